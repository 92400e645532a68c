"""Round trips on an NFS-like mount (tools/latencyfs), counted: verify and prune read each side
once, about what listing the destination costs. Counts, not timings: they repeat run to run.
(The per-file counts of copy and of an unchanged re-run: docs/nfs.md.)"""

from __future__ import annotations

import json
import os
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
    assert (
        requests(
            copied, run_ferry, "prune", "--yes", "--log", tmp_path / "prune.tsv", f"{source}/", dst
        )
        <= 1.2 * listing
    )
    assert (tmp_path / "prune.tsv").exists()


def counted(fs: LatencyFS, cmd: list) -> dict:
    """Requests by kind (and the in-flight figures) that one command makes on a fresh mount."""
    fs.unmount()
    fs.mount()
    fs.reset()
    subprocess.run([str(c) for c in cmd], check=True, capture_output=True)
    snap = fs.snapshot()
    return {
        **{k: v for k, v in snap["ops"].items() if v},
        "total": snap["total"],
        "inflight_max": snap["inflight_max"],
    }


@pytest.fixture
def empty_mount(tmp_path):
    backing = tmp_path / "backing"
    backing.mkdir()
    fs = LatencyFS(backing, tmp_path / "mnt", attr_timeout=30, entry_timeout=30)
    yield fs
    fs.unmount()


def test_a_copied_file_costs_what_cp_costs_plus_the_temp_names_rename(
    empty_mount, source, ferry_bin
):
    # A new file must never be seen under its final name half-written, and NFS has no
    # O_TMPFILE: ferry writes a temp name and renames it, which costs the final name's LOOKUP
    # and the RENAME over `cp -a`. (FUSE with the writeback cache also writes the ctime back
    # after a rename, which an NFS client does not: latencyfs counts that apart, as
    # `ctime_flush`.) Everything else per file is cp's or less (docs/nfs.md).
    mnt = empty_mount.mountpoint
    cp = counted(empty_mount, ["cp", "-a", source, mnt / "cp"])
    ferry = counted(empty_mount, [ferry_bin, "copy", "-r", f"{source}/", mnt / "ferry"])
    n = FILES
    assert ferry["create"] == cp["create"] == n and ferry["rename"] == n, (ferry, cp)
    # And the two LOOKUPs (measured: 489 before, 491 after, for 240 files) of resolving the
    # destination root, not made yet, that refusing overlapping roots costs once a command
    # (docs/worker.md, "Overlapping roots").
    assert ferry["lookup"] <= cp["lookup"] + n + 2, (ferry, cp)
    for kind in ("write", "flush", "release", "mkdir"):
        assert ferry.get(kind, 0) <= cp.get(kind, 0), (kind, ferry, cp)
    # A temp file is made with ferry's mark (the sticky bit, so that it is told from a user's
    # file of the same name: docs/worker.md, "Integrity"), which its final mode clears: one
    # SETATTR a file more where cp's mode needs none.
    assert ferry.get("setattr", 0) <= cp.get("setattr", 0) + n, (ferry, cp)
    # Durable without a FSYNC per file (one flush of the filesystem per batch), and no
    # directory opened per file.
    assert ferry.get("fsync", 0) == 0 and ferry.get("opendir", 0) <= 2, ferry
    # The temp name's LOOKUP and RENAME, and the SETATTR that clears its mark.
    assert ferry["total"] <= cp["total"] + 3 * n, (ferry, cp)


def test_an_unchanged_rerun_costs_one_listing_of_the_destination(copied, source, ferry_bin):
    dst = copied.mountpoint / "dst"
    listing = counted(copied, [ferry_bin, "ls", "-r", dst])["total"]
    rerun = counted(copied, [ferry_bin, "copy", "-r", "--json", f"{source}/", dst])
    assert rerun["total"] <= 1.2 * listing, (rerun, listing)
    assert rerun.get("setattr", 0) == 0 and rerun.get("getattr", 0) == 0, rerun


