"""Both engines honour every resources key: each step's Slurm partition, account, time and memory
as Slurm itself records them (the job-completion log of scripts/slurm-up.sh), for one config run
by Snakemake (profiles/slurm) and by Nextflow (-profile slurm).

Accounting is on: Snakemake's Slurm plugin checks an account with sacctmgr before it submits.
slurm-up.sh makes the partition and the account `ferry-alt` for this test."""

from __future__ import annotations

import re
import subprocess

import pytest
from support.nextflow import nextflow, params_for
from support.pipeline import base_config, local_snapshot, migration_tree, pipeline, report
from support.slurm import jobcomp_records, slurm_up

# The copy step goes elsewhere than the default partition and account; the other steps keep
# Slurm's defaults. Verify runs in the copy's job under Snakemake (the partition group), so it
# asks for less memory than the copy and no time of its own.
RESOURCES = {
    "list": {"threads": 1, "mem_mb": 600, "runtime": 4},
    "plan": {"threads": 1, "mem_mb": 500, "runtime": 5},
    "copy": {
        "threads": 1,
        "mem_mb": 900,
        "runtime": 7,
        "slurm_partition": "ferry-alt",
        "slurm_account": "ferry-alt",
    },
    "verify": {"threads": 1, "mem_mb": 400, "runtime": 6},
}


def default_account() -> str:
    """The account Slurm charges a job that names none: the user's default."""
    proc = subprocess.run(
        ["sacctmgr", "-n", "-P", "show", "user", "root", "format=defaultaccount"],
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout.strip()


def new_jobs(before: set[str]) -> list[dict[str, str]]:
    return [r for r in jobcomp_records() if r["JobId"] not in before]


def request(job: dict[str, str]) -> tuple[str, str, str, str]:
    """(partition, account, time limit in minutes, memory in MiB) as Slurm recorded the job."""
    mem = re.search(r"mem=(\d+)M", job["Tres"]) or re.search(r"mem=(\d+)G", job["Tres"])
    mib = int(mem.group(1)) * (1024 if mem.group(0).endswith("G") else 1)
    return job["Partition"], job["Account"], job["TimeLimit"], str(mib)


@pytest.mark.timeout(600)
def test_each_step_gets_its_partition_account_time_and_memory_in_both_engines(
    slurm, tmp_path, ferry_bin
):
    slurm_up(accounting=True)
    src = tmp_path / "src"
    migration_tree(src, files=12, big=0)

    account = default_account()
    before = {r["JobId"] for r in jobcomp_records()}
    outdir, dest = tmp_path / "snakemake", tmp_path / "dest-snakemake"
    resources = (
        "resources={"
        + ", ".join(
            f"{step}: {{" + ", ".join(f"{k}: {v}" for k, v in table.items()) + "}"
            for step, table in RESOURCES.items()
        )
        + "}"
    )
    pipeline(
        *base_config(ferry_bin, outdir, src, dest, "baseline"),
        "plan={mode: parts, parts: 1}",
        resources,
        profile="profiles/slurm",
        timeout=400,
    )
    assert report(outdir, "baseline")["status"] == "complete"
    assert local_snapshot(dest) == local_snapshot(src)
    jobs = sorted(request(j) for j in new_jobs(before))
    # One job lists and plans (two listings side by side: twice list's memory); one job copies
    # and verifies its partition, in the copy's partition and account, with the copy's limits;
    # one carries the destination's state, with list's.
    assert jobs == sorted(
        [
            ("debug", account, "4", "1200"),
            ("ferry-alt", "ferry-alt", "7", "900"),
            ("debug", account, "4", "600"),
        ]
    ), jobs

    before = {r["JobId"] for r in jobcomp_records()}
    outdir, dest = tmp_path / "nextflow", tmp_path / "dest-nextflow"
    params = params_for(
        ferry_bin,
        outdir,
        src,
        dest,
        "baseline",
        plan={"mode": "parts", "parts": 1},
        resources=RESOURCES,
    )
    nextflow(tmp_path / "launch", params=params, profile="slurm", timeout=400)
    assert report(outdir, "baseline")["status"] == "complete"
    assert local_snapshot(dest) == local_snapshot(src)
    by_step = {
        j["Name"].removeprefix("nf-MIGRATE_").split("_(")[0]: request(j) for j in new_jobs(before)
    }
    # Nextflow submits every step on its own; the report's request falls back to resources.default.
    assert by_step == {
        "LIST": ("debug", account, "4", "600"),
        "MAKE_DEST": ("debug", account, "4", "600"),
        "PLAN": ("debug", account, "5", "500"),
        "COPY": ("ferry-alt", "ferry-alt", "7", "900"),
        "VERIFY": ("debug", account, "6", "400"),
        "CARRY": ("debug", account, "4", "600"),
        "REPORT": ("debug", account, "10", "1000"),
    }, by_step
