"""Shared fixtures for ferry's end-to-end tests: the worker binary, Azurite, containers, the proxy."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import uuid
from pathlib import Path

import pytest

from support import faults as _faults
from support.azurite import ACCOUNT, KEY, Azurite, start_azurite
from support.proxy import FaultProxy
from support.toxiproxy import Toxiproxy, start_toxiproxy

# The fault suite's options (--deep), seed and closing summary line (tests/support/faults.py).
pytest_addoption = _faults.pytest_addoption
pytest_report_header = _faults.pytest_report_header
pytest_terminal_summary = _faults.pytest_terminal_summary

REPO_ROOT = Path(__file__).resolve().parent.parent
SECOND_ACCOUNT = "ferrysecond"
DEFAULT_TEST_TIMEOUT = 120  # seconds; pytest-timeout ends any single test that goes past it

# Inherited settings that could send a test's traffic off the machine or change which
# credential ferry picks; every test states its own.
_SCRUBBED_PREFIXES = ("AZURE_", "FERRY_", "AZCOPY_", "RCLONE_")
_PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")


def pytest_configure(config):
    _faults.pytest_configure(config)
    for var in _PROXY_VARS:
        os.environ.pop(var, None)
    # Loopback must never be sent through a proxy, by ferry (reqwest) or the Python SDK (requests).
    os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"


def pytest_collection_modifyitems(config, items):
    # An explicit --timeout on the command line wins over this default.
    if config.pluginmanager.hasplugin("timeout") and config.getoption("timeout") is not None:
        return
    for item in items:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(DEFAULT_TEST_TIMEOUT))


def ferry_env(extra: dict | None = None) -> dict:
    """Environment for a ferry run: Azurite's key credentials, an IMDS guard, nothing inherited
    that names Azure. ``extra`` overrides; a value of None removes the variable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_SCRUBBED_PREFIXES)}
    env.update({
        "AZURE_STORAGE_ACCOUNT": ACCOUNT,
        "AZURE_STORAGE_KEY": KEY,
        "FERRY_AUTH": "key",
        # If anything ever falls through to managed identity, it hits a closed loopback port
        # instead of the real metadata service.
        "FERRY_IMDS_ENDPOINT": "http://127.0.0.1:9",
    })
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

    def __call__(self, *args, env: dict | None = None, check: bool | int = True, timeout: float = 110,
                 cwd=None, input: bytes | None = None) -> subprocess.CompletedProcess:
        cmd = self.command(args)
        proc = subprocess.run(cmd, env=self.env(env), cwd=cwd or self.workdir, input=input, capture_output=True,
                              timeout=timeout, stdin=None if input is not None else subprocess.DEVNULL)
        result = subprocess.CompletedProcess(cmd, proc.returncode, _decode(proc.stdout), _decode(proc.stderr))
        result.stdout_bytes = proc.stdout
        result.json = None
        want = 0 if check is True else None if check is False else check
        if want is not None and proc.returncode != want:
            pytest.fail(f"{describe(cmd)}\n  expected exit {want}, got {proc.returncode}\n"
                        f"  stdout: {result.stdout[-3000:]}\n  stderr: {result.stderr[-3000:]}", pytrace=False)
        if "--json" in args and proc.returncode in (0, 1):
            try:
                result.json = json.loads(result.stdout)
            except ValueError:
                pytest.fail(f"{describe(cmd)}\n  --json output is not one JSON object:\n{result.stdout[-3000:]}"
                            f"\n  stderr: {result.stderr[-2000:]}", pytrace=False)
        return result

    def spawn(self, *args, env: dict | None = None, log_dir: Path) -> subprocess.Popen:
        """Start ferry in the background (for tests that kill it); output goes to files in log_dir."""
        out = open(log_dir / "ferry.stdout", "wb")
        err = open(log_dir / "ferry.stderr", "wb")
        try:
            return subprocess.Popen(self.command(args), env=self.env(env), cwd=self.workdir,
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        finally:
            out.close()
            err.close()


def describe(cmd) -> str:
    return "command: " + " ".join(repr(c) if isinstance(c, bytes) or " " in str(c) else str(c) for c in cmd)


@pytest.fixture(scope="session")
def ferry_bin() -> Path:
    path = Path(os.environ.get("FERRY_BIN") or REPO_ROOT / "worker" / "target" / "release" / "ferry")
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(f"ferry binary not found at {path}: build it with `make build` "
                    f"(cargo build --release --manifest-path worker/Cargo.toml)", pytrace=False)
    return path


@pytest.fixture(scope="session")
def run_ferry(ferry_bin, tmp_path_factory) -> FerryRunner:
    return FerryRunner(ferry_bin, tmp_path_factory.mktemp("ferry-cwd"))


@pytest.fixture(scope="session")
def azurite() -> Azurite:
    az = start_azurite(REPO_ROOT)
    try:
        yield az
    finally:
        az.stop()


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

        permission = ContainerSasPermissions(read=True, list=True, add=write, create=write, write=write, delete=write)
        sas = generate_container_sas(self.azurite.account, self.name, account_key=self.azurite.key, permission=permission,
                                     expiry=datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1))
        return f"{self.azurite.url(self.name, prefix, port=port)}?{sas}"

    def blobs(self, prefix: str | None = None) -> dict:
        """{blob name: BlobProperties} (size, content_settings.content_md5, metadata, ...)."""
        return {b.name: b for b in self.client.list_blobs(name_starts_with=prefix, include=["metadata"])}


