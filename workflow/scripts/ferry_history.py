"""A migration's history (one JSON line per phase run, either engine) and the projection of its
final pass from it (docs/pipeline.md, "History" and "Projection").

    ferry_history.py project RUN_ROOT [--max-delete L] [--json]   # "a final pass started now would take ≈ …"
    ferry_history.py show RUN_ROOT [--json]      # the history table
    ferry_history.py start RUN_DIR --engine E [--pid N] -- REPORT_ARGS...   # the engines' start hook

RUN_ROOT is `<outdir>/<run_name>`, above the phase directories; its `history.jsonl` holds the
records, oldest first. The two functions other code calls return plain dicts and lists:

load(run_root) -> list[record], ordered by `started`; runs that started and never recorded
their end (killed: the engine got SIGKILL, no report ran) appear as `stopped` records built from
what they left, or `running` while their engine is alive on this host (from another host: until
a later run starts). A record:

    {"version": 1, "run_id": str, "run_name": str, "phase": "baseline"|"incremental"|"final",
     "pass": int, "run_dir": str (the phase directory's name under the run root),
     "status": "complete"|"incomplete"|"failed"|"stopped"|"running",   # ferry status's words
     "engine": "snakemake"|"nextflow"|"unknown",
     "started": ISO str|None, "ended": ISO str|None, "wall_seconds": float|None,
     "source": {"files": int|None, "bytes": int|None},
     "dest": {"files": int|None, "bytes": int|None},           # the destination's listing
     "planned": {"files", "bytes", "new", "changed", "metadata_only", "type_changed",
                 "undecided", "deleted", "deleted_bytes",      # ints (0 when unknown); deleted:
                 "prune_dirs", "dest_dirs",     # what only the destination holds (would delete)
                 "newer": {"count", "examples"}},  # of it, newer than all the source holds
     "deleted": {"files", "dirs"},          # what the pass's prune deleted (0 but a final's)
     "prune_refused": str|None,
     "carried": bool,                       # it left the destination's state for the next pass
     "dest_listed": "carried"|"fresh"|None, "dest_listed_why": str|None,   # how it knew it
     "copied": {"files": int, "bytes": int},
     "verified": {"files", "same", "differ", "missing_on_dst", "missing_on_src", "error"},
     "checksum": bool,                                          # verify compared MD5s
     "failed": int, "retries": int,
     "requests": {"total": {kind: int}, "by_step": {step: {kind: int}}},
         # kinds: list_pages, puts, blocks, block_lists, gets, heads, deletes, batches, copies, others
     "steps": {step: {"seconds": float, "span": float}},       # list_source, list_dest, plan,
         # copy, verify, prune, final_check: summed job seconds, and wall span first start→last end
     "partitions": int, "depth": {"mode": str|None, "final": int|None, "peak": int|None}}

project(records, now=None, phase="final", checksum=None, settings=None) -> dict: the pass
`phase` started at `now` (epoch seconds; default the current time), from the complete records'
measured rates and delta trend (checksum: that pass verifies by MD5; default as the last final
pass did; settings: the config's prune.max_delete/force, dest_listing and state, Settings):

    {"phase": str, "at": ISO str, "records": int, "passes": int (the complete ones used),
     "ok": bool, "why_not": str|None, "line": str,        # ok False (no complete pass): no more keys
     "checksum": bool,
     "seconds": float,
     "steps": {"listing", "plan", "copy", "verify", "prune", "final_check", "overhead": float},
     "delta": {"files": int, "bytes": int, "deleted": int},          # expected to copy / delete
     "per_hour": {"files_per_hour", "bytes_per_hour", "deleted_per_hour": float},
     "requests": int, "requests_by_kind": {kind: int},
     "rates": {"list_source_files_per_s", "list_dest_files_per_s", "plan_entries_per_s",
               "copy_files_per_s", "copy_bytes_per_s", "verify_files_per_s",
               "verify_md5_bytes_per_s", "prune_entries_per_s", "final_check_entries_per_s":
               float|None (None: never measured), "overhead_seconds": float},
     "trend": [{"run_id", "pass", "phase", "started", "hours_since_previous", "files", "bytes",
                "deleted", "files_per_hour", "bytes_per_hour", "deleted_per_hour"}],
     "converging": "converging"|"steady"|"diverging"|"unknown", "why": str,
     "assumptions": [str],
     "backtest": [{"run_id", "pass", "phase", "from_passes", "projected_seconds", "actual_seconds",
                   "error_seconds", "error_pct", "projected_requests", "actual_requests"}],
     "final_pass": {"goes_through": bool, "refused": str|None, "said": str, "problems": [str],
                    "deletions": {"entries", "of", "files": int, "limit": str},
                    "needed_max_delete": str|None, "force": bool,
                    "dest_listing": {"carried": bool, "why": str}, "source_loss": dict|None}}

`line` (line(p)) is the one-line summary the engines print at the end ("a final pass started
now would take ≈ 14 min (listing 6 min + …), with ≈ 12,400 Blob requests; passes converging;
the final pass would go through (…)"); history_markdown(records) and
projection_markdown(projection) are report.md's sections, as lists of lines.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import math
import os
import socket
import sys
import time

import ferry_lock
import ferry_model
import ferry_preflight
import ferry_run
from ferry_docs import REQUEST_KINDS as KINDS
from ferry_lock import alive, process_start
from ferry_run_dir import DELETIONS, HISTORY, RUN_STARTED, record_migration
from ferrylib import fmt_bytes, iso, load_json, write_json

VERSION = 1
STEPS = ("list_source", "list_dest", "plan", "copy", "verify", "prune", "final_check")
# A step of the history taken by more than one of the pipeline's: prune's parts, then its
# directories' job, which starts when the last part ends (so their spans add up).
JOBS_OF = {"prune": ("prune", "prune_dirs")}
# How many of the latest passes the rates and the delta trend are taken over: recent enough to
# follow a change of load, several so one odd pass does not decide.
RECENT = 3


# --- time ----------------------------------------------------------------------------------------


def epoch(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return dt.datetime.fromisoformat(text).timestamp()
    except (TypeError, ValueError):
        return None


# --- the start marker --------------------------------------------------------------------------


def run_root(run_dir: str) -> str:
    """<outdir>/<run_name>: the phase directories' parent, where the history lives."""
    return os.path.dirname(os.path.abspath(run_dir))


def gone(marker: dict, starts: list[float]) -> bool:
    """Has the marker's run ended (without a record)? On its own host, when its engine process
    is gone; from another host, once a later run of the migration started (passes follow one
    another), since its process cannot be seen from here."""
    if marker.get("host") == socket.gethostname() and isinstance(marker.get("pid"), int):
        return not alive(marker)
    began = epoch(marker.get("started")) or 0.0
    return any(s > began for s in starts)


def starts(root: str) -> list[float]:
    """When each run of the migration began, recorded or not."""
    found = [epoch(r.get("started")) for r in read(root)] + [
        epoch(m.get("started")) for _, m in markers(root)
    ]
    return [s for s in found if s is not None]


