"""The destination carried from pass to pass, through both engines (docs/scale.md): a pass after a
complete one lists only the source and converges; the state may live in Blob storage beside the
destination, where every task can reach it (Nextflow's local executor stands in for Azure Batch,
whose tasks cannot see the head's run directory); a pass that stopped early makes the next list
afresh; what another tool did to the destination between passes is caught and repaired; and the
audit, after the cut-over, lists both sides afresh and names what only the destination holds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.ferry import new_container
from support.nextflow import nextflow, params_for, trace
from support.pipeline import (
    base_config,
    blob_snapshot,
    md5s,
    migration_tree,
    modify_tree,
    pipeline,
    report,
)


def listed(rep: dict) -> dict:
    return rep["totals"]["dest_listing"]["listed"]


def dest_list_pages(rep: dict) -> int:
    return rep["totals"]["requests"]["by_step"]["list_dest"]["list_pages"]


@pytest.mark.timeout(600)
def test_nextflow_carries_the_destination_in_blob_beside_it(tmp_path, ferry_bin, azurite, request):
    src = tmp_path / "src"
    content = migration_tree(src, files=30)
    dest = new_container(azurite, request)
    state = new_container(azurite, request)
    outdir, launch = tmp_path / "results", tmp_path / "launch"

    def run(phase, **extra):
        params = params_for(
            ferry_bin,
            outdir,
            src,
            dest.at("share"),
            phase,
            state=state.at("ferry/t"),
            plan={"mode": "parts", "parts": 2},
            **extra,
        )
        return nextflow(launch, params=params)

    run("baseline")
    left = report(outdir, "baseline")["totals"]["dest_listing"]["left"]
    assert left["written_by"] == "baseline" and left["taken_by"] is None
    # The state is in Blob storage, beside the destination and outside it.
    assert {"ferry/t/dest.json", "ferry/t/dest.tsv"} <= set(state.blobs("ferry/"))
    assert not any(name.startswith("share/ferry") for name in dest.blobs())

    added, changed, _deleted = modify_tree(src, content)
    run("incremental")
    rep = report(outdir, "incremental")
    assert rep["status"] == "complete"
    assert (listed(rep)["used"], listed(rep)["written_by"]) == (True, "baseline")
    assert dest_list_pages(rep) == 0
    assert rep["totals"]["files"]["copied"] >= len(added) + len(changed)

    # Nothing changed since: the next pass plans nothing, against what the last one carried.
    run("incremental", **{"pass": 2})
    rep = report(outdir, "incremental-pass2")
    assert listed(rep)["written_by"] == "incremental"
    assert dest_list_pages(rep) == 0
    assert rep["totals"]["files"]["planned"] == 0 and rep["partitions"] == []

    # The history reached the report's task as Batch would bring it, staged in with the run's
    # start marker (the script names nothing of the head's run directory), and went back to the
    # run root with this pass's record: the projection had every pass.
    report_task = [r for r in trace(outdir, "incremental-pass2") if r["process"].endswith("REPORT")]
    script = (Path(report_task[-1]["workdir"]) / ".command.sh").read_text()
    assert str(outdir) not in script, script
    root = outdir / "t"
    history = [json.loads(line) for line in (root / "history.jsonl").read_text().splitlines()]
    passes = ["baseline", "incremental", "incremental-pass2"]
    assert [r["run_dir"] for r in history] == passes
    assert [r["run_dir"] for r in rep["history"]] == passes and rep["projection"]["ok"]


@pytest.mark.timeout(600)
def test_after_a_pass_that_stopped_early_the_next_lists_fresh(tmp_path, ferry_bin):
    src, dest, outdir = tmp_path / "src", tmp_path / "dst", tmp_path / "results"
    content = migration_tree(src, files=30)
    pipeline(*base_config(ferry_bin, outdir, src, dest, "baseline"))
    # A pass that took the state and ended before leaving a new one (killed, or stopped here).
    pipeline(
        *base_config(ferry_bin, outdir, src, dest, "incremental"), extra_args=("--until", "plan")
    )
    modify_tree(src, content)
    pipeline(*base_config(ferry_bin, outdir, src, dest, "incremental"), "pass=2")
    rep = report(outdir, "incremental-pass2")
    assert listed(rep)["used"] is False
    assert "incremental, did not leave a new one" in listed(rep)["reason"]
    # ... and it leaves a state the pass after it uses.
    pipeline(*base_config(ferry_bin, outdir, src, dest, "incremental"), "pass=3")
    rep = report(outdir, "incremental-pass3")
    assert listed(rep)["written_by"] == "incremental-pass2"
    assert rep["totals"]["files"]["planned"] == 0


@pytest.mark.timeout(600)
def test_what_another_tool_did_is_caught_and_repaired(tmp_path, ferry_bin, azurite, request):
    """A blob deleted, one overwritten and one added behind ferry's back: the probe (here of
    every carried file) finds the first two, the pass lists afresh and copies them again; the
    final pass prunes the third, and the audit finds the trees the same."""
    src, outdir = tmp_path / "src", tmp_path / "results"
    content = migration_tree(src, files=30)
    container = new_container(azurite, request)
    dest = container.at("share")
    pipeline(*base_config(ferry_bin, outdir, src, dest, "baseline"))
    victims = sorted(name for name in content if name.startswith("data/"))[:2]
    container.client.delete_blob(f"share/{victims[0]}")
    container.client.upload_blob(f"share/{victims[1]}", b"written by another tool", overwrite=True)
    container.client.upload_blob("share/stray.txt", b"added by another tool")

    # The overwritten blob is newer than its source: the operator, having looked, lets the pass
    # put the source's back (without the key its plan refuses: issue 42).
    repair = "copy={block_size: 1MiB, concurrency: 4, parallel_files: 4, overwrite_newer: true}"
    pipeline(*base_config(ferry_bin, outdir, src, dest, "incremental"), "dest_probe=1000", repair)
    rep = report(outdir, "incremental")
    assert listed(rep)["used"] is False
    assert "carried entries probed differ from the destination" in listed(rep)["reason"]
    assert rep["totals"]["files"]["copied"] == 2
    assert rep["plan"]["extra_on_dest"]["files"] == 1

    # The stray blob is newer than everything at the source: deleted only with prune.force.
    final = "prune={max_delete: 100%, force: true}"
    pipeline(*base_config(ferry_bin, outdir, src, dest, "final"), final)
    rep = report(outdir, "final")
    assert listed(rep)["used"] is True
    assert rep["totals"]["prune"]["deleted"] == 1
    assert blob_snapshot(container, "share/") == md5s(content)

    # One more blob behind ferry's back after the cut-over: only the audit can see it.
    container.client.upload_blob("share/late.txt", b"added after the cut-over")
    # An audit that finds a difference ends in failure, in both engines, its report named so.
    pipeline(*base_config(ferry_bin, outdir, src, dest, "audit"), expect=1)
    rep = report(outdir, "audit", name="report-incomplete.json")
    assert listed(rep)["reason"] == "a fresh listing was asked for"
    assert rep["plan"]["verify_scope"] == "all"
    assert rep["totals"]["verify"]["same"] == len(content) + 1  # and the symlink
    assert rep["partitions"] == []  # nothing copied
    assert [f["stage"] for f in rep["failures"]] == ["audit"]
    assert "1 files only on the destination" in rep["failures"][0]["error"]
    # The audit's listing is carried: the next pass sees the stray blob without listing.
    assert rep["totals"]["dest_listing"]["left"]["written_by"] == "audit"
