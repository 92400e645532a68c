"""The pipeline on the three-node cluster of scripts/slurm-up.sh: jobs spread over the nodes when
the config asks (resources.<step>.slurm_spread), and the report and `ferry status` say where each
job ran, as Slurm itself recorded it (the job-completion log's NodeList)."""

from __future__ import annotations

import subprocess

import pytest
from support.pipeline import base_config, local_snapshot, migration_tree, pipeline, report, run_dir
from support.slurm import NODES, jobcomp_records, slurm_up, squeue_comments


def slurm_jobs(before: set[str]) -> dict[str, set[str]]:
    """{rule: the nodes its jobs ran on} of the jobs Slurm finished since `before`."""
    jobs = {r["JobId"]: r["NodeList"] for r in jobcomp_records() if r["JobId"] not in before}
    comments = squeue_comments([int(j) for j in jobs])
    nodes: dict[str, set[str]] = {}
    for job, comment in comments.items():
        for rule in ("list_source", "copy"):
            if rule in comment:
                nodes.setdefault(rule, set()).add(jobs[str(job)])
    return nodes


@pytest.mark.timeout(900)
def test_spread_jobs_land_on_several_nodes_and_the_report_says_which(slurm, tmp_path, ferry_bin):
    slurm_up(accounting=False)
    src, dest, outdir = tmp_path / "src", tmp_path / "dest", tmp_path / "results"
    migration_tree(src, files=12, big=0)
    before = {r["JobId"] for r in jobcomp_records()}
    pipeline(
        *base_config(ferry_bin, outdir, src, dest, "baseline"),
        "plan={mode: parts, parts: 3}",
        "list={jobs: 3}",
        "resources={default: {slurm_spread: true}}",
        profile="profiles/slurm",
        timeout=700,
    )
    rep = report(outdir, "baseline")
    assert rep["status"] == "complete", rep["failures"]
    assert local_snapshot(dest) == local_snapshot(src)

    # Slurm's record: the three list jobs and the three partitions' jobs each over 2+ nodes.
    seen = slurm_jobs(before)
    assert len(seen.get("list_source", ())) >= 2, seen
    assert len(seen.get("copy", ())) >= 2, seen
    # The report's timeline names the node of every job, the same nodes Slurm names.
    spans = rep["jobs"]
    assert all(s["node"] in NODES for s in spans), spans
    assert {s["node"] for s in spans if s["step"] == "copy"} == seen["copy"]
    assert {s["node"] for s in spans if s["step"] == "list_source"} == seen["list_source"]
    # `ferry status` says which partitions' jobs ran where.
    status = subprocess.run(
        [str(ferry_bin), "status", str(run_dir(outdir, "baseline"))],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for node in seen["copy"]:
        assert f"  on {node}: copy " in status, status
