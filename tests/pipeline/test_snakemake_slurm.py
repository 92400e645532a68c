"""The pipeline through `--profile profiles/slurm` on the one-node Slurm of scripts/slurm-up.sh.

Same migration as test_snakemake.py (local tree -> Azurite, checked with the Azure SDK), but every
non-local job is an sbatch job, and the test confirms Slurm itself saw them: squeue (which keeps
finished jobs for MinJobAge) and the job-completion log that slurm-up.sh configures.
"""

from __future__ import annotations

import os
import re
import subprocess
import time

import pytest
from support.pipeline import (
    REPO,
    assert_no_secret,
    base_config,
    blob_snapshot,
    jobs_per_step,
    local_snapshot,
    md5s,
    migration_tree,
    modify_tree,
    pipeline,
    report,
)
from support.slurm import completed_jobs, jobcomp_records, slurm_up, squeue_comments


def assert_rules_ran(comments, rules) -> None:
    """Every rule appears in some job's comment (rule_<name>... or, for a group, its members)."""
    for rule in rules:
        assert any(re.search(rf"(^|_){rule}(_|$)", c) for c in comments), (rule, sorted(comments))


@pytest.mark.timeout(420)
def test_migration_through_slurm(slurm, tmp_path, ferry_bin, container):
    # Accounting off: the case where the executor's default (polling with sacct) hangs.
    slurm_up(accounting=False)
    src = tmp_path / "src"
    content = migration_tree(src, files=40, big=2)
    outdir = tmp_path / "results"
    dest = container.at("viaslurm")
    parts = "plan={mode: parts, parts: 2}"

    seen_before = set(completed_jobs())
    pipeline(
        *base_config(ferry_bin, outdir, src, dest, "baseline"), parts, profile="profiles/slurm"
    )
    assert blob_snapshot(container, "viaslurm/") == md5s(content)
    rep = report(outdir, "baseline")
    assert rep["status"] == "complete"
    # Every file and the symlink, which blob storage holds too.
    assert rep["totals"]["files"]["copied"] == len(content) + 1
    assert rep["totals"]["verify"]["same"] == len(content) + 1

    new_jobs = {job: desc for job, desc in completed_jobs().items() if job not in seen_before}
    # One job lists and plans, then one job per partition (its copy and verify grouped), then
    # one carries the destination's state.
    assert len(new_jobs) == 4, new_jobs
    assert all(desc.endswith("COMPLETED") for desc in new_jobs.values()), new_jobs
    comments = squeue_comments(new_jobs)
    assert set(comments) == set(new_jobs), "squeue no longer knows jobs that just ran"
    assert_rules_ran(comments.values(), ["list_source", "plan", "copy", "verify", "carry"])
    assert sum("copy" in c and "verify" in c for c in comments.values()) == 2, comments

    _added, _changed, deleted = modify_tree(src, content)
    seen_before = set(completed_jobs())
    # The whole-tree check inside the final pass, as a job of its own (final_check: true).
    pipeline(
        *base_config(ferry_bin, outdir, src, dest, "final"),
        parts,
        "final_check=true",
        profile="profiles/slurm",
    )
    assert blob_snapshot(container, "viaslurm/") == md5s(content)
    rep = report(outdir, "final")
    assert rep["status"] == "complete"
    assert rep["totals"]["prune"]["deleted"] == len(deleted)
    assert rep["totals"]["final_check"]["same"] == len(content) + 1
    new_jobs = {job: desc for job, desc in completed_jobs().items() if job not in seen_before}
    assert all(desc.endswith("COMPLETED") for desc in new_jobs.values()), new_jobs
    comments = squeue_comments(new_jobs)
    assert_rules_ran(
        comments.values(),
        [
            "list_source", "list_dest", "plan", "copy", "verify", "prune", "prune_dirs",
            "final_check", "carry",
        ],
    )  # fmt: skip
    rules = jobs_per_step(rep)
    # Grouped: listing+plan is one job, a partition's copy and verify one; each part of prune,
    # the directories' prune, the final check and carry alone.
    assert rules["prune"] >= 1 and rules["prune_dirs"] == 1, rules
    assert len(new_jobs) == 1 + rules["copy"] + rules["prune"] + 3, (new_jobs, rules)
    assert_no_secret(outdir, REPO / ".snakemake" / "slurm_logs")