def start(
    run_dir: str,
    engine: str,
    report_args: list[str],
    pid: int | None = None,
    now: float | None = None,
    migration: dict | None = None,
    hold: bool = False,
    lease: dict | None = None,
    check: dict | None = None,
) -> dict:
    """The engines' start hook (Snakemake's onstart, Nextflow's workflow start): first record as
    killed whatever earlier run of the migration left a marker and no record, then leave this
    run's marker. The engine writes it, not a step: only the engine knows that one run began
    (a re-run redoes some steps only, and Nextflow's steps run away from the run directory)."""
    now = time.time() if now is None else now
    pid = os.getpid() if pid is None else pid
    root = run_root(run_dir)
    marker = {
        "run_id": f"{dt.datetime.fromtimestamp(now, dt.UTC):%Y%m%dT%H%M%SZ}-{socket.gethostname()}-{pid}",
        "engine": engine,
        "host": socket.gethostname(),
        "pid": pid,
        "pid_start": process_start(pid),
        "started": iso(now),
        "report_args": report_args,
    }
    if check is not None:
        # Before the lock: a pass refused by its pre-flight leaves nothing behind.
        ferry_preflight.check(check)
    lock_for(root, run_dir, marker, now, hold, lease)
    if migration is not None:
        record_migration(root, migration)
    settle(root, starting=now)
    os.makedirs(run_dir, exist_ok=True)
    # There from the start, even empty: Nextflow stages it into the report's task.
    open(os.path.join(root, HISTORY), "a", encoding="utf-8").close()
    write_json(os.path.join(run_dir, RUN_STARTED), marker)
    return marker


def lock_for(
    root: str, run_dir: str, marker: dict, now: float, hold: bool, lease: dict | None = None
) -> None:
    """One pass at a time (ferry_lock.py): a pass whose lock another holds ends here, before
    any job, with exit status 3 and the holder named; `hold` leaves a holder process keeping
    the lock while the engine runs (the engines' hooks ask for it)."""
    holder = {k: marker[k] for k in ("run_id", "host", "pid", "pid_start")}
    holder["pass"] = os.path.basename(os.path.abspath(run_dir))
    try:
        broke = ferry_lock.take(root, holder, now, lease)
    except ferry_lock.Held as held:
        print(f"ferry: {held}", file=sys.stderr)
        raise SystemExit(3) from None
    if broke:
        print(broke, file=sys.stderr)
    if hold:
        ferry_lock.spawn_holder(root, marker["run_id"], marker["pid"], lease)


def markers(root: str) -> list[tuple[str, dict]]:
    """(phase directory, marker) of every run directory under the run root that has one."""
    found = []
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return []
    for name in names:
        if not os.path.isdir(os.path.join(root, name)):
            continue
        marker = load_json(os.path.join(root, name, RUN_STARTED))
        if isinstance(marker, dict) and marker.get("run_id"):
            found.append((os.path.join(root, name), marker))
    return found


# --- the records ---------------------------------------------------------------------------------


def read(root: str) -> list[dict]:
    """The records as appended, the first of each run_id (a record is never rewritten)."""
    out, seen = [], set()
    try:
        with open(os.path.join(root, HISTORY), encoding="utf-8") as handle:
            lines = handle.readlines()
    except OSError:
        return []
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # a line cut short by a full disk or a kill: the others still count
        if isinstance(rec, dict) and rec.get("run_id") not in seen:
            seen.add(rec.get("run_id"))
            if rec.get("status") == "killed":
                # Histories written before the job states were one vocabulary said "killed".
                rec["status"] = "stopped"
            out.append(rec)
    return out


def ends_with_newline(path: str) -> bool:
    try:
        with open(path, "rb") as handle:
            handle.seek(-1, os.SEEK_END)
            return handle.read(1) == b"\n"
    except OSError:  # missing or empty
        return True


def append(root: str, record: dict) -> bool:
    """One line, in one write (O_APPEND: lines of concurrent writers do not interleave); a run
    already recorded is not recorded twice. False when it was."""
    if any(r.get("run_id") == record["run_id"] for r in read(root)):
        return False
    os.makedirs(root, exist_ok=True)
    path = os.path.join(root, HISTORY)
    line = (json.dumps(record, ensure_ascii=False) + "\n").encode()
    if not ends_with_newline(path):
        line = b"\n" + line  # a line cut short stays alone, and this one whole
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
    return True


def status_of(report: dict, ended_in_error: bool) -> str:
    if report.get("status") == "complete" and not ended_in_error:
        return "complete"
    return "failed" if report.get("failures") or ended_in_error else "incomplete"


def _int(value) -> int:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def record(
    report: dict, marker: dict | None, run_dir_name: str, status: str, ended: float, pass_: int = 1
) -> dict:
    """A run's record from its report (ferry_model.build: every key present) and its start
    marker. Without a plan (a run that never got that far), its plan's counts are nothing."""
    marker = marker or {}
    plan = report["plan"]
    totals, per_step = report["totals"], report["time"]["per_step"]
    started = epoch(marker.get("started")) or epoch(report["time"]["first_job_started_at"])
    verify, requests = totals["verify"], totals["requests"]
    planned = ("files", "bytes", "new", "changed", "metadata_only", "type_changed", "undecided")
    to_copy = plan["to_copy"] if plan else dict.fromkeys(planned, 0)
    extra = plan["extra_on_dest"] if plan else {"files": 0, "bytes": 0}
    prune = totals["prune"]
    return {
        "version": VERSION,
        "run_id": marker.get("run_id") or f"{iso(started or ended)}-{run_dir_name}-unmarked",
        "run_name": report["run_name"],
        "phase": report["phase"],
        "pass": pass_,
        "run_dir": run_dir_name,
        "status": status,
        "engine": marker.get("engine", "unknown"),
        "started": iso(started),
        "ended": iso(ended),
        "wall_seconds": round(ended - started, 3) if started else None,
        "source": {k: plan["source"][k] if plan else None for k in ("files", "bytes")},
        "dest": {k: plan["dest"][k] if plan and plan["dest"] else None for k in ("files", "bytes")},
        "planned": {
            **{k: to_copy[k] for k in planned},
            # What only the destination holds: what a final pass's prune deletes (and, with
            # `dest_dirs`, what prune.max_delete judges it by), not what this pass deleted.
            "deleted": extra["files"],
            "deleted_bytes": extra["bytes"],
            "prune_dirs": _int((plan or {}).get("prune_dirs")),
            "dest_dirs": _int((plan or {}).get("dest_dirs")),
            # Of them, those newer than everything at the source (the final's prune refuses).
            "newer": (plan or {}).get("newer_deletions") or {"count": 0, "examples": []},
        },
        # What this pass's prune deleted: nothing unless it is a final pass whose prune ran (a
        # dry run or a refused prune deletes nothing).
        "deleted": {
            "files": _int(prune["deleted"]) if prune else 0,
            "dirs": _int(prune.get("dirs_deleted")) if prune else 0,
        },
        "prune_refused": prune["refused"] if prune else None,
        "copied": {"files": totals["files"]["copied"], "bytes": totals["bytes"]["copied"]},
        "verified": {"files": sum(verify.values()), **verify},
        "checksum": report["checksum_verified"],
        # What the report lists as failed: files, verify differences, jobs without a result.
        "failed": len(report["failures"]),
        "retries": totals["retries"]["total"],
        "requests": {"total": requests["total"], "by_step": requests["by_step"]},
        "steps": {
            s: {
                key: round(sum(per_step[j][field] for j in jobs), 3)
                for key, field in (("seconds", "seconds"), ("span", "span_seconds"))
            }
            for s in STEPS
            if (jobs := [j for j in JOBS_OF.get(s, (s,)) if j in per_step])
        },
        "partitions": len(report["partitions"]),
        "depth": totals["depth"],
        # Whether the next pass carries the destination's state (this pass's, or the one it
        # found and did not write past), and then lists only the source (docs/scale.md).
        "carried": totals["dest_listing"]["next"] == "carried",
        # How it knew the destination: "carried", "fresh" (and why), None (it never decided).
        **dest_known(report),
    }


