"""tools/latencyfs, the latency-injecting passthrough the NFS-class benchmarks run on: it counts
what it is asked, serves requests in parallel, delays each one, and never changes a byte."""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import threading
import time
from pathlib import Path

import pytest
from support.latencyfs import NO_ROUND_TRIP, LatencyFS, build, mounted_here


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
    """The counters once `kind` has reached `at_least`, then reset: release (and releasedir) is
    sent asynchronously after close() returns, so it may trail the call that caused it."""
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
    ops = nonzero(settle(fs, "release", 1))
    # Writing the inode back, the kernel sometimes (one run in three here, by timing) also sends
    # the mtime it kept during the writes: one SETATTR, never more.
    assert ops.pop("setattr", 0) <= 1
    assert ops == {"lookup": 1, "create": 1, "write": 1, "flush": 1, "release": 1}
    assert (fs.source / "new").read_bytes() == b"w" * 512 * 512

    # The create changed the directory, yet no getattr of it follows: permissions are checked
    # underneath (no default_permissions), as an NFS server checks them.
    os.symlink("f01", m / "link")
    assert nonzero(fs.snapshot()) == {"lookup": 1, "symlink": 1}
    assert os.readlink(fs.source / "link") == "f01"

    st = fs.stats()
    assert (
        st["total"]
        == sum(v for k, v in st["ops"].items() if k not in NO_ROUND_TRIP)
        == st["finished"]
    )


def requests(st: dict) -> dict:
    """Requests by kind, without forgets (one-way messages the kernel sends when it likes)."""
    return {k: v for k, v in nonzero(st).items() if k != "forget"}


