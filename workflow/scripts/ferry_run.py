"""The one reader of a phase's run directory (run_dir.json's layout): every fact the report,
the history and report.html are made from, read once, each worker document through its schema
(ferry_docs.py). What it returns is plain data; ferry_model.py makes the report of it, and the
renderers (ferry_markdown.py, ferry_html.py) only render that.

    read(run_dir) -> {"plan", "copy": [job], "verify": [job], "prune": [job], "prune_dirs": job,
                      "final_check": job,
                      "carry": job, "shards": the shard step's document or None,
                      "listings": {step: listing}, "timings": {key: timing},
                      "preparation": [{"stage", "error"}]}

A job: {"id", "files", "bytes" (as planned), "state", "doc" (the worker's document or None),
"error" (the last line of its log, when it failed without a document), "timing", "progress"};
a prune job also "deleted": its deletion list, relative to the run directory, None if it left none.
Its state is one of ferry status's (pending / running / done / failed / stopped): done when it
left its document, failed when it left it under failed/ (or only a log), stopped when its
progress file says it began and never finished, pending when it left nothing.

A listing: {"entries", "seconds", "requests", "carried", "jobs"}, the summaries of the list jobs
that took it (one, or list.jobs with a shard step) read as one: entries and requests summed,
seconds the longest job's (they run side by side), carried the destination's decision (the
shard step's, which every list job of the destination followed); None when no job left one.
"""

from __future__ import annotations

import argparse
import csv
import os

import ferry_docs
from ferry_run_dir import (
    BENCHMARKS_DIR,
    DELETED,
    DOCUMENTS,
    LISTING_SUMMARIES,
    PLAN,
    PROGRESS,
    SHARDED_SUMMARIES,
    SHARDS,
    expand,
    records,
    shard_ids,
)


def read_timing(path: str) -> dict | None:
    """A timing file (columns s, cpu_time, max_rss, node; Snakemake's benchmark or ferry_task.py's):
    the job's seconds, CPU seconds, peak RSS, node, and its start (the file's time is its end)."""
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle, delimiter="\t"))
        end = os.path.getmtime(path)
    except OSError:
        return None
    if not rows:
        return None
    row = rows[-1]

    def num(key):
        try:
            return float(row.get(key, "NA"))
        except (TypeError, ValueError):
            return None

    seconds = num("s") or 0.0
    return {
        "seconds": seconds,
        "cpu_seconds": num("cpu_time"),
        "max_rss_mb": num("max_rss"),
        "node": row.get("node") or None,
        "start": end - seconds,
    }


def timings(run_dir: str) -> dict[str, dict]:
    """Every job's timing, by its path under benchmarks/ without .tsv: {'copy/part-00000': ...}."""
    found = {}
    root = os.path.join(run_dir, BENCHMARKS_DIR)
    for dirpath, _dirs, files in os.walk(root):
        for name in sorted(files):
            if name.endswith(".tsv"):
                key = os.path.relpath(os.path.join(dirpath, name), root)[: -len(".tsv")]
                timing = read_timing(os.path.join(dirpath, name))
                if timing:
                    found[key] = timing
    return found


def timing_key(step: str, part: str | None = None, shard: str | None = None) -> str:
    """A job's key in timings()."""
    bench = records(step, part, shard=shard).bench
    return os.path.relpath(bench, BENCHMARKS_DIR)[: -len(".tsv")]


