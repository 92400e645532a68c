"""A migration's history (one JSON line per phase run, either engine) and the projection of its
final pass from it (docs/pipeline.md, "History" and "Projection").

    ferry_history.py project RUN_ROOT [--json]   # "a final pass started now would take ≈ …"
    ferry_history.py show RUN_ROOT [--json]      # the history table
    ferry_history.py start RUN_DIR --engine E [--pid N]   # the engines' start hook (below)

RUN_ROOT is `<outdir>/<run_name>`, above the phase directories; its `history.jsonl` holds the
records, oldest first. The two functions other code calls return plain dicts and lists:

load(run_root) -> list[record], ordered by `started`; runs that started and never recorded
their end (killed: the engine got SIGKILL, no report ran) appear as `killed` records built from
what they left, or `running` while their engine is still alive on this host. A record:

    {"version": 1, "run_id": str, "run_name": str, "phase": "baseline"|"incremental"|"final",
     "pass": int, "run_dir": str (the phase directory's name under the run root),
     "status": "complete"|"incomplete"|"failed"|"killed"|"running",
     "engine": "snakemake"|"nextflow"|"unknown",
     "started": ISO str|None, "ended": ISO str|None, "wall_seconds": float|None,
     "source": {"files": int|None, "bytes": int|None},
     "dest": {"files": int|None, "bytes": int|None},           # the destination's listing
     "planned": {"files", "bytes", "new", "changed", "metadata_only", "type_changed",
                 "undecided", "deleted", "deleted_bytes"},      # ints (0 when unknown)
     "copied": {"files": int, "bytes": int},
     "verified": {"files", "same", "differ", "missing_on_dst", "missing_on_src", "error"},
     "checksum": bool,                                          # verify compared MD5s
     "failed": int, "retries": int,
     "requests": {"total": {kind: int}, "by_step": {step: {kind: int}}},
         # kinds: list_pages, puts, blocks, block_lists, gets, heads, deletes, copies, others
     "steps": {step: {"seconds": float, "span": float}},       # list_source, list_dest, plan,
         # copy, verify, prune, final_check: summed job seconds, and wall span first start→last end
     "partitions": int, "depth": {"mode": str|None, "final": int|None, "peak": int|None}}

project(records, now=None, phase="final") -> dict: the pass `phase` started at `now` (epoch
seconds; default the current time), from the records' measured rates and delta trend:

    {"phase": str, "at": ISO str, "ok": bool, "why_not": str|None,   # ok False: too few records
     "seconds": float, "steps": {"listing", "plan", "copy", "verify", "prune", "final_check": float},
     "delta": {"files": int, "bytes": int, "deleted": int},          # expected to copy / delete
     "requests": int, "requests_by_kind": {kind: int},
     "rates": {...the measured rates used...},
     "trend": [{"run_id", "pass", "phase", "started", "hours_since_previous",
                "files", "bytes", "files_per_hour", "bytes_per_hour"}],
     "converging": "converging"|"steady"|"diverging"|"unknown", "why": str,
     "assumptions": [str],
     "backtest": [{"run_id", "pass", "phase", "projected_seconds", "actual_seconds",
                   "error_seconds", "error_pct", "projected_requests", "actual_requests"}],
     "line": str}                                                     # the one-line summary
"""
