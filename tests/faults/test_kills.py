"""Seeded SIGKILL loops: ferry killed at random moments of uploads, downloads, local copies, prunes
and a pipeline's copy job, then run again until a run ends on its own.

After every kill: every blob that exists holds exactly its source's bytes, every local file under
a final name is complete (only ferry's ``.ferry-*`` temp names may hold partial data), and a prune
has deleted nothing the source still has. After the last run: the destination is complete,
``ferry verify --checksum`` accepts it and the Python SDK's bytes agree. Uploads go through the
test proxy, so a block staged before a kill is seen never to be sent again.

The seed is printed in the pytest header; ``FERRY_FAULT_SEED=<seed>`` replays the same kill times
(as far as the machine's timing allows).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from support.faults import PARTIAL_PREFIX, random_files, upload_with_sdk, write_files
from support.ferry import REPO_ROOT, ferry_env
from support.interrupt import ferry_processes
from support.proxy import FaultProxy

KiB = 1024
REPO = REPO_ROOT

# Kills per kind of run: CI totals 100; --deep five times as many, on bigger trees.
KILLS = {"upload": 37, "download": 37, "local": 12, "prune": 11, "pipeline": 3}
DEEP_FACTOR = 5
# Transfers are capped so that a run lasts about a second (CI) and a kill lands mid-transfer.
BANDWIDTH = "2MiB/s"
BANDWIDTH_BYTES = 2 << 20


def quota(faults, what: str) -> int:
    return KILLS[what] * (DEEP_FACTOR if faults.deep else 1)


def max_sequences(faults) -> int:
    """A bound on kill sequences, so a test whose kills never land ends; deep runs need more."""
    return 60 * (DEEP_FACTOR if faults.deep else 1)


def tree(faults, rng) -> dict[str, bytes]:
    if faults.deep:
        return random_files(rng, small=30, big=3, big_size=1536 * KiB)
    return random_files(rng, small=8, big=2, big_size=512 * KiB)


def window(files: dict[str, bytes]) -> float:
    """Kills fall uniformly within this many seconds: a little more than a whole capped run, so
    some land early, some late, and now and then a run gets to finish."""
    return 1.2 * sum(map(len, files.values())) / BANDWIDTH_BYTES + 0.1


def kill_at_random(proc: subprocess.Popen, rng, longest: float) -> bool:
    """SIGKILL ``proc`` at a random moment within ``longest`` seconds; False if it ended first."""
    try:
        proc.wait(rng.uniform(0.02, longest))
        return False
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
        return True


def run_until_done(
    faults, what: str, start, after_kill, longest: float, kills_left: int, max_runs: int = 40
) -> tuple[int, int, float | None]:
    """Start, kill at random, check, start again, until a run ends by itself (the run after
    ``kills_left`` kills is left alone); returns its exit status, the number of kills, and how
    long the first start took when it ran whole (None once it was killed). Every kill and run
    goes into the ledger."""
    rng = faults.test_rng
    for kills in range(max_runs):
        began = time.monotonic()
        proc = start()
        faults.ran()
        if kills >= kills_left:
            proc.wait(120)
            return proc.returncode, kills, None
        if not kill_at_random(proc, rng, longest):
            return proc.returncode, kills, (time.monotonic() - began) if kills == 0 else None
        faults.kill(what)
        after_kill()
    raise AssertionError(f"{what}: no run finished by itself in {max_runs} starts")


def stderr_of(log_dir: Path) -> str:
    return (log_dir / "ferry.stderr").read_text(errors="replace")[-3000:]


def leftovers(root: Path) -> list[str]:
    return [
        os.path.join(d, n)
        for d, _, names in os.walk(root)
        for n in names
        if n.startswith(PARTIAL_PREFIX)
    ]


def test_upload_killed_at_random_converges(tmp_path, azurite, container, run_ferry, faults):
    rng = faults.test_rng
    seq = killed = 0
    with FaultProxy(azurite.port) as proxy:
        while killed < quota(faults, "upload"):
            seq += 1
            src = tmp_path / f"src{seq}"
            files = tree(faults, rng)
            write_files(src, files)
            prefix = f"seq{seq}/"
            dest = container.via(proxy.port, prefix)
            proxy.clear_log()

            def start():
                return run_ferry.spawn(
                    "copy",
                    src,
                    dest,
                    "--recursive",
                    "--block-size",
                    "256KiB",
                    "--max-bandwidth",
                    BANDWIDTH,
                    log_dir=tmp_path,
                )

            def after_kill():
                # Requests the dead run had sent land before anything is judged or re-run.
                proxy.wait_idle(30)
                assert not faults.check_blobs(container, files, complete=False, prefix=prefix)

            rc, kills, _ = run_until_done(
                faults, "upload", start, after_kill, window(files), quota(faults, "upload") - killed
            )
            killed += kills
            assert rc == 0, stderr_of(tmp_path)
            assert not faults.check_blobs(container, files, complete=True, prefix=prefix)
            run_ferry("verify", "--checksum", src, container.at(prefix))
            staged = Counter(
                (r.path, r.block_id) for r in proxy.requests("PUT", comp="block") if r.status == 201
            )
            again = {k: n for k, n in staged.items() if n > 1}
            assert not again, f"blocks staged before a kill were sent again: {list(again)[:5]}"
            assert seq < max_sequences(faults), (
                "kills are not landing: runs finish before the random moment"
            )


def converge_to_local(what: str, source_of, tmp_path, run_ferry, faults):
    """Kill sequences into fresh local destinations until the quota of kills is reached;
    ``source_of(seq, files)`` puts a tree somewhere and returns its location."""
    seq = killed = 0
    while killed < quota(faults, what):
        seq += 1
        files = tree(faults, faults.test_rng)
        source = source_of(seq, files)
        dst = tmp_path / f"dst{seq}"

        def start():
            return run_ferry.spawn(
                "copy", source, dst, "--recursive", "--max-bandwidth", BANDWIDTH, log_dir=tmp_path
            )

        def after_kill():
            assert not faults.check_local(dst, files, complete=False)

        rc, kills, _ = run_until_done(
            faults, what, start, after_kill, window(files), quota(faults, what) - killed
        )
        killed += kills
        assert rc == 0, stderr_of(tmp_path)
        assert not faults.check_local(dst, files, complete=True)
        assert leftovers(dst) == [], "temp files left behind after the run that completed"
        run_ferry("verify", "--checksum", source, dst)
        assert seq < max_sequences(faults), (
            "kills are not landing: runs finish before the random moment"
        )


def test_download_killed_at_random_converges(tmp_path, container, run_ferry, faults):
    def source_of(seq, files):
        upload_with_sdk(container, files, f"seq{seq}/")
        return container.at(f"seq{seq}/")

    converge_to_local("download", source_of, tmp_path, run_ferry, faults)


def test_local_copy_killed_at_random_converges(tmp_path, run_ferry, faults):
    def source_of(seq, files):
        write_files(tmp_path / f"src{seq}", files)
        return tmp_path / f"src{seq}"

    converge_to_local("local", source_of, tmp_path, run_ferry, faults)


def test_prune_killed_at_random_deletes_only_what_the_source_lost(
    tmp_path, azurite, container, toxiproxy, run_ferry, faults
):
    rng = faults.test_rng
    tcp = toxiproxy.proxy(azurite.port)
    # Every request a little late, so that a prune spends its time in round trips to be killed in.
    tcp.toxic("latency", stream="downstream", latency=40, jitter=10)
    seq = killed = 0
    # Batched deletes finish a prune well inside a second: the kills fall within a little more
    # than the longest whole run seen so far, whatever the seed, so that most of them land.
    whole_runs: list[float] = []
    try:
        while killed < quota(faults, "prune"):
            seq += 1
            keep = random_files(rng, small=8, big=0, big_size=0, prefix="keep/")
            extra = {
                f"gone/{i // 50}/x{i:04d}": b"%d" % i
                for i in range(150 if not faults.deep else 400)
            }
            prefix = f"seq{seq}/"
            src = tmp_path / f"src{seq}"
            # The source written after the upload: what the prune deletes is older than the
            # source's newest file, as in a migration (a newer one is refused: issue 42).
            upload_with_sdk(container, {**keep, **extra}, prefix)
            write_files(src, keep)
            dest = container.via(tcp.port, prefix)

            def start():
                # A SIGKILL leaves prune's scratch directory behind: keep it out of /tmp.
                return run_ferry.spawn(
                    "prune",
                    "--yes",
                    src,
                    dest,
                    "--max-delete",
                    "100%",
                    "--scratch",
                    tmp_path,
                    "--log",
                    tmp_path / f"prune{seq}.tsv",
                    log_dir=tmp_path,
                )

            def after_kill():
                # Deletes the dead run had sent are still crossing toxiproxy's latency: let them land.
                time.sleep(0.3)
                # Whatever is left is either kept or not yet deleted, and intact; nothing kept went.
                left = container.blobs(prefix)
                lost = [rel for rel in keep if prefix + rel not in left]
                assert not lost, f"prune deleted files the source still has: {lost}"
                assert not faults.check_blobs(
                    container, {**keep, **extra}, complete=False, prefix=prefix
                )

            rc, kills, whole = run_until_done(
                faults,
                "prune",
                start,
                after_kill,
                1.2 * max(whole_runs, default=5 / 6),
                quota(faults, "prune") - killed,
            )
            killed += kills
            if whole is not None:
                whole_runs.append(whole)
            assert rc == 0, stderr_of(tmp_path)
            assert not faults.check_blobs(container, keep, complete=True, prefix=prefix)
            run_ferry("verify", "--checksum", src, container.at(prefix))
            assert seq < max_sequences(faults), (
                "kills are not landing: runs finish before the random moment"
            )
    finally:
        tcp.delete()


@pytest.mark.timeout(600)
def test_pipeline_killed_at_random_converges(tmp_path, ferry_bin, container, faults):
    """The Snakemake pipeline (local profile): each kill takes either the whole process group
    (snakemake and its jobs, as when a node dies) or only a ferry copy child (snakemake then
    records the job as failed); the next run starts with --unlock semantics (--nolock) and
    --rerun-incomplete, as after a crash."""
    rng = faults.test_rng
    seq = killed = 0
    while killed < quota(faults, "pipeline"):
        seq += 1
        files = tree(faults, rng)
        src = tmp_path / f"src{seq}"
        write_files(src, files)
        prefix = f"seq{seq}"
        outdir = tmp_path / f"results{seq}"
        cmd = [
            sys.executable,
            "-m",
            "snakemake",
            "--profile",
            "profiles/local",
            "--nolock",
            "--config",
            f"source={src}",
            f"dest={container.at(prefix)}",
            "phase=baseline",
            f"outdir={outdir}",
            "run_name=t",
            f"ferry_bin={ferry_bin}",
            "plan={mode: parts, parts: 2}",
            f"copy={{block_size: 256KiB, concurrency: 4, parallel_files: 4, max_bandwidth: {BANDWIDTH}}}",
        ]
        for _ in range(20):
            last = killed >= quota(faults, "pipeline")
            log = open(tmp_path / f"snakemake{seq}.log", "ab")
            proc = subprocess.Popen(
                cmd,
                cwd=REPO,
                env=ferry_env(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            log.close()
            faults.ran()
            if last:
                proc.wait(280)
                break
            if not kill_pipeline(proc, rng):
                break
            faults.kill("pipeline")
            killed += 1
            assert not faults.check_blobs(container, files, complete=False, prefix=prefix + "/")
        else:
            raise AssertionError("the pipeline never finished by itself")
        log_text = (tmp_path / f"snakemake{seq}.log").read_text(errors="replace")
        assert proc.returncode == 0, log_text[-5000:]
        assert not faults.check_blobs(container, files, complete=True, prefix=prefix + "/")
        subprocess.run(
            [str(ferry_bin), "verify", "--checksum", src, container.at(prefix)],
            env=ferry_env(),
            check=True,
            capture_output=True,
            timeout=60,
        )
        assert seq < 20, "kills are not landing"


def kill_pipeline(proc: subprocess.Popen, rng) -> bool:
    """Kill the whole group at a random moment, or one ferry child mid-transfer (chosen at
    random); False when the run ended first."""
    pgid = proc.pid
    if rng.random() < 0.5:
        landed = kill_at_random_group(proc, pgid, rng.uniform(0.5, 6.0))
    else:
        landed = False
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and proc.poll() is None:
            children = ferry_processes(pgid)
            copying = [
                c
                for c in children
                if b"copy" in Path(f"/proc/{c}/cmdline").read_bytes().split(b"\0")[1:2]
            ]
            if copying:
                time.sleep(rng.uniform(0.05, 0.5))
                try:
                    os.kill(copying[0], signal.SIGKILL)
                    landed = True
                except ProcessLookupError:
                    pass
                break
            time.sleep(0.02)
    try:
        proc.wait(120)
    except subprocess.TimeoutExpired:
        os.killpg(pgid, signal.SIGKILL)
        proc.wait(10)
        raise AssertionError("snakemake did not end after its copy job was killed") from None
    return landed


def kill_at_random_group(proc: subprocess.Popen, pgid: int, delay: float) -> bool:
    try:
        proc.wait(delay)
        return False
    except subprocess.TimeoutExpired:
        os.killpg(pgid, signal.SIGKILL)
        return True
