"""workflow/scripts/replicate.py under real Open MPI (mpirun) and real Slurm (srun --mpi=pmix).

Every rank writes to its own `{rank}` directory, standing in for a node's local disk. The source
is Azurite behind the recording proxy, so the tests count every byte read from Blob; copies are
checked by reading the files, never with ferry.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from support.ferry import REPO_ROOT, ContainerURL, describe, ferry_env
from support.pipeline import pipeline
from support.proxy import FaultProxy
from support.slurm import NODES, lose_node, node_state, slurm_is_up, slurm_up
from support.trees import (
    Dir,
    File,
    Link,
    files_only,
    make_tree,
    many_files_spec,
    odd_names_spec,
    snapshot,
)

REPLICATE = REPO_ROOT / "workflow" / "scripts" / "replicate.py"
CHUNK = 64 * 1024
MPI_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    # More ranks than cores: waiting ranks must yield the CPU instead of spinning.
    "OMPI_MCA_mpi_yield_when_idle": "1",
}


def launcher(kind: str, ranks: int) -> list:
    """mpirun on this machine; srun wherever Slurm places the ranks; "nodes": srun, a rank a node."""
    if kind == "mpirun":
        return ["mpirun", "-n", str(ranks), "--oversubscribe"]
    spread = ["-N", str(ranks)] if kind == "nodes" else []
    return ["srun", "--mpi=pmix", "--kill-on-bad-exit=1", *spread, "-n", str(ranks), "--time=5"]


def replicate_cmd(kind, ranks, src, dest, *opts) -> list:
    return [
        *launcher(kind, ranks),
        sys.executable,
        "-m",
        "mpi4py",
        str(REPLICATE),
        str(src),
        str(dest),
        *opts,
    ]


def replicate(kind, ranks, src, dest, tmp_path, *opts, check=0, timeout=90):
    """Run replicate; returns (CompletedProcess, report dict or None)."""
    report = tmp_path / f"report-{uuid.uuid4().hex[:8]}.json"
    cmd = replicate_cmd(kind, ranks, src, dest, "--json", str(report), *opts)
    proc = subprocess.run(
        cmd,
        env=ferry_env(MPI_ENV),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        cwd=tmp_path,
    )
    if check is not None and proc.returncode != check:
        pytest.fail(
            f"{describe(cmd)}\n  expected exit {check}, got {proc.returncode}\n"
            f"  stdout: {proc.stdout[-3000:]}\n  stderr: {proc.stderr[-5000:]}",
            pytrace=False,
        )
    return proc, json.loads(report.read_text()) if report.exists() else None


def dataset_spec() -> dict:
    spec = {**many_files_spec(1000), **odd_names_spec()}
    spec["big/over-several-chunks.bin"] = File(size=5 * CHUNK + 12345)
    spec["big/exactly-one-chunk.bin"] = File(size=CHUNK)
    spec["empty/zero.bin"] = File(data=b"")
    spec["empty/deeper/also zero"] = File(data=b"")
    return spec


@pytest.fixture(scope="module")
def dataset(azurite, tmp_path_factory, ferry_bin):
    """The mixed dataset, uploaded once for the module: {path bytes: md5}, total bytes, container."""
    src = tmp_path_factory.mktemp("replicate-src")
    contents = make_tree(src, dataset_spec())
    container = ContainerURL(azurite, f"replicate-{uuid.uuid4().hex[:12]}")
    container.client.create_container()
    subprocess.run(
        [str(ferry_bin), "copy", "-r", str(src), container.at("data"), "--no-progress"],
        env=ferry_env(),
        check=True,
        capture_output=True,
        timeout=60,
    )
    want = {p: hashlib.md5(c).hexdigest() for p, c in contents.items()}
    mtimes = {p: e.mtime_ns for p, e in snapshot(src).items() if e.type == "f"}
    return want, sum(len(c) for c in contents.values()), container, mtimes


@pytest.fixture(scope="module")
def slurm():
    """The one-node cluster of scripts/slurm-up.sh; stopped afterwards only if this started it."""
    started = not slurm_is_up()
    if started:
        slurm_up(accounting=False)
    try:
        yield
    finally:
        if started:
            subprocess.run(
                ["bash", str(REPO_ROOT / "scripts" / "slurm-down.sh")],
                capture_output=True,
                timeout=60,
            )


def rank_dirs(root: Path, ranks: int) -> list:
    return [root / str(r) for r in range(ranks)]


def assert_replicas(root: Path, ranks: int, want: dict, mtimes: dict | None = None) -> None:
    """Every rank holds exactly the dataset, byte for byte, with the same mode and mtime (the
    source's, when given), and no temp file is left."""
    first = None
    for d in rank_dirs(root, ranks):
        snap = snapshot(d)
        got = files_only(snap)
        assert got == want, (
            f"{d}: {len(set(want) - set(got))} missing, "
            f"{sum(1 for p in want if p in got and got[p] != want[p])} differ"
        )
        assert not [p for p in snap if os.path.basename(p).startswith(b".ferry-")], (
            f"temp files left in {d}"
        )
        meta = {p: (e.mode, e.mtime_ns) for p, e in snap.items() if e.type == "f"}
        if first is None:
            first = meta
            if mtimes is not None:
                assert {p: m for p, (_, m) in meta.items()} == mtimes, (
                    f"{d}: mtimes differ from the source's"
                )
        else:
            assert meta == first, f"{d}: mode/mtime differ from rank 0's"


def needs_launcher(kind, request):
    if kind == "srun":
        request.getfixturevalue("slurm")


@pytest.mark.parametrize(
    "kind,ranks", [("mpirun", 2), ("mpirun", 4), pytest.param("srun", 2, marks=pytest.mark.slurm)]
)
def test_every_rank_gets_the_dataset_reading_blob_once(
    kind, ranks, dataset, azurite, tmp_path, request
):
    needs_launcher(kind, request)
    want, total, container, mtimes = dataset
    dest = tmp_path / "nodes"
    with FaultProxy(azurite.port) as proxy:
        src = container.via(proxy.port, "data")
        _, rep = replicate(
            kind,
            ranks,
            src,
            f"{dest}/{{rank}}",
            tmp_path,
            "--chunk-size",
            str(CHUNK),
            "--depth",
            "3",
        )
        assert_replicas(dest, ranks, want, mtimes)
        # Blob was read exactly once in all, each rank reading only its share.
        assert proxy.bytes_served() == total
        assert rep["bytes"]["read_from_source"] == total
        assert rep["bytes"]["broadcast"] == total
        shares = [r["download"]["bytes"] for r in rep["per_rank"]]
        assert all(s > 0 for s in shares) and sum(shares) == total, shares
        assert all(r["peak_rss_mib"] > 0 for r in rep["per_rank"])

        # A re-run finds everything on every rank: nothing read, nothing broadcast.
        proxy.clear_log()
        _, rep = replicate(
            kind, ranks, src, f"{dest}/{{rank}}", tmp_path, "--chunk-size", str(CHUNK)
        )
        assert proxy.bytes_served() == 0
        assert rep["bytes"] == {"read_from_source": 0, "broadcast": 0, "written_by_receivers": 0}
        assert rep["plan"]["held_by_all"] == len(want)

        # One rank lost files, another has a stale one: they come from the other ranks, not Blob.
        last = dest / str(ranks - 1)
        lost = [b"big/over-several-chunks.bin", b"many/d003/f00301.txt", b"odd/tab\there.txt"]
        moved = sum(os.path.getsize(last / os.fsdecode(p)) for p in lost)
        for p in lost:
            os.unlink(last / os.fsdecode(p))
        stale = dest / "0" / "many" / "d000" / "f00007.txt"
        os.utime(stale, ns=(0, 0))
        moved += stale.stat().st_size
        proxy.clear_log()
        _, rep = replicate(
            kind, ranks, src, f"{dest}/{{rank}}", tmp_path, "--chunk-size", str(CHUNK), "--verify"
        )
        assert proxy.bytes_served() == 0
        assert rep["bytes"]["broadcast"] == moved
        assert rep["verify"]["mismatch_count"] == 0
        assert_replicas(dest, ranks, want)


BROADCAST_UNDER_WAY = re.compile(rb"replicate: broadcast [1-9][0-9.]* [KM]?i?B / ")


def find_rank_pid(marker: str, rank: int, deadline: float) -> int:
    """The pid of the given rank of the replicate run whose environment carries `marker`."""
    wanted = {f"OMPI_COMM_WORLD_RANK={rank}".encode(), f"SLURM_PROCID={rank}".encode()}
    while time.monotonic() < deadline:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if str(REPLICATE).encode() not in f.read():
                        continue
                with open(f"/proc/{pid}/environ", "rb") as f:
                    env = set(f.read().split(b"\0"))
            except OSError:
                continue
            if f"FERRY_TEST_RUN={marker}".encode() in env and env & wanted:
                return int(pid)
        time.sleep(0.05)
    raise TimeoutError(f"rank {rank} of run {marker} never appeared")


@pytest.mark.parametrize("kind", ["mpirun", pytest.param("srun", marks=pytest.mark.slurm)])
def test_rank_killed_mid_broadcast_fails_the_job_and_rerun_completes(
    kind, dataset, azurite, tmp_path, request
):
    needs_launcher(kind, request)
    want, total, container, mtimes = dataset
    dest = tmp_path / "nodes"
    marker = uuid.uuid4().hex
    with FaultProxy(azurite.port) as proxy:
        src = container.via(proxy.port, "data")
        # A slow broadcast (about 4 s) so that the kill lands in the middle of it.
        cmd = replicate_cmd(
            kind,
            3,
            src,
            f"{dest}/{{rank}}",
            "--chunk-size",
            str(CHUNK),
            "--max-broadcast-bandwidth",
            "128KiB/s",
            "--progress-interval",
            "0.5",
        )
        err_path = tmp_path / "killed.stderr"
        with open(err_path, "wb") as err:
            job = subprocess.Popen(
                cmd,
                env=ferry_env({**MPI_ENV, "FERRY_TEST_RUN": marker}),
                cwd=tmp_path,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        try:
            deadline = time.monotonic() + 60
            while not BROADCAST_UNDER_WAY.search(err_path.read_bytes()) and job.poll() is None:
                assert time.monotonic() < deadline, err_path.read_text()
                time.sleep(0.05)
            assert job.poll() is None, f"finished before the kill:\n{err_path.read_text()}"
            os.kill(find_rank_pid(marker, 1, deadline), 9)
            killed = time.monotonic()
            rc = job.wait(timeout=30)
            took = time.monotonic() - killed
        finally:
            if job.poll() is None:
                job.kill()
                job.wait()
        stderr = err_path.read_text(errors="replace")
        assert rc != 0, stderr
        assert took < 30
        # The launcher names the rank that died.
        assert "rank 1" in stderr if kind == "mpirun" else "task 1" in stderr, stderr
        # Whatever carries a final name is complete; the rest is only under temp names.
        for d in rank_dirs(dest, 3):
            got = files_only(snapshot(d))
            assert all(
                want.get(p) == m
                for p, m in got.items()
                if not os.path.basename(p).startswith(b".ferry-")
            )

        # Every file reached some rank before the kill, so the re-run reads nothing from Blob.
        proxy.clear_log()
        _, rep = replicate(kind, 3, src, f"{dest}/{{rank}}", tmp_path, "--chunk-size", str(CHUNK))
        assert proxy.bytes_served() == 0
        assert rep["bytes"]["read_from_source"] == 0 and rep["bytes"]["broadcast"] > 0
        assert_replicas(dest, 3, want)


def rank_node(pid: int) -> str:
    """The Slurm node a rank runs on, from its environment."""
    with open(f"/proc/{pid}/environ", "rb") as f:
        env = dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)
    return env[b"SLURMD_NODENAME"].decode()


@pytest.mark.slurm
@pytest.mark.timeout(600)
def test_across_three_nodes_and_a_node_lost_mid_broadcast(dataset, azurite, tmp_path, slurm):
    """One rank on each node (srun -N3); then a node lost (its slurmd and all it started) in the
    middle of the broadcast: the job fails naming it, and a re-run on the three nodes, the lost
    one back, completes from what each node holds without reading Blob again."""
    want, total, container, _ = dataset
    with FaultProxy(azurite.port) as proxy:
        src = container.via(proxy.port, "data")
        dest = tmp_path / "whole"
        _, rep = replicate(
            "nodes",
            3,
            src,
            f"{dest}/{{rank}}",
            tmp_path,
            "--chunk-size",
            str(CHUNK),
            "--verify",
            timeout=240,
        )
        assert sorted(r["node"] for r in rep["per_rank"]) == list(NODES)
        assert rep["verify"]["mismatch_count"] == 0 and proxy.bytes_served() == total
        assert_replicas(dest, 3, want)

        dest = tmp_path / "lost"
        marker = uuid.uuid4().hex
        err_path = tmp_path / "lost.stderr"
        slow = ["--chunk-size", str(CHUNK), "--max-broadcast-bandwidth", "128KiB/s"]
        slow += ["--progress-interval", "0.5"]
        with open(err_path, "wb") as err:
            job = subprocess.Popen(
                [*replicate_cmd("nodes", 3, src, f"{dest}/{{rank}}"), *slow],
                env=ferry_env({**MPI_ENV, "FERRY_TEST_RUN": marker}),
                cwd=tmp_path,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        try:
            deadline = time.monotonic() + 120
            while not BROADCAST_UNDER_WAY.search(err_path.read_bytes()) and job.poll() is None:
                assert time.monotonic() < deadline, err_path.read_text()
                time.sleep(0.05)
            assert job.poll() is None, f"finished before the kill:\n{err_path.read_text()}"
            lost = rank_node(find_rank_pid(marker, 1, deadline))
            lose_node(lost)
            rc = job.wait(timeout=240)
        finally:
            if job.poll() is None:
                job.kill()
                job.wait()
            slurm_up(accounting=False)  # the lost node back: slurmd restarted, the node resumed
        stderr = err_path.read_text(errors="replace")
        assert rc != 0, stderr
        # srun names the node: as lost, or (when its step reported first) as where task 1 died.
        assert re.search(rf"Node failure on {lost}|{lost}: task 1: Killed", stderr), stderr
        assert node_state(lost) in ("idle", "mixed", "allocated"), node_state(lost)

        proxy.clear_log()
        _, rep = replicate(
            "nodes", 3, src, f"{dest}/{{rank}}", tmp_path, "--chunk-size", str(CHUNK), timeout=240
        )
        assert proxy.bytes_served() == 0
        assert rep["bytes"]["read_from_source"] == 0 and rep["bytes"]["broadcast"] > 0
        assert_replicas(dest, 3, want)


def test_verify_names_the_rank_and_file_of_a_corrupt_copy(dataset, tmp_path):
    want, _, container, _ = dataset
    dest = tmp_path / "nodes"
    src = container.at("data")
    replicate("mpirun", 2, src, f"{dest}/{{rank}}", tmp_path, "--verify")
    # Same size and mtime, different bytes: the compare rule keeps it, only --verify can tell.
    victim = dest / "1" / "many" / "d005" / "f00512.txt"
    st = victim.stat()
    data = bytearray(victim.read_bytes())
    data[0] ^= 0xFF
    victim.write_bytes(bytes(data))
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))
    proc, rep = replicate("mpirun", 2, src, f"{dest}/{{rank}}", tmp_path, "--verify", check=1)
    assert "verify: rank 1: many/d005/f00512.txt" in proc.stderr, proc.stderr
    assert rep["verify"]["mismatch_count"] == 1
    assert rep["verify"]["mismatches"][0]["rank"] == 1
    assert rep["verify"]["mismatches"][0]["against"] == "the source's Content-MD5"


