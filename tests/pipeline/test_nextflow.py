"""End-to-end tests of the Nextflow pipeline (main.nf, workflow/modules, profiles/test).

Every run is the real Nextflow 24.10.0 (scripts/nextflow, or `nextflow` on PATH) on the real
worker; destinations are checked by reading files (here) or with the Azure SDK
(test_engines.py), never with ferry. Each Nextflow start costs several seconds, so runs are
shared between assertions through module-scoped fixtures. The helpers are in
tests/support/nextflow.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
import yaml
from support.ferry import ferry_env
from support.nextflow import NEXTFLOW, nextflow, params_for, statuses, trace
from support.pipeline import (
    REPO,
    held_lock,
    local_snapshot,
    md5s,
    migration_tree,
    report,
    run_dir,
    write_file,
)

# ---------------------------------------------------------------------------------------------
# configuration: no task runs


def test_nextflow_schema_is_generated_from_the_yaml_schema():
    proc = subprocess.run(
        [
            str(REPO / ".venv" / "bin" / "python"),
            str(REPO / "workflow" / "scripts" / "ferry_config.py"),
            "nextflow-schema",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    committed = (REPO / "nextflow_schema.json").read_text()
    assert proc.stdout == committed, (
        "nextflow_schema.json is stale: regenerate it with `make nextflow-schema`"
    )
    schema = json.loads(committed)
    yaml_schema = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
    grouped = {k for group in schema["$defs"].values() for k in group["properties"]}
    assert grouped == set(yaml_schema["properties"])
    modes = schema["$defs"]["steps"]["properties"]["plan"]["properties"]["mode"]["enum"]
    assert modes == yaml_schema["properties"]["plan"]["properties"]["mode"]["enum"]


def test_bad_config_stops_nextflow_before_any_task(tmp_path, ferry_bin):
    """One run: an unknown phase named by field; nothing is listed, no work or run directory made."""
    outdir = tmp_path / "results"
    params = params_for(ferry_bin, outdir, tmp_path / "src", tmp_path / "dst", "sideways")
    proc = nextflow(tmp_path / "launch", params=params, expect=None)
    assert proc.returncode != 0
    text = proc.stdout + proc.stderr
    assert "config field 'phase'" in text and "sideways" in text, text[-3000:]
    assert not outdir.exists() and not (tmp_path / "dst").exists()
    work = tmp_path / "launch" / "work"
    assert not work.exists() or not any(work.iterdir()), "a task ran despite the bad config"


def test_azurebatch_profile_config_and_offline_stub_run(tmp_path):
    """`nextflow config -profile azurebatch` shows where tasks would go; `-stub-run` with a local
    override walks the final phase's whole DAG (every process has a stub:) without Azure."""
    proc = subprocess.run(
        [NEXTFLOW, "config", str(REPO), "-profile", "azurebatch"],
        cwd=tmp_path,
        env=ferry_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    text = proc.stdout
    assert "executor = 'azurebatch'" in text
    assert "container = 'ferryregistry.azurecr.io/ferry:0.1.0'" in text
    assert "queue = 'ferry-pool'" in text
    assert "workDir = 'az://ferry-work/work'" in text
    assert "FERRY_AUTH = 'managed'" in text
    assert "sku = 'batch.node.ubuntu 24.04'" in text

    local = tmp_path / "local.config"
    local.write_text(
        f"process.executor = 'local'\nprocess.container = null\nworkDir = '{tmp_path / 'work'}'\n"
    )
    outdir = tmp_path / "results"
    proc = subprocess.run(
        [
            NEXTFLOW,
            "run",
            str(REPO / "main.nf"),
            "-profile",
            "azurebatch",
            "-c",
            str(local),
            "-stub-run",
            "-ansi-log",
            "false",
            "--source",
            "/data/share",
            "--dest",
            "az://archive/share",
            "--phase",
            "final",
            "--outdir",
            str(outdir),
            "--run_name",
            "stub",
        ],
        cwd=tmp_path,
        env=ferry_env(),
        capture_output=True,
        text=True,
        timeout=200,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    ran = {r["process"].split(":")[-1] for r in trace(outdir, "final", "stub")}
    assert ran == {"LIST", "PLAN", "COPY", "VERIFY", "PRUNE", "PRUNE_DIRS", "CARRY", "REPORT"}, ran
    assert statuses(trace(outdir, "final", "stub"), "COPY") == ["COMPLETED", "COMPLETED"]
    # The stub's destination listing holds one file the source lacks: one part to delete.
    assert statuses(trace(outdir, "final", "stub"), "PRUNE") == ["COMPLETED"]


# ---------------------------------------------------------------------------------------------
# local -> local: baseline, an unchanged incremental, then a final pass with an emptied source


@pytest.fixture(scope="module")
def local_runs(tmp_path_factory, ferry_bin):
    root = tmp_path_factory.mktemp("nf-local")
    # The source's own name has a space and quotes: it reaches ferry as a string, never staged.
    src, dest, outdir, launch = (
        root / "src 'a' \"b\"",
        root / "nfs" / "share",
        root / "results",
        root / "launch",
    )
    content = migration_tree(src, files=40, big=0)
    for rel in (
        "odd/tab\there.txt",
        "odd/new\nline.txt",
        'odd/quote\'s "both".txt',
        "odd/$(dollar) `tick`.txt",
    ):
        content[rel] = rel.encode()
        write_file(src, rel, content[rel])
    parts = {"plan": {"mode": "max-files", "max_files": 16}}
    runs = {"content": content, "src": src, "dest": dest, "outdir": outdir}
    runs["baseline"] = nextflow(
        launch, params=params_for(ferry_bin, outdir, src, dest, "baseline", **parts)
    )
    runs["dest_after_baseline"] = local_snapshot(dest)
    # The same migration spelt otherwise (issue 42): continued, not refused, not begun again.
    respelt = f"{root}/./{src.name}/"
    runs["incremental"] = nextflow(
        launch, params=params_for(ferry_bin, outdir, respelt, dest, "incremental", **parts)
    )
    # Everything at the source is gone (an unmounted share looks like this): prune must refuse.
    shutil.rmtree(src)
    src.mkdir()
    runs["final"] = nextflow(
        launch, params=params_for(ferry_bin, outdir, src, dest, "final", **parts), expect=None
    )
    return runs


def test_local_baseline_copies_everything(local_runs):
    content, outdir = local_runs["content"], local_runs["outdir"]
    assert local_runs["dest_after_baseline"] == md5s(content)
    assert os.readlink(local_runs["dest"] / "docs" / "link-to-top") == "../top.txt"
    rep = report(outdir, "baseline")
    assert rep["status"] == "complete"
    assert rep["totals"]["files"]["copied"] == len(content) + 1  # and the symlink
    assert rep["totals"]["verify"]["same"] == len(content) + 1
    assert len(rep["partitions"]) == 3 and all(p["files"] <= 16 for p in rep["partitions"])
    rows = trace(outdir, "baseline")
    assert statuses(rows, "COPY") == ["COMPLETED"] * 3
    assert statuses(rows, "VERIFY") == ["COMPLETED"] * 3
    run = run_dir(outdir, "baseline")
    for kept in (
        "listing/source.tsv",
        "plan/plan.json",
        "plan/copy/part-00000.tsv",
        "copy/part-00000.json",
        "verify/part-00002.json",
        "logs/copy/part-00001.log",
        "benchmarks/plan.tsv",
        "report.md",
        "report.html",
        "pipeline_info/timeline.html",
        "pipeline_info/report.html",
    ):
        assert (run / kept).is_file(), f"{kept} missing from the run directory"
    assert {r: s["jobs"] for r, s in rep["time"]["per_step"].items()} == {
        "list_source": 1,
        "make_dest": 1,
        "plan": 1,
        "copy": 3,
        "verify": 3,
        "carry": 1,
    }


def test_unchanged_incremental_plans_nothing(local_runs):
    recorded = json.loads((local_runs["outdir"] / "t" / "migration.json").read_text())
    assert (recorded["source"], recorded["dest"]) == (
        str(local_runs["src"]),
        str(local_runs["dest"]),
    )
    rep = report(local_runs["outdir"], "incremental")
    assert rep["status"] == "complete"
    assert rep["plan"]["unchanged"] == len(local_runs["content"]) + 1
    assert rep["totals"]["files"]["planned"] == 0 and rep["partitions"] == []
    rows = trace(local_runs["outdir"], "incremental")
    assert statuses(rows, "COPY") == [] and statuses(rows, "VERIFY") == []
    assert statuses(rows, "REPORT") == ["COMPLETED"]


def test_prune_refused_on_an_empty_source(local_runs):
    proc = local_runs["final"]
    assert proc.returncode != 0, "a final pass that could not prune must fail"
    text = proc.stdout + proc.stderr
    assert "report-incomplete.md" in text
    # A refusal of the config's making fails again until the config changes: no -resume advice.
    assert "Change the config as the failure says" in text and "-resume" not in text, text[-2000:]
    assert local_snapshot(local_runs["dest"]) == md5s(local_runs["content"]), (
        "prune deleted from the destination"
    )
    run = run_dir(local_runs["outdir"], "final")
    partial = json.loads((run / "report-incomplete.json").read_text())
    assert partial["status"] == "incomplete"
    # The plan judged the pass's prune as the prune would, before any copy: refused.
    refused = [f for f in partial["failures"] if f["stage"] == "plan"]
    assert refused and "no entries at the source" in str(refused[0]), partial["failures"]
    assert "set prune.force: true" in str(refused[0]), refused[0]
    assert not (run / "report.json").exists()
    # Its page shows the refusal among the deletions, in the config's keys; the baseline's
    # says what its verify compared.
    page = (run / "report-incomplete.html").read_text(encoding="utf-8")
    assert "prune refused (by the plan, before any copy)</span>: the plan in" in page
    assert "found no entries at the source; set prune.force: true" in page
    baseline = run_dir(local_runs["outdir"], "baseline") / "report.html"
    assert "(copied files, by sizes): " in baseline.read_text(encoding="utf-8")
    rows = trace(local_runs["outdir"], "final")
    assert statuses(rows, "PLAN") == ["FAILED"]
    for later in ("COPY", "PRUNE", "PRUNE_DIRS", "FINAL_CHECK"):
        assert statuses(rows, later) == [], later


# ---------------------------------------------------------------------------------------------
# a failed partition, redone alone by -resume


@pytest.mark.timeout(300)
def test_resume_redoes_only_the_failed_partition(tmp_path, ferry_bin, read_only_dir):
    src, dest, outdir, launch = (
        tmp_path / "src",
        tmp_path / "dst",
        tmp_path / "results",
        tmp_path / "launch",
    )
    content = migration_tree(src, files=30, big=0)
    # The only file under blocked/ lands in exactly one partition.
    content["blocked/only.txt"] = b"needs a directory the destination cannot have yet\n"
    write_file(src, "blocked/only.txt", content["blocked/only.txt"])
    params = params_for(
        ferry_bin, outdir, src, dest, "baseline", plan={"mode": "max-files", "max_files": 8}
    )

    # The directory blocked/, read-only at the destination (as the source's in every other
    # respect, so nothing but its file needs writing), makes that one copy fail.
    (dest / "blocked").mkdir(parents=True)
    st = (src / "blocked").stat()
    os.utime(dest / "blocked", ns=(st.st_atime_ns, st.st_mtime_ns))
    unblock = read_only_dir(dest / "blocked")
    proc = nextflow(launch, params=params, expect=None)
    assert proc.returncode != 0
    run = run_dir(outdir, "baseline")
    partial = json.loads((run / "report-incomplete.json").read_text())
    failed = [p for p in partial["partitions"] if p["state"] == "failed"]
    assert len(failed) == 1, partial["partitions"]
    ok = [p for p in partial["partitions"] if p["state"] == "done"]
    assert len(ok) == len(partial["partitions"]) - 1 >= 2
    copy_failures = [f for f in partial["failures"] if f["stage"] == "copy"]
    assert [(f["partition"], f["path"]) for f in copy_failures] == [
        (failed[0]["id"], "blocked/only.txt")
    ]
    verify_status = {v["id"]: v["state"] for v in partial["verify_partitions"]}
    assert verify_status.pop(failed[0]["id"]) == "pending"
    assert set(verify_status.values()) == {"done"}
    assert statuses(trace(outdir, "baseline"), "COPY") == ["COMPLETED"] * len(ok) + ["FAILED"]
    assert not (run / "report.json").exists()
    assert sorted(p.name for p in run.glob("report-incomplete.*")) == [
        "report-incomplete.html",
        "report-incomplete.json",
        "report-incomplete.md",
    ]

    unblock()
    nextflow(launch, "-resume", params=params)
    assert local_snapshot(dest) == md5s(content)
    rows = trace(outdir, "baseline")
    assert statuses(rows, "COPY") == ["CACHED"] * len(ok) + ["COMPLETED"], (
        "only the failed partition may run again"
    )
    redone = [r for r in rows if r["process"].endswith("COPY") and r["status"] == "COMPLETED"]
    assert redone[0]["tag"] == f"part-{failed[0]['id']}"
    assert statuses(rows, "LIST") == ["CACHED"] and statuses(rows, "PLAN") == ["CACHED"]
    rep = report(outdir, "baseline")
    assert rep["status"] == "complete" and rep["failures"] == []
    # Every page of the failed attempt's report went with it, the HTML one too.
    assert list(run.glob("report-incomplete.*")) == [] and not (run / "failed").exists()
    # Both runs are in the migration's history, the failed one as failed (docs/pipeline.md, History).
    runs = [json.loads(line) for line in (outdir / "t" / "history.jsonl").read_text().splitlines()]
    assert [(r["status"], r["failed"] > 0) for r in runs] == [("failed", True), ("complete", False)]


# ---------------------------------------------------------------------------------------------
# MPI replication: one task, the whole MPI job


def test_replicate_entry_puts_the_dataset_on_every_rank(tmp_path, ferry_bin):
    src, nodes, outdir = tmp_path / "src", tmp_path / "nodes", tmp_path / "results"
    content = migration_tree(src, files=30, big=1)
    params = {
        "outdir": str(outdir),
        "ferry_bin": str(ferry_bin),
        "replicate": {
            "source": str(src),
            "dest": f"{nodes}/{{rank}}",
            "ranks": 2,
            "launcher": "mpirun --oversubscribe",
            "verify": True,
            "chunk_size": "256KiB",
        },
    }
    mpi_env = {
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "OMPI_MCA_mpi_yield_when_idle": "1",
    }
    nextflow(tmp_path / "launch", "-entry", "REPLICATE", params=params, env=mpi_env)
    for rank in (0, 1):
        assert local_snapshot(nodes / str(rank)) == md5s(content), f"rank {rank} lacks the dataset"
    (rep,) = outdir.glob("replicate/*/report.json")
    assert json.loads(rep.read_text())["verify"]["mismatch_count"] == 0
    assert (rep.parent / "replicate.log").is_file() and (
        rep.parent / "pipeline_info" / "trace.txt"
    ).is_file()


def test_a_pass_is_refused_while_another_holds_the_migration(local_runs, tmp_path, ferry_bin):
    """Issue 42: one pass at a time per migration. A pass that finds the lock held by a running
    engine stops before any task, naming the holder."""
    outdir, src, dest = local_runs["outdir"], local_runs["src"], local_runs["dest"]
    with held_lock(outdir / "t", "incremental-pass2") as holder:
        params = params_for(ferry_bin, outdir, src, dest, "final", **{"pass": 2})
        proc = nextflow(tmp_path / "launch", params=params, expect=None)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0, text[-3000:]
    assert "another pass of this migration is running: pass incremental-pass2" in text
    assert f"pid {holder.pid}" in text, text[-3000:]
    # Nextflow opens its trace file there before the workflow starts; nothing else is made.
    made = {p.name for p in (outdir / "t" / "final-pass2").iterdir()}
    assert made <= {"pipeline_info"}, made
    work = tmp_path / "launch" / "work"
    assert not work.exists() or not any(work.iterdir()), "a task ran while the lock was held"


@pytest.mark.timeout(600)
def test_a_destination_file_newer_than_its_source_stops_the_pass_at_its_plan(tmp_path, ferry_bin):
    """Something wrote at the destination since the baseline: the incremental's plan refuses
    before any copy, naming copy.overwrite_newer (not the worker's flag, nor -resume), and the
    file stays; with the key set (a restore of older versions at the source), the pass copies."""
    src, dest, outdir = tmp_path / "src", tmp_path / "dst", tmp_path / "results"
    content = migration_tree(src, files=10, big=0)
    launch = tmp_path / "launch"
    nextflow(launch, params=params_for(ferry_bin, outdir, src, dest, "baseline"))
    edited = sorted(content)[0]
    (dest / edited).write_bytes(b"edited at the destination, after the baseline\n")
    params = params_for(ferry_bin, outdir, src, dest, "incremental")
    proc = nextflow(launch, params=params, expect=None)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "set copy.overwrite_newer: true" in out and "--overwrite-newer" not in out, out[-3000:]
    assert "Change the config as the failure says" in out and "with -resume" not in out
    assert (dest / edited).read_bytes() == b"edited at the destination, after the baseline\n"
    params["copy"] = {**params["copy"], "overwrite_newer": True}
    nextflow(launch, params=params)
    assert (dest / edited).read_bytes() == (src / edited).read_bytes()
