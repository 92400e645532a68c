"""The Slurm cluster of scripts/slurm-up.sh (three nodes on this host) as the tests use it: is it
up, start it in an accounting mode, what it recorded (the job-completion log, squeue's comments),
and losing a node. The ``slurm`` fixture (tests/conftest.py) starts and stops it around a module."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from support.ferry import REPO_ROOT

JOBCOMP_LOG = Path("/var/log/slurm/jobcomp.log")
NODES = ("node1", "node2", "node3")
SLURM_CONF = Path("/etc/slurm/slurm.conf")


def slurm_is_up() -> bool:
    if not shutil.which("scontrol"):
        return False
    proc = subprocess.run(["scontrol", "ping"], capture_output=True, text=True)
    return proc.returncode == 0 and "is UP" in proc.stdout


def accounting_on() -> bool:
    return SLURM_CONF.exists() and "accounting_storage/slurmdbd" in SLURM_CONF.read_text()


def slurm_up(accounting: bool) -> None:
    env = {"FERRY_SLURM_ACCOUNTING": "1" if accounting else "0"}
    proc = subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / "slurm-up.sh")],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, **env},
    )
    if proc.returncode != 0:
        pytest.fail(
            f"scripts/slurm-up.sh (accounting={accounting}) failed:\n{proc.stdout}\n{proc.stderr}",
            pytrace=False,
        )


def jobcomp_records() -> list[dict[str, str]]:
    """Every job Slurm recorded as finished, as {field: value} (JobId, Name, JobState, TimeLimit,
    Tres, ...), oldest first."""
    if not JOBCOMP_LOG.exists():
        return []
    return [
        dict(re.findall(r"(\w+)=(\S*)", line))
        for line in JOBCOMP_LOG.read_text(errors="replace").splitlines()
    ]


def completed_jobs() -> dict[int, str]:
    """{job id: job name} of the jobs Slurm recorded as finished."""
    if not JOBCOMP_LOG.exists():
        return {}
    jobs = {}
    for line in JOBCOMP_LOG.read_text(errors="replace").splitlines():
        match = re.search(r"JobId=(\d+) .*?Name=(\S+) JobState=(\S+)", line)
        if match:
            jobs[int(match.group(1))] = f"{match.group(2)} {match.group(3)}"
    return jobs


def squeue_comments(job_ids) -> dict[int, str]:
    """{job id: comment} for jobs slurmctld still holds (the executor puts the rule in the comment)."""
    proc = subprocess.run(
        [
            "squeue",
            "--states=all",
            "--noheader",
            "--format=%i|%k|%T",
            "--jobs",
            ",".join(map(str, job_ids)),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    found = {}
    for line in proc.stdout.splitlines():
        job, comment, _state = line.strip().split("|")
        found[int(job)] = comment
    return found


def node_state(node: str) -> str:
    proc = subprocess.run(
        ["sinfo", "-h", "-n", node, "-o", "%T"], capture_output=True, text=True, check=True
    )
    return proc.stdout.split("\n")[0].strip()


def job_nodes(job_ids) -> dict[int, tuple[str, str]]:
    """{job id: (state, node)} of jobs slurmctld holds, finished ones included."""
    proc = subprocess.run(
        ["squeue", "--states=all", "-h", "-o", "%i|%T|%N", "-j", ",".join(map(str, job_ids))],
        capture_output=True,
        text=True,
    )
    rows = (line.split("|") for line in proc.stdout.split())
    return {int(job): (state, node) for job, state, node in rows}


def lose_node(node: str) -> list[int]:
    """Kill a node as a power cut would: its slurmd and everything it started (the slurmstepd of
    each job, which keep the node's log open, and their descendants), all at once with SIGKILL.
    Returns the pids killed."""
    log = f"/var/log/slurm/slurmd-{node}.log"
    roots = [pid for pid in pids() if log in open_files(pid)]
    assert roots, f"no process of {node} found (is its slurmd up?)"
    doomed = set(roots)
    while True:
        more = {pid for pid in pids() if parent(pid) in doomed} - doomed
        if not more:
            break
        doomed |= more
    for pid in doomed:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return sorted(doomed)


def pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def open_files(pid: int) -> set[str]:
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return set()
    out = set()
    for fd in fds:
        with contextlib.suppress(OSError):
            out.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
    return out


def parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(") ", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None