def dest_known(report: dict) -> dict:
    listed = report["totals"]["dest_listing"]["listed"]
    if not listed:
        return {"dest_listed": None, "dest_listed_why": None}
    if listed.get("used"):
        return {
            "dest_listed": "carried",
            "dest_listed_why": f"as {listed.get('written_by')} left it",
        }
    return {"dest_listed": "fresh", "dest_listed_why": listed.get("reason")}


def last_activity(run_dir: str) -> float | None:
    """When a run that left no record last wrote anything in its run directory."""
    latest = None
    for dirpath, _dirs, files in os.walk(run_dir):
        for name in files:
            if dirpath == run_dir and name == RUN_STARTED:
                continue  # written at the start, not by the work
            try:
                latest = max(latest or 0.0, os.path.getmtime(os.path.join(dirpath, name)))
            except OSError:
                continue
    return latest


def unrecorded(marker_dir: str, marker: dict, status: str) -> dict:
    """The record of a run that never reported (killed), from what it left in its directory."""
    opts = ferry_run.options(marker_dir, marker["report_args"])
    report = ferry_model.build(ferry_run.read(marker_dir), opts, complete=False)
    ended = last_activity(marker_dir) or epoch(marker.get("started")) or time.time()
    return record(report, marker, os.path.basename(marker_dir), status, ended, opts.pass_)


def settle(root: str, starting: float | None = None, skip: str | None = None) -> list[dict]:
    """Record as killed each run that left a marker and no record and is gone (gone()).
    starting: a run begins now (the start hook), later than any. skip: the run_id being recorded
    now. Returns the records added."""
    recorded = {r.get("run_id") for r in read(root)}
    began = starts(root) + ([starting] if starting is not None else [])
    added = []
    for marker_dir, marker in markers(root):
        if marker["run_id"] in recorded or marker["run_id"] == skip or not gone(marker, began):
            continue
        try:
            rec = unrecorded(marker_dir, marker, "stopped")
        except Exception as err:  # noqa: BLE001 - a broken leftover must not stop the new run
            print(f"ferry: could not record the run in {marker_dir}: {err}", file=sys.stderr)
            continue
        if append(root, rec):
            added.append(rec)
    return added


def record_run(
    run_dir: str,
    report: dict,
    ended_in_error: bool = False,
    pass_: int = 1,
    now: float | None = None,
) -> dict:
    """The report step's part: settle the runs killed before this one, append this run's record
    (its marker names it), and return it. run_dir is the run directory on disk, where the marker is."""
    root = run_root(run_dir)
    marker = load_json(os.path.join(run_dir, RUN_STARTED))
    if ended_in_error and marker is None:
        # Snakemake's onerror also fires when no phase run began (a failure while building the
        # graph, another target): nothing of the phase ran, there is nothing to record.
        return {}
    now = time.time() if now is None else now
    rec = record(
        report,
        marker,
        os.path.basename(os.path.abspath(run_dir)),
        status_of(report, ended_in_error),
        now,
        pass_,
    )
    settle(root, skip=rec["run_id"])
    append(root, rec)
    return rec


def load(run_root: str) -> list[dict]:
    """Every run of the migration, oldest first: the records, and a `stopped` or `running` one
    made (not written) for each run that left a marker and no record."""
    records = read(run_root)
    recorded = {r.get("run_id") for r in records}
    began = starts(run_root)
    for marker_dir, marker in markers(run_root):
        if marker["run_id"] in recorded:
            continue
        try:
            records.append(
                unrecorded(marker_dir, marker, "stopped" if gone(marker, began) else "running")
            )
        except Exception:  # noqa: BLE001 - what cannot be read is left out, not fatal to a reader
            continue
    return sorted(records, key=lambda r: epoch(r.get("started")) or 0.0)


# --- the projection ------------------------------------------------------------------------------


def span(rec: dict, step: str) -> float:
    return float((rec.get("steps") or {}).get(step, {}).get("span") or 0.0)


def files_of(rec: dict, side: str) -> int:
    return _int((rec.get(side) or {}).get("files"))


def pooled(passes: list[dict], units, seconds) -> float | None:
    """Units per second over the passes that did some of it: total units / total seconds, so a
    big pass weighs more than a small one. None: never measured."""
    return fitted(passes, units, seconds)[1]


def fitted(passes: list[dict], units, seconds) -> tuple[float, float | None]:
    """A step's time as `fixed + units / rate`, fitted by least squares over the passes that did
    some of it: the fixed part is what its jobs cost whatever their work (scheduled, started,
    gathered), which a pass with a small delta pays in full. From passes of one size (or a fit
    the noise turns upside down) all of it is rate: total units / total seconds. (0, None): never
    measured."""
    pairs = [(units(r), seconds(r)) for r in passes]
    pairs = [(u, s) for u, s in pairs if u > 0 and s > 0]
    if not pairs:
        return 0.0, None
    proportional = (0.0, sum(u for u, _ in pairs) / sum(s for _, s in pairs))
    mean_u = sum(u for u, _ in pairs) / len(pairs)
    mean_s = sum(s for _, s in pairs) / len(pairs)
    spread = sum((u - mean_u) ** 2 for u, _ in pairs)
    if spread <= 0:
        return proportional
    slope = sum((u - mean_u) * (s - mean_s) for u, s in pairs) / spread
    fixed = mean_s - slope * mean_u
    if slope <= 0 or fixed < 0:
        return proportional
    return fixed, 1 / slope


def overhead(rec: dict) -> float:
    """What a pass's wall time holds beyond its steps' spans: engine start-up, scheduling between
    steps, the report; less where steps ran side by side (one part's verify with another's
    copy), so it can be below zero. Measured per pass so the projection of a pass like the last
    one is its wall time, not just its steps'."""
    steps = max(span(rec, "list_source"), span(rec, "list_dest")) + sum(
        span(rec, s) for s in ("plan", "copy", "verify", "prune", "final_check")
    )
    return float(rec.get("wall_seconds") or 0.0) - steps


# The jobs a pass runs one after another beyond its steps' (the carry step, the report): each
# one more the engine schedules, starts and waits for. Prune is two (its parts, then the
# directories').
FIXED_HOPS = 2
HOPS = {"listing": 1, "plan": 1, "copy": 1, "verify": 1, "prune": 2, "final_check": 1}


def hops(rec: dict) -> int:
    """How many jobs the pass ran one after another (a step's jobs side by side count once)."""
    done = set(rec.get("steps") or {})
    steps = {"listing" if s in ("list_source", "list_dest") else s for s in done}
    return FIXED_HOPS + sum(HOPS.get(s, 1) for s in steps)


