"""Round trips on an NFS-like mount (tools/latencyfs), counted: verify and prune read each side
once, about what listing the destination costs. Counts, not timings: they repeat run to run.
(The per-file counts of copy and of an unchanged re-run: docs/nfs.md.)"""

from __future__ import annotations

import subprocess

import pytest

from support.latencyfs import LatencyFS, build

FILES, DIRS = 240, 6


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    build()
    src = tmp_path_factory.mktemp("nfs-counts") / "src"
    for i in range(FILES):
        d = src / f"d{i % DIRS}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i:04d}").write_bytes(b"x" * (i * 37 % 5000))
    return src


@pytest.fixture
def copied(tmp_path, source):
    """A mount whose destination already holds a copy of the source, made underneath (uncounted);
    caches of 30 s so nothing learnt during a command expires before it ends."""
    backing = tmp_path / "backing"
    backing.mkdir()
    subprocess.run(["cp", "-a", str(source), str(backing / "dst")], check=True)
    fs = LatencyFS(backing, tmp_path / "mnt", attr_timeout=30, entry_timeout=30)
    yield fs
    fs.unmount()


def requests(fs: LatencyFS, run, *args) -> int:
    """Requests one ferry command makes on a fresh mount (nothing cached from before)."""
    fs.unmount()
    fs.mount()
    fs.reset()
    run(*args)
    return fs.snapshot()["total"]


def test_verify_and_prune_read_the_destination_once(copied, source, run_ferry, tmp_path):
    dst = copied.mountpoint / "dst"
    listing = requests(copied, run_ferry, "ls", "-r", dst)
    # One READDIRPLUS page holds tens of entries: a listing is far below one request a file.
    assert DIRS * 3 <= listing < FILES / 4
    assert requests(copied, run_ferry, "verify", f"{source}/", dst) <= 1.2 * listing
    assert requests(copied, run_ferry, "prune", "--log", tmp_path / "prune.tsv", f"{source}/", dst) <= 1.2 * listing
    assert (tmp_path / "prune.tsv").exists()
