"""Start and stop a throwaway Azurite blob emulator on loopback for tests."""

from __future__ import annotations

import ctypes
import http.client
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ACCOUNT = "devstoreaccount1"
# Azurite's published development key (the same for every Azurite install); not a secret.
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def free_port() -> int:
    """A loopback port nobody listens on right now (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_answers(port: int, timeout: float = 1.0) -> bool:
    """True once something on the port speaks HTTP (any status, even 403, will do)."""
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        conn.request("GET", f"/{ACCOUNT}?comp=list")
        conn.getresponse().read()
        conn.close()
        return True
    except (OSError, http.client.HTTPException):
        return False


@dataclass
class Azurite:
    port: int
    location: Path
    process: subprocess.Popen
    log_path: Path
    binary: Path | None = None
    account: str = ACCOUNT
    key: str = KEY
    _owns_location: bool = field(default=True, repr=False)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}/{self.account}"

    def url(self, container: str, blob: str = "", port: int | None = None) -> str:
        """Path-style blob URL; `port` lets a caller aim at a proxy in front of this Azurite."""
        base = f"http://127.0.0.1:{port or self.port}/{self.account}/{container}"
        return f"{base}/{blob}" if blob else base

    def service_client(self, endpoint: str | None = None, **kwargs):
        # Imported here so that local-only test runs never need the SDK loaded.
        from azure.storage.blob import BlobServiceClient

        return BlobServiceClient(
            endpoint or self.endpoint,
            credential={"account_name": self.account, "account_key": self.key},
            **kwargs,
        )

    def log_tail(self, n: int = 40) -> str:
        return log_tail(self.log_path, n)

    def kill(self) -> None:
        """SIGKILL the emulator, as a crash would; its --location stays for a restart."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def restart(self, graceful: bool = False, start_timeout: float = 30.0) -> None:
        """Start the emulator again on the same port and --location. ``graceful``: stop it with
        SIGTERM first, which saves its metadata (a SIGKILL loses what it had not saved yet)."""
        if graceful and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(30)
        self.kill()
        self.process = _launch(
            self.binary, self.port, self.location, self.log_path, self.account, self.key
        )
        deadline = time.monotonic() + start_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"Azurite did not restart:\n{self.log_tail()}")
            if http_answers(self.port):
                return
            time.sleep(0.05)
        raise RuntimeError(f"Azurite did not answer after a restart:\n{self.log_tail()}")

    def stop(self) -> None:
        stop_process(self.process)
        if self._owns_location:
            shutil.rmtree(self.location, ignore_errors=True)


def log_tail(path: Path, n: int) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return f"(no log at {path})"


def stop_process(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL if it is still there after 10 s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _die_with_parent() -> None:
    """Runs in the child before exec: ask Linux to SIGTERM Azurite when the test process dies, so a
    killed or timed-out pytest (no fixture teardown) leaves no emulator behind."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def azurite_binary(repo_root: Path) -> Path:
    return repo_root / "node_modules" / ".bin" / "azurite-blob"


def _accounts_env(account: str, key: str) -> dict:
    """Azurite's environment: the default account unless another is asked for. A custom account
    list in the caller's environment is never inherited (it would drop devstoreaccount1)."""
    env = {k: v for k, v in os.environ.items() if k != "AZURITE_ACCOUNTS"}
    if (account, key) != (ACCOUNT, KEY):
        # Only this account then exists here: a request signed for any other one fails.
        env["AZURITE_ACCOUNTS"] = f"{account}:{key}"
    return env


def _launch(
    binary: Path, port: int, location: Path, log_path: Path, account: str = ACCOUNT, key: str = KEY
) -> subprocess.Popen:
    log = open(log_path, "ab")
    try:
        return subprocess.Popen(
            [
                str(binary),
                "--blobHost",
                "127.0.0.1",
                "--blobPort",
                str(port),
                "--location",
                str(location / "data"),
                "--skipApiVersionCheck",
                "--loose",
                "--disableTelemetry",
                "--silent",
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=location,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            env=_accounts_env(account, key),
        )
    finally:
        log.close()


def start_azurite(
    repo_root: Path,
    start_timeout: float = 30.0,
    attempts: int = 3,
    account: str = ACCOUNT,
    key: str = KEY,
) -> Azurite:
    """Launch azurite-blob on a free 127.0.0.1 port with a fresh on-disk workspace, serving
    ``account`` (with ``key``, base64) only; by default the well-known development account.

    Disk mode with a temp dir (not --inMemoryPersistence) because in-memory Azurite keeps
    overwritten data around and balloons; --skipApiVersionCheck because current SDKs send API
    versions newer than Azurite knows; --disableTelemetry so the emulator never calls out.
    """
    binary = azurite_binary(repo_root)
    if not binary.exists():
        raise RuntimeError(f"{binary} is missing: run `make setup` (npm ci) first")
    last_error = ""
    for _ in range(attempts):
        port = free_port()
        location = Path(tempfile.mkdtemp(prefix="ferry-azurite-"))
        log_path = location / "azurite.log"
        proc = _launch(binary, port, location, log_path, account, key)
        az = Azurite(
            port=port,
            location=location,
            process=proc,
            log_path=log_path,
            binary=binary,
            account=account,
            key=key,
        )
        deadline = time.monotonic() + start_timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                break
            if http_answers(port):
                return az
            time.sleep(0.1)
        # Either it died (most likely the port was taken between probe and bind) or it never answered.
        last_error = az.log_tail()
        az.stop()
    raise RuntimeError(f"Azurite did not start after {attempts} attempts; last log:\n{last_error}")
