"""The run report of one phase: report.json (for machines) and report.md (for people).

One command for both engines (docs/pipeline.md, "The report"):

    ferry_report.py build RUN_DIR --run-name N --phase P [--pass K] --source S --dest D [--checksum]
                          [--final-check] [--final-checksum] [--history DIR] [--json FILE --md FILE | --by-status]

(the options after RUN_DIR: ferry_config.py's run.report_args). With --history (the run
directory as it is on disk), the run's record is appended to the migration's history and the
report carries the history and the projection of the final pass (ferry_history.py).

Built by scanning the run directory rather than from a list of inputs, so the same code serves a
finished run (everything present) and a failed one (whatever it left: then the report is
report-incomplete.{json,md}, and the successful re-run writes the real one). The partitions the
report expects come from plan/plan.json; files of other partitions in the directory (left from an
older plan) are ignored.

Sources, the same whichever engine ran the steps: the worker's `--json` documents (counts,
bytes, retries, the worker's own seconds), and one timing file per step under benchmarks/
(a TSV with at least the columns s, cpu_time and max_rss: Snakemake's benchmark files, or what
ferry_task.py writes for both engines), whose modification time marks the step's end. Where each
record lives is run_dir.json (ferry_run_dir.py).
"""

import argparse
import csv
import datetime as dt
import os
import sys
import time
from collections import Counter, defaultdict

import ferry_history
import ferry_html
import ferry_run_dir
from ferry_run_dir import BENCHMARKS_DIR, LISTING_SUMMARIES, PLAN, RECORDS, records
from ferrylib import REQUEST_KINDS, load_json, write_json
from ferrylib import fmt_bytes as human_bytes

STEP_ORDER = list(RECORDS)
VERIFY_KEYS = ["same", "differ", "missing_on_dst", "missing_on_src", "error"]


def read_benchmark(path: str) -> dict | None:
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle, delimiter="\t"))
        end = os.path.getmtime(path)
    except (FileNotFoundError, OSError):
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
        "start": end - seconds,
    }


def benchmarks(run_dir: str) -> dict[str, dict]:
    """{'copy/part-00000': {...}, 'list_source': {...}, ...}"""
    found = {}
    root = os.path.join(run_dir, BENCHMARKS_DIR)
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            if not name.endswith(".tsv"):
                continue
            key = os.path.relpath(os.path.join(dirpath, name), root)[: -len(".tsv")]
            bench = read_benchmark(os.path.join(dirpath, name))
            if bench:
                found[key] = bench
    return found


def nonempty(path: str) -> bool:
    try:
        return os.path.getsize(path) > 0
    except OSError:
        return False


def failed_job(run_dir, stage, part):
    """A failure entry for a job that died without the worker's JSON: its log's last line says why."""
    return {
        "stage": stage,
        "partition": part,
        "error": last_log_line(records(stage, part, run_dir).log)
        or f"{stage} job failed without a report from the worker",
    }