def delta_of(rec: dict) -> tuple[int, int]:
    planned = rec.get("planned") or {}
    return _int(planned.get("files")), _int(planned.get("bytes"))


def trend(passes: list[dict]) -> list[dict]:
    """The delta each pass found, per hour since the pass before it started (what changed at the
    source in that time, as far as a pass can see it). A baseline's delta is the whole tree."""
    out = []
    for prev, rec in zip(passes, passes[1:]):
        hours = ((epoch(rec.get("started")) or 0) - (epoch(prev.get("started")) or 0)) / 3600
        if rec.get("phase") == "baseline" or hours <= 0:
            continue
        files, byts = delta_of(rec)
        # Incremental passes never delete: extra_on_dest grows from pass to pass, and only what
        # is new since the previous pass is this interval's share.
        before = (
            0 if prev.get("phase") == "final" else _int((prev.get("planned") or {}).get("deleted"))
        )
        deleted = max(0, _int((rec.get("planned") or {}).get("deleted")) - before)
        out.append(
            {
                "run_id": rec.get("run_id"),
                "pass": rec.get("pass"),
                "phase": rec.get("phase"),
                "started": rec.get("started"),
                "hours_since_previous": round(hours, 4),
                "files": files,
                "bytes": byts,
                "deleted": deleted,
                "files_per_hour": files / hours,
                "bytes_per_hour": byts / hours,
                "deleted_per_hour": deleted / hours,
            }
        )
    return out


def verified_most(rec: dict) -> bool:
    return _int((rec.get("verified") or {}).get("files")) * 2 >= files_of(rec, "source") > 0


# The steps priced by their work, and the work each measured pass did in it.
WORK = {
    "list_source": lambda r: files_of(r, "source"),
    "list_dest": lambda r: files_of(r, "dest"),
    "plan": lambda r: files_of(r, "source") + files_of(r, "dest"),
    "copy_files": lambda r: _int((r.get("copied") or {}).get("files")),
    "copy_bytes": lambda r: _int((r.get("copied") or {}).get("bytes")),
    "verify_files": lambda r: _int((r.get("verified") or {}).get("files")),
    "verify_md5_bytes": lambda r: _int((r.get("copied") or {}).get("bytes")),
    "prune": lambda r: _int((r.get("planned") or {}).get("deleted")),
    "final_check": lambda r: files_of(r, "source") + files_of(r, "dest"),
}
# Where rates() reports each fit's rate, as the report has always named them.
RATE_NAMES = {
    "list_source": "list_source_files_per_s",
    "list_dest": "list_dest_files_per_s",
    "plan": "plan_entries_per_s",
    "copy_files": "copy_files_per_s",
    "copy_bytes": "copy_bytes_per_s",
    "verify_files": "verify_files_per_s",
    "verify_md5_bytes": "verify_md5_bytes_per_s",
    "prune": "prune_entries_per_s",
    "final_check": "final_check_entries_per_s",
}


def rates(passes: list[dict]) -> dict:
    """The measured rates, over the latest passes that ran each step (None: never measured), and
    each step's fixed seconds (`fixed_seconds`, fitted()): the step then takes fixed + work/rate."""
    recent = passes[-RECENT:]
    # The steps whose work differs most between passes are fitted over them all: the baseline's
    # large copy fixes the rate, the incremental passes' small ones the fixed part.
    with_copies = [r for r in passes if (r.get("copied") or {}).get("files")]
    # A verify by MD5 reads what the pass copied; by size, it looks the files up.
    size_verifies = [r for r in passes if not r.get("checksum")]
    md5_verifies = [r for r in passes if r.get("checksum")]
    over = {
        "list_source": (recent, "list_source"),
        "list_dest": (recent, "list_dest"),
        "plan": (recent, "plan"),
        "copy_files": (with_copies, "copy"),
        "copy_bytes": (with_copies, "copy"),
        "verify_files": (size_verifies, "verify"),
        "verify_md5_bytes": (md5_verifies, "verify"),
        "prune": (passes, "prune"),
        "final_check": (recent, "final_check"),
    }
    out, fixed, points = {}, {}, {}
    for name, (among, step) in over.items():
        fixed[name], out[RATE_NAMES[name]] = fitted(
            among, WORK[name], lambda r, step=step: span(r, step)
        )
        points[name] = [
            [u, s] for r in among if (u := WORK[name](r)) > 0 and (s := span(r, step)) > 0
        ]
    out["fixed_seconds"] = {k: round(v, 3) for k, v in fixed.items()}
    out["points"] = points
    # Per job the engine ran in turn: from the passes most like the one projected (an
    # incremental or a final, not the baseline, whose copy outlasts its other jobs' gaps).
    like = [r for r in passes if r.get("phase") != "baseline"][-RECENT:] or recent
    out["overhead_per_hop"] = sum(overhead(r) / hops(r) for r in like) / len(like)
    out["overhead_seconds"] = sum(overhead(r) for r in like) / len(like)
    return out


def requests_per_unit(passes: list[dict], step: str, units) -> dict[str, float]:
    """A step's Blob requests of each kind per unit of its work (entry listed, file copied, ...)."""
    recent = [
        r
        for r in passes
        if step in ((r.get("requests") or {}).get("by_step") or {}) and units(r) > 0
    ][-RECENT:]
    total_units = sum(units(r) for r in recent)
    if not total_units:
        return {}
    return {
        k: sum(_int(r["requests"]["by_step"][step].get(k)) for r in recent) / total_units
        for k in KINDS
    }


def seconds_for(units: float, rate: float | None) -> float:
    return units / rate if units and rate else 0.0


def priced(r: dict, name: str, units: float) -> float:
    """What `units` of step `name`'s work take: the measured passes nearest in size to it, moved
    by the step's marginal rate (rates()) for the difference. A small pass pays its jobs' fixed
    costs (start-up, scheduling, gathering) as the small passes measured them, whatever a fit
    through a baseline ten thousand times larger says of them."""
    rate = r[RATE_NAMES[name]]
    if not units or not rate:
        return 0.0
    near = nearest(r["points"].get(name) or [], units)
    if not near:
        return r["fixed_seconds"][name] + units / rate
    fixed = sum(s - u / rate for u, s in near) / len(near)
    return max(0.0, fixed) + units / rate


def nearest(points: list[list[float]], units: float) -> list[list[float]]:
    """The measured (units, seconds) nearest `units` in ratio, and those within half again of it."""
    if not points:
        return []

    def far(p) -> float:
        return abs(math.log(p[0] / units))

    best = min(far(p) for p in points)
    return [p for p in points if far(p) <= best + math.log(1.5)]


