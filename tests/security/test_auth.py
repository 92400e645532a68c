"""Token credential flows, each against a loopback stand-in for the identity endpoints and the
Blob service: the token ferry fetches must be the one it presents on every request (a listing
sends its first page and a probe of `startFrom` together), and nothing leaves 127.0.0.1.
IMDS answers over http, as the real one does; the Entra endpoint and the Blob service answer over
https with a throwaway CA, because the Azure SDK sends tokens over https only."""

from __future__ import annotations

import os
import stat

import pytest
from support.standin import StandIn, token_env


@pytest.fixture
def standin(tls):
    s = StandIn(tls)
    yield s
    s.close()


def ls(run_ferry, standin, env, check=True, tls=True):
    """`ferry ls` of the stand-in's container, over https (trusting the test CA) unless tls=False."""
    if tls:
        env = {**env, "SSL_CERT_FILE": str(standin.ca_file)}
    base = standin.tls_url if tls else standin.url
    return run_ferry("ls", f"{base}/acct/ctr", "-r", env=env, check=check)


def test_managed_identity_token_is_fetched_and_presented(run_ferry, standin):
    out = ls(
        run_ferry, standin, token_env({"FERRY_AUTH": "managed", "FERRY_IMDS_ENDPOINT": standin.url})
    )
    assert "hello.txt\tf\t5\t" in out.stdout
    assert set(standin.blob_auth()) == {"Bearer tok-imds"}


def test_a_token_is_never_sent_over_plain_http(run_ferry, standin):
    out = ls(
        run_ferry,
        standin,
        token_env({"FERRY_AUTH": "managed", "FERRY_IMDS_ENDPOINT": standin.url}),
        check=2,
        tls=False,
    )
    assert "https" in out.stderr
    assert standin.blob_auth() == []


def test_workload_identity_exchanges_the_federated_token(run_ferry, standin, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("federated-jwt")  # as Kubernetes projects it: no newline
    env = token_env(
        {
            "AZURE_FEDERATED_TOKEN_FILE": str(token_file),
            "AZURE_CLIENT_ID": "client-1",
            "AZURE_TENANT_ID": "tenant-1",
            "AZURE_AUTHORITY_HOST": standin.tls_url,
        }
    )
    out = ls(run_ferry, standin, env)
    assert "hello.txt" in out.stdout
    assert set(standin.blob_auth()) == {"Bearer tok-workload"}
    # Auto mode picked workload identity on its own: IMDS was never asked.
    assert not any(s["path"].startswith("/metadata") for s in standin.seen)


def test_azure_cli_token(run_ferry, standin, tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    az = bindir / "az"
    az.write_text(
        "#!/bin/sh\n"
        "[ \"$1 $2\" = 'account get-access-token' ] || exit 3\n"
        'echo \'{"accessToken": "tok-cli", "expiresOn": "2099-01-01 00:00:00.000000", '
        '"expires_on": 4070908800, "tokenType": "Bearer"}\'\n'
    )
    az.chmod(az.stat().st_mode | stat.S_IEXEC)
    env = token_env({"FERRY_AUTH": "cli", "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"})
    ls(run_ferry, standin, env)
    assert set(standin.blob_auth()) == {"Bearer tok-cli"}


def test_auto_chain_falls_back_to_anonymous(run_ferry, standin, tmp_path):
    # No credentials at all, IMDS unreachable (closed loopback port), no az on PATH.
    env = token_env({"FERRY_IMDS_ENDPOINT": "http://127.0.0.1:9", "PATH": str(tmp_path)})
    out = ls(run_ferry, standin, env, tls=False)
    assert "hello.txt" in out.stdout
    assert set(standin.blob_auth()) == {None}


def test_forced_managed_identity_fails_clearly_when_unreachable(run_ferry, standin):
    out = ls(
        run_ferry,
        standin,
        token_env({"FERRY_AUTH": "managed", "FERRY_IMDS_ENDPOINT": "http://127.0.0.1:9"}),
        check=2,
    )
    assert "managed identity" in out.stderr
    assert standin.blob_auth() == []


def test_sas_from_environment_is_sent_but_never_shown(run_ferry, standin):
    env = token_env({"AZURE_STORAGE_SAS_TOKEN": "?sv=2024-01-01&sig=TOPSECRETSIG"})
    out = ls(run_ferry, standin, env, tls=False)
    assert "hello.txt" in out.stdout
    listed = [s for s in standin.seen if s["path"] == "/acct/ctr"]
    assert listed and listed[0]["query"].get("sig") == ["TOPSECRETSIG"]
    shown = run_ferry("env", f"{standin.url}/acct/ctr", env=env)
    assert "TOPSECRETSIG" not in shown.stdout + shown.stderr
    assert "credential: sas" in shown.stdout


def test_secrets_never_reach_error_messages(run_ferry, container):
    """A wrong key and a SAS in the URL, against a real Azurite: the error says 403 and how to
    find out which credential was used; it never repeats the key or the signature."""
    wrong_key = "d3Jvbmcta2V5LXdyb25nLWtleS13cm9uZy1rZXk="
    out = run_ferry("ls", container, env={"AZURE_STORAGE_KEY": wrong_key}, check=2)
    assert "403" in out.stderr and "ferry env" in out.stderr
    assert wrong_key not in out.stderr + out.stdout
    sas_url = f"{container}?sv=2024-01-01&sp=r&sig=NOTAREALSIGNATURE"
    out = run_ferry("ls", sas_url, env={"FERRY_AUTH": None}, check=2)
    assert "NOTAREALSIGNATURE" not in out.stderr + out.stdout
