"""The migration's history (workflow/scripts/ferry_history.py) as both engines write it: a baseline
and an incremental pass of a small local tree append one record each to <outdir>/<run_name>/
history.jsonl, read back with what the passes planned and copied; the report carries the history
and the projection; and a run killed mid-copy (SIGKILL of the engine's process group, no report),
Snakemake's or Nextflow's, is recorded as `killed` by the run after it. `ferry status` reads the
same runs: running while the copy goes, stopped once killed, complete after the next run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from support.ferry import ferry_env
from support.interrupt import ferry_processes
from support.nextflow import NEXTFLOW, nextflow, params_for
from support.pipeline import REPO, base_config, migration_tree, modify_tree, pipeline, report

HISTORY_SCRIPT = REPO / "workflow" / "scripts" / "ferry_history.py"


def history(outdir: Path, run_name: str = "t") -> list[dict]:
    """The records as written, line by line (not through the loader)."""
    lines = (outdir / run_name / "history.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def project(outdir: Path, run_name: str = "t") -> dict:
    proc = subprocess.run(
        [sys.executable, str(HISTORY_SCRIPT), "project", str(outdir / run_name), "--json"],
        capture_output=True,
        text=True,
        check=True,
        env=ferry_env(),
    )
    return json.loads(proc.stdout)


def check_two_passes(
    outdir: Path, engine: str, added: set, changed: set, deleted: set, content: dict
) -> None:
    baseline, incremental = history(outdir)
    assert [(r["phase"], r["pass"], r["status"], r["engine"]) for r in (baseline, incremental)] == [
        ("baseline", 1, "complete", engine),
        ("incremental", 1, "complete", engine),
    ]
    assert (
        baseline["copied"]["files"] == baseline["planned"]["files"] == baseline["source"]["files"]
    )
    assert incremental["planned"]["new"] == len(added)
    # A changed file the listings cannot judge is the copy's to decide (undecided).
    assert incremental["planned"]["changed"] + incremental["planned"]["undecided"] == len(changed)
    assert incremental["planned"]["files"] == len(added) + len(changed)
    assert incremental["planned"]["deleted"] == len(deleted)
    assert incremental["copied"]["files"] == len(added) + len(changed)
    assert incremental["source"]["files"] == len(content) + 1  # the symlink too
    assert incremental["verified"]["same"] == len(added) + len(changed)
    assert incremental["failed"] == 0 and incremental["partitions"] >= 1
    for rec in (baseline, incremental):
        assert rec["started"] <= rec["ended"] and rec["wall_seconds"] > 0
        assert {"list_source", "plan", "copy", "verify"} <= set(rec["steps"])
        assert set(rec["requests"]["total"]) >= {"puts", "list_pages", "gets"}
    assert "list_dest" in incremental["steps"] and incremental["run_id"] != baseline["run_id"]
    # The report carries the history and the projection; the loader reads the same records back.
    rep = report(outdir, "incremental")
    assert [r["run_id"] for r in rep["history"]] == [baseline["run_id"], incremental["run_id"]]
    proj = rep["projection"]
    assert proj["ok"] and proj["passes"] == 2 and len(proj["backtest"]) == 1
    md = (outdir / "t" / "incremental" / "report.md").read_text()
    assert "## Projection of the final pass" in md and "## History of the migration" in md
    # report.html (ferry_html.py) shows the same history and projection, whichever engine ran.
    page = (outdir / "t" / "incremental" / "report.html").read_text(encoding="utf-8")
    assert "<td>baseline</td>" in page and "<td>incremental 1</td>" in page
    assert 'id="projection-line">A final pass started now would take ≈' in page
    on_demand = project(outdir)
    assert on_demand["ok"] and on_demand["line"].startswith("a final pass started now would take ≈")
    assert on_demand["backtest"] == proj["backtest"]
    check_final_pass_forecast(incremental, proj, md, page, deleted)


def check_final_pass_forecast(incremental: dict, proj: dict, md: str, page: str, deleted) -> None:
    """Every pass's report says whether the final pass would go through: the deletions the
    plan counted against prune.max_delete (10 %), the destination carried (the pass left its
    state where the config keeps it); and the history's deleted column holds what was deleted."""
    final = proj["final_pass"]
    assert final["deletions"]["files"] == len(deleted) and final["deletions"]["limit"] == "10%"
    of, n = final["deletions"]["of"], final["deletions"]["entries"]
    assert final["goes_through"] == (n <= of * 0.10)
    assert final["dest_listing"]["carried"], final["dest_listing"]
    said = "would go through" if final["goes_through"] else "would NOT go through"
    assert f"the final pass {said}" in proj["line"] and "prune.max_delete" in proj["line"]
    assert f"**The final pass {said}**" in md and 'id="final-pass"' in page
    # The incremental pass deleted nothing; what it would delete is another column.
    assert incremental["deleted"] == {"files": 0, "dirs": 0}
    assert incremental["planned"]["deleted"] == len(deleted)
    assert "| would delete | deleted |" in md