def estimate(
    passes: list[dict],
    at: float,
    phase: str,
    checksum: bool,
    work: dict | None = None,
    known: dict | None = None,
) -> dict:
    """The pass `phase` started at `at`, from the complete passes before it (oldest first).
    `work`: the delta it will find ({"files", "bytes", "deleted"}) when known, instead of the
    one the trend forecasts. `known`: how it will know the destination (next_listing());
    default: carried where the last pass left a state."""
    assumptions = []
    last = passes[-1]
    r = rates(passes)
    moves = trend(passes)
    recent_moves = moves[-RECENT:]
    hours = max(0.0, (at - (epoch(last.get("started")) or at)) / 3600)
    if recent_moves:
        per_hour = {
            k: sum(m[k] for m in recent_moves) / len(recent_moves)
            for k in ("files_per_hour", "bytes_per_hour", "deleted_per_hour")
        }
        assumptions.append(
            f"the source changes at the rate the last {len(recent_moves)} passes found: "
            f"{per_hour['files_per_hour']:,.0f} files and {fmt_bytes(per_hour['bytes_per_hour'])} per hour"
        )
    else:
        per_hour = {"files_per_hour": 0.0, "bytes_per_hour": 0.0, "deleted_per_hour": 0.0}
        assumptions.append(
            "no incremental pass yet: the rate of change is unknown and taken as none"
        )
    delta_files = per_hour["files_per_hour"] * hours
    delta_bytes = per_hour["bytes_per_hour"] * hours
    pending_deletes = (
        0 if last.get("phase") == "final" else _int((last.get("planned") or {}).get("deleted"))
    )
    deletes = pending_deletes + per_hour["deleted_per_hour"] * hours
    if work is not None:
        delta_files, delta_bytes, deletes = work["files"], work["bytes"], work["deleted"]
    source = files_of(last, "source")
    dest = files_of(last, "dest") or source  # after the baseline the destination holds the source
    assumptions.append(
        f"the trees are as large as the last pass listed them ({source:,} files at the source)"
    )

    # A pass that carries the destination's state lists only the source.
    if known is None:
        known = {"carried": bool(last.get("carried")), "why": f"left by {last.get('run_dir')}"}
    carried = known["carried"] and phase != "audit"
    full_listing = max(
        priced(r, "list_source", source),
        priced(r, "list_dest" if r["list_dest_files_per_s"] else "list_source", dest),
    )
    listing = priced(r, "list_source", source) if carried else full_listing
    if carried:
        assumptions.append(f"the destination is not listed: its state is carried ({known['why']})")
    elif phase != "audit":
        assumptions.append(f"the destination is listed fresh: {known['why']}")
    if not r["list_dest_files_per_s"]:
        assumptions.append(
            "the destination lists as fast as the source (no destination listing measured)"
        )
    plan = priced(r, "plan", source + dest)
    copy = max(priced(r, "copy_files", delta_files), priced(r, "copy_bytes", delta_bytes))
    if (delta_files or delta_bytes) and not r["copy_files_per_s"]:
        assumptions.append("no copy measured yet: the copy's time is unknown")
    final = phase == "final"
    # Every pass verifies what it copied; the whole tree is the audit's (projected apart).
    verified = delta_files
    verify = priced(r, "verify_files", verified)
    if verified and not r["verify_files_per_s"]:
        # A verify by size reads what a listing of both sides reads.
        verify = listing
        assumptions.append(
            "verifying takes as long as listing both sides (no verify of most of the tree measured)"
        )
    if final and checksum:
        verify = max(
            verify,
            priced(r, "verify_md5_bytes", delta_bytes)
            if r["verify_md5_bytes_per_s"]
            else seconds_for(delta_bytes, r["copy_bytes_per_s"]),
        )
        if not r["verify_md5_bytes_per_s"]:
            assumptions.append(
                "verifying by MD5 reads every byte at the copy's measured bytes/s (no MD5 verify measured)"
            )
    if final:
        assumptions.append(
            f"the final pass verifies what it copies ({'by MD5' if checksum else 'by size'}); "
            "the whole tree is checked by the audit, after the downtime"
        )
    prune = 0.0
    if final and r["prune_entries_per_s"]:
        prune = priced(r, "prune", deletes)
    elif final and deletes:
        # Never measured (before the first final pass): its jobs, one per part, a request per
        # entry, are priced as the verify's of as many files — a deletion is no cheaper a
        # request than a lookup, and the jobs start as the verify's do.
        prune = (
            priced(r, "verify_files", deletes)
            if r["verify_files_per_s"]
            else seconds_for(deletes, r["copy_files_per_s"])
        )
        assumptions.append(
            "deleting a file takes as long as verifying one, in as many jobs (no prune measured)"
        )
    # The in-window whole-tree check only where the last final pass ran one (final_check: true).
    final_check = priced(r, "final_check", source + dest) if final else 0.0
    steps = {
        "listing": listing,
        "plan": plan,
        "copy": copy,
        "verify": verify,
        "prune": prune,
        "final_check": final_check,
    }
    # The engine's own time per job it runs in turn, as the passes most like this one paid it:
    # a final pass runs prune's two more.
    ran = [k for k, v in steps.items() if v or k in ("listing", "plan") or (k == "prune" and final)]
    extra = r["overhead_per_hop"] * (FIXED_HOPS + sum(HOPS[k] for k in ran))
    steps["overhead"] = max(0.0, extra)
    assumptions.append(
        "each step takes the time the measured passes nearest it in size took, moved by its "
        "rate for the difference; the engine's time between and around the steps (start-up, "
        "scheduling, the report) is what the passes most like this one paid per job, for each "
        "job this pass runs in turn"
    )

    units = {
        "list_source": source,
        "list_dest": 0 if carried else dest,
        "copy": delta_files,
        "verify": verified,
        "prune": deletes if final else 0,
        "final_check": (source + dest) if final and r["final_check_entries_per_s"] else 0,
    }
    measured_units = {
        "list_source": lambda x: files_of(x, "source"),
        "list_dest": lambda x: files_of(x, "dest"),
        "copy": lambda x: _int((x.get("copied") or {}).get("files")),
        "verify": lambda x: _int((x.get("verified") or {}).get("files")),
        "prune": lambda x: _int((x.get("planned") or {}).get("deleted")),
        "final_check": lambda x: files_of(x, "source") + files_of(x, "dest"),
    }
    by_kind = dict.fromkeys(KINDS, 0.0)
    for step, n in units.items():
        for kind, per in requests_per_unit(passes, step, measured_units[step]).items():
            by_kind[kind] += per * n
    audit = {
        "listing": full_listing,
        "plan": priced(r, "plan", source + dest),
        "verify": max(
            priced(r, "verify_files", source) if r["verify_files_per_s"] else full_listing,
            priced(r, "verify_md5_bytes", _int((last.get("source") or {}).get("bytes")))
            if checksum
            else 0.0,
        ),
    }
    return {
        # Below zero, the engine's time is steps run side by side (one part's verify with
        # another's copy): the pass is shorter than its steps one after another.
        "seconds": round(max(max(steps.values()), sum(steps.values()) + min(0.0, extra)), 3),
        "steps": {k: round(v, 3) for k, v in steps.items()},
        # The whole-tree check after the cut-over: both sides listed afresh, every file verified.
        "audit": {
            "seconds": round(sum(audit.values()) + r["overhead_seconds"], 3),
            "steps": {k: round(v, 3) for k, v in audit.items()},
        },
        "delta": {
            "files": round(delta_files),
            "bytes": round(delta_bytes),
            "deleted": round(deletes),
        },
        "requests": round(sum(by_kind.values())),
        "requests_by_kind": {k: round(v) for k, v in by_kind.items()},
        "rates": r,
        "trend": moves,
        "per_hour": per_hour,
        "assumptions": assumptions,
    }