def test_local_source_with_odd_names_download_ranks_and_manifest(tmp_path, ferry_bin):
    src = tmp_path / "src"
    spec = {**odd_names_spec(local_only=True), **many_files_spec(50)}
    spec["big.bin"] = File(size=3 * CHUNK + 7, mode=0o640, mtime_ns=1_600_000_000_123_456_789)
    spec["link"] = Link("big.bin")
    spec["empty dir/inner"] = Dir()
    want = {p: hashlib.md5(c).hexdigest() for p, c in make_tree(src, spec).items()}
    dest = tmp_path / "nodes"

    _, rep = replicate("mpirun", 3, src, f"{dest}/{{rank}}", tmp_path, "--dry-run")
    assert not dest.exists()
    assert rep["dry_run"] and rep["plan"]["download_files"] == len(want)

    _, rep = replicate(
        "mpirun",
        3,
        src,
        f"{dest}/{{rank}}",
        tmp_path,
        "--download-ranks",
        "1",
        "--max-bandwidth",
        "4GiB/s",
        "--chunk-size",
        str(CHUNK),
        "--verify",
    )
    assert rep["max_bandwidth_per_download_rank"] == 4 << 30
    assert_replicas(dest, 3, want)
    assert [r["download"]["bytes"] for r in rep["per_rank"]] == [
        sum(os.path.getsize(src / os.fsdecode(p)) for p in want),
        0,
        0,
    ]
    assert rep["ignored"] == [
        {"path": "link", "reason": "symlink (replicate copies files and directories)"}
    ]
    # --manifest: the given listing, not the source's, is what gets replicated.
    manifest = tmp_path / "subset.tsv"
    listing = subprocess.run(
        [str(ferry_bin), "ls", "-r", str(src)], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    manifest.write_text(
        "\n".join(
            line
            for line in listing
            if line.startswith(("#ferry-manifest", "many/d000/", "big.bin"))
        )
        + "\n"
    )
    _, sub = replicate(
        "mpirun", 2, src, f"{tmp_path}/subset/{{rank}}", tmp_path, "--manifest", str(manifest)
    )
    subset = {p: m for p, m in want.items() if p.startswith(b"many/d000/") or p == b"big.bin"}
    assert sub["plan"]["files"] == len(subset)
    assert_replicas(tmp_path / "subset", 2, subset)

    for d in rank_dirs(dest, 3):
        assert (d / "empty dir" / "inner").is_dir()
        st = (d / "big.bin").stat()
        assert (st.st_mode & 0o7777, st.st_mtime_ns) == (0o640, 1_600_000_000_123_456_789)


def test_a_rank_holds_a_file_by_the_workers_rule(tmp_path):
    """Held or not is the copy's rule (worker/src/same.rs), asked of each rank's worker: an mtime
    within a microsecond of the listing's is the same file (other tools keep fewer digits), one
    further off is not, and only that file is broadcast again."""
    src = tmp_path / "src"
    spec = many_files_spec(20)
    make_tree(src, spec)
    dest = tmp_path / "nodes"
    replicate("mpirun", 2, src, f"{dest}/{{rank}}", tmp_path)
    close, far = (dest / "1" / p for p in sorted(spec)[1:3])  # not the empty f00000
    for path, off in ((close, 700), (far, 2_000)):
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + off))
    _, rep = replicate("mpirun", 2, src, f"{dest}/{{rank}}", tmp_path)
    assert rep["plan"]["held_by_all"] == len(spec) - 1
    assert rep["bytes"]["broadcast"] == far.stat().st_size
    assert rep["bytes"]["read_from_source"] == 0


