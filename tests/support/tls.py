"""A throwaway certificate authority and a server certificate for 127.0.0.1, so token flows can
be tested over https on loopback (the Azure SDK sends Entra ID tokens over https only)."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


class LoopbackTLS:
    """`ca_file` is what a client trusts (SSL_CERT_FILE); `server_context()` serves 127.0.0.1.
    A separate CA signs the leaf: TLS libraries refuse a CA certificate used as a server's."""

    def __init__(self, directory: Path):
        now = datetime.datetime.now(datetime.UTC)
        valid = dict(
            not_valid_before=now - datetime.timedelta(minutes=5),
            not_valid_after=now + datetime.timedelta(days=1),
        )
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca = (
            x509.CertificateBuilder(
                subject_name=_name("ferry test CA"),
                issuer_name=_name("ferry test CA"),
                public_key=ca_key.public_key(),
                serial_number=x509.random_serial_number(),
                **valid,
            )
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=False,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(ca_key, hashes.SHA256())
        )
        key = ec.generate_private_key(ec.SECP256R1())
        leaf = (
            x509.CertificateBuilder(
                subject_name=_name("127.0.0.1"),
                issuer_name=ca.subject,
                public_key=key.public_key(),
                serial_number=x509.random_serial_number(),
                **valid,
            )
            .add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False,
            )
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
            )
            .sign(ca_key, hashes.SHA256())
        )
        directory.mkdir(parents=True, exist_ok=True)
        self.ca_file = directory / "ca.pem"
        self.ca_file.write_bytes(_pem(ca))
        self._chain = directory / "server.pem"
        self._chain.write_bytes(_pem(leaf) + _pem(ca))
        self._key = directory / "server.key"
        self._key.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )

    def server_context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self._chain, self._key)
        return ctx
