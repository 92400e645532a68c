"""`list.jobs: N`: each side listed by N jobs over the key ranges a shard step cuts, read by the
plan (and prune, and carry) as one listing (docs/pipeline.md, docs/scale.md). In both engines, a
migration with three list jobs and one with one, over the same source tree, each into its own
destination, plan the same files into the same partitions, their reports count the same listing
entries, and the three-job migration converges."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.ferry import new_container
from support.nextflow import nextflow, params_for
from support.pipeline import (
    base_config,
    blob_snapshot,
    local_snapshot,
    md5s,
    migration_tree,
    modify_tree,
    pipeline,
    plan_files,
    report,
    run_dir,
)

JOBS = (1, 3)


def same_plan(outdirs: dict[int, Path], phase: str) -> dict[int, dict]:
    """Both migrations' reports, once their plans are checked to be one plan and their listings
    to hold the same entries; the three-job one's listings checked to be three jobs' each."""
    one, three = (run_dir(outdirs[jobs], phase) for jobs in JOBS)
    assert plan_files(three) == plan_files(one), f"{phase}: three list jobs planned otherwise"
    reports = {jobs: report(outdirs[jobs], phase) for jobs in JOBS}
    for jobs, rep in reports.items():
        assert rep["status"] == "complete", (jobs, rep["failures"])
    listings = {jobs: rep["totals"]["listings"] for jobs, rep in reports.items()}
    sides = ("source",) if phase == "baseline" else ("source", "dest")
    for side in sides:
        assert listings[3][side]["entries"] == listings[1][side]["entries"], side
        assert (listings[1][side]["jobs"], listings[3][side]["jobs"]) == (1, 3), side
    assert listings[1]["shards"] is None and listings[3]["shards"]["jobs"] == 3
    per_step = reports[3]["time"]["per_step"]
    assert per_step["shard"]["jobs"] == 1
    assert {side: per_step[f"list_{side}"]["jobs"] for side in sides} == dict.fromkeys(sides, 3)
    assert "shard" not in reports[1]["time"]["per_step"]
    return reports


@pytest.mark.timeout(900)
def test_snakemake_three_list_jobs_plan_as_one_through_the_final_pass(tmp_path, ferry_bin):
    """Local to local, through the final pass's prune, which reads the three jobs' listings too."""
    src = tmp_path / "src"
    content = migration_tree(src, files=40)
    dests = {jobs: tmp_path / f"dst-{jobs}" for jobs in JOBS}
    outdirs = {jobs: tmp_path / f"results-{jobs}" for jobs in JOBS}

    def run(jobs: int, phase: str, *extra: str):
        return pipeline(
            *base_config(ferry_bin, outdirs[jobs], src, dests[jobs], phase),
            "plan={mode: parts, parts: 2}",
            f"list={{jobs: {jobs}}}",
            *extra,
        )

    for jobs in JOBS:
        run(jobs, "baseline")
    same_plan(outdirs, "baseline")
    # Each list job left its own listing and summary beside the cuts they shared.
    listing = run_dir(outdirs[3], "baseline") / "listing"
    assert {p.name for p in listing.iterdir()} == {
        "shards.json",
        "dest-ready.txt",
        *(f"source-{k}.tsv" for k in "123"),
        *(f"source-{k}-summary.json" for k in "123"),
    }

    _added, _changed, deleted = modify_tree(src, content)
    for jobs in JOBS:
        run(jobs, "incremental")
    reports = same_plan(outdirs, "incremental")
    assert reports[3]["plan"]["extra_on_dest"]["files"] == len(deleted)

    for jobs in JOBS:
        run(jobs, "final", "prune={max_delete: 100%}")
    reports = same_plan(outdirs, "final")
    assert reports[3]["totals"]["prune"]["deleted"] == reports[1]["totals"]["prune"]["deleted"]
    assert reports[3]["totals"]["prune"]["deleted"] == len(deleted)
    assert local_snapshot(dests[3]) == local_snapshot(src) == md5s(content)

    # Converged: one more pass finds nothing to do.
    run(3, "incremental", "pass=2")
    rep = report(outdirs[3], "incremental-pass2")
    assert rep["totals"]["files"]["planned"] == 0 and rep["partitions"] == []


@pytest.mark.timeout(900)
def test_nextflow_three_list_jobs_plan_as_one_against_the_carried_destination(
    tmp_path, ferry_bin, azurite, request
):
    """Local to Azurite, with the destination carried from pass to pass: the shard step decides
    once that the carried state stands, and no list job of the destination lists it."""
    src = tmp_path / "src"
    content = migration_tree(src, files=40)
    container = new_container(azurite, request)
    dests = {jobs: container.at(f"jobs-{jobs}") for jobs in JOBS}
    outdirs = {jobs: tmp_path / f"results-{jobs}" for jobs in JOBS}

    def run(jobs: int, phase: str, **extra):
        params = params_for(
            ferry_bin,
            outdirs[jobs],
            src,
            dests[jobs],
            phase,
            plan={"mode": "parts", "parts": 2},
            list={"jobs": jobs},
            **extra,
        )
        return nextflow(tmp_path / f"launch-{jobs}", params=params)

    for jobs in JOBS:
        run(jobs, "baseline")
    same_plan(outdirs, "baseline")
    assert (run_dir(outdirs[3], "baseline") / "listing" / "shards.json").is_file()

    modify_tree(src, content)
    for jobs in JOBS:
        run(jobs, "incremental")
    reports = same_plan(outdirs, "incremental")
    for jobs, rep in reports.items():
        listed = rep["totals"]["dest_listing"]["listed"]
        assert (listed["used"], listed["written_by"]) == (True, "baseline"), jobs
        assert rep["totals"]["requests"]["by_step"]["list_dest"]["list_pages"] == 0, jobs
    assert reports[3]["totals"]["listings"]["shards"]["basis"] == "carried"
    assert blob_snapshot(container, "jobs-3/") == blob_snapshot(container, "jobs-1/")

    # Converged: the next pass plans nothing, against what this one carried.
    run(3, "incremental", **{"pass": 2})
    rep = report(outdirs[3], "incremental-pass2")
    assert rep["totals"]["dest_listing"]["listed"]["written_by"] == "incremental"
    assert rep["totals"]["files"]["planned"] == 0 and rep["partitions"] == []
