"""Shared fixtures for ferry's end-to-end tests: the worker binary, Azurite, containers, the proxy,
Slurm, a throwaway TLS CA. Every helper they use lives in tests/support/; no test module imports
another."""

from __future__ import annotations

import base64
import os
import subprocess
from pathlib import Path

import pytest
from support import faults as _faults
from support.azurite import Azurite, start_azurite
from support.ferry import REPO_ROOT, ContainerURL, FerryRunner, new_container
from support.proxy import FaultProxy
from support.slurm import SLURM_CONF, accounting_on, slurm_is_up, slurm_up
from support.tls import LoopbackTLS
from support.toxiproxy import Toxiproxy, start_toxiproxy

# The fault suite's options (--deep), seed and closing summary line (tests/support/faults.py).
pytest_addoption = _faults.pytest_addoption
pytest_report_header = _faults.pytest_report_header
pytest_terminal_summary = _faults.pytest_terminal_summary

SECOND_ACCOUNT = "ferrysecond"
DEFAULT_TEST_TIMEOUT = 120  # seconds; pytest-timeout ends any single test that goes past it

_PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")


def pytest_configure(config):
    _faults.pytest_configure(config)
    for var in _PROXY_VARS:
        os.environ.pop(var, None)
    # Loopback must never be sent through a proxy, by ferry (reqwest) or the Python SDK (requests).
    os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"


# The slow suites' markers (registered in pytest.ini), given to every test of a folder or module
# under tests/; a test elsewhere that needs the same carries the marker itself. A test that uses
# the `slurm` fixture is marked slurm wherever it is.
MARKERS = {
    "faults/": ("faults",),
    "nfs/": ("fuse",),
    "pipeline/": ("pipeline",),
    "pipeline/test_snakemake_slurm.py": ("slurm",),
    "pipeline/test_nextflow_slurm.py": ("slurm",),
    "replicate/": ("mpi",),
}
MARKERS_BY_FIXTURE = {"slurm": "slurm"}
TESTS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    for item in items:
        path = Path(item.path).resolve()
        rel = path.relative_to(TESTS).as_posix() if path.is_relative_to(TESTS) else ""
        for where, names in MARKERS.items():
            if rel == where or (where.endswith("/") and rel.startswith(where)):
                for name in names:
                    item.add_marker(name)
        for fixture, name in MARKERS_BY_FIXTURE.items():
            if fixture in getattr(item, "fixturenames", ()):
                item.add_marker(name)
    # An explicit --timeout on the command line wins over this default.
    if config.pluginmanager.hasplugin("timeout") and config.getoption("timeout") is not None:
        return
    for item in items:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(DEFAULT_TEST_TIMEOUT))


@pytest.fixture(scope="session")
def ferry_bin() -> Path:
    path = Path(
        os.environ.get("FERRY_BIN") or REPO_ROOT / "worker" / "target" / "release" / "ferry"
    )
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(
            f"ferry binary not found at {path}: build it with `make build` "
            f"(cargo build --release --manifest-path worker/Cargo.toml)",
            pytrace=False,
        )
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


@pytest.fixture(scope="session")
def azurite2() -> Azurite:
    """A second emulator standing for a second storage account: another name, another key, so
    a request signed with the first account's credential fails here."""
    az = start_azurite(
        REPO_ROOT, account=SECOND_ACCOUNT, key=base64.b64encode(os.urandom(64)).decode()
    )
    try:
        yield az
    finally:
        az.stop()


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


@pytest.fixture(scope="module")
def slurm():
    """The three-node cluster of scripts/slurm-up.sh. Each test sets the accounting mode it needs;
    afterwards a cluster this fixture started is stopped, one that was running gets its mode back."""
    started = not slurm_is_up()
    was_accounting = accounting_on() and not started
    try:
        yield
    finally:
        if not started:
            slurm_up(accounting=was_accounting)
        else:
            subprocess.run(
                ["bash", str(REPO_ROOT / "scripts" / "slurm-down.sh")],
                capture_output=True,
                timeout=60,
            )
            # A slurm.conf left behind with no controller makes every later Snakemake start wait
            # ~9 s on the Slurm plugin's import-time probe (docs/pipeline.md, "Start-up cost").
            assert not SLURM_CONF.exists(), "slurm-down.sh left its slurm.conf behind"


@pytest.fixture(scope="module")
def tls(tmp_path_factory) -> LoopbackTLS:
    """A throwaway CA and a loopback server certificate (support.standin serves https with it)."""
    return LoopbackTLS(tmp_path_factory.mktemp("tls"))
