"""A migration's history: one JSON line per phase run, either engine (docs/pipeline.md, "History").

    ferry_history.py project RUN_ROOT [--max-delete L] [--json]   # "a final pass started now would take ≈ …"
    ferry_history.py show RUN_ROOT [--json]      # the history table
    ferry_history.py start RUN_DIR --engine E [--pid N] -- REPORT_ARGS...   # the engines' start hook

RUN_ROOT is `<outdir>/<run_name>`, above the phase directories; its `history.jsonl` holds the
records, oldest first, each checked against workflow/schemas/history.schema.json when written
and when read (a record missing a field is an error naming the file, its line and the field);
records of version 1 (today's before version 2, or with no version) are read through from_v1().
The two functions other code calls return plain dicts and lists:

load(run_root) -> list[record], ordered by `started`; runs that started and never recorded
their end (killed: the engine got SIGKILL, no report ran) appear as `stopped` records built from
what they left, or `running` while their engine is alive on this host (from another host: until
a later run starts). A record:

    {"version": 2, "run_id": str, "run_name": str, "phase": "baseline"|"incremental"|"final",
     "pass": int, "run_dir": str (the phase directory's name under the run root),
     "status": "complete"|"incomplete"|"failed"|"stopped"|"running",   # the worker's phase states
     "engine": "snakemake"|"nextflow"|"unknown",
     "started": ISO str|None, "ended": ISO str|None, "wall_seconds": float|None,
     "source": {"files": int|None, "bytes": int|None},
     "dest": {"files": int|None, "bytes": int|None},           # the destination's listing
     "planned": {"files", "bytes", "new", "changed", "metadata_only", "type_changed",
                 "undecided", "deleted", "deleted_bytes",      # ints (0 when unknown); deleted:
                 "prune_dirs", "dest_dirs",     # what only the destination holds (would delete)
                 "newer": {"count", "examples"}},  # of it, newer than all the source holds
     "deleted": {"files", "dirs"}|None,     # what the pass's prune deleted (0 but a final's;
                                            # None: a final recorded before records said it)
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

The projection of the final pass from these records is ferry_projection.py's; the history's
and the projection's markdown are ferry_markdown.py's (report.md's sections).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import socket
import sys
import time

import ferry_docs
import ferry_lock
import ferry_markdown
import ferry_model
import ferry_preflight
import ferry_projection
import ferry_run
from ferry_lock import alive, process_start
from ferry_run_dir import HISTORY, RUN_STARTED, record_migration
from ferrylib import epoch, iso, load_json, write_json

VERSION = 2
STEPS = ("list_source", "list_dest", "plan", "copy", "verify", "prune", "final_check")
# A step of the history taken by more than one of the pipeline's: prune's parts, then its
# directories' job, which starts when the last part ends (so their spans add up).
JOBS_OF = {"prune": ("prune", "prune_dirs")}
# A record's schema, its status the worker's phase states (one vocabulary, generated).
SCHEMA = ferry_docs.pipeline_schema("history")
SCHEMA["properties"]["status"]["enum"] = list(ferry_docs.STATES["phase"])
# Its requests, by the worker's kinds (ferry_docs.REQUEST_KINDS), every one.
SCHEMA["$defs"]["requests"] |= {
    "properties": {kind: {"$ref": "#/$defs/count"} for kind in ferry_docs.REQUEST_KINDS},
    "required": list(ferry_docs.REQUEST_KINDS),
    "additionalProperties": False,
}
_VALIDATOR = ferry_docs.validator(SCHEMA)

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
    found = [epoch(r["started"]) for r in read(root)] + [
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


class HistoryError(ferry_docs.DocumentError):
    """A record of the history that is not what its schema says."""


def checked(rec, where: str) -> dict:
    """rec, of this version and valid, or a HistoryError naming where and each wrong field."""
    try:
        return ferry_docs.validate(_VALIDATOR, rec, where, f"a history record (version {VERSION})")
    except ferry_docs.DocumentError as err:
        raise HistoryError(str(err)) from None


def from_v1(rec: dict) -> dict:
    """A record of version 1 (or of none: today's records before they were checked), as version
    2: the keys v1's writers added over time, with what the reader took for them when missing;
    `killed`, the word before the job states were one vocabulary, is `stopped`."""
    planned = rec.get("planned")
    if isinstance(planned, dict):
        newer = {"count": 0, "examples": []}
        planned = {"prune_dirs": 0, "dest_dirs": 0, "newer": newer} | planned
        planned["newer"] = planned["newer"] or newer
    # A final pass's deletions went unrecorded before records said them: unknown, not 0.
    deleted = None if rec.get("phase") == "final" else {"files": 0, "dirs": 0}
    defaults = {
        "deleted": deleted,
        "prune_refused": None,
        "carried": False,
        "dest_listed": None,
        "dest_listed_why": None,
        "depth": {"mode": None, "final": None, "peak": None},
    }
    status = {"killed": "stopped"}.get(rec.get("status"), rec.get("status"))
    now = {"version": VERSION, "status": status} | ({"planned": planned} if planned else {})
    return defaults | rec | now


# How a record of each version is read: made this version's.
READERS = {None: from_v1, 1: from_v1, VERSION: lambda rec: rec}


def parse(line: str, where: str) -> dict | None:
    """A line's record, as this version; None for a line cut short (a full disk, a kill)."""
    try:
        rec = json.loads(line)
    except ValueError:
        return None
    if not isinstance(rec, dict):
        raise HistoryError(f"{where}: not a history record: {line[:80]!r}")
    reader = READERS.get(rec.get("version"))
    if reader is None:
        raise HistoryError(
            f"{where}: a history record of version {rec.get('version')}; this ferry reads "
            f"versions 1 to {VERSION}"
        )
    return checked(reader(rec), where)


def read(root: str) -> list[dict]:
    """The records as appended, the first of each run_id (a record is never rewritten)."""
    out, seen = [], set()
    path = os.path.join(root, HISTORY)
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.readlines()
    except OSError:
        return []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        rec = parse(line, f"{path}, line {number}")
        if rec is not None and rec["run_id"] not in seen:
            seen.add(rec["run_id"])
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
    checked(record, f"the record of {record.get('run_id')} for {os.path.join(root, HISTORY)}")
    if any(r["run_id"] == record["run_id"] for r in read(root)):
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
    if report["status"] == "complete" and not ended_in_error:
        return "complete"
    return "failed" if report["failures"] or ended_in_error else "incomplete"


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
            "prune_dirs": plan["prune_dirs"] if plan else 0,
            "dest_dirs": plan["dest_dirs"] if plan else 0,
            # Of them, those newer than everything at the source (the final's prune refuses).
            "newer": plan["newer_deletions"] if plan else {"count": 0, "examples": []},
        },
        # What this pass's prune deleted: nothing unless it is a final pass whose prune ran (a
        # dry run or a refused prune deletes nothing).
        "deleted": {
            "files": prune["deleted"] if prune else 0,
            "dirs": prune["dirs_deleted"] if prune else 0,
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
    if listed["used"]:
        return {
            "dest_listed": "carried",
            "dest_listed_why": f"as {listed['written_by']} left it",
        }
    return {"dest_listed": "fresh", "dest_listed_why": listed["reason"]}


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
    rec = record(report, marker, os.path.basename(marker_dir), status, ended, opts.pass_)
    return checked(rec, marker_dir)


def settle(root: str, starting: float | None = None, skip: str | None = None) -> list[dict]:
    """Record as killed each run that left a marker and no record and is gone (gone()).
    starting: a run begins now (the start hook), later than any. skip: the run_id being recorded
    now. Returns the records added."""
    recorded = {r["run_id"] for r in read(root)}
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
    recorded = {r["run_id"] for r in records}
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
    return sorted(records, key=lambda r: epoch(r["started"]) or 0.0)


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
        default=ferry_projection.DEFAULT_MAX_DELETE,
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
            else "\n".join(ferry_markdown.history_markdown(records))
        )
        return 0
    settings = ferry_projection.Settings(
        max_delete=args.max_delete,
        force=args.force,
        dest_listing=args.dest_listing,
        state=args.state or default_state(args.run_root),
    )
    result = ferry_projection.project(
        records, phase=args.phase, checksum=args.checksum, settings=settings
    )
    print(json.dumps(result, indent=2, ensure_ascii=False) if args.json else result["line"])
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