def convergence(moves: list[dict], r: dict) -> tuple[str, str]:
    """Are the passes' deltas shrinking, and can a pass keep up with the change at all?"""
    if len(moves) < 2:
        return "unknown", "two incremental passes are needed to see a trend"
    recent = moves[-RECENT:]
    # The latest pass's change rate against the copy's: the present, not the mean of the past.
    copy_bph = (r.get("copy_bytes_per_s") or 0) * 3600
    copy_fph = (r.get("copy_files_per_s") or 0) * 3600
    bph = recent[-1]["bytes_per_hour"]
    fph = recent[-1]["files_per_hour"]
    if (copy_bph and bph > copy_bph) or (copy_fph and fph > copy_fph):
        return "diverging", (
            f"the delta grows faster than a pass can copy it: {fmt_bytes(bph)} and {fph:,.0f} files "
            f"change per hour, a pass copies {fmt_bytes(copy_bph)} and {copy_fph:,.0f} files per hour"
        )
    files = [m["files"] for m in recent]
    byts = [m["bytes"] for m in recent]
    said = f"{', '.join(f'{f:,}' for f in files)} files, {', '.join(fmt_bytes(b) for b in byts)}"
    # Converging only where both shrink: fewer files of many more bytes is a pass no shorter.
    if shrinking(files) and shrinking(byts):
        return (
            "converging",
            f"each of the last {len(files)} passes found a smaller delta, in files and in bytes ({said})",
        )
    grew = [what for what, xs in (("files", files), ("bytes", byts)) if xs[-1] > xs[-2] * 1.1]
    if grew:
        return "diverging", (
            f"the passes' deltas are not decreasing: the last grew in {' and '.join(grew)} ({said}); "
            "the source changes faster between passes than the passes get shorter"
        )
    return "steady", (
        f"the passes' deltas no longer shrink in both files and bytes ({said}): more "
        "incremental passes will not make the final pass shorter; what remains is listing and verifying"
    )


def shrinking(xs: list[int]) -> bool:
    return all(b < a for a, b in zip(xs, xs[1:]))


def actual_requests(rec: dict) -> int:
    return sum(_int(v) for v in ((rec.get("requests") or {}).get("total") or {}).values())


def backtest(passes: list[dict]) -> list[dict]:
    """Each pass that had a predecessor, projected from the passes before it, against what it took."""
    out = []
    for i in range(1, len(passes)):
        rec = passes[i]
        at = epoch(rec.get("started"))
        if at is None or rec.get("phase") == "baseline" or not rec.get("wall_seconds"):
            continue
        # How it knew the destination, as the state said when it started (the records'
        # "carried" of older histories, where it is not recorded).
        known = (
            {"carried": rec["dest_listed"] == "carried", "why": rec.get("dest_listed_why") or ""}
            if rec.get("dest_listed")
            else None
        )
        est = estimate(passes[:i], at, rec["phase"], bool(rec.get("checksum")), known=known)
        # The same pass priced with the delta it found: the model's error apart from the
        # forecast's.
        files, byts = delta_of(rec)
        work = {
            "files": files,
            "bytes": byts,
            "deleted": _int((rec.get("planned") or {}).get("deleted")),
        }
        priced_ = estimate(passes[:i], at, rec["phase"], bool(rec.get("checksum")), work, known)[
            "seconds"
        ]
        actual = float(rec["wall_seconds"])
        out.append(
            {
                "run_id": rec.get("run_id"),
                "pass": rec.get("pass"),
                "phase": rec.get("phase"),
                # The passes it was projected from: after the baseline alone, no small pass was
                # measured yet, nor any change rate.
                "from_passes": i,
                "projected_seconds": est["seconds"],
                "actual_seconds": round(actual, 3),
                "error_seconds": round(est["seconds"] - actual, 3),
                "error_pct": round(100 * (est["seconds"] - actual) / actual, 1) if actual else None,
                "priced_seconds": priced_,
                "priced_error_pct": round(100 * (priced_ - actual) / actual, 1) if actual else None,
                "projected_requests": est["requests"],
                "actual_requests": actual_requests(rec),
            }
        )
    return out


def project(
    records: list[dict],
    now: float | None = None,
    phase: str = "final",
    checksum: bool | None = None,
    settings: Settings | None = None,
) -> dict:
    """The pass `phase` (a final one unless said) started at `now`, from the complete passes of
    records (load()'s list; failed, stopped and running ones are not measures of a pass).
    checksum: whether that pass verifies by MD5 (default: as the last final pass did, else not)."""
    now = time.time() if now is None else now
    # An audit copies nothing and finds no change: it is no measure of a migration pass.
    passes = sorted(
        (
            r
            for r in records
            if r.get("status") == "complete"
            and epoch(r.get("started"))
            and r.get("phase") != "audit"
        ),
        key=lambda r: epoch(r["started"]),
    )
    base = {"phase": phase, "at": iso(now), "records": len(records), "passes": len(passes)}
    if not passes:
        return {
            **base,
            "ok": False,
            "why_not": "no complete pass recorded yet",
            "line": "no projection: no complete pass recorded yet",
        }
    if checksum is None:
        checksum = next(
            (bool(r.get("checksum")) for r in reversed(passes) if r.get("phase") == "final"), False
        )
    settings = settings or Settings()
    listing = next_listing(records, settings)
    est = estimate(passes, now, phase, checksum, known=listing)
    state, why = convergence(est["trend"], est["rates"])
    result = {
        **base,
        "ok": True,
        "why_not": None,
        "checksum": checksum,
        **est,
        "converging": state,
        "why": why,
        "backtest": backtest(passes),
        "final_pass": verdict(passes, est["trend"], listing, settings),
    }
    result["final_pass"]["said"] = verdict_words(result["final_pass"])
    result["line"] = line(result)
    return result


# --- will the final pass go through ---------------------------------------------------------------

# prune.max_delete's default (config/config.yaml), the worker's --max-delete's too.
DEFAULT_MAX_DELETE = "10%"
# The carried state's document at a local state location (worker/src/carried.rs) and its layout.
STATE_DOC = "dest.json"
STATE_VERSION = 1
# A pass's source lost "more than it usually does" past this many times the most an earlier
# interval lost at its rate, and past this many files (a handful is noise, not a sign).
LOSS_FACTOR = 3.0
LOSS_FLOOR = 10


@dataclasses.dataclass(frozen=True)
class Settings:
    """What the next pass runs with, as the config says (ferry_config.report_args): its prune's
    limit and force, and how it knows the destination (dest_listing, and the state location)."""

    max_delete: str = DEFAULT_MAX_DELETE
    force: bool = False
    dest_listing: str = "carried"
    state: str | None = None


def limit_allows(limit: str, n: int, of: int) -> bool:
    """prune's rule (worker/src/commands/prune.rs, Limit::allows): a count, or a share of the
    destination's entries."""
    text = str(limit).strip()
    if text.endswith("%"):
        return of == 0 or n <= of * float(text[:-1]) / 100.0
    return n <= int(text)


def needed_limit(n: int, of: int) -> str:
    """The smallest whole percentage prune.max_delete must be for `n` of `of` to go."""
    return f"{max(1, math.ceil(100.0 * n / of))}%" if of else str(n)