@pytest.mark.parametrize("writeback", [True, False], ids=["writeback-cache", "write-through"])
def test_counts_by_kind_are_exact(mount, writeback):
    fs = mount(attr_timeout=60, entry_timeout=60, writeback_cache=writeback)
    m, n = fs.mountpoint, 25
    for i in range(20):
        os.stat(m / f"f{i:02d}")
    fs.reset()

    fds = [os.open(m / f"new{i}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644) for i in range(n)]
    assert requests(fs.snapshot()) == {"lookup": n, "create": n}  # the name is looked up first
    for fd in fds:
        os.close(fd)
    assert requests(settle(fs, "release", n)) == {"flush": n, "release": n}

    for i in range(n):
        os.mkdir(m / f"dir{i}")
    assert requests(fs.snapshot()) == {"lookup": n, "mkdir": n}

    # With the writeback cache the kernel keeps ctime itself, and sends it after a rename, a
    # link or an unlink (one SETATTR each, every time, counted as a ctime flush); without it
    # the server keeps it.
    kept_ctime = {"ctime_flush": 1} if writeback else {}
    os.rename(m / "f05", m / "renamed")
    assert requests(fs.snapshot()) == {"lookup": 1, "rename": 1, **kept_ctime}
    os.link(m / "f06", m / "hard")
    assert requests(fs.snapshot()) == {"lookup": 1, "link": 1, **kept_ctime}
    os.unlink(m / "f07")
    assert requests(fs.snapshot()) == {"unlink": 1, **kept_ctime}
    os.rmdir(m / "dir0")
    assert requests(fs.snapshot()) == {"rmdir": 1}
    os.utime(m / "renamed", ns=(1, 2))  # a tool's own SETATTR of times, after the flush
    assert requests(fs.snapshot()) == {"setattr": 1}

    os.listdir(
        m / "dir1"
    )  # readdirplus while the kernel has no entries to revalidate, then readdir
    assert requests(settle(fs, "releasedir", 1)) == {
        "opendir": 1,
        "readdirplus": 1,
        "readdir": 1,
        "releasedir": 1,
    }


def test_the_kernels_ctime_flush_is_no_round_trip(mount):
    """The SETATTR that follows a rename under the writeback cache is FUSE's own (NFS clients
    send none): it is neither delayed nor in `total`, while a tool's SETATTR right after is."""
    delay = 0.3
    fs = mount(delay_ops={"setattr": delay * 1000}, entry_timeout=60, attr_timeout=60)
    m = fs.mountpoint
    os.stat(m / "f00")
    fs.reset()
    os.rename(m / "f00", m / "moved")
    st = fs.snapshot()
    assert requests(st) == {"lookup": 1, "rename": 1, "ctime_flush": 1}
    assert st["total"] == 2 and st["request_s"] < delay
    os.utime(m / "moved", ns=(1, 2))
    st = fs.snapshot()
    assert requests(st) == {"setattr": 1} and st["request_s"] >= delay
    os.stat(m / "f01")
    fs.reset()
    os.rename(m / "moved", m / "f01")  # over a file the kernel knows: a flush for each
    ops = requests(fs.snapshot())
    assert ops["rename"] == 1 and ops["ctime_flush"] == 2 and "setattr" not in ops, ops


def test_counts_stay_exact_with_concurrent_requests_and_snapshots(mount):
    """Threads count into blocks of their own, added up when asked: 8 clients' requests, read in
    snapshots taken while they run, must add up to exactly what they asked."""
    fs = mount(attr_timeout=0, entry_timeout=0)
    clients, n = 8, 400
    for i in range(clients):
        os.stat(fs.mountpoint / f"f{i:02d}")
    fs.reset()
    done, snapshots = threading.Event(), []

    def snapshot_while_running():
        while not done.is_set():
            snapshots.append(fs.snapshot())
            time.sleep(0.005)

    def client(i):
        for _ in range(n):  # caches off: every stat is a lookup and a getattr
            os.stat(fs.mountpoint / f"f{i:02d}")

    watcher = threading.Thread(target=snapshot_while_running)
    watcher.start()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    watcher.join()
    snapshots.append(fs.snapshot())
    assert len(snapshots) > 2
    total = {k: sum(s["ops"][k] for s in snapshots) for k in ("lookup", "getattr")}
    assert total == {"lookup": clients * n, "getattr": clients * n}
    assert (
        sum(s["total"] for s in snapshots)
        == sum(s["finished"] for s in snapshots)
        == 2 * clients * n
    )
    # At zero delay latencyfs serves with a thread per CPU (two at least), not one per request.
    assert max(s["inflight_max"] for s in snapshots) <= max(2, os.cpu_count())


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


def stat_at_once(fs: LatencyFS, names: list[str]) -> float:
    """Stat `names` through the mount from a thread each, released together; the wall time."""
    barrier = threading.Barrier(len(names))
    errors = []

    def one(name):
        try:
            barrier.wait(timeout=10)
            os.stat(fs.mountpoint / name)
        except Exception as e:  # reported below; a thread's exception would be lost
            errors.append(e)

    started = time.monotonic()
    threads = [threading.Thread(target=one, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    return time.monotonic() - started


@pytest.mark.parametrize("kind", ["lookup", "getattr"])
def test_requests_run_in_parallel_and_each_is_delayed(mount, kind):
    """16 threads stat 16 names in one directory, each request delayed 1 s: all 16 must be in
    the filesystem at once (parallel directory operations, replies held back together), so that
    together they take about one delay, not 16. Lookups: names not yet known; getattrs: names
    known for 60 s, attributes never trusted. The delay is long so that "at once" holds however
    slowly a busy machine starts the 16 threads: they need only all ask within it."""
    delay, k = 1.0, 16
    names = [f"f{i:02d}" for i in range(k)]
    fs = mount(
        delay_ops={kind: delay * 1000}, entry_timeout=60, attr_timeout=60 if kind == "lookup" else 0
    )
    if kind == "getattr":
        for n in names:
            os.stat(fs.mountpoint / n)
    fs.reset()
    elapsed = stat_at_once(fs, names)
    st = fs.snapshot()
    assert nonzero(st) == {kind: k} and st["total"] == k
    assert st["inflight_max"] == k
    # Time has floors only, as this machine's load varies: every request slept its delay...
    assert st["request_s"] >= k * delay
    assert elapsed >= delay
    # ...and they slept together: the filesystem was busy for little more than one delay, so
    # that the average in flight while busy comes near k (a ratio of its own clocks).
    assert st["inflight_avg_busy"] > k / 2


def test_threads_bound_the_requests_in_flight(mount):
    """--threads 4: 8 delayed lookups at once are served 4 at a time, so they take two delays.
    (Four must ask within one delay for 4 to be in flight together: 1 s, whatever the load.)"""
    delay = 1.0
    fs = mount(delay_ops={"lookup": delay * 1000}, entry_timeout=60, attr_timeout=60, threads=4)
    fs.reset()
    elapsed = stat_at_once(fs, [f"f{i:02d}" for i in range(8)])
    st = fs.snapshot()
    assert nonzero(st) == {"lookup": 8}
    assert st["inflight_max"] == 4
    assert elapsed >= 2 * delay and st["request_s"] >= 8 * delay


def test_a_delayed_request_holds_no_thread_through_its_delay(mount, tree):
    """32 lookups delayed 1 s at once are all in flight together, yet no thread waits out any
    of their delays: each does its work at once and leaves its reply in the queue, instead of a
    thread sleeping through every delay (the cost that took CPU from the tools measured).
    Counted by latencyfs itself: how many threads libfuse happens to start depends on how the
    machine schedules them, not on whether a thread is held. (The delay is long so that all 32
    ask within it however slowly a busy machine starts their threads.)"""
    delay, k = 1.0, 32
    names = [f"g{i:02d}" for i in range(k)]
    for n in names:
        (tree / n).touch()
    fs = mount(delay_ops={"lookup": delay * 1000}, entry_timeout=60, attr_timeout=60)
    fs.reset()
    elapsed = stat_at_once(fs, names)
    st = fs.snapshot()
    assert nonzero(st) == {"lookup": k} and st["inflight_max"] == k
    # Every reply waited in the queue, all k of them at once, and no thread slept a delay: a
    # thread per delayed request would have made held 0 and slept k.
    assert (st["held"], st["held_max"], st["slept"]) == (k, k, 0), st
    assert st["request_s"] >= k * delay and elapsed >= delay


def test_a_reply_too_big_to_hold_is_slept_through(mount, tree):
    """The one case where a thread still waits out a delay: a READ reply over 128 KiB is not
    copied into the queue, and `slept` counts it (so that `slept` 0 above means something)."""
    (tree / "big").write_bytes(b"x" * (1 << 20))
    fs = mount(delay_ops={"read": 20}, entry_timeout=60, attr_timeout=60)
    with open(fs.mountpoint / "big", "rb", buffering=0) as f:
        fs.reset()
        assert len(os.pread(f.fileno(), 256 << 10, 0)) == 256 << 10
        st = fs.snapshot()
    # Lower bounds only: readahead may still be on its way when the counters are read.
    assert st["ops"]["read"] >= 1 and st["slept"] >= 1, st


def test_per_kind_delay_and_jitter(mount):
    fs = mount(delay_ops={"lookup": 50}, jitter_ms=20, entry_timeout=60, attr_timeout=60)
    fs.reset()
    for i in range(4):
        started = time.monotonic()
        os.stat(fs.mountpoint / f"f{i:02d}")
        assert time.monotonic() - started >= 0.050  # a floor: the lookup slept its own delay
    os.statvfs(fs.mountpoint)
    st = fs.snapshot()
    assert nonzero(st) == {"lookup": 4, "statfs": 1}
    # Lower bounds only: the lookups slept at least their own delay.
    assert st["request_s"] >= 4 * 0.050


def test_jitter_alone_delays_every_request(mount):
    """--jitter 40 and no delay: each request sleeps a uniform 0-40 ms. 20 of them sum to 400 ms
    on average; under 80 ms has a probability below 1e-12, so the floor is safe."""
    fs = mount(jitter_ms=40, entry_timeout=60, attr_timeout=60)
    fs.reset()
    for i in range(20):
        os.stat(fs.mountpoint / f"f{i:02d}")
    st = fs.snapshot()
    assert nonzero(st) == {"lookup": 20}
    assert st["request_s"] >= 0.080


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
                out[rel] = (
                    "file",
                    st.st_mode,
                    st.st_mtime_ns,
                    hashlib.sha256(p.read_bytes()).hexdigest(),
                )
    return out


def test_copies_through_it_are_byte_identical(mount, tmp_path, run_ferry):
    original = tmp_path / "original"
    rng = random.Random(7)
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
    ops = fs.stats()["ops"]
    # One LINK each: cp -a's and ferry's for the second name of the hard-linked file.
    assert ops["write"] > 0 and ops["link"] == 2
    for name in ("by-cp", "by-ferry"):
        assert (
            os.lstat(fs.mountpoint / name / "hard link").st_ino
            == os.lstat(fs.mountpoint / name / "dir2" / "file 2 ü.bin").st_ino
        ), name
    fs.unmount()  # read back through a mount with nothing cached: every byte a read request
    fs.mount()
    for name in ("by-cp", "by-ferry"):
        assert file_digests(fs.mountpoint / name) == want, name  # read back through the mount
        assert file_digests(fs.source / name) == want, name  # and what landed underneath
    assert fs.stats()["ops"]["read"] > 0
    assert os.stat(fs.source / "by-cp" / "hard link").st_nlink == 2


@pytest.mark.parametrize("writeback", [True, False], ids=["writeback-cache", "write-through"])
def test_a_large_random_file_round_trips(mount, tmp_path, writeback):
    """48 MiB of random bytes written through the mount in pieces of odd sizes land underneath
    unchanged; read back through a second mount, whose page cache never saw them (every byte
    comes from the filesystem's reads), whole and at odd offsets, they are unchanged too."""
    rng = random.Random(14)
    data = rng.randbytes(48 * 2**20 + 4097)
    original = tmp_path / "original"
    original.write_bytes(data)

    fs = mount(writeback_cache=writeback)
    fd = os.open(fs.mountpoint / "big", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    pos = 0
    while pos < len(data):
        pos += os.write(fd, data[pos : pos + rng.randint(1, 3 * 2**20)])
    os.fsync(fd)
    os.close(fd)
    assert fs.stats()["ops"]["write"] > 0
    subprocess.run(["cmp", original, fs.source / "big"], check=True)

    fresh = mount()
    fresh.reset()
    with open(fresh.mountpoint / "big", "rb", buffering=0) as f:
        for _ in range(64):
            off, size = rng.randrange(len(data)), rng.randint(1, 2**20 + 3)
            assert os.pread(f.fileno(), size, off) == data[off : off + size], (off, size)
    assert fresh.stats()["ops"]["read"] > 0
    subprocess.run(["cmp", original, fresh.mountpoint / "big"], check=True)


def test_stats_file_written_at_unmount(tmp_path, tree):
    stats = tmp_path / "final.json"
    fs = LatencyFS(tree, tmp_path / "mnt", stats_file=stats)
    with fs:
        os.listdir(fs.mountpoint)
        seen = fs.stats()["total"]
    assert not mounted_here(fs.mountpoint)
    final = json.loads(stats.read_text())
    assert final["total"] >= seen > 0 and final["inflight_now"] == 0


def many_files(src: Path, dirs: int, per_dir: int) -> dict[str, bytes]:
    want = {}
    for d in range(dirs):
        (src / f"d{d:02d}").mkdir(parents=True)
        for i in range(per_dir):
            rel = f"d{d:02d}/f{i:03d}"
            want[rel] = b"%s " % rel.encode() * (1 + i % 7)
            (src / rel).write_bytes(want[rel])
    return want


@pytest.mark.parametrize("limit", ["64:64", "128:4096"])
def test_more_inodes_than_the_hard_limit_on_open_files(tmp_path, limit):
    """latencyfs keeps a descriptor open for only some of the inodes the kernel knows (half its
    limit on open files) and reopens the others by file handle: with a hard limit of 64 it
    serves 3,000 files the kernel knows all at once (entries trusted for a minute), stat, read,
    written, renamed, deleted and made again, every byte intact and no EMFILE."""
    src = tmp_path / "many"
    want = many_files(src, 30, 100)
    # Attributes never trusted: every stat is a GETATTR, of an inode whose descriptor was closed
    # since, most of them.
    fs = LatencyFS(src, tmp_path / "mnt", attr_timeout=0, entry_timeout=60)
    fs.args = ["prlimit", f"--nofile={limit}", "--", *fs.args]
    with fs:
        mnt = fs.mountpoint
        for _ in range(2):
            assert {rel: os.stat(mnt / rel).st_size for rel in want} == {
                rel: len(b) for rel, b in want.items()
            }
        assert {rel: (mnt / rel).read_bytes() for rel in want} == want
        for n, rel in enumerate(sorted(want)[::5]):
            want[rel] += b"appended %d" % n
            with open(mnt / rel, "ab") as f:
                f.write(b"appended %d" % n)
        for rel in sorted(want)[1::9]:  # ext4 gives a deleted inode's number to the next new file
            os.unlink(mnt / rel)
            want[rel] = b"made again: " + rel.encode()
            (mnt / rel).write_bytes(want[rel])
        for rel in sorted(want)[2::11]:
            os.rename(mnt / rel, mnt / f"{rel}.moved")
            want[f"{rel}.moved"] = want.pop(rel)
        assert {rel: (mnt / rel).read_bytes() for rel in want} == want
        assert {str(p.relative_to(mnt)) for p in mnt.rglob("f*")} == set(want)
        st = fs.stats()
        hard = int(
            limit.split(":")[1]
        )  # raised to: the soft limit is the hard one, half of it cached
        assert len(os.listdir(f"/proc/{fs.proc.pid}/fd")) <= min(hard, hard // 2 + 64) < len(want)
    assert {rel: (src / rel).read_bytes() for rel in want} == want
    # The kernel kept most inodes (it forgot few): it knew far more at once than the limit.
    assert st["ops"]["forget"] < len(want) // 2 and st["ops"]["lookup"] >= len(want)
    assert "out of descriptors" not in fs.log.read_text()


def test_without_file_handles_a_descriptor_per_inode(tmp_path):
    # Without CAP_DAC_READ_SEARCH (open_by_handle_at takes it) latencyfs keeps a descriptor for
    # every inode the kernel knows, says so once, and raises its soft limit on open files to
    # the hard one so as to serve more of them than the soft limit.
    src = tmp_path / "many"
    want = many_files(src, 6, 100)
    fs = LatencyFS(src, tmp_path / "mnt", attr_timeout=60, entry_timeout=60)
    fs.args = [
        "prlimit",
        "--nofile=128:4096",
        "--",
        "setpriv",
        "--bounding-set",
        "-dac_read_search",
        "--",
        *fs.args,
    ]
    with fs:
        assert {rel: (fs.mountpoint / rel).read_bytes() for rel in want} == want
        assert len(os.listdir(f"/proc/{fs.proc.pid}/fd")) > len(want)
    assert "no file handles" in fs.log.read_text()


def test_a_new_inode_with_the_number_of_a_deleted_one_the_kernel_still_knows(tmp_path):
    # The kernel keeps a removed directory's inode while something holds it (here an O_PATH
    # descriptor, which latencyfs never hears of); latencyfs, its descriptor closed to make
    # room, no longer keeps the directory alive underneath, and ext4 gives its number to the
    # next new directory. That one must be a new inode to the kernel, not the removed one.
    src = tmp_path / "src"
    many_files(src, 1, 200)
    fs = LatencyFS(src, tmp_path / "mnt", attr_timeout=0, entry_timeout=60)
    fs.args = ["prlimit", "--nofile=64:64", "--", *fs.args]
    with fs:
        mnt = fs.mountpoint
        os.mkdir(mnt / "gone")
        number = os.stat(src / "gone").st_ino
        held = os.open(mnt / "gone", os.O_PATH)
        try:
            for p in (mnt / "d00").iterdir():  # the cache (32 descriptors) turns over
                os.stat(p)
            os.rmdir(mnt / "gone")
            for i in range(20):
                os.mkdir(mnt / f"new{i}")
                (mnt / f"new{i}" / "x").write_bytes(b"%d" % i)
                assert (mnt / f"new{i}" / "x").read_bytes() == b"%d" % i
                assert os.listdir(mnt / f"new{i}") == ["x"]
        finally:
            os.close(held)
        reused = [i for i in range(20) if os.stat(src / f"new{i}").st_ino == number]
    if not reused:
        pytest.skip("the backing filesystem gave the number to no new directory")


def test_files_renamed_over_or_unlinked_past_the_descriptor_cache_leave_syncfs_clean(tmp_path):
    """With the writeback cache the kernel writes a file's ctime back right after a rename over
    it or its unlink (`ctime_flush`), and a failure there is kept for the next syncfs() on the
    mount. latencyfs has closed the descriptors of most of the inodes the kernel knows, and a
    file without a name cannot be reopened by its handle: it keeps the descriptor of a file
    losing its name until that flush is served. NFS sends no such request, so nothing may fail
    (a durable `ferry copy` re-run, which renames over changed files, failed on 100,000 files)."""
    src = tmp_path / "many"
    want = many_files(src, 10, 100)
    fs = LatencyFS(src, tmp_path / "mnt", attr_timeout=60, entry_timeout=60)
    fs.args = ["prlimit", "--nofile=64:64", "--", *fs.args]
    with fs:
        mnt = fs.mountpoint
        assert {rel: os.stat(mnt / rel).st_size for rel in want} == {
            rel: len(b) for rel, b in want.items()
        }
        for n, rel in enumerate(sorted(want)):
            if n % 3 == 0:
                (mnt / f"{rel}.new").write_bytes(b"new")
                os.rename(mnt / f"{rel}.new", mnt / rel)
            elif n % 3 == 1:
                os.unlink(mnt / rel)
        # `sync -f` is syncfs(2) of the mount: it reports what a ctime flush returned.
        synced = subprocess.run(["sync", "-f", str(mnt)], capture_output=True, text=True)
        assert synced.returncode == 0, synced.stderr
        st = fs.stats()
    assert st["ops"]["ctime_flush"] >= 2 * len(want) // 3, st["ops"]