def test_partitions_verify_and_copy_from_their_own_directories(copied, source, ferry_bin, tmp_path):
    # The pipelines hand each job a partition cut in path order (ferry plan): together the
    # jobs look at each destination directory about once, not each at the whole tree.
    dst = copied.mountpoint / "dst"
    listing = counted(copied, [ferry_bin, "ls", "-r", dst])["total"]
    manifest = tmp_path / "all.tsv"
    manifest.write_bytes(
        subprocess.run([str(ferry_bin), "ls", "-r", source], check=True, capture_output=True).stdout
    )
    plan = tmp_path / "plan"
    subprocess.run(
        [
            str(ferry_bin),
            "plan",
            manifest,
            "--out",
            plan,
            "--phase",
            "baseline",
            "--max-files",
            str(FILES // 3),
        ],
        check=True,
        capture_output=True,
    )
    part_files = sorted((plan / "copy").glob("part-*.tsv"))
    assert len(part_files) >= 3
    for verb in (["verify"], ["copy", "--compare", "size-mtime"]):
        jobs = [
            counted(copied, [ferry_bin, *verb, f"{source}/", dst, "--files-from", p])
            for p in part_files
        ]
        total = sum(job["total"] for job in jobs)
        # Beyond its share of the listing, a job costs a few requests of its own: its root's
        # lookups, a statfs or two, and, on a loaded machine, the kernel's second LOOKUP when two
        # threads reach one name at once (44 here when quiet, 46 seen under load). Each job
        # reading the whole tree would cost 3 listings.
        assert total <= 1.2 * listing + 5 * len(part_files), (verb, total, listing, jobs)


def test_a_few_paths_of_a_large_directory_are_looked_up_not_listed(tmp_path, ferry_bin):
    # A final pass verifies its delta: a few files in each of a few large directories. The
    # verify costs those files, not the directories they sit in.
    backing, n, delta = tmp_path / "backing", 6000, 12
    for side in ("src", "dst"):
        (backing / side / "big").mkdir(parents=True)
        for i in range(n):
            (backing / side / "big" / f"file-{i:05d}.dat").write_bytes(b"x")
    listing = (
        subprocess.run(
            [str(ferry_bin), "ls", "-r", backing / "src"], check=True, capture_output=True
        )
        .stdout.decode()
        .splitlines(keepends=True)
    )
    part = tmp_path / "delta.tsv"
    part.write_text(listing[0] + "".join(listing[1 : 1 + n : n // delta]))
    fs = LatencyFS(backing, tmp_path / "mnt", attr_timeout=30, entry_timeout=30)
    try:
        mnt = fs.mountpoint
        whole = counted(fs, [ferry_bin, "ls", "-r", mnt / "dst"])
        verify = counted(
            fs, [ferry_bin, "verify", "--json", mnt / "src", mnt / "dst", "--files-from", part]
        )
    finally:
        fs.unmount()
    assert "readdir" not in verify and "readdirplus" not in verify, verify
    # A look a file on each side (and the way to them), against one side's listing.
    assert verify["total"] <= 2 * delta + 8 < whole["total"], (verify, whole)


def test_a_slow_mount_gets_many_requests_in_flight(tmp_path, ferry_bin):
    # At 2 ms a request, 16 files at once would leave the copy waiting on round trips: on a
    # network filesystem ferry starts with 64. (Spread over many directories: creates and
    # renames in one directory take its lock, which no depth gets around.)
    src = tmp_path / "src"
    for i in range(480):
        d = src / f"d{i % 96:02d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i:04d}").write_bytes(b"y" * (i % 3000))
    backing = tmp_path / "backing"
    backing.mkdir()
    with LatencyFS(backing, tmp_path / "mnt", delay_ms=2, attr_timeout=30, entry_timeout=30) as fs:
        fs.reset()
        out = subprocess.run(
            [str(ferry_bin), "copy", "-r", "--json", f"{src}/", fs.mountpoint / "dst"],
            check=True,
            capture_output=True,
            text=True,
        )
        depth = json.loads(out.stdout)["concurrency"]
        assert depth["mode"] == "adaptive" and depth["initial"] == 64, depth
        assert fs.stats()["inflight_max"] >= 32


def flat_tree(tmp_path, files: int):
    """A source directory `flat` of `files` small files (the crowded shape), and an empty
    backing directory for the mount."""
    src = tmp_path / "src" / "flat"
    src.mkdir(parents=True)
    for i in range(files):
        (src / f"f{i:04d}").write_bytes(os.urandom(i * 7 % 4000))
    backing = tmp_path / "backing"
    backing.mkdir()
    return src, backing


def test_a_crowded_directory_is_written_through_staging_directories_and_none_is_left(
    tmp_path, ferry_bin
):
    # Hundreds of files into one directory of a network filesystem: their temp names are made
    # in staging directories under the root (only the rename into place holds the crowded
    # directory's lock), a few shared by all threads, and those go once the copy is done. In a
    # durable run each such file is flushed on its own and renamed at once.
    src, backing = flat_tree(tmp_path, 300)
    with LatencyFS(backing, tmp_path / "mnt", attr_timeout=30, entry_timeout=30) as fs:
        dst = fs.mountpoint / "dst"
        fs.reset()
        subprocess.run(
            [str(ferry_bin), "copy", "-r", f"{src.parent}/", dst], check=True, capture_output=True
        )
        ops = fs.stats()["ops"]
        got = {p.name: p.read_bytes() for p in (dst / "flat").iterdir()}
        assert got == {p.name: p.read_bytes() for p in src.iterdir()}
        assert sorted(os.listdir(backing / "dst")) == ["flat"], (
            "a staging directory was left behind"
        )
    # dst and flat, then the staging directories: made, and removed as many.
    assert 2 < ops["mkdir"] <= 2 + 16 and ops["rmdir"] == ops["mkdir"] - 2, ops
    assert ops["rename"] == ops["fsync"] == 300, ops


def test_files_bound_for_a_crowded_directory_are_renamed_before_their_staged_name_is_forgotten(
    tmp_path, ferry_bin
):
    # Each file into a crowded directory costs two LOOKUPs: its final name there (absent, so
    # never cached) and its staged name at its create. Renames into that directory go one at a
    # time under its lock, so with hundreds of files at once a file would wait there longer
    # than the client's entry cache (1 s here) remembers its staged name, and the rename would
    # look it up again. ferry lets few such files in flight, whatever the depth.
    src, backing = flat_tree(tmp_path, 300)
    with LatencyFS(backing, tmp_path / "mnt", delay_ms=5, attr_timeout=1, entry_timeout=1) as fs:
        fs.reset()
        subprocess.run(
            [
                str(ferry_bin),
                "copy",
                "-r",
                "--no-fsync",
                "--parallel-files",
                "256",
                f"{src.parent}/",
                fs.mountpoint / "dst",
            ],
            check=True,
            capture_output=True,
        )
        ops = fs.stats()["ops"]
        assert sorted(p.name for p in (fs.mountpoint / "dst" / "flat").iterdir()) == sorted(
            p.name for p in src.iterdir()
        )
    assert ops["rename"] == 300 and ops["lookup"] <= 2.2 * 300, ops


def test_a_crowded_directory_without_fsync_at_the_adaptive_depth_completes(tmp_path, ferry_bin):
    # The adaptive depth starts below the 256 threads a network filesystem gets, so threads wait
    # for slots; a thread waiting for its turn at a crowded directory must not hold one, or the
    # thread whose turn it is can never get the slot its commit takes (a deadlock, seen once).
    src, backing = flat_tree(tmp_path, 600)
    with LatencyFS(backing, tmp_path / "mnt", delay_ms=1, attr_timeout=30, entry_timeout=30) as fs:
        out = subprocess.run(
            [
                str(ferry_bin),
                "copy",
                "-r",
                "--no-fsync",
                "--json",
                f"{src.parent}/",
                fs.mountpoint / "dst",
            ],
            check=True,
            capture_output=True,
            text=True,
            timeout=120,
        )
        depth = json.loads(out.stdout)["concurrency"]
        assert depth["mode"] == "adaptive" and depth["initial"] < 256, depth
        assert sorted(p.name for p in (fs.mountpoint / "dst" / "flat").iterdir()) == sorted(
            p.name for p in src.iterdir()
        )


def test_files_are_copied_while_later_directories_are_still_being_made(tmp_path, ferry_bin):
    # Directories in one parent are made one at a time (the parent's lock, over a LOOKUP and a
    # MKDIR each): 2,000 of them at 1 ms is four seconds. A directory is made when the first
    # file bound for it needs it, so the files of the first ones go in while the later ones
    # are still being made, instead of after all of them. Told from the order of the system
    # calls (strace), not from timings.
    src = tmp_path / "src"
    for d in range(24):
        for i in range(6):
            (src / f"d{d:02d}").mkdir(parents=True, exist_ok=True)
            (src / f"d{d:02d}" / f"f{i}").write_bytes(b"z" * (d * 100 + i))
    backing = tmp_path / "backing"
    backing.mkdir()
    trace = tmp_path / "trace"
    with LatencyFS(backing, tmp_path / "mnt", delay_ms=2, attr_timeout=30, entry_timeout=30) as fs:
        dst = fs.mountpoint / "dst"
        subprocess.run(
            [
                "strace",
                "-f",
                "-qq",
                "-o",
                trace,
                "-e",
                "trace=mkdirat,openat",
                ferry_bin,
                "copy",
                "-r",
                "--parallel-files",
                "4",
                f"{src}/",
                dst,
            ],
            check=True,
            capture_output=True,
        )
        assert sorted(p.relative_to(dst) for p in dst.rglob("*")) == sorted(
            p.relative_to(src) for p in src.rglob("*")
        )
    calls = trace.read_text().splitlines()
    mkdirs = [n for n, line in enumerate(calls) if "mkdirat(" in line and '"d' in line]
    creates = [
        n
        for n, line in enumerate(calls)
        if "openat(" in line and "O_CREAT" in line and "partial" in line
    ]
    assert len(mkdirs) == 24 and len(creates) == 24 * 6, (len(mkdirs), len(creates))
    assert creates[0] < mkdirs[-1], "every directory was made before the first file"