@pytest.fixture(scope="session")
def azurite2() -> Azurite:
    """A second emulator standing for a second storage account: another name, another key, so
    a request signed with the first account's credential fails here."""
    az = start_azurite(REPO_ROOT, account=SECOND_ACCOUNT, key=base64.b64encode(os.urandom(64)).decode())
    try:
        yield az
    finally:
        az.stop()


def new_container(azurite: Azurite, request) -> ContainerURL:
    # Container names: 3-63 chars of [a-z0-9-], no leading, trailing or doubled dash. The test's
    # name in it helps when reading Azurite's data after a failure.
    stem = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower())[:40].strip("-")
    name = f"{stem}-{uuid.uuid4().hex[:10]}".lstrip("-")
    c = ContainerURL(azurite, name)
    c.client.create_container()
    return c


@pytest.fixture
def container(azurite, request) -> ContainerURL:
    return new_container(azurite, request)


@pytest.fixture
def other_container(azurite, request) -> ContainerURL:
    """A second fresh container in the same account as ``container``."""
    return new_container(azurite, request)


@pytest.fixture
def container2(azurite2, request) -> ContainerURL:
    """A fresh container in the second account (``azurite2``)."""
    return new_container(azurite2, request)


@pytest.fixture
def proxy(azurite) -> FaultProxy:
    with FaultProxy(azurite.port) as p:
        yield p


@pytest.fixture
def proxy2(azurite2) -> FaultProxy:
    """A fault proxy in front of the second account's emulator."""
    with FaultProxy(azurite2.port) as p:
        yield p



@pytest.fixture
def faults(request) -> _faults.Ledger:
    """The session's fault ledger (seed, --deep, counts for the closing summary); ``faults.rng``
    gives this test a generator derived from the seed and its name."""
    ledger = _faults.ledger()
    ledger.tests += 1
    ledger.test_rng = ledger.rng(request.node.nodeid)
    return ledger


@pytest.fixture(scope="session")
def toxiproxy(tmp_path_factory) -> Toxiproxy:
    server = start_toxiproxy(REPO_ROOT, tmp_path_factory.mktemp("toxiproxy"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def read_only_dir():
    """Makes an existing directory read-only where it stands (bound onto itself read-only, as
    root): every write into it fails with EROFS, while it looks like any other directory — a
    persistent failure a rerun can be shown to recover from once it is lifted. Returns the undo;
    whatever is still bound at teardown is released."""
    bound: list[Path] = []

    def release(path: Path) -> None:
        if path in bound:
            bound.remove(path)
            subprocess.run(["umount", str(path)], check=True)

    def make(path: Path):
        subprocess.run(["mount", "--bind", str(path), str(path)], check=True)
        bound.append(path)
        subprocess.run(["mount", "-o", "remount,bind,ro", str(path)], check=True)
        return lambda: release(path)

    yield make
    for path in list(bound):
        release(path)