def last_log_line(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            lines = [line.strip() for line in handle if line.strip()]
    except FileNotFoundError:
        return ""
    return lines[-1][:300] if lines else ""


def _nonempty(path: str) -> bool:
    try:
        return os.path.getsize(path) > 0
    except OSError:
        return False


def lost(progress: str) -> list[dict]:
    """The progress of the job's earlier attempts that never finished (ferry_task.keep_lost)."""
    folder, stem = os.path.split(progress.removesuffix(".json"))
    try:
        names = sorted(n for n in os.listdir(folder) if n.startswith(f"{stem}.lost-"))
    except FileNotFoundError:
        return []
    return [ferry_docs.load("progress", os.path.join(folder, n)) for n in names]


def job(run_dir: str, step: str, part: str | None, bench: dict[str, dict]) -> dict:
    rec = records(step, part, run_dir)
    kind = DOCUMENTS[step]
    progress = (
        ferry_docs.load("progress", os.path.join(run_dir, expand(PROGRESS[step], {"part": part})))
        if step in PROGRESS
        else None
    )
    found = {"state": "pending", "doc": None, "error": None, "progress": progress}
    found["lost"] = (
        lost(os.path.join(run_dir, PROGRESS[step].format(part=part))) if step in PROGRESS else []
    )
    found["timing"] = bench.get(timing_key(step, part))
    # A prune job's list of what it deleted, relative to the run directory, where it is.
    if step in DELETED:
        listed = expand(DELETED[step], {"part": part})
        found["deleted"] = listed if os.path.isfile(os.path.join(run_dir, listed)) else None
    try:
        doc = ferry_docs.load(kind, rec.out)
    except ferry_docs.DocumentError as err:
        # Not what the worker writes (cut short, or another worker's version): no result, and
        # the report says why instead of counting it as nothing.
        return found | {"state": "failed", "error": str(err)}
    if doc is not None:
        return found | {"state": "done", "doc": doc}
    if os.path.exists(rec.failed):
        found |= {"state": "failed", "doc": ferry_docs.load_failed(kind, rec.failed)}
    elif progress is not None and not progress["finished"]:
        found["state"] = "stopped"
    # Snakemake creates (empty) log files when it schedules a job, even one that then never
    # starts because its predecessor failed; only a worker that said something has run.
    elif _nonempty(rec.log):
        found["state"] = "failed"
    if found["state"] != "pending" and found["doc"] is None:
        found["error"] = (
            last_log_line(rec.log)
            or f"{step} job {found['state']} without a report from the worker"
        )
    return found


def preparation(run_dir: str, shards: dict | None) -> list[dict]:
    """What the listing and planning steps that did not finish said last, for a run without a
    plan (one that finished said what it did: no failure)."""
    found = []
    for step in ("make_dest", "shard", "list_source", "list_dest", "plan"):
        # A list job's listing may be cut short; its summary is written when it ended well.
        done = LISTING_SUMMARIES.get(step) or records(step).out
        jobs = [(records(step, root=run_dir).log, done)]
        if shards and step in SHARDED_SUMMARIES:
            jobs = [
                (
                    records(step, root=run_dir, shard=k).log,
                    expand(SHARDED_SUMMARIES[step], {"shard": k}),
                )
                for k in shard_ids(shards["jobs"])
            ]
        for log, out in jobs:
            line = last_log_line(log)
            if line and not (out and _nonempty(os.path.join(run_dir, out))):
                found.append({"stage": step, "error": line})
    return found


def merged_listing(summaries: list[dict | None], carried: dict | None = None) -> dict | None:
    """The list jobs' summaries of one side as one listing (see the module's docstring); carried:
    the shard step's decision for the destination, which wins over what a job repeats of it."""
    found = [s for s in summaries if s is not None]
    if not found:
        return None
    return {
        "entries": sum(s["entries"] for s in found),
        "seconds": max(s["seconds"] for s in found),
        "requests": {
            kind: sum(s["requests"][kind] for s in found) for kind in ferry_docs.REQUEST_KINDS
        },
        "carried": carried or next((s["carried"] for s in found if s["carried"]), None),
        "jobs": len(found),
    }


def listings(run_dir: str, shards: dict | None) -> dict[str, dict | None]:
    """Each side's listing: its one summary, or with a shard step its list jobs' summaries as one."""
    found = {}
    for step, path in LISTING_SUMMARIES.items():
        if shards is None:
            paths = [path]
        else:
            pattern = SHARDED_SUMMARIES[step]
            paths = [expand(pattern, {"shard": k}) for k in shard_ids(shards["jobs"])]
        summaries = [ferry_docs.load("ls_summary", os.path.join(run_dir, p)) for p in paths]
        carried = shards["carried"] if shards and step == "list_dest" else None
        found[step] = merged_listing(summaries, carried)
    return found


def read(run_dir: str) -> dict:
    plan = ferry_docs.load("plan", os.path.join(run_dir, PLAN))
    bench = timings(run_dir)
    shards = ferry_docs.load("shards", os.path.join(run_dir, SHARDS))

    def partitions(step: str) -> list[dict]:
        specs = plan[f"{step}_partitions"] if plan else []
        return [
            {"id": s["id"], "files": s["files"], "bytes": s["bytes"]}
            | job(run_dir, step, s["id"], bench)
            for s in specs
        ]

    return {
        "run_dir": run_dir,
        "plan": plan,
        "copy": partitions("copy"),
        "verify": partitions("verify"),
        "prune": partitions("prune"),
        "prune_dirs": job(run_dir, "prune_dirs", None, bench),
        "final_check": job(run_dir, "final_check", None, bench),
        "carry": job(run_dir, "carry", None, bench),
        "shards": shards,
        "listings": listings(run_dir, shards),
        "timings": bench,
        "preparation": [] if plan else preparation(run_dir, shards),
    }


# --- what the engines say of the run: ferry_config.py's run.report_args ---------------------------


def options_parser(add_help: bool = True) -> argparse.ArgumentParser:
    """The report's options (ferry_config.py's run.report_args), as the engines pass them."""
    p = argparse.ArgumentParser(
        prog="ferry_report.py build",
        description="The run report of one pipeline phase.",
        add_help=add_help,
    )
    p.add_argument("run_dir")
    p.add_argument("--run-name", required=True)
    p.add_argument("--phase", required=True, choices=["baseline", "incremental", "final", "audit"])
    p.add_argument("--pass", dest="pass_", type=int, default=1, help="the pass of the phase")
    p.add_argument("--source", required=True, help="as it may be shown (no query string)")
    p.add_argument("--dest", required=True, help="as it may be shown (no query string)")
    p.add_argument("--checksum", action="store_true", help="the final verify compared MD5s")
    p.add_argument(
        "--final-check", action="store_true", help="the phase includes a final whole-tree check"
    )
    p.add_argument(
        "--final-checksum",
        action="store_true",
        help="the final pass verifies by MD5 (config checksum): the projection's assumption",
    )
    # What the projection judges the final pass by (ferry_projection.verdict): the config's
    # prune settings and how the next pass will know the destination.
    p.add_argument("--max-delete", default=None, help="the config's prune.max_delete")
    p.add_argument("--prune-force", action="store_true", help="the config's prune.force")
    p.add_argument("--dest-listing", choices=["carried", "fresh"], default="carried")
    p.add_argument("--state", default=None, help="where the carried state is kept")
    p.add_argument(
        "--history",
        metavar="DIR",
        help="the run directory on disk (absolute): the run's record goes to its run root's history",
    )
    return p


def options(run_dir: str, report_args: list[str]) -> argparse.Namespace:
    """The options a run's report was (or would be) made with, from its report_args."""
    return options_parser().parse_args([run_dir, *report_args])