@pytest.mark.timeout(240)
def test_snakemake_appends_a_record_per_phase_run(tmp_path, ferry_bin):
    src, dest, outdir = tmp_path / "src", tmp_path / "dst", tmp_path / "results"
    content = migration_tree(src, files=30, big=2)
    pipeline(*base_config(ferry_bin, outdir, src, dest, "baseline"))
    added, changed, deleted = modify_tree(src, content)
    pipeline(*base_config(ferry_bin, outdir, src, dest, "incremental"))
    check_two_passes(outdir, "snakemake", added, changed, deleted, content)
    # A dry run starts no run of the phase: no marker, no record.
    pipeline(
        *base_config(ferry_bin, outdir, src, dest, "incremental"),
        "pass=2",
        extra_args=("--dry-run",),
    )
    assert len(history(outdir)) == 2 and not (outdir / "t" / "incremental-pass2").exists()


@pytest.mark.timeout(300)
def test_nextflow_appends_a_record_per_phase_run(tmp_path, ferry_bin):
    src, dest, outdir = tmp_path / "src", tmp_path / "dst", tmp_path / "results"
    content = migration_tree(src, files=30, big=2)
    nextflow(tmp_path / "launch", params=params_for(ferry_bin, outdir, src, dest, "baseline"))
    added, changed, deleted = modify_tree(src, content)
    # -resume: the report is never taken from the cache, the new run is recorded.
    nextflow(
        tmp_path / "launch",
        "-resume",
        params=params_for(ferry_bin, outdir, src, dest, "incremental"),
    )
    check_two_passes(outdir, "nextflow", added, changed, deleted, content)


def copy_source(src: Path) -> None:
    """A tree that takes a throttled copy several seconds, many files completing along the way
    (a job's progress counts the bytes of files done)."""
    migration_tree(src, files=20, big=2)
    for i in range(60):
        (src / "bulk").mkdir(exist_ok=True)
        (src / "bulk" / f"f{i:02}.bin").write_bytes(os.urandom(64 << 10))


def status(ferry_bin, run: Path) -> dict:
    proc = subprocess.run(
        [str(ferry_bin), "status", str(run), "--json"], capture_output=True, text=True, check=True
    )
    return json.loads(proc.stdout)


def status_while_copying(ferry_bin, run: Path) -> dict:
    """`ferry status` once a copy job's progress file shows bytes moving (the jobs rewrite theirs
    every two seconds)."""
    deadline = time.monotonic() + 30
    while True:
        st = status(ferry_bin, run)
        if st["state"] == "running" and st["progress"]["bytes"]["done"] > 0:
            return st
        assert time.monotonic() < deadline, st
        time.sleep(0.3)


def check_running_then_stopped(ferry_bin, run: Path, kill) -> None:
    st = status_while_copying(ferry_bin, run)
    # The engine's lock (and start marker) say it runs; once killed, that it ended.
    assert st["engine"] == "running", st
    p = st["progress"]
    assert p["copy"]["running"] >= 1, p["copy"]
    assert p["bytes_per_second"] > 0 and p["eta_seconds"] > 0
    assert 0 < p["bytes"]["done"] < p["bytes"]["planned"]
    assert p["slowest_running"] in {part["id"] for part in p["partitions"]["copy"]}
    kill()
    deadline = time.monotonic() + 10  # the killed jobs' processes gone from this machine
    while (st := status(ferry_bin, run))["state"] == "running" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert st["state"] == "stopped" and st["progress"]["copy"]["running"] == 0, st
    assert st["engine"] == "ended", st
    tally = st["progress"]["copy"]
    assert (
        tally["stopped"] >= 1
        and tally["done"] + tally["stopped"] + tally["pending"] == tally["planned"]
    ), tally
    assert st["progress"]["eta_seconds"] is None
    text = subprocess.run(
        [str(ferry_bin), "status", str(run)], capture_output=True, text=True, check=True
    ).stdout
    assert text.startswith(f"ferry status {run}: stopped") and "copy partitions:" in text