@pytest.mark.timeout(300)
def test_profile_polls_right_with_accounting_on(slurm, tmp_path, ferry_bin):
    """With slurmdbd running, sacct works: the same profile must still see jobs finish, and the
    jobs must be in the accounting database."""
    slurm_up(accounting=True)
    src = tmp_path / "src"
    content = migration_tree(src, files=20, big=0)
    dest = tmp_path / "nfs"
    outdir = tmp_path / "results"
    seen_before = set(completed_jobs())
    pipeline(
        *base_config(ferry_bin, outdir, src, dest, "baseline"),
        "plan={mode: parts, parts: 2}",
        profile="profiles/slurm",
    )
    assert local_snapshot(dest) == md5s(content)
    assert report(outdir, "baseline")["status"] == "complete"
    new_jobs = sorted(job for job in completed_jobs() if job not in seen_before)
    # Listing and plan, a job per partition, and carry.
    assert len(new_jobs) == 4, new_jobs
    # slurmctld hands finished jobs to slurmdbd from a queue, so the records can trail the jobs'
    # end by some seconds: ask again for a bounded time.
    want = {str(job): "COMPLETED" for job in new_jobs}
    deadline = time.monotonic() + 60
    while True:
        proc = subprocess.run(
            ["sacct", "-X", "-n", "-P", "-o", "JobID,State", "-j", ",".join(map(str, new_jobs))],
            capture_output=True,
            text=True,
            check=True,
        )
        states = dict(line.split("|") for line in proc.stdout.split())
        if states == want or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert states == want


@pytest.mark.timeout(420)
def test_requests_reach_slurm_as_configured_and_grow_after_a_timeout(slurm, tmp_path, ferry_bin):
    """The time and memory each job asks Slurm for are the configured ones, not the sum over a
    group's steps; a copy job Slurm kills at its time limit is retried with twice the time and
    memory, and the retry finishes the partition (the files the first attempt completed are not
    copied again)."""
    slurm_up(accounting=False)
    src = tmp_path / "src"
    src.mkdir()
    for i in range(16):
        (src / f"f{i:02d}.bin").write_bytes(os.urandom(256 * 1024))
    dest = tmp_path / "nfs"
    dest.mkdir()
    outdir = tmp_path / "results"
    seen_before = {r["JobId"] for r in jobcomp_records()}
    pipeline(
        *base_config(ferry_bin, outdir, src, dest, "incremental"),
        # 4 MiB at 32 KiB/s, one file at a time: about two minutes, past the 1-minute limit.
        "copy={max_bandwidth: 32KiB/s, parallel_files: 1, concurrency: 1}",
        "plan={mode: parts, parts: 1}",
        "job_retries=1",
        "resources={list: {runtime: 3, mem_mb: 600}, plan: {runtime: 5, mem_mb: 500}, "
        "copy: {runtime: 1, mem_mb: 700}, verify: {runtime: 9, mem_mb: 800}}",
        profile="profiles/slurm",
        timeout=400,
    )
    assert local_snapshot(dest) == local_snapshot(src)
    rep = report(outdir, "incremental")
    assert rep["status"] == "complete"
    # The retry's copy skipped what the killed attempt had finished.
    files = rep["totals"]["files"]
    assert files["skipped"] > 0 and files["copied"] + files["skipped"] == 16, files

    jobs = [r for r in jobcomp_records() if r["JobId"] not in seen_before]
    limits = [
        (r["JobState"], r["TimeLimit"], re.search(r"mem=(\d+)M", r["Tres"]).group(1)) for r in jobs
    ]
    # Listing + plan: list's runtime alone (plan runs after it in the same job and adds no time);
    # the two listings run side by side, so twice list's memory (plan's is below that). Then the partition job (copy + verify): copy's runtime alone, the
    # larger memory of the two; killed at 1 minute, retried with 2 minutes and twice the memory.
    # Last, carry, with list's limits.
    assert limits == [
        ("COMPLETED", "3", "1200"),
        ("TIMEOUT", "1", "800"),
        ("COMPLETED", "2", "1600"),
        ("COMPLETED", "3", "600"),
    ], jobs
