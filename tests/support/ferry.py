"""Running the worker as the tests do: the environment it gets (Azurite's key, nothing inherited
that names Azure), the runner behind the ``run_ferry`` fixture, and a container as a URL that
knows its SDK client (the ``container`` fixtures)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import uuid
from pathlib import Path

import pytest

from support.azurite import ACCOUNT, KEY, Azurite

REPO_ROOT = Path(__file__).resolve().parents[2]

# Inherited settings that could send a test's traffic off the machine or change which
# credential ferry picks; every test states its own.
_SCRUBBED_PREFIXES = ("AZURE_", "FERRY_", "AZCOPY_", "RCLONE_")


def ferry_env(extra: dict | None = None) -> dict:
    """Environment for a ferry run: Azurite's key credentials, an IMDS guard, nothing inherited
    that names Azure. ``extra`` overrides; a value of None removes the variable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_SCRUBBED_PREFIXES)}
    env.update(
        {
            "AZURE_STORAGE_ACCOUNT": ACCOUNT,
            "AZURE_STORAGE_KEY": KEY,
            "FERRY_AUTH": "key",
            # If anything ever falls through to managed identity, it hits a closed loopback port
            # instead of the real metadata service.
            "FERRY_IMDS_ENDPOINT": "http://127.0.0.1:9",
        }
    )
    for k, v in (extra or {}).items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="surrogateescape")


class FerryRunner:
    """``run_ferry(*args, env=..., check=...)``: run the worker, return a CompletedProcess.

    ``check``: True (exit 0 required), False (anything goes) or the exit status required.
    The result also has ``stdout_bytes`` and, when ``--json`` was passed, ``json`` (parsed stdout).
    """

    def __init__(self, binary: Path, workdir: Path):
        self.binary = binary
        # Anything ferry writes relative to its working directory (default log files, say)
        # lands here, never in the repository the tests were started from.
        self.workdir = workdir

    def env(self, extra: dict | None) -> dict:
        # What ferry keeps for the user (a prune's default log) goes to the tests' own directory.
        return ferry_env({"XDG_STATE_HOME": str(self.workdir / "state"), **(extra or {})})

    def command(self, args) -> list:
        return [str(self.binary), *[a if isinstance(a, bytes) else os.fspath(a) for a in args]]

    def __call__(
        self,
        *args,
        env: dict | None = None,
        check: bool | int = True,
        timeout: float = 110,
        cwd=None,
        input: bytes | None = None,
    ) -> subprocess.CompletedProcess:
        cmd = self.command(args)
        proc = subprocess.run(
            cmd,
            env=self.env(env),
            cwd=cwd or self.workdir,
            input=input,
            capture_output=True,
            timeout=timeout,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
        result = subprocess.CompletedProcess(
            cmd, proc.returncode, _decode(proc.stdout), _decode(proc.stderr)
        )
        result.stdout_bytes = proc.stdout
        result.json = None
        want = 0 if check is True else None if check is False else check
        if want is not None and proc.returncode != want:
            pytest.fail(
                f"{describe(cmd)}\n  expected exit {want}, got {proc.returncode}\n"
                f"  stdout: {result.stdout[-3000:]}\n  stderr: {result.stderr[-3000:]}",
                pytrace=False,
            )
        if "--json" in args and proc.returncode in (0, 1):
            try:
                result.json = json.loads(result.stdout)
            except ValueError:
                pytest.fail(
                    f"{describe(cmd)}\n  --json output is not one JSON object:\n{result.stdout[-3000:]}"
                    f"\n  stderr: {result.stderr[-2000:]}",
                    pytrace=False,
                )
        return result

    def spawn(self, *args, env: dict | None = None, log_dir: Path) -> subprocess.Popen:
        """Start ferry in the background (for tests that kill it); output goes to files in log_dir."""
        out = open(log_dir / "ferry.stdout", "wb")
        err = open(log_dir / "ferry.stderr", "wb")
        try:
            return subprocess.Popen(
                self.command(args),
                env=self.env(env),
                cwd=self.workdir,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
            )
        finally:
            out.close()
            err.close()


def describe(cmd) -> str:
    return "command: " + " ".join(
        repr(c) if isinstance(c, bytes) or " " in str(c) else str(c) for c in cmd
    )


class ContainerURL(str):
    """A container's blob URL (use it as a string) that also knows its SDK client."""

    def __new__(cls, azurite: Azurite, name: str):
        self = super().__new__(cls, azurite.url(name))
        self.name = name
        self.azurite = azurite
        self.client = azurite.service_client().get_container_client(name)
        return self

    def via(self, port: int, prefix: str = "") -> str:
        """The same container (and optional prefix) addressed through a proxy on ``port``."""
        return self.azurite.url(self.name, prefix, port=port)

    def at(self, prefix: str) -> str:
        return self.azurite.url(self.name, prefix)

    def signed(self, prefix: str = "", *, write: bool = False, port: int | None = None) -> str:
        """The container (and optional prefix) with a container SAS in the URL, made from its own
        Azurite's account key: read and list, and with ``write`` also add, create, write, delete."""
        import datetime

        from azure.storage.blob import ContainerSasPermissions, generate_container_sas

        permission = ContainerSasPermissions(
            read=True, list=True, add=write, create=write, write=write, delete=write
        )
        sas = generate_container_sas(
            self.azurite.account,
            self.name,
            account_key=self.azurite.key,
            permission=permission,
            expiry=datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1),
        )
        return f"{self.azurite.url(self.name, prefix, port=port)}?{sas}"

    def blobs(self, prefix: str | None = None) -> dict:
        """{blob name: BlobProperties} (size, content_settings.content_md5, metadata, ...)."""
        return {
            b.name: b for b in self.client.list_blobs(name_starts_with=prefix, include=["metadata"])
        }


def new_container(azurite: Azurite, request) -> ContainerURL:
    # Container names: 3-63 chars of [a-z0-9-], no leading, trailing or doubled dash. The test's
    # name in it helps when reading Azurite's data after a failure.
    stem = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower())[:40].strip("-")
    name = f"{stem}-{uuid.uuid4().hex[:10]}".lstrip("-")
    c = ContainerURL(azurite, name)
    c.client.create_container()
    return c