def state_doc(state: str | None) -> tuple[bool, dict | None]:
    """(readable here, the carried state's document or None): a local state location only; a
    Blob prefix is judged from the records instead."""
    if not state or "://" in state or not os.path.isdir(state):
        return (bool(state) and "://" not in state and not os.path.exists(state)), None
    doc = load_json(os.path.join(state, STATE_DOC))
    return True, doc if isinstance(doc, dict) else None


def next_listing(records: list[dict], settings: Settings) -> dict:
    """How the next pass will know the destination: {"carried": bool, "why": str}. From the
    state itself where this machine sees it (what the worker's decide() reads first), else from
    the records: the last pass that touched the state either left one or took it and left none."""
    if settings.dest_listing == "fresh":
        return {"carried": False, "why": "dest_listing is fresh: every pass lists the destination"}
    seen, doc = state_doc(settings.state)
    if seen:
        if doc is None:
            return {"carried": False, "why": f"there is no carried state at {settings.state}"}
        if doc.get("version") != STATE_VERSION:
            return {"carried": False, "why": "the carried state is of another version of ferry"}
        if doc.get("taken_by"):
            return {
                "carried": False,
                "why": f"the carried state was taken by {doc['taken_by']}, which did not leave a "
                "new one (it failed or was stopped)",
            }
        return {
            "carried": True,
            "why": f"left by {doc.get('written_by')}, {_int(doc.get('entries')):,} entries",
        }
    for rec in sorted(records, key=lambda r: epoch(r.get("started")) or 0.0, reverse=True):
        if rec.get("carried"):
            return {"carried": True, "why": f"left by {rec.get('run_dir')}"}
        if took_state(rec):
            return {
                "carried": False,
                "why": f"{rec.get('run_dir')} ({rec.get('status')}) left no carried state",
            }
    return {"carried": False, "why": "no pass has left a carried state"}


def took_state(rec: dict) -> bool:
    """Did the pass decide on the carried state (and, not carrying it on, leave the next pass to
    list fresh)? A pass that decided how to know the destination did; so did a baseline that
    wrote."""
    if rec.get("dest_listed"):
        return True
    return rec.get("phase") == "baseline" and bool((rec.get("copied") or {}).get("files"))


def source_loss(moves: list[dict], source: int) -> dict | None:
    """The last interval's loss at the source against the earlier ones': a source that lost much
    more than it usually does (an unmounted share, the wrong path, someone's rm) is named before
    the final pass makes the destination lose it too. None: nothing unusual, or nothing to
    compare with."""
    if len(moves) < 2:
        return None
    last, earlier = moves[-1], moves[:-1]
    usual = max(m["deleted_per_hour"] for m in earlier)
    expected = usual * last["hours_since_previous"]
    if last["deleted"] <= max(LOSS_FACTOR * expected, LOSS_FLOOR):
        return None
    most = max(m["deleted"] for m in earlier)
    return {
        "files": last["deleted"],
        "usual": most,
        "why": f"the source lost {last['deleted']:,} files since the pass before "
        f"(earlier passes: at most {most:,}"
        + (f", of {source:,}" if source else "")
        + "): check it is the right source, whole, before the window",
    }


def verdict(passes: list[dict], moves: list[dict], listing: dict, settings: Settings) -> dict:
    """Would the final pass go through as the migration stands: its deletions (what the last
    pass's plan counted) against prune.max_delete, as `ferry plan` and prune judge them; how it
    will know the destination; the source's loss."""
    last = passes[-1]
    planned = last.get("planned") or {}
    # What the last plan counted, as `ferry plan` would judge it now; a final pass deleted it.
    files = 0 if last.get("phase") == "final" else _int(planned.get("deleted"))
    n = files + (0 if last.get("phase") == "final" else _int(planned.get("prune_dirs")))
    of = files_of(last, "dest") + _int(planned.get("dest_dirs")) or files_of(last, "source")
    problems, refused = [], None
    if files_of(last, "source") == 0 and not settings.force:
        refused = (
            "the last pass found no entries at the source, and prune refuses to empty the "
            "destination: check the source is mounted; set prune.force: true only if it really is empty"
        )
    elif not settings.force and not limit_allows(settings.max_delete, n, of):
        share = 100.0 * n / of if of else 100.0
        refused = (
            f"{n:,} of {of:,} destination entries to delete ({share:.1f} %), more than "
            f"prune.max_delete {settings.max_delete} allows: review {last.get('run_dir')}/{DELETIONS}, "
            f'then set prune.max_delete: "{needed_limit(n, of)}" (or prune.force: true)'
        )
    newer = planned.get("newer") or {}
    if refused is None and _int(newer.get("count")) and not settings.force:
        refused = (
            f"{_int(newer.get('count')):,} files to delete are newer than everything at the source "
            f"(first: {', '.join(newer.get('examples') or [])}): something wrote at the destination, "
            f"or the source's newest files were deleted; review {last.get('run_dir')}/{DELETIONS}, "
            "then set prune.force: true if they are to go"
        )
    if refused:
        problems.append(f"its prune would be refused: {refused}")
    # After a final pass the loss was the cut-over's own, dealt with (deleted, or refused).
    loss = None if last.get("phase") == "final" else source_loss(moves, files_of(last, "source"))
    if loss:
        problems.append(loss["why"])
    if not listing["carried"]:
        problems.append(f"it lists the destination fresh ({listing['why']})")
    return {
        "goes_through": refused is None,
        "refused": refused,
        "deletions": {"entries": n, "of": of, "files": files, "limit": settings.max_delete},
        "needed_max_delete": needed_limit(n, of) if refused and of else None,
        "force": settings.force,
        "dest_listing": listing,
        "source_loss": loss,
        "problems": problems,
    }


def verdict_words(v: dict) -> str:
    d = v["deletions"]
    if not v["goes_through"]:
        head = "the final pass would NOT go through: " + v["problems"][0]
        rest = v["problems"][1:]
    else:
        within = "prune.force is set" if v["force"] else f"within prune.max_delete {d['limit']}"
        head = (
            f"the final pass would go through ({d['entries']:,} of {d['of']:,} destination "
            f"entries to delete, {within}; the destination "
            + ("carried" if v["dest_listing"]["carried"] else "listed fresh")
            + ")"
        )
        rest = [p for p in v["problems"] if not p.startswith("it lists the destination fresh")]
        if not v["dest_listing"]["carried"]:
            rest.append(f"it lists the destination fresh: {v['dest_listing']['why']}")
    return "; ".join([head, *(f"but {p}" for p in rest)])