def kill_mid_copy(cmd: list, cwd: Path, log_path: Path, ferry_bin, run: Path) -> int:
    """Start an engine in its own process group, check `ferry status` while a copy job runs,
    SIGKILL the whole group, check the status again; the engine's pid."""
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            env=ferry_env(),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + 120
    while not ferry_processes(proc.pid, "copy"):
        assert proc.poll() is None, log_path.read_text()
        assert time.monotonic() < deadline, "no copy job started"
        time.sleep(0.05)
    check_running_then_stopped(
        ferry_bin, run, lambda: (os.killpg(proc.pid, signal.SIGKILL), proc.wait(30))
    )
    return proc.pid


@pytest.mark.timeout(300)
def test_a_run_killed_mid_copy_is_recorded_as_killed_by_the_next(tmp_path, ferry_bin):
    src, dest, outdir = tmp_path / "src", tmp_path / "dst", tmp_path / "results"
    copy_source(src)
    # About 8 MiB at 1 MiB/s: the copy is still going when the kill lands.
    cfg = [
        *base_config(ferry_bin, outdir, src, dest, "baseline"),
        "copy={block_size: 1MiB, concurrency: 2, parallel_files: 2, max_bandwidth: 1MiB/s}",
    ]
    # Killed mid-run, Snakemake leaves its lock and incomplete markers: the next run is told, as
    # after a crash.
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "--profile",
        "profiles/local",
        "--nolock",
        "--config",
        *cfg,
    ]
    run = outdir / "t" / "baseline"
    pid = kill_mid_copy(cmd, REPO, tmp_path / "killed.log", ferry_bin, run)
    marker = json.loads((run / "run_started.json").read_text())
    assert marker["engine"] == "snakemake" and marker["pid"] == pid
    assert not (outdir / "t" / "history.jsonl").read_text(), "a killed run writes no record itself"

    pipeline(*cfg, extra_args=("--nolock", "--rerun-incomplete"))
    killed, done = history(outdir)
    assert (killed["run_id"], killed["status"], killed["engine"]) == (
        marker["run_id"],
        "stopped",
        "snakemake",
    )
    assert killed["started"] == marker["started"] and killed["wall_seconds"] > 0
    assert "list_source" in killed["steps"] and "copy" not in killed["steps"], "killed mid-copy"
    assert (done["status"], done["phase"]) == ("complete", "baseline") and done["run_id"] != killed[
        "run_id"
    ]
    assert done["copied"]["files"] > 0
    # A killed run is no measure of a pass: the projection stands on the complete one.
    rep = report(outdir, "baseline")
    assert [r["status"] for r in rep["history"]] == ["stopped", "complete"]
    assert rep["projection"]["passes"] == 1 and rep["projection"]["records"] == 2
    assert status(ferry_bin, run)["state"] == "complete"


@pytest.mark.timeout(300)
def test_a_nextflow_run_killed_mid_copy_is_recorded_as_killed_by_the_next(tmp_path, ferry_bin):
    src, dest, outdir, launch = (
        tmp_path / "src",
        tmp_path / "dst",
        tmp_path / "results",
        tmp_path / "launch",
    )
    copy_source(src)
    params = params_for(
        ferry_bin,
        outdir,
        src,
        dest,
        "baseline",
        copy={
            "block_size": "1MiB",
            "concurrency": 2,
            "parallel_files": 2,
            "max_bandwidth": "1MiB/s",
        },
    )
    launch.mkdir()
    (launch / "params.yaml").write_text(yaml.safe_dump(params, allow_unicode=True))
    cmd = [
        NEXTFLOW,
        "run",
        str(REPO / "main.nf"),
        "-profile",
        "test",
        "-w",
        str(launch / "work"),
        "-ansi-log",
        "false",
        "-params-file",
        str(launch / "params.yaml"),
    ]
    run = outdir / "t" / "baseline"
    kill_mid_copy(cmd, launch, tmp_path / "killed.log", ferry_bin, run)
    marker = json.loads((run / "run_started.json").read_text())
    assert marker["engine"] == "nextflow"
    assert not (outdir / "t" / "history.jsonl").read_text(), "a killed run writes no record itself"

    nextflow(launch, "-resume", params=params)
    killed, done = history(outdir)
    assert (killed["run_id"], killed["status"], killed["engine"]) == (
        marker["run_id"],
        "stopped",
        "nextflow",
    )
    assert (done["status"], done["engine"]) == ("complete", "nextflow") and done[
        "run_id"
    ] != killed["run_id"]
