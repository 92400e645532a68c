"""The Nextflow pipeline through `-profile slurm` on the three-node Slurm of scripts/slurm-up.sh.

The migration of test_nextflow.py (local tree -> Azurite, checked with the Azure SDK), with every
task an sbatch job; the test confirms Slurm itself ran them: the job-completion log that
slurm-up.sh configures names every job, and Nextflow's trace carries the same Slurm job ids. The
baseline asks for its jobs spread (resources.default.slurm_spread): the copies land on several
nodes, and the report names the node Slurm recorded for each.
Run it under `flock /tmp/ferry-slurm.lock` where several people share the cluster.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.nextflow import nextflow, params_for, trace
from support.pipeline import blob_snapshot, md5s, migration_tree, modify_tree, report
from support.slurm import NODES, completed_jobs, jobcomp_records, slurm_up


def new_jobs(before: set[int]) -> dict[int, str]:
    return {job: desc for job, desc in completed_jobs().items() if job not in before}


@pytest.mark.timeout(600)
def test_nextflow_migration_through_slurm(slurm, tmp_path, ferry_bin, container):  # noqa: F811
    slurm_up(accounting=False)
    src = tmp_path / "src"
    content = migration_tree(src, files=30, big=2)  # modify_tree deletes big1
    outdir = tmp_path / "results"
    dest = container.at("viaslurm")
    launch = tmp_path / "launch"
    # Four deletions in a small tree are more than the default 10%: allow them.
    parts = {"plan": {"mode": "parts", "parts": 2}, "prune": {"max_delete": "25%"}}
    spread = {"resources": {"default": {"slurm_spread": True}}}

    seen = set(completed_jobs())
    nextflow(
        launch,
        params=params_for(ferry_bin, outdir, src, dest, "baseline", **parts, **spread),
        profile="slurm",
    )
    assert blob_snapshot(container, "viaslurm/") == md5s(content)
    rep = report(outdir, "baseline")
    # Every file and the symlink, which blob storage holds too.
    assert rep["status"] == "complete" and rep["totals"]["verify"]["same"] == len(content) + 1
    jobs = new_jobs(seen)
    rows = trace(outdir, "baseline")
    # Every task was a Slurm job: the trace's native ids are the jobs Slurm recorded as completed.
    assert {int(r["native_id"]) for r in rows} == set(jobs), (rows, jobs)
    assert all(desc.endswith("COMPLETED") for desc in jobs.values()), jobs
    names = " ".join(jobs.values())
    for step in ("LIST", "MAKE_DEST", "PLAN", "COPY", "VERIFY", "CARRY", "REPORT"):
        assert f"MIGRATE_{step}" in names, (step, names)
    assert len(jobs) == 1 + 1 + 1 + 2 + 2 + 1 + 1
    # Slurm was asked for the copy's configured resources (config/config.yaml: resources.copy).
    copy = next(r for r in rows if r["process"].endswith("COPY"))
    script = (Path(copy["workdir"]) / ".command.run").read_text()
    for request in ("#SBATCH -c 2", "#SBATCH -t 12:00:00", "#SBATCH --mem 2000M"):
        assert request in script, (request, script[:600])
    # Spread: each job a node of its own, so the two copies ran on two nodes, and the report's
    # timeline names the nodes Slurm recorded.
    assert "--exclusive" in script, script[:600]
    where = {r["JobId"]: r["NodeList"] for r in jobcomp_records()}
    copies = {where[r["native_id"]] for r in rows if r["process"].endswith("COPY")}
    assert len(copies) == 2 and copies <= set(NODES), copies
    assert {s["node"] for s in rep["jobs"] if s["step"] == "copy"} == copies, rep["jobs"]

    _added, _changed, deleted = modify_tree(src, content)
    seen = set(completed_jobs())
    nextflow(
        launch,
        params=params_for(ferry_bin, outdir, src, dest, "final", final_check=True, **parts),
        profile="slurm",
    )
    assert blob_snapshot(container, "viaslurm/") == md5s(content)
    rep = report(outdir, "final")
    assert rep["status"] == "complete"
    assert rep["totals"]["prune"]["deleted"] == len(deleted)
    assert rep["totals"]["final_check"]["same"] == len(content) + 1
    jobs = new_jobs(seen)
    assert {int(r["native_id"]) for r in trace(outdir, "final")} == set(jobs)
    names = " ".join(jobs.values())
    for step in ("PRUNE", "PRUNE_DIRS", "FINAL_CHECK"):
        assert f"MIGRATE_{step}" in names, (step, names)