def test_refusals_are_clear(tmp_path):
    src = tmp_path / "src"
    make_tree(src, {"a.txt": b"a"})
    proc, _ = replicate("mpirun", 2, src, tmp_path / "shared", tmp_path, check=None)
    assert proc.returncode != 0
    assert "failed in stage 'setup'" in proc.stderr and "share DEST" in proc.stderr, proc.stderr
    proc, _ = replicate(
        "mpirun", 2, src, f"{tmp_path}/n/{{rank}}", tmp_path, "--chunk-size", "2GiB", check=2
    )
    assert proc.stderr.count("--chunk-size must be between") == 1, proc.stderr


@pytest.mark.pipeline
def test_snakemake_replicate_target(tmp_path, ferry_bin):
    src = tmp_path / "src"
    want = {p: hashlib.md5(c).hexdigest() for p, c in make_tree(src, many_files_spec(30)).items()}
    dest = tmp_path / "nodes"
    outdir = tmp_path / "results"
    settings = (
        f"replicate={{source: {src}, dest: '{dest}/{{rank}}', ranks: 2, "
        f"launcher: 'mpirun --oversubscribe', verify: true}}"
    )
    pipeline(
        settings,
        f"outdir={outdir}",
        f"ferry_bin={ferry_bin}",
        extra_args=("replicate",),
        env=MPI_ENV,
    )
    assert_replicas(dest, 2, want)
    (rep,) = outdir.glob("replicate/*/report.json")
    assert json.loads(rep.read_text())["verify"]["mismatch_count"] == 0
    # The migration is not configured: its target says what to run instead.
    proc = pipeline(settings, f"outdir={outdir}", expect=1)
    assert "snakemake replicate" in proc.stdout + proc.stderr
