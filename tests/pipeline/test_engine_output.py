"""What a person reads of each engine's run with its local profile (profiles/local): a line or
two a step naming the step and its part, never the step's spec; no warning of ferry's making; a
complete pass ends by naming its report (report.html and report.md) with the projection's line;
and Ctrl-C (SIGINT to the engine's process group while a copy runs) stops every job, prints no
Python traceback, and ends with the sentence that says how to resume, which is true: the same
command (Nextflow's with -resume) completes the pass."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.ferry import ferry_env
from support.interrupt import ferry_processes
from support.nextflow import command, nextflow, params_for
from support.pipeline import REPO, base_config, migration_tree, pipeline, report, run_dir

LONGEST_LINE = 300
# What a step's spec looks like on a line: its JSON keys.
SPEC = re.compile(r'"(argv|resources|values)"')
WARNING = re.compile(r"\bWARN|warning", re.IGNORECASE)
SNAKEMAKE_RESUME = "ferry: interrupted; to resume, run the same command again"
NEXTFLOW_RESUME = "to resume, run the same command again with -resume"


def lines_of(proc: subprocess.CompletedProcess) -> list[str]:
    return (proc.stdout + proc.stderr).splitlines()


def check_short(lines: list[str]) -> None:
    long = [line for line in lines if len(line) > LONGEST_LINE]
    assert not long, f"{len(long)} lines over {LONGEST_LINE} characters, first: {long[0][:400]}"
    assert not [line for line in lines if SPEC.search(line)], "a step's spec printed"
    assert not [line for line in lines if WARNING.search(line)], "a warning printed"


def check_ended(lines: list[str], outdir: Path, phase: str) -> None:
    """The pass's last words name its report, both forms, and give the projection's line: its
    time, then whether the final pass would go through."""
    run = run_dir(outdir, phase)
    said = f"its report: {run / 'report.html'} (and {run / 'report.md'})"
    where = [i for i, line in enumerate(lines) if said in line]
    assert where, f"no line names the report ({said!r}):\n" + "\n".join(lines[-8:])
    projection = report(outdir, phase)["projection"]["line"]
    time_said, verdict = lines[where[0] + 1], lines[where[0] + 2]
    assert time_said.startswith("ferry: a final pass started now would take"), time_said
    assert verdict.startswith("ferry: the final pass would go through"), verdict
    assert f"{time_said}; {verdict.removeprefix('ferry: ')}" == f"ferry: {projection}"
    assert len(lines) - where[0] <= 5, "the report's lines are not the last words"


def small_tree(src: Path) -> None:
    migration_tree(src, files=12, big=0)


def drop_some(src: Path) -> None:
    for rel in ("docs/f000.txt", "gone/f004.txt"):
        (src / rel).unlink()


@pytest.mark.timeout(300)
def test_snakemake_prints_a_line_a_step_and_ends_with_its_report(tmp_path, ferry_bin):
    src, dest, outdir = tmp_path / "src", tmp_path / "dst", tmp_path / "results"
    small_tree(src)
    for phase, extra in (("baseline", ()), ("final", ("prune={force: true}",))):
        if phase == "final":
            drop_some(src)
        proc = pipeline(*base_config(ferry_bin, outdir, src, dest, phase), *extra)
        lines = lines_of(proc)
        check_short(lines)
        started = [line for line in lines if re.match(r"Job \d+: ferry ", line)]
        steps = {"list_source", "plan", "carry", "report"}
        # The final pass here deletes and copies nothing.
        steps |= {"prune part", "prune_dirs"} if phase == "final" else {"copy part", "verify part"}
        for step in steps:
            assert any(f": ferry {step}" in line for line in started), (step, started)
        # A job's start and end, and Snakemake's scheduling lines around them: a few lines a job.
        assert len(lines) <= 30 + 10 * len(started), "\n".join(lines)
        check_ended(lines, outdir, phase)


@pytest.mark.timeout(300)
def test_nextflow_prints_a_line_a_step_and_ends_with_its_report(tmp_path, ferry_bin):
    src, dest, outdir, launch = (
        tmp_path / "src",
        tmp_path / "dst",
        tmp_path / "results",
        tmp_path / "launch",
    )
    small_tree(src)
    for phase, extra in (("baseline", {}), ("final", {"prune": {"force": True}})):
        if phase == "final":
            drop_some(src)
        params = params_for(ferry_bin, outdir, src, dest, phase, **extra)
        lines = lines_of(nextflow(launch, params=params, profile="local"))
        check_short(lines)
        submitted = [line for line in lines if "Submitted process > MIGRATE:" in line]
        assert len(lines) <= 10 + len(submitted), "\n".join(lines)
        check_ended(lines, outdir, phase)


def big_source(src: Path) -> None:
    """24 MiB: at 1 MiB/s a copy of it runs for 24 s at least whatever the machine's speed, so
    the interrupt lands while it runs, and a worker left running after its engine ended is still
    there to be seen when the wait for the workers to stop (STOP_WAIT) is over."""
    small_tree(src)
    (src / "bulk").mkdir()
    for i in range(12):
        (src / "bulk" / f"b{i}.bin").write_bytes(os.urandom(2 << 20))


STOP_WAIT = 10  # seconds, well short of the copy's 24
SLOW_COPY = {"block_size": "1MiB", "concurrency": 2, "parallel_files": 2, "max_bandwidth": "1MiB/s"}


def interrupt_mid_copy(cmd: list[str], cwd: Path, log_path: Path) -> str:
    """Run an engine in its own process group as a terminal would (SIGINT not ignored), send the
    group SIGINT (Ctrl-C) once a copy job's worker runs, wait for the engine to end; its output.
    Every ferry worker of the group has ended with it."""
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            env=ferry_env(),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
    try:
        deadline = time.monotonic() + 120
        while not ferry_processes(proc.pid, "copy"):
            assert proc.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, "no copy job started"
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    output = log_path.read_text()
    assert proc.returncode != 0, output
    deadline = time.monotonic() + STOP_WAIT  # the jobs' workers stop as they are told to
    while ferry_processes(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = ferry_processes(proc.pid)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert left == [], "a ferry worker still runs after the engine ended"
    return output


def check_interrupted(output: str, resume: str, last: bool) -> None:
    """No traceback; the resume sentence once (Snakemake's as its last line, after its own)."""
    assert "Traceback" not in output and "KeyboardInterrupt" not in output, output[-3000:]
    lines = output.splitlines()
    said = [line for line in lines if resume in line]
    assert len(said) == 1, output[-3000:]
    if last:
        assert resume in lines[-1], output[-3000:]
    assert not SPEC.search(output), "a step's spec printed"


@pytest.mark.timeout(300)
def test_snakemake_ctrl_c_says_how_to_resume_and_the_same_command_does(tmp_path, ferry_bin):
    src, dest, outdir = tmp_path / "src", tmp_path / "dst", tmp_path / "results"
    big_source(src)
    cfg = [
        *base_config(ferry_bin, outdir, src, dest, "baseline"),
        "copy=" + json.dumps(SLOW_COPY),
    ]
    cmd = [sys.executable, "-m", "snakemake", "--profile", "profiles/local", "--config", *cfg]
    output = interrupt_mid_copy(cmd, REPO, tmp_path / "interrupted.log")
    check_interrupted(output, SNAKEMAKE_RESUME, last=True)

    pipeline(*cfg)
    assert report(outdir, "baseline")["status"] == "complete"


@pytest.mark.timeout(300)
def test_nextflow_ctrl_c_says_how_to_resume_and_resume_does(tmp_path, ferry_bin):
    src, dest, outdir, launch = (
        tmp_path / "src",
        tmp_path / "dst",
        tmp_path / "results",
        tmp_path / "launch",
    )
    big_source(src)
    params = params_for(ferry_bin, outdir, src, dest, "baseline", copy=SLOW_COPY)
    cmd = command(launch, params=params, profile="local")
    output = interrupt_mid_copy(cmd, launch, tmp_path / "interrupted.log")
    check_interrupted(output, NEXTFLOW_RESUME, last=False)

    nextflow(launch, "-resume", params=params, profile="local")
    assert report(outdir, "baseline")["status"] == "complete"
