"""The destination carried from pass to pass, through both engines (docs/scale.md): a pass after a
complete one lists only the source and converges; the state may live in Blob storage beside the
destination, where every task can reach it (Nextflow's local executor stands in for Azure Batch,
whose tasks cannot see the head's run directory); a pass that stopped early makes the next list
afresh; what another tool did to the destination between passes is caught and repaired; and the
audit, after the cut-over, lists both sides afresh and names what only the destination holds."""

from __future__ import annotations

import json
import uuid
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
def test_a_pass_that_stopped_before_writing_leaves_the_state_and_one_after_does_not(
    tmp_path, ferry_bin, read_only_dir
):
    """Issue 42 (3): a pass that ends before its first write (here after its plan; a refused plan
    or a wrong key alike) costs the next nothing: it carries the state. One that ended after its
    copies wrote makes the next list afresh, saying why."""
    src, dest, outdir = tmp_path / "src", tmp_path / "dst", tmp_path / "results"
    content = migration_tree(src, files=30)
    pipeline(*base_config(ferry_bin, outdir, src, dest, "baseline"))
    modify_tree(src, content)
    incremental = base_config(ferry_bin, outdir, src, dest, "incremental")
    pipeline(*incremental, extra_args=("--until", "plan"))
    pipeline(*incremental, "pass=2")
    rep = report(outdir, "incremental-pass2")
    assert (listed(rep)["used"], listed(rep)["written_by"]) == (True, "baseline"), listed(rep)
    # A copy job that began to write and failed: a directory read-only at the destination.
    (src / "docs" / "new-since-pass2.txt").write_bytes(b"new")
    unblock = read_only_dir(dest / "docs")
    assert pipeline(*incremental, "pass=3", expect=None).returncode != 0
    unblock()
    pipeline(*incremental, "pass=4")
    rep = report(outdir, "incremental-pass4")
    assert listed(rep)["used"] is False
    assert (
        "incremental-pass3 wrote to the destination and did not leave a new"
        in (listed(rep)["reason"])
    )
    # ... and it leaves a state the pass after it uses.
    pipeline(*incremental, "pass=5")
    rep = report(outdir, "incremental-pass5")
    assert listed(rep)["written_by"] == "incremental-pass4"
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


@pytest.mark.timeout(600)
def test_nextflow_a_final_pass_refused_by_its_plan_leaves_the_state_to_its_rerun(
    tmp_path, ferry_bin
):
    """Issue 42 (3, 6): the final pass whose prune would be refused stops at its plan, before any
    write, naming the config key; the re-run with the key raised carries the destination."""
    src, dest, outdir = tmp_path / "src", tmp_path / "dst", tmp_path / "results"
    content = migration_tree(src, files=30)
    launch = tmp_path / "launch"

    def run(phase, **extra):
        return nextflow(
            launch, params=params_for(ferry_bin, outdir, src, dest, phase, **extra), expect=None
        )

    assert run("baseline").returncode == 0
    _added, _changed, deleted = modify_tree(src, content)
    assert deleted
    refused = run("final", prune={"max_delete": 1})
    assert refused.returncode != 0
    out = refused.stdout + refused.stderr
    assert "prune.max_delete" in out and "--max-delete" not in out, out[-3000:]
    assert json.loads((outdir / "t" / "state" / "dest.json").read_text())["taken_by"] is None
    assert run("final", prune={"max_delete": "100%"}).returncode == 0
    rep = report(outdir, "final")
    assert (listed(rep)["used"], listed(rep)["written_by"]) == (True, "baseline"), listed(rep)
    assert rep["totals"]["prune"]["deleted"] >= len(deleted)


@pytest.mark.timeout(600)
def test_a_pass_on_another_machine_holding_the_state_is_refused_by_both_engines(
    tmp_path, ferry_bin, azurite, request, run_ferry
):
    """Issue 42 (4): with the carried state in Blob, a pass started elsewhere (another head, its
    own run directory) holds the state's lease; this machine's pass is refused before any job,
    naming it, by either engine, and starts once the lease is given back."""
    src, outdir = tmp_path / "src", tmp_path / "results"
    migration_tree(src, files=5, big=0)
    dest = new_container(azurite, request)
    state = new_container(azurite, request).at("ferry/t")
    other = {"pass": "incremental-pass4", "host": "head-b", "pid": 4242, "since": "02:13"}
    lease_id = str(uuid.uuid4())
    run_ferry("lease", state, "acquire", "--id", lease_id, "--holder", json.dumps(other))
    snake = pipeline(
        *base_config(ferry_bin, outdir, src, dest, "baseline"), f"state={state}", expect=None
    )
    flow = nextflow(
        tmp_path / "launch",
        params=params_for(ferry_bin, outdir, src, dest, "baseline", state=state),
        expect=None,
    )
    for proc in (snake, flow):
        text = proc.stdout + proc.stderr
        assert proc.returncode != 0, text[-3000:]
        assert "pass incremental-pass4" in text and "head-b" in text, text[-3000:]
        assert "lease on the carried state" in text
    assert not dest.blobs(), "a refused pass wrote to the destination"
    run_ferry("lease", state, "release", "--id", lease_id)
    pipeline(*base_config(ferry_bin, outdir, src, dest, "baseline"), f"state={state}")
    assert report(outdir, "baseline")["status"] == "complete"