# --- words ---------------------------------------------------------------------------------------


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{int(seconds // 3600)} h {seconds % 3600 / 60:.0f} min"


STEP_WORDS = [
    ("listing", "listing"),
    ("plan", "plan"),
    ("copy", "copy"),
    ("verify", "verify"),
    ("prune", "prune"),
    ("final_check", "final check"),
    ("overhead", "overhead"),
]


def line(p: dict, verdict: bool = True) -> str:
    """'a final pass started now would take ≈ 14 min (listing 6 min + ...), with ≈ 12,400 Blob
    requests; ...; the final pass would go through (...)'; without its verdict where that is
    said on a line of its own."""
    if not p.get("ok"):
        return p.get("line") or f"no projection: {p.get('why_not')}"
    parts = " + ".join(
        f"{word} {duration(p['steps'][key])}"
        for key, word in STEP_WORDS
        if key in p["steps"] and (p["steps"][key] or key in ("listing", "copy", "verify"))
    )
    audit = p.get("audit")
    after = f"; the audit after it ≈ {duration(audit['seconds'])}" if audit else ""
    final = f"; {verdict_words(p['final_pass'])}" if verdict and p.get("final_pass") else ""
    return (
        f"a {p['phase']} pass started now would take ≈ {duration(p['seconds'])} ({parts}), "
        f"with ≈ {p['requests']:,} Blob requests{after}; passes {p.get('converging', 'unknown')}"
        f"{final}"
    )


def deleted_files(rec: dict) -> int | None:
    """What the pass's prune deleted: 0 for a pass that runs none (baseline, incremental, audit),
    None where the record does not say (a final pass recorded before records said it)."""
    done = rec.get("deleted")
    if isinstance(done, dict):
        return _int(done.get("files"))
    return None if rec.get("phase") == "final" else 0


def history_markdown(records: list[dict]) -> list[str]:
    """The history table. `would delete`: what only the destination holds as the pass's plan
    counted it (what a final pass's prune deletes); `deleted`: what the pass deleted."""
    lines = [
        "| run | pass | status | engine | started | wall | source files | planned files | planned bytes | "
        "would delete | deleted | copied files | copied bytes | verified | failed | retries | "
        "Blob requests | partitions |",
        "|---|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in records:
        planned, copied = r.get("planned") or {}, r.get("copied") or {}
        deleted = deleted_files(r)
        lines.append(
            f"| {r.get('run_dir') or r.get('phase')} | {r.get('pass')} | {r.get('status')} | {r.get('engine')} | "
            f"{r.get('started') or '-'} | {duration(r.get('wall_seconds'))} | {(r.get('source') or {}).get('files') or '-'} | "
            f"{planned.get('files', 0)} | {fmt_bytes(planned.get('bytes'))} | {planned.get('deleted', 0)} | "
            f"{'-' if deleted is None else deleted} | "
            f"{copied.get('files', 0)} | {fmt_bytes(copied.get('bytes'))} | {(r.get('verified') or {}).get('files', 0)} | "
            f"{r.get('failed', 0)} | {r.get('retries', 0)} | {actual_requests(r):,} | {r.get('partitions', 0)} |"
        )
    if not records:
        lines.append("| (no run recorded) |" + " |" * 17)
    return lines


def verdict_markdown(v: dict) -> list[str]:
    """Whether the final pass would go through, and each thing in its way."""
    d = v["deletions"]
    said = "would go through" if v["goes_through"] else "would NOT go through"
    limit = "prune.force is set" if v["force"] else f"prune.max_delete is {d['limit']}"
    lines = [
        f"**The final pass {said}** as the migration stands: {d['entries']:,} of {d['of']:,} "
        f"destination entries to delete ({limit}); the destination "
        + (
            f"carried ({v['dest_listing']['why']})"
            if v["dest_listing"]["carried"]
            else f"listed fresh ({v['dest_listing']['why']})"
        )
        + ".",
    ]
    if v["problems"]:
        lines += ["", *(f"- {p[0].upper() + p[1:]}." for p in v["problems"])]
    return lines


def projection_markdown(p: dict) -> list[str]:
    if not p.get("ok"):
        return [f"No projection: {p.get('why_not')}."]
    lines = [
        f"**{line(p)[0].upper() + line(p)[1:]}.**",
        "",
        *(verdict_markdown(p["final_pass"]) + [""] if p.get("final_pass") else []),
        f"Passes: **{p['converging']}** — {p['why']}.",
        "",
        "Assumptions:",
        "",
    ]
    lines += [f"- {a}" for a in p["assumptions"]]
    lines += [
        "",
        "Projected against measured, for every pass that had a predecessor (projected from the passes before it):",
        "",
        "| pass | phase | from passes | projected | actual | error | projected requests | actual requests |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for b in p["backtest"]:
        pct = f"{b['error_pct']:+.0f} %" if b["error_pct"] is not None else "-"
        lines.append(
            f"| {b['pass']} | {b['phase']} | {b.get('from_passes', '-')} | "
            f"{duration(b['projected_seconds'])} | {duration(b['actual_seconds'])} | "
            f"{pct} | {b['projected_requests']:,} | {b['actual_requests']:,} |"
        )
    if not p["backtest"]:
        lines.append("| (no pass with a predecessor yet) | | | | | | | |")
    return lines


def default_state(root: str) -> str | None:
    """The config's default state location, where there is one: a state kept elsewhere (the
    config's `state`) is judged from the records unless --state names it."""
    path = os.path.join(root, "state")
    return path if os.path.isdir(path) else None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="ferry_history.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    proj = sub.add_parser(
        "project", help="project the final pass started now from RUN_ROOT's history"
    )
    proj.add_argument("run_root", help="<outdir>/<run_name>, above the phase directories")
    proj.add_argument("--phase", default="final", choices=["incremental", "final"])
    proj.add_argument(
        "--checksum", action="store_true", default=None, help="the final pass verifies by MD5"
    )
    proj.add_argument(
        "--max-delete",
        default=DEFAULT_MAX_DELETE,
        help="the config's prune.max_delete (default %(default)s)",
    )
    proj.add_argument("--force", action="store_true", help="the config's prune.force")
    proj.add_argument("--dest-listing", choices=["carried", "fresh"], default="carried")
    proj.add_argument(
        "--state", help="the carried state's location (default RUN_ROOT/state, if it is there)"
    )
    proj.add_argument("--json", action="store_true")
    show = sub.add_parser("show", help="the history of RUN_ROOT")
    show.add_argument("run_root")
    show.add_argument("--json", action="store_true")
    st = sub.add_parser("start", help="the engines' start hook: leave RUN_DIR's start marker")
    st.add_argument("run_dir")
    st.add_argument("--engine", required=True)
    st.add_argument(
        "--pid", type=int, help="the engine's process id (default: this process's parent)"
    )
    st.add_argument(
        "--migration", type=json.loads, help="the run's ferry_config.py run.migration, as JSON"
    )
    st.add_argument("--lease", type=json.loads, help="the run's ferry_config.py run.lease, as JSON")
    st.add_argument(
        "--check", type=json.loads, help="the run's pre-flight, ferry_config.py run.check, as JSON"
    )
    st.epilog = (
        "after --: the run's ferry_report.py build options (ferry_config.py's run.report_args)"
    )
    argv = sys.argv[1:] if argv is None else list(argv)
    # The report's options follow `--` as they are; argparse would read them as this command's.
    report_args = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)

    if args.command == "start":
        start(
            args.run_dir,
            args.engine,
            report_args,
            args.pid or os.getppid(),
            migration=args.migration,
            hold=True,
            lease=args.lease,
            check=args.check,
        )
        return 0
    records = load(args.run_root)
    if args.command == "show":
        print(
            json.dumps(records, indent=2, ensure_ascii=False)
            if args.json
            else "\n".join(history_markdown(records))
        )
        return 0
    settings = Settings(
        max_delete=args.max_delete,
        force=args.force,
        dest_listing=args.dest_listing,
        state=args.state or default_state(args.run_root),
    )
    result = project(records, phase=args.phase, checksum=args.checksum, settings=settings)
    print(json.dumps(result, indent=2, ensure_ascii=False) if args.json else result["line"])
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