def last_log_line(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            lines = [line.strip() for line in handle if line.strip()]
    except FileNotFoundError:
        return ""
    return lines[-1][:300] if lines else ""


def preparation_failures(run_dir: str) -> list[dict]:
    """Why there is no plan: the last words of whichever listing or planning step failed."""
    found = []
    for step in ("make_dest", "list_source", "list_dest", "plan"):
        line = last_log_line(records(step, root=run_dir).log)
        if line:
            found.append({"stage": step, "error": line})
    return found or [
        {"stage": "plan", "error": "no plan was made (listing or planning did not finish)"}
    ]


def stage_result(run_dir: str, stage: str, part: str) -> tuple[str, dict | None]:
    """(status, worker JSON) of one partition's copy or verify."""
    rec = records(stage, part, run_dir)
    done = load_json(rec.out)
    if done is not None:
        return "ok", done
    failed = load_json(rec.failed)
    if failed is not None or os.path.exists(rec.failed):
        return "failed", failed
    # Snakemake creates (empty) log files when it schedules a job, even one that then never
    # starts because its predecessor failed; only a worker that said something has run.
    if nonempty(rec.log):
        return "failed", None
    return "not run", None


def add_counts(total: dict, doc: dict, keys) -> None:
    for key in keys:
        total[key] = total.get(key, 0) + int(doc.get(key, 0) or 0)


def request_counts(doc: dict | None) -> dict[str, int]:
    """A worker document's Blob requests by kind, summed over whatever sides it splits them into
    ({"puts": 3, ...} or {"source": {...}, "dest": {...}}); missing or malformed counts as 0."""
    counts = dict.fromkeys(REQUEST_KINDS, 0)

    def add(node):
        for key, value in (node or {}).items():
            if isinstance(value, dict):
                add(value)
            elif key in counts and isinstance(value, (int, float)) and not isinstance(value, bool):
                counts[key] += int(value)

    add((doc or {}).get("requests") if isinstance(doc, dict) else None)
    return counts


def requests_by_step(run_dir: str, plan: dict | None) -> dict:
    """{"total": {kind: n}, "by_step": {step: {kind: n}}} over every worker JSON the run left,
    failed jobs' included (their requests were made too), and the listings' summaries."""
    docs: list[tuple[str, dict | None]] = []
    for step in ("list_source", "list_dest"):
        docs.append((step, load_json(os.path.join(run_dir, LISTING_SUMMARIES[step]))))
    for step, key in (("copy", "copy_partitions"), ("verify", "verify_partitions")):
        for spec in (plan or {}).get(key, []):
            rec = records(step, spec["id"], run_dir)
            docs.append((step, load_json(rec.out) or load_json(rec.failed)))
    for step in ("prune", "final_check"):
        rec = records(step, root=run_dir)
        docs.append((step, load_json(rec.out) or load_json(rec.failed)))
    by_step: dict[str, dict[str, int]] = {}
    for step, doc in docs:
        counts = request_counts(doc)
        if doc is not None:
            by_step[step] = {k: by_step.get(step, {}).get(k, 0) + n for k, n in counts.items()}
    total = {k: sum(c[k] for c in by_step.values()) for k in REQUEST_KINDS}
    return {"total": total, "by_step": by_step}


def depth_used(docs: list[dict]) -> dict:
    """The copies' depth (the worker's `concurrency`): its mode and the largest limit settled on
    and tried over the partitions."""
    depths = [d.get("concurrency") for d in docs if isinstance(d.get("concurrency"), dict)]

    def largest(key):
        return max(
            (int(c[key]) for c in depths if isinstance(c.get(key), (int, float))), default=None
        )

    return {
        "mode": depths[0].get("mode") if depths else None,
        "final": largest("final"),
        "peak": largest("peak"),
    }


def build(
    run_dir: str,
    run_name: str,
    phase: str,
    source: str,
    dest: str,
    complete: bool,
    final_check_expected: bool = False,
) -> dict:
    plan = load_json(os.path.join(run_dir, PLAN))
    bench = benchmarks(run_dir)
    failures: list[dict] = []
    ignored_entries: list[dict] = []
    if plan is None:
        failures.extend(preparation_failures(run_dir))

    files = {
        "copied": 0,
        "skipped": 0,
        "metadata_only": 0,
        "replaced": 0,
        "ignored": 0,
        "failed": 0,
    }
    byts = {"copied": 0, "skipped": 0}
    retries_total = 0
    retries_by_status: Counter = Counter()
    partitions = []
    copy_docs = []
    for spec in (plan or {}).get("copy_partitions", []):
        part = spec["id"]
        status, doc = stage_result(run_dir, "copy", part)
        row = {"id": part, "files": spec["files"], "bytes": spec["bytes"], "status": status}
        if doc:
            copy_docs.append(doc)
            add_counts(files, doc.get("files", {}), files.keys())
            add_counts(byts, doc.get("bytes", {}), byts.keys())
            retries = doc.get("retries", {}) or {}
            retries_total += int(retries.get("total", 0) or 0)
            retries_by_status.update(
                {k: int(v) for k, v in (retries.get("by_status") or {}).items()}
            )
            row.update(
                copied=doc.get("files", {}).get("copied"),
                skipped=doc.get("files", {}).get("skipped"),
                metadata_only=doc.get("files", {}).get("metadata_only"),
                ignored=doc.get("files", {}).get("ignored"),
                failed=doc.get("files", {}).get("failed"),
                bytes_copied=doc.get("bytes", {}).get("copied"),
                retries=retries.get("total", 0),
                worker_seconds=doc.get("seconds"),
            )
            for failure in doc.get("failures") or []:
                failures.append({"stage": "copy", "partition": part, **failure})
            ignored_entries.extend({"partition": part, **item} for item in doc.get("ignored") or [])
        elif status == "failed":
            failures.append(failed_job(run_dir, "copy", part))
        job = bench.get(f"copy/part-{part}")
        row["job_seconds"] = round(job["seconds"], 3) if job else None
        partitions.append(row)

    verify_totals = {key: 0 for key in VERIFY_KEYS}
    verify_rows = []
    for spec in (plan or {}).get("verify_partitions", []):
        part = spec["id"]
        status, doc = stage_result(run_dir, "verify", part)
        row = {"id": part, "files": spec["files"], "bytes": spec["bytes"], "status": status}
        if doc:
            add_counts(verify_totals, doc, VERIFY_KEYS)
            row.update(
                {key: doc.get(key, 0) for key in VERIFY_KEYS}, worker_seconds=doc.get("seconds")
            )
            for entry in doc.get("entries") or []:
                if entry.get("status") not in ("same", "="):
                    failures.append({"stage": "verify", "partition": part, **entry})
        elif status == "failed":
            failures.append(failed_job(run_dir, "verify", part))
        job = bench.get(f"verify/part-{part}")
        row["job_seconds"] = round(job["seconds"], 3) if job else None
        verify_rows.append(row)

    prune = None
    if phase == "final":
        rec = records("prune", root=run_dir)
        prune = load_json(rec.out) or load_json(rec.failed)
        if prune and prune.get("refused"):
            failures.append({"stage": "prune", "error": f"prune refused: {prune['refused']}"})
        elif prune is None and nonempty(rec.log):
            failures.append({"stage": "prune", "error": last_log_line(rec.log) or "prune failed"})
        for failure in (prune or {}).get("failures") or []:
            failures.append({"stage": "prune", **failure})
        if prune and prune.get("log"):
            # The deletion list lives in the run directory, wherever the engine ran prune from.
            prune = {**prune, "log": os.path.join("prune", os.path.basename(prune["log"]))}

    final_check = None
    if phase == "final":
        rec = records("final_check", root=run_dir)
        final_check = load_json(rec.out) or load_json(rec.failed)
        if final_check:
            final_check = {key: final_check.get(key, 0) for key in VERIFY_KEYS} | {
                "seconds": final_check.get("seconds")
            }
            if any(final_check[key] for key in VERIFY_KEYS if key != "same"):
                failures.append(
                    {
                        "stage": "final_check",
                        "error": "destination differs from source after prune",
                        **final_check,
                    }
                )

    per_step: dict[str, dict] = defaultdict(
        lambda: {
            "jobs": 0,
            "seconds": 0.0,
            "max_seconds": 0.0,
            "cpu_seconds": 0.0,
            "max_rss_mb": 0.0,
        }
    )
    spans: dict[str, tuple[float, float]] = {}
    for key, job in bench.items():
        step = key.split("/", 1)[0]
        stats = per_step[step]
        stats["jobs"] += 1
        stats["seconds"] += job["seconds"]
        stats["max_seconds"] = max(stats["max_seconds"], job["seconds"])
        stats["cpu_seconds"] += job["cpu_seconds"] or 0.0
        stats["max_rss_mb"] = max(stats["max_rss_mb"], job["max_rss_mb"] or 0.0)
        first, last = spans.get(step, (job["start"], job["start"] + job["seconds"]))
        spans[step] = (min(first, job["start"]), max(last, job["start"] + job["seconds"]))
    for step, (first, last) in spans.items():
        # The step's wall time with its jobs side by side (first start to last end): what a
        # pass waits for, where `seconds` adds the partitions up.
        per_step[step]["span_seconds"] = last - first
    ordered = {step: per_step[step] for step in STEP_ORDER if step in per_step}
    ordered.update({step: stats for step, stats in per_step.items() if step not in ordered})
    for stats in ordered.values():
        for key in ("seconds", "max_seconds", "cpu_seconds", "max_rss_mb", "span_seconds"):
            stats[key] = round(stats[key], 3)

    now = time.time()
    first_start = min((job["start"] for job in bench.values()), default=None)
    worker_copy_seconds = sum(p.get("worker_seconds") or 0 for p in partitions)
    worker_verify_seconds = sum(v.get("worker_seconds") or 0 for v in verify_rows)

    planned = (plan or {}).get("to_copy", {})
    # Every step the phase needs must have left its result: an engine that carries on past a
    # failed step (Nextflow) runs the report anyway, and a step that never ran is no success.
    finished = (
        plan is not None
        and all(p["status"] == "ok" for p in partitions)
        and all(v["status"] == "ok" for v in verify_rows)
        and (phase != "final" or (prune is not None and not prune.get("refused")))
        and (not final_check_expected or final_check is not None)
    )
    report = {
        "status": "complete" if complete and finished and not failures else "incomplete",
        "run_name": run_name,
        "phase": phase,
        "source": source,
        "dest": dest,
        "generated_at": dt.datetime.fromtimestamp(now, dt.UTC).isoformat(timespec="seconds"),
        "plan": {
            key: plan[key]
            for key in (
                "compare",
                "source",
                "dest",
                "to_copy",
                "unchanged",
                "extra_on_dest",
                "partitioning",
                "verify_scope",
            )
            if plan and key in plan
        }
        or None,
        "totals": {
            "files": {
                "source": (plan or {}).get("source", {}).get("files"),
                "planned": planned.get("files"),
                **files,
            },
            "bytes": {
                "source": (plan or {}).get("source", {}).get("bytes"),
                "planned": planned.get("bytes"),
                **byts,
            },
            "retries": {
                "total": retries_total,
                "by_status": dict(sorted(retries_by_status.items())),
            },
            "partitions": {
                "copy": len(partitions),
                "copy_ok": sum(p["status"] == "ok" for p in partitions),
                "verify": len(verify_rows),
                "verify_ok": sum(v["status"] == "ok" for v in verify_rows),
            },
            "verify": verify_totals,
            "prune": prune,
            "final_check": final_check,
            "requests": requests_by_step(run_dir, plan),
            "depth": depth_used(copy_docs),
        },
        "time": {
            "elapsed_seconds": round(now - first_start, 3) if first_start else None,
            "first_job_started_at": (
                dt.datetime.fromtimestamp(first_start, dt.UTC).isoformat(timespec="seconds")
                if first_start
                else None
            ),
            "job_seconds": round(sum(job["seconds"] for job in bench.values()), 3),
            "worker_copy_seconds": round(worker_copy_seconds, 3),
            "worker_verify_seconds": round(worker_verify_seconds, 3),
            "per_step": ordered,
        },
        "partitions": partitions,
        "verify_partitions": verify_rows,
        "failures": failures,
        "ignored": ignored_entries,
    }
    return report


def fmt_bytes(n) -> str:
    return human_bytes(n, decimals=2)


def fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def markdown(report: dict) -> str:
    t = report["totals"]
    lines = [
        f"# ferry {report['phase']} run `{report['run_name']}`: {report['status']}",
        "",
        f"- source: `{report['source']}`",
        f"- destination: `{report['dest']}`",
        f"- generated: {report['generated_at']}",
        "",
        "## Totals",
        "",
        "| | files | bytes |",
        "|---|---:|---:|",
        f"| at source | {fmt(t['files']['source'])} | {fmt_bytes(t['bytes']['source'])} |",
        f"| planned for copy | {fmt(t['files']['planned'])} | {fmt_bytes(t['bytes']['planned'])} |",
        f"| copied | {t['files']['copied']} | {fmt_bytes(t['bytes']['copied'])} |",
        f"| skipped by ferry (already there) | {t['files']['skipped']} | {fmt_bytes(t['bytes']['skipped'])} |",
        f"| of them, only metadata set (mode, owner, times, attributes) | {t['files']['metadata_only']} | |",
        f"| entries of another type replaced | {t['files']['replaced']} | |",
        f"| ignored by ferry (cannot exist at the destination) | {t['files']['ignored']} | |",
        f"| failed | {t['files']['failed']} | |",
        "",
    ]
    plan = report.get("plan") or {}
    if plan.get("to_copy"):
        lines += [
            f"Plan: {plan['to_copy'].get('new', 0)} new, {plan['to_copy'].get('changed', 0)} changed, "
            f"{plan['to_copy'].get('undecided', 0)} left to ferry's `--compare {plan.get('compare')}`, "
            f"{plan['to_copy'].get('metadata_only', 0)} with new metadata only, "
            f"{plan['to_copy'].get('type_changed', 0)} of another type before, "
            f"{plan['to_copy'].get('dirs', 0)} directories and nodes to make or update, "
            f"{plan.get('unchanged', 0)} unchanged; {plan.get('extra_on_dest', {}).get('files', 0)} files "
            "on the destination are not at the source."
            + (
                f" {plan['source']['symlinks_not_migrated']} symlinks are not migrated (blob storage has none)."
                if plan.get("source", {}).get("symlinks_not_migrated")
                else ""
            ),
            "",
        ]
    retries = t["retries"]
    by_status = ", ".join(f"{k}: {v}" for k, v in retries["by_status"].items()) or "none"
    v = t["verify"]
    lines += [
        f"Retries: {retries['total']} ({by_status}).",
        "",
        f"Verify ({plan.get('verify_scope', '-')} files): {v['same']} same, {v['differ']} differ, "
        f"{v['missing_on_dst']} missing on destination, {v['missing_on_src']} missing on source, {v['error']} errors.",
        "",
    ]
    if t["prune"] is not None:
        p = t["prune"]
        lines += [
            f"Prune: {p.get('deleted', 0)} deleted, {p.get('would_delete', 0)} would delete"
            + (" (dry run)" if p.get("dry_run") else "")
            + (f", refused: {p['refused']}" if p.get("refused") else "")
            + (f"; list in `{p['log']}`" if p.get("log") else "")
            + ".",
            "",
        ]
    if t["final_check"] is not None:
        fc = t["final_check"]
        lines += [
            f"Final check of the whole trees: {fc['same']} same, {fc['differ']} differ, "
            f"{fc['missing_on_dst']} missing on destination, {fc['missing_on_src']} extra on destination.",
            "",
        ]
    tm = report["time"]
    lines += [
        "## Where the time went",
        "",
        f"Elapsed since the first job started: {fmt(tm['elapsed_seconds'])} s; job time summed over all jobs: "
        f"{fmt(tm['job_seconds'])} s (of which ferry reported {fmt(tm['worker_copy_seconds'])} s copying and "
        f"{fmt(tm['worker_verify_seconds'])} s verifying). The gap between job time and the ferry seconds is "
        "start-up per job; elapsed beyond job time is scheduling (and, on a cluster, queueing).",
        "",
        "| step | jobs | wall s | longest s | CPU s | max RSS MiB |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for step, stats in tm["per_step"].items():
        lines.append(
            f"| {step} | {stats['jobs']} | {fmt(stats['seconds'])} | {fmt(stats['max_seconds'])} | "
            f"{fmt(stats['cpu_seconds'])} | {fmt(stats['max_rss_mb'])} |"
        )
    lines += [
        "",
        "### Copy partitions",
        "",
        "| partition | status | files | bytes | copied | skipped | failed | retries | ferry s | job s |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for p in report["partitions"]:
        lines.append(
            f"| {p['id']} | {p['status']} | {p['files']} | {fmt_bytes(p['bytes'])} | {fmt(p.get('copied'))} | "
            f"{fmt(p.get('skipped'))} | {fmt(p.get('failed'))} | {fmt(p.get('retries'))} | "
            f"{fmt(p.get('worker_seconds'))} | {fmt(p.get('job_seconds'))} |"
        )
    if not report["partitions"]:
        lines.append("| (nothing to copy) | | | | | | | | | |")
    lines += [
        "",
        "### Verify partitions",
        "",
        "| partition | status | files | same | differ | missing on dst | errors | ferry s | job s |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for p in report["verify_partitions"]:
        lines.append(
            f"| {p['id']} | {p['status']} | {p['files']} | {fmt(p.get('same'))} | {fmt(p.get('differ'))} | "
            f"{fmt(p.get('missing_on_dst'))} | {fmt(p.get('error'))} | {fmt(p.get('worker_seconds'))} | "
            f"{fmt(p.get('job_seconds'))} |"
        )
    if not report["verify_partitions"]:
        lines.append("| (nothing to verify) | | | | | | | | |")
    if report["ignored"]:
        lines += ["", "## Not migrated", ""]
        for item in report["ignored"][:50]:
            lines.append(f"- `{item.get('path')}`: {item.get('reason', '')}")
        if len(report["ignored"]) > 50:
            lines.append(f"- ... and {len(report['ignored']) - 50} more in report.json")
    if report.get("projection") is not None:
        lines += [
            "",
            "## Projection of the final pass",
            "",
            *ferry_history.projection_markdown(report["projection"]),
        ]
    if report.get("history") is not None:
        lines += [
            "",
            "## History of the migration",
            "",
            *ferry_history.history_markdown(report["history"]),
        ]
    lines += ["", "## Failures", ""]
    if report["failures"]:
        shown = report["failures"][:200]
        for f in shown:
            where = f"partition {f['partition']}" if "partition" in f else f["stage"]
            what = f.get("error") or f.get("reason") or f.get("status", "")
            path = f" `{f['path']}`" if f.get("path") else ""
            lines.append(f"- {f['stage']} ({where}){path}: {what}")
        if len(report["failures"]) > len(shown):
            lines.append(f"- ... and {len(report['failures']) - len(shown)} more in report.json")
    else:
        lines.append("None.")
    return "\n".join(lines) + "\n"


def write(report: dict, paths: dict[str, str], run_dir: str) -> None:
    """The report's three forms at paths {json, md, html} (ferry_run_dir.report_paths)."""
    write_json(paths["json"], report)
    tmp = f"{paths['md']}.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(markdown(report))
    os.replace(tmp, paths["md"])
    # The page people open (ferry_html.py).
    ferry_html.write(report, paths["html"], run_dir)


def write_incomplete(run_dir: str, report_args: list[str]) -> None:
    """onerror hook: record what the failed run achieved; never raise (the run already failed)."""
    try:
        if not os.path.isdir(run_dir):
            return
        args = parser().parse_args(["build", run_dir, *report_args])
        report = build(run_dir, args.run_name, args.phase, args.source, args.dest, complete=False)
        report["checksum_verified"] = args.checksum
        add_history(report, args, ended_in_error=True)
        paths = ferry_run_dir.report_paths(run_dir, complete=False)
        write(report, paths, run_dir)
        print(f"ferry: partial report in {paths['md']}", file=sys.stderr)
    except Exception as err:  # noqa: BLE001 - a broken partial report must not hide the real error
        print(f"ferry: could not write the partial report: {err}", file=sys.stderr)


def add_history(report: dict, args, ended_in_error: bool = False) -> None:
    """Append this run's record to the migration's history (--history) and put the history and
    the final pass's projection into the report. A history that cannot be written (a run
    directory this machine does not see) costs the report nothing but these sections."""
    if not args.history:
        return
    if not os.path.isdir(args.history):
        # The report runs where the run directory is not (an Azure Batch node): a history made
        # here would be lost with the node.
        print(
            f"ferry: no history: the run directory {args.history} is not on this machine",
            file=sys.stderr,
        )
        return
    try:
        ferry_history.record_run(
            args.history, report, ended_in_error=ended_in_error, pass_=args.pass_
        )
        records = ferry_history.load(ferry_history.run_root(args.history))
    except OSError as err:
        print(f"ferry: no history: {err}", file=sys.stderr)
        return
    report["history"] = records
    report["projection"] = ferry_history.project(
        records, checksum=args.checksum or args.final_checksum
    )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ferry_report.py", description="The run report of one pipeline phase."
    )
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="write the report of RUN_DIR")
    b.add_argument("run_dir")
    b.add_argument("--run-name", required=True)
    b.add_argument("--phase", required=True, choices=["baseline", "incremental", "final"])
    b.add_argument("--pass", dest="pass_", type=int, default=1, help="the pass of the phase")
    b.add_argument("--source", required=True, help="as it may be shown (no query string)")
    b.add_argument("--dest", required=True, help="as it may be shown (no query string)")
    b.add_argument("--checksum", action="store_true", help="the final verify compared MD5s")
    b.add_argument(
        "--final-check", action="store_true", help="the phase includes a final whole-tree check"
    )
    b.add_argument(
        "--final-checksum",
        action="store_true",
        help="the final pass verifies by MD5 (config checksum): the projection's assumption",
    )
    b.add_argument(
        "--history",
        metavar="DIR",
        help="the run directory on disk (absolute): the run's record goes to its run root's history",
    )
    b.add_argument("--json", dest="json_path", help="report JSON (default RUN_DIR/report.json)")
    b.add_argument("--md", dest="md_path", help="report Markdown (default RUN_DIR/report.md)")
    b.add_argument(
        "--by-status",
        action="store_true",
        help="name the files report-incomplete.* when the run is incomplete",
    )
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    report = build(
        args.run_dir,
        args.run_name,
        args.phase,
        args.source,
        args.dest,
        complete=True,
        final_check_expected=args.final_check,
    )
    report["checksum_verified"] = args.checksum
    add_history(report, args)
    paths = ferry_run_dir.report_paths(
        args.run_dir, complete=not args.by_status or report["status"] == "complete"
    )
    if args.json_path:
        paths["json"] = args.json_path
    if args.md_path:
        paths["md"] = args.md_path
        paths["html"] = os.path.splitext(args.md_path)[0] + ".html"
    write(report, paths, args.run_dir)
    print(f"ferry: report {report['status']}, {len(report['failures'])} failures", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
