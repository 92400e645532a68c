"""The driver: `campaign.py <scenario> [options]`."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import sys
import time
from pathlib import Path

from . import __doc__ as PACKAGE_DOC
from .common import SCENARIOS, TIME, Settings, log, purge_trash, rel, rmtree, snapshot_ferry
from .report import machine, update_docs, versions, write_results
from .scenarios.azurite import scenario_azurite
from .scenarios.discard import scenario_discard
from .scenarios.local import scenario_local
from .scenarios.nfs import scenario_nfs
from .scenarios.partition import scenario_partition
from .scenarios.pipeline import scenario_pipeline
from .scenarios.sweep import scenario_sweep
from .services import AzuriteHost, DelayedAzuriteHost, DiscardServer, LatencyHost, ctl_client
from .timing import run_group

TRASH_LIMIT = 500_000  # files a group may have set aside before they are deleted right after it

# scenario → (the service its commands talk to, started before and closed after; what makes its groups)
SCENARIO_BUILDERS = {
    "local": (None, scenario_local),
    "azurite": (AzuriteHost, scenario_azurite),
    "discard": (DiscardServer, scenario_discard),
    "partition": (None, scenario_partition),
    "nfs": (LatencyHost, scenario_nfs),
    "pipeline": (None, scenario_pipeline),
    "sweep": (DelayedAzuriteHost, scenario_sweep),
}
assert tuple(SCENARIO_BUILDERS) == SCENARIOS


def run_scenario(s: Settings, scenario: str, command: str, partial: str | None = None) -> dict:
    started = time.monotonic()
    ferry = snapshot_ferry(s)
    s.ferry_sha256 = ferry["sha256"]
    purge_trash(s)  # left by an interrupted campaign
    service, build = SCENARIO_BUILDERS[scenario]
    host = service(s) if service else None
    groups_out = []
    loads = [os.getloadavg()[0]]
    try:
        if host:
            host.serve()
        pending = list(build(s, host))
        while pending:
            g = pending.pop(0)
            groups_out.append(run_group(s, scenario, g))
            # A group that set aside many files (a million, say) must not leave them to the end:
            # they would fill the inodes, and deleting them would slow the next group's runs.
            if g.files * groups_out[-1]["rounds"] * len(g.rows) >= TRASH_LIMIT:
                purge_trash(s, settle=True)
            if g.followup and (nxt := g.followup(groups_out[-1])):
                pending.insert(0, nxt)
    finally:
        if host:
            host.close()
        purge_trash(s)
    loads.append(os.getloadavg()[0])
    for g in groups_out:
        if g["load1"]:
            loads += [g["load1"]["min"], g["load1"]["max"]]
    res = {
        "scenario": scenario,
        "quick": s.quick,
        "scale": s.scale,
        "runs": s.runs,
        "command": command,
        "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": machine(),
        "ferry": ferry,
        "versions": versions(scenario, s),
        "load1": {"min": round(min(loads), 2), "max": round(max(loads), 2)},
        "seconds": round(time.monotonic() - started, 1),
        "groups": groups_out,
    }
    # A partial campaign (--only) refreshes its groups and keeps the others from the last run,
    # whatever their scale: each group carries its own (its dataset line says it).
    prev_file = s.results / f"{scenario}.json"
    if s.only and prev_file.exists():
        prev = json.loads(prev_file.read_text())
        res["partial_command"] = partial
        for g in prev["groups"]:
            g.setdefault("ferry_sha256", prev["ferry"]["sha256"])
            g.setdefault("scale", prev.get("scale", "full"))
        fresh = {g["id"] for g in groups_out}
        order = [g["id"] for g in prev["groups"]] + [
            g["id"] for g in groups_out if g["id"] not in {p["id"] for p in prev["groups"]}
        ]
        merged = {g["id"]: g for g in prev["groups"] if g["id"] not in fresh} | {
            g["id"]: g for g in groups_out
        }
        res["groups"] = [merged[i] for i in order]
        res["scale"] = ", ".join(dict.fromkeys(g["scale"] for g in res["groups"]))
        res["load1"] = {
            "min": min(res["load1"]["min"], prev["load1"]["min"]),
            "max": max(res["load1"]["max"], prev["load1"]["max"]),
        }
    write_results(s, res)
    failed = [g["id"] for g in groups_out if not (g.get("verification") or {}).get("ok", True)]
    log(
        f"{scenario}: done in {res['seconds']:.0f} s; results in {rel(s.results)}/{scenario}.md"
        + (f"; VERIFICATION FAILED for {failed}" if failed else "")
    )
    return res


OUTSIDE_BUILDS = {"--mpifileutils": "DIR", "--azcp": "PATH"}


def hide_outside_builds(args: list[str]) -> list[str]:
    """Builds outside the repo are named by their role (`--azcp=PATH`), never by where they sit."""
    out = []
    for i, x in enumerate(args):
        opt = x.split("=", 1)[0]
        if opt in OUTSIDE_BUILDS:
            out.append(f"{opt}={OUTSIDE_BUILDS[opt]}")
        elif not (i and args[i - 1] in OUTSIDE_BUILDS):
            out.append(x)
    return out


def main(argv: list[str]) -> int:
    if argv[:1] == ["_ctl"]:  # hyperfine's --prepare talks to the running campaign through this
        return ctl_client(argv[1], argv[2:])
    ap = argparse.ArgumentParser(
        prog="benchmarks/campaign.py", description=PACKAGE_DOC.split("\n\n")[0]
    )
    ap.add_argument("scenario", choices=[*SCENARIOS, "all", "report", "clean"])
    ap.add_argument("--runs", type=int, help="measured runs per row (default 3; 1 with --quick)")
    ap.add_argument(
        "--quick",
        action="store_true",
        help="one run, smaller datasets; results go to the scratch dir",
    )
    ap.add_argument(
        "--fraction",
        type=float,
        default=1.0,
        help="nfs, pipeline: this fraction of the full-scale file counts (labelled in the results)",
    )
    ap.add_argument(
        "--rounds",
        type=int,
        help="fewer rounds than whole rotations (at least --runs is then not guaranteed; labelled)",
    )
    ap.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="GLOB",
        help="only groups whose id matches (repeatable), e.g. --only 'up-*'",
    )
    ap.add_argument(
        "--scratch",
        default="benchmarks/.data",
        help="datasets and workspaces (default: %(default)s)",
    )
    ap.add_argument(
        "--results",
        help="where results go (default benchmarks/results; <scratch>/results-quick with --quick)",
    )
    ap.add_argument(
        "--ferry", default="worker/target/release/ferry", help="worker binary to snapshot and time"
    )
    ap.add_argument(
        "--azcp",
        metavar="PATH",
        help="azure: also time azcp, this binary built for the measurement (never part of the repo)",
    )
    ap.add_argument(
        "--mpifileutils",
        metavar="DIR",
        help="nfs: also time dcp and dsync from this build directory (never part of the repo)",
    )
    ap.add_argument(
        "--keep",
        action="store_true",
        help="keep destinations and Azurite workspaces after verifying",
    )
    ap.add_argument(
        "--no-docs",
        action="store_true",
        help="don't refresh the results blocks in docs/benchmarks.md",
    )
    ap.add_argument(
        "--docs",
        action="store_true",
        help="refresh them even with --quick or --results (a small-scale campaign on purpose)",
    )
    a = ap.parse_args(argv)
    scratch = Path(a.scratch)
    results = (
        Path(a.results)
        if a.results
        else (scratch / "results-quick" if a.quick else Path("benchmarks/results"))
    )
    s = Settings(
        scratch=scratch,
        results=results,
        runs=a.runs or (1 if a.quick else 3),
        quick=a.quick,
        only=a.only,
        keep=a.keep,
        update_docs=not a.no_docs and (a.docs or (not a.quick and not a.results)),
        ferry_source=Path(a.ferry),
        mpifileutils=Path(a.mpifileutils) if a.mpifileutils else None,
        azcp=Path(a.azcp) if a.azcp else None,
        fraction=a.fraction,
        rounds=a.rounds,
    )
    if not 0 < s.fraction <= 1:
        ap.error("--fraction is in (0, 1]")
    if a.scenario == "clean":
        # Only what the campaigns make: other benchmarks (plan.py, replicate.py) share the dir.
        for name in (
            "data",
            "data-quick",
            "work",
            "azurite",
            "azurite-quick",
            "bin",
            "runs",
            "trash",
            "results-quick",
            "rclone.conf",
            "azurite-ctl.sock",
            "latencyfs-ctl.sock",
        ):
            p = scratch / name
            if p.exists():
                log(f"removing {rel(p)}")
                rmtree(p) if p.is_dir() else p.unlink()
        return 0
    if a.scenario == "report":
        for sc in SCENARIOS:
            f = results / f"{sc}.json"
            if f.exists():
                write_results(s, json.loads(f.read_text()))
        if s.update_docs:
            update_docs(results)
        return 0
    missing = [t for t in ("hyperfine", TIME) if not shutil.which(t)]
    if missing:
        sys.exit(f"campaign: missing {missing}: run `make setup` (scripts/apt-packages.txt)")
    scratch.mkdir(parents=True, exist_ok=True)
    todo = SCENARIOS if a.scenario == "all" else (a.scenario,)
    failed = False
    for sc in todo:
        # The command that redoes the whole scenario; a partial run (--only) is recorded apart.
        # A build outside the repo is named by its role, not by where it sits on this machine.
        shown = hide_outside_builds(argv[1:])
        opts, skip = [], False
        for arg in shown:
            if skip or arg.startswith("--only"):
                skip = arg == "--only"
                continue
            opts.append(arg)
        cmd = " ".join([".venv/bin/python benchmarks/campaign.py", sc, *opts])
        partial = (
            " ".join([".venv/bin/python benchmarks/campaign.py", sc, *shown]) if a.only else None
        )
        res = run_scenario(s, sc, cmd, partial)
        failed |= any(not (g.get("verification") or {}).get("ok", True) for g in res["groups"])
        if s.update_docs:
            update_docs(results)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
