"""`ferry status` before the plan: the listing phase, counted in list jobs per side from what the
list jobs leave in the run directory (workflow/scripts/run_dir.json), and "planning" only once
every listing is there. The run directories are made by hand (support/rundir.py), as the steps
leave them."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import ferry_lock
from support.rundir import RunDir


def status(run_ferry, run: RunDir) -> dict:
    return run_ferry("status", run.path, "--json").json


def sides(doc: dict) -> dict:
    return {s["side"]: (s["done"], s["jobs"]) for s in doc["listing"]}


def test_three_list_jobs_a_side_plan_only_once_all_six_have_listed(tmp_path, run_ferry):
    run = RunDir(tmp_path / "m" / "incremental-pass2")
    # The shard step is cutting the key space: how many list jobs there are is not known yet.
    run.log("shard", "")
    st = status(run_ferry, run)
    assert (st["state"], sides(st)) == ("listing", {"source": (0, None), "dest": (0, None)}), st
    run.sharded(3)
    run.listing("source", 1)
    run.listing("source", 2, running=True)
    run.listing("source", 3)
    st = status(run_ferry, run)
    assert (st["state"], sides(st)) == ("listing", {"source": (2, 3), "dest": (0, 3)}), st
    assert st["progress"] is None
    text = run_ferry("status", run.path).stdout
    assert text.splitlines()[1:] == [
        "  source listing: 2 of 3 list jobs done",
        "  dest listing: 0 of 3 list jobs done",
    ], text
    run.listing("source", 2)
    run.listing("dest", 1)
    run.listing("dest", 2)
    st = status(run_ferry, run)
    assert (st["state"], sides(st)) == ("listing", {"source": (3, 3), "dest": (2, 3)}), st
    run.listing("dest", 3)
    st = status(run_ferry, run)
    assert (st["state"], sides(st)) == ("planning", {"source": (3, 3), "dest": (3, 3)}), st
    run.plan(copy=[("00000", 1, 10)])
    st = status(run_ferry, run)
    assert st["listing"] is None and st["progress"]["copy"]["pending"] == 1, st


def test_a_baseline_lists_the_source_only(tmp_path, run_ferry):
    run = RunDir(tmp_path / "m" / "baseline")
    run.listing("source", running=True)
    st = status(run_ferry, run)
    assert (st["state"], sides(st)) == ("listing", {"source": (0, 1)}), st
    run.listing("source")
    st = status(run_ferry, run)
    assert (st["state"], sides(st)) == ("planning", {"source": (1, 1)}), st


# --- the engine behind the pass (issue 42): its marker and the migration's lock ---------------


def engine() -> subprocess.Popen:
    """A stand-in for an engine process: it runs until the test ends it."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])


def ended_engine() -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc


def started_by(run: RunDir, proc: subprocess.Popen, at: str = "2026-01-01T00:00:00+00:00"):
    pid_start = ferry_lock.process_start(proc.pid)
    return run.started(proc.pid, socket.gethostname(), pid_start, at)


def planned_pass(tmp_path) -> RunDir:
    """A final pass whose plan is made and none of whose jobs has started: queued."""
    run = RunDir(tmp_path / "m" / "final")
    run.plan(copy=[("00000", 1, 10), ("00001", 1, 10)], verify=[("00000", 1, 10)])
    return run


def test_a_pass_whose_jobs_are_queued_runs_while_its_engine_does(tmp_path, run_ferry):
    run = planned_pass(tmp_path)
    proc = engine()
    try:
        started_by(run, proc)
        st = status(run_ferry, run)
        assert st["state"] == "running" and st["engine"] == "running", st
        assert st["progress"]["copy"]["pending"] == 2, st
        text = run_ferry("status", run.path).stdout
        assert text.splitlines()[:2] == [f"ferry status {run.path}: running", "  engine: running"]
        # Between two steps (copy done, verify not started yet): running still.
        run.copied("00000")
        run.copied("00001")
        assert status(run_ferry, run)["state"] == "running"
    finally:
        proc.kill()
        proc.wait()
    st = status(run_ferry, run)
    assert (st["state"], st["engine"]) == ("stopped", "ended"), st


def test_before_the_plan_a_pass_whose_engine_ended_is_stopped(tmp_path, run_ferry):
    run = RunDir(tmp_path / "m" / "baseline")
    run.listing("source", running=True)
    started_by(run, ended_engine())
    st = status(run_ferry, run)
    assert st["state"] == "stopped" and st["engine"] == "ended", st


def test_the_lock_of_an_engine_on_another_host_says_by_its_heartbeat(tmp_path, run_ferry):
    run = planned_pass(tmp_path)
    marker = run.started(4242, "another-host", "17", "2026-01-01T00:00:00+00:00")
    run.locked(marker, heartbeat=time.time())
    st = status(run_ferry, run)
    assert st["state"] == "running", st
    # Ten heartbeats missed: its holder is gone (ferry_lock.py's STALE_AFTER).
    run.locked(marker, heartbeat=time.time() - ferry_lock.STALE_AFTER - 60)
    st = status(run_ferry, run)
    assert (st["state"], st["engine"]) == ("stopped", "ended"), st
    # The lock given back, another host's marker alone: the engine ended.
    (run.path.parent / "lock.json").unlink()
    assert status(run_ferry, run)["engine"] == "ended"


def test_the_migration_folder_shows_its_latest_pass(tmp_path, run_ferry):
    baseline = RunDir(tmp_path / "m" / "baseline")
    baseline.plan()
    baseline.reported()
    started_by(baseline, ended_engine(), at="2026-01-01T00:00:00+00:00")
    latest = planned_pass(tmp_path)
    started_by(latest, ended_engine(), at="2026-01-02T00:00:00+00:00")
    latest.migration_files()
    st = status(run_ferry, RunDir(tmp_path / "m"))
    assert st["run_dir"].endswith("/m/final") and st["state"] == "stopped", st
    assert st["progress"]["copy"]["planned"] == 2, st
    # The pass holding the lock wins, whatever started last.
    proc = engine()
    try:
        baseline.locked(started_by(baseline, proc, at="2026-01-01T00:00:00+00:00"), time.time())
        st = status(run_ferry, RunDir(tmp_path / "m"))
        assert st["run_dir"].endswith("/m/baseline") and st["state"] == "complete", st
    finally:
        proc.kill()
        proc.wait()


def test_a_migration_folder_with_no_pass_started_says_so(tmp_path, run_ferry):
    RunDir(tmp_path / "m" / "baseline").migration_files()
    out = run_ferry("status", tmp_path / "m", check=False)
    assert out.returncode != 0 and "no pass started yet" in out.stderr, out.stderr


def next_status(proc: subprocess.Popen) -> dict:
    line = proc.stdout.readline()
    assert line, f"ferry status --watch ended: {proc.stderr.read()}"
    return json.loads(line)


def test_watch_waits_through_queued_jobs_until_the_report(tmp_path, ferry_bin):
    run = planned_pass(tmp_path)
    proc = engine()
    started_by(run, proc)
    watch = subprocess.Popen(
        [str(ferry_bin), "status", str(run.path), "--watch", "0.2", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # Three refreshes of a queued pass: --watch stays.
        for _ in range(3):
            assert next_status(watch)["state"] == "running"
        assert watch.poll() is None
        run.reported()
        while (st := next_status(watch))["state"] != "complete":
            assert st["state"] == "running", st
        assert watch.wait(timeout=60) == 0
    finally:
        watch.kill()
        watch.wait()
        proc.kill()
        proc.wait()
