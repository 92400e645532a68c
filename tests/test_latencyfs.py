"""tools/latencyfs, the latency-injecting passthrough the NFS-class benchmarks run on: it counts
what it is asked, serves requests in parallel, delays each one, and never changes a byte."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from support.latencyfs import LatencyFS, build, mounted_here


@pytest.fixture(scope="module", autouse=True)
def binary():
    return build()


@pytest.fixture
def tree(tmp_path) -> Path:
    src = tmp_path / "backing"
    src.mkdir()
    for i in range(20):
        (src / f"f{i:02d}").write_bytes(bytes([i]) * 4096)
    return src


@pytest.fixture
def mount(tmp_path, tree):
    """A factory: mount(**options) mounts `tree` at tmp/mnt; every mount is unmounted at teardown."""
    mounts = []

    def make(**options) -> LatencyFS:
        fs = LatencyFS(tree, tmp_path / f"mnt{len(mounts)}", **options)
        mounts.append(fs)
        return fs.mount()

    yield make
    for fs in mounts:
        fs.unmount()
        assert not mounted_here(fs.mountpoint)


def settle(fs: LatencyFS, kind: str, at_least: int) -> dict:
    """The counters once `kind` has reached `at_least`: release is sent asynchronously after
    close() returns, so it may trail the call that caused it by a moment."""
    deadline = time.monotonic() + 5
    while (st := fs.stats())["ops"][kind] < at_least and time.monotonic() < deadline:
        time.sleep(0.01)
    fs.reset()
    return st


def nonzero(st: dict) -> dict:
    return {k: v for k, v in st["ops"].items() if v}


def test_a_known_sequence_of_calls_gives_known_counts(mount):
    fs = mount(attr_timeout=60, entry_timeout=60)
    m = fs.mountpoint
    fs.reset()

    for i in range(10):
        os.stat(m / f"f{i:02d}")
    assert nonzero(fs.snapshot()) == {"lookup": 10}
    for i in range(10):  # attributes and names cached for 60 s: no request at all
        os.stat(m / f"f{i:02d}")
    assert fs.snapshot()["total"] == 0

    for _ in range(3):  # no negative caching by default: every miss asks again
        assert not (m / "missing").exists()
    assert nonzero(fs.snapshot()) == {"lookup": 3}

    fd = os.open(m / "f00", os.O_RDONLY)
    assert os.read(fd, 8192) == bytes([0]) * 4096
    os.close(fd)
    assert nonzero(settle(fs, "release", 1)) == {"open": 1, "read": 1, "flush": 1, "release": 1}

    os.utime(m / "f01", ns=(1_000_000_001, 2_000_000_002))
    os.chmod(m / "f01", 0o600)
    assert nonzero(fs.snapshot()) == {"setattr": 2}
    backing = os.stat(fs.source / "f01")
    assert backing.st_mtime_ns == 2_000_000_002 and backing.st_mode & 0o777 == 0o600

    # 512 writes of 512 bytes reach the filesystem as one request: the writeback cache is on.
    fd = os.open(m / "new", os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o640)
    for _ in range(512):
        os.write(fd, b"w" * 512)
    os.close(fd)
    assert nonzero(settle(fs, "release", 1)) == {
        "lookup": 1, "create": 1, "write": 1, "flush": 1, "release": 1}
    assert (fs.source / "new").read_bytes() == b"w" * 512 * 512

    # The create changed the directory, yet no getattr of it follows: permissions are checked
    # underneath (no default_permissions), as an NFS server checks them.
    os.symlink("f01", m / "link")
    assert nonzero(fs.snapshot()) == {"lookup": 1, "symlink": 1}
    assert os.readlink(fs.source / "link") == "f01"

    st = fs.stats()
    assert st["total"] == sum(v for k, v in st["ops"].items() if k != "forget") == st["finished"]


def test_options_change_what_the_kernel_asks(mount):
    cached_misses = mount(negative_timeout=60)
    for _ in range(3):
        assert not (cached_misses.mountpoint / "missing").exists()
    assert cached_misses.snapshot()["ops"]["lookup"] == 1

    uncached = mount(attr_timeout=0, entry_timeout=0)
    os.stat(uncached.mountpoint / "f00")
    uncached.reset()
    os.stat(uncached.mountpoint / "f00")  # timeouts of 0: asked again
    assert uncached.snapshot()["total"] >= 1

    write_through = mount(writeback_cache=False)
    fd = os.open(write_through.mountpoint / "small-writes", os.O_CREAT | os.O_WRONLY, 0o644)
    for _ in range(64):
        os.write(fd, b"x" * 512)
    os.close(fd)
    assert settle(write_through, "release", 1)["ops"]["write"] == 64


def test_requests_run_in_parallel_and_each_is_delayed(mount):
    """16 threads stat 16 names in one directory, each lookup delayed 300 ms: all 16 must be in
    the filesystem at once (parallel directory operations, a thread per request)."""
    delay = 0.3
    fs = mount(delay_ms=delay * 1000, entry_timeout=60, attr_timeout=60)
    fs.reset()
    barrier = threading.Barrier(16)
    errors = []

    def one(i):
        try:
            barrier.wait(timeout=10)
            os.stat(fs.mountpoint / f"f{i:02d}")
        except Exception as e:  # reported below; a thread's exception would be lost
            errors.append(e)

    started = time.monotonic()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    st = fs.snapshot()
    assert not errors
    assert st["ops"]["lookup"] == 16 and st["total"] == 16
    assert st["inflight_max"] == 16
    # Every request slept its delay: the summed request time and the wall time have floors.
    assert st["request_s"] >= 16 * delay
    assert elapsed >= st["total"] * delay / st["inflight_max"]
    assert st["inflight_avg_busy"] > 1


def test_per_kind_delay_and_jitter(mount):
    fs = mount(delay_ops={"lookup": 50}, jitter_ms=20, entry_timeout=60, attr_timeout=60)
    fs.reset()
    for i in range(4):
        os.stat(fs.mountpoint / f"f{i:02d}")
    st = fs.snapshot()
    assert st["ops"]["lookup"] == 4
    assert st["request_s"] >= 4 * 0.050
    # statfs has no delay of its own, only the jitter (at most 20 ms).
    os.statvfs(fs.mountpoint)
    assert fs.snapshot()["request_s"] < 4 * 0.050


def file_digests(root: Path) -> dict:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = Path(dirpath) / n
            st = os.lstat(p)
            rel = str(p.relative_to(root))
            if os.path.islink(p):
                out[rel] = ("link", os.readlink(p))
            elif p.is_dir():
                out[rel] = ("dir", st.st_mode)
            else:
                out[rel] = ("file", st.st_mode, st.st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
    return out


def test_copies_through_it_are_byte_identical(mount, tmp_path, run_ferry):
    original = tmp_path / "original"
    rng = __import__("random").Random(7)
    sizes = [0, 1, 511, 4095, 4096, 4097, 65536 + 3, 1_048_576, 3 * 1_048_576 + 17]
    for i, size in enumerate(sizes):
        d = original / f"dir{i % 3}" / ("deep" if i % 2 else "")
        d.mkdir(parents=True, exist_ok=True)
        (d / f"file {i} ü.bin").write_bytes(rng.randbytes(size))
    os.symlink("dir0/file 0 ü.bin", original / "link")
    os.link(original / "dir2" / "file 2 ü.bin", original / "hard link")  # cp -a links it again
    os.utime(original / "dir1" / "deep" / "file 1 ü.bin", ns=(1_500_000_000_123_456_789,) * 2)
    want = file_digests(original)

    fs = mount(delay_ms=0.2)
    subprocess.run(["cp", "-a", str(original), str(fs.mountpoint / "by-cp")], check=True)
    run_ferry("copy", "-r", f"{original}/", fs.mountpoint / "by-ferry")
    for name in ("by-cp", "by-ferry"):
        assert file_digests(fs.mountpoint / name) == want, name  # read back through the mount
        assert file_digests(fs.source / name) == want, name      # and what landed underneath
    assert os.stat(fs.source / "by-cp" / "hard link").st_nlink == 2
    ops = fs.stats()["ops"]
    assert ops["write"] > 0 and ops["link"] == 1


def test_stats_file_written_at_unmount(tmp_path, tree):
    stats = tmp_path / "final.json"
    fs = LatencyFS(tree, tmp_path / "mnt", stats_file=stats)
    with fs:
        os.listdir(fs.mountpoint)
        seen = fs.stats()["total"]
    assert not mounted_here(fs.mountpoint)
    final = json.loads(stats.read_text())
    assert final["total"] >= seen > 0 and final["inflight_now"] == 0
