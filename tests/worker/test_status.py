"""`ferry status` before the plan: the listing phase, counted in list jobs per side from what the
list jobs leave in the run directory (workflow/scripts/run_dir.json), and "planning" only once
every listing is there. The run directories are made by hand (support/rundir.py), as the steps
leave them."""

from __future__ import annotations

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
