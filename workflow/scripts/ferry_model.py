"""The run report's model: made of what ferry_run.py read of the run directory, nothing else.
report.json is this model as it is; ferry_markdown.py and ferry_html.py render it. Its shape:
docs/pipeline.md, "The report".

    build(run, opts, complete) -> report
"""

from __future__ import annotations

import datetime as dt
import os
import time
from collections import Counter, defaultdict

import ferry_config
import ferry_docs
from ferry_run import timing_key
from ferry_run_dir import DELETED, DELETIONS, RECORDS, SHARDED, shard_ids

# The report's own version: 2 since partitions have a `state` and the report its `jobs`
# (report.json files before it have none).
VERSION = 2
# Its schema (workflow/schemas/report.schema.json), with the worker's words for its states.
SCHEMA = ferry_docs.pipeline_schema("report")
SCHEMA["properties"]["version"]["const"] = VERSION
SCHEMA["properties"]["status"]["enum"] = list(ferry_docs.STATES["phase"])
SCHEMA["$defs"]["partition"]["properties"]["state"]["enum"] = list(ferry_docs.STATES["job"])
_VALIDATOR = ferry_docs.validator(SCHEMA)
STEP_ORDER = list(RECORDS)
# The steps that run once a phase (not per partition), the timeline's top lanes.
SINGLE_STEPS = [s for s in STEP_ORDER if "{part}" not in RECORDS[s].log and s != "replicate"]
VERIFY_KEYS = ["same", "differ", "missing_on_dst", "missing_on_src", "error"]
COPY_FILE_KEYS = ["copied", "skipped", "metadata_only", "replaced", "removed", "ignored", "failed"]
PLAN_KEYS = [
    "compare",
    "source",
    "dest",
    "to_copy",
    "unchanged",
    "extra_on_dest",
    # With dest.files, what the final pass's prune judges its deletions by (prune.max_delete).
    "dest_dirs",
    "prune_dirs",
    # Deletions newer than everything at the source: the final pass's prune refuses them.
    "newer_deletions",
    "partitioning",
    "verify_scope",
]


def iso(epoch: float | None) -> str | None:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).isoformat(timespec="seconds") if epoch else None


def job_failure(stage: str, job: dict, part: str | None = None) -> dict:
    """A job that ended without saying which files failed: its log's last words."""
    where = {"partition": part} if part is not None else {}
    return {"stage": stage, **where, "error": job["error"]}


def preparation_failures(run: dict) -> list[dict]:
    """Why there is no plan: the last words of whichever listing or planning step failed."""
    if run["plan"] is not None:
        return []
    return run["preparation"] or [
        {"stage": "plan", "error": "no plan was made (listing or planning did not finish)"}
    ]


def job_seconds(job: dict) -> float | None:
    return round(job["timing"]["seconds"], 3) if job["timing"] else None


def copy_row(job: dict) -> dict:
    row = {"id": job["id"], "files": job["files"], "bytes": job["bytes"], "state": job["state"]}
    doc = job["doc"]
    if doc:
        files = doc["files"]
        row |= {key: files[key] for key in ("copied", "skipped", "metadata_only", "ignored")}
        row |= {
            "failed": files["failed"],
            "bytes_copied": doc["bytes"]["copied"],
            "retries": doc["retries"]["total"],
            "worker_seconds": doc["seconds"],
        }
    return row | {"job_seconds": job_seconds(job)}


def copies(run: dict) -> dict:
    """The copy partitions: a row each, their totals, and what they failed or left out."""
    files, byts = dict.fromkeys(COPY_FILE_KEYS, 0), {"copied": 0, "skipped": 0}
    retries, by_status = 0, Counter()
    rows, failures, ignored = [], [], []
    for job in run["copy"]:
        rows.append(copy_row(job))
        doc = job["doc"]
        if doc is None:
            if job["error"]:
                failures.append(job_failure("copy", job, job["id"]))
            continue
        for key in files:
            files[key] += doc["files"][key]
        for key in byts:
            byts[key] += doc["bytes"][key]
        retries += doc["retries"]["total"]
        by_status.update(doc["retries"]["by_status"])
        failures += [{"stage": "copy", "partition": job["id"], **f} for f in doc["failures"]]
        ignored += [{"partition": job["id"], **item} for item in doc["ignored"]]
    return {
        "rows": rows,
        "files": files,
        "bytes": byts,
        "retries": {"total": retries, "by_status": dict(sorted(by_status.items()))},
        "failures": failures,
        "ignored": ignored,
    }


# What a verify compares, in the worker's words (`compared` in its document), and the report's.
COMPARED_WORDS = {"size": "sizes", "md5": "MD5s", "metadata": "metadata (mtime, mode, owner…)"}


def compared_words(compared: list[str]) -> str:
    """What a verify compared, for a person: ", by sizes", ", by sizes and MD5s", ", by sizes,
    MD5s and …"; nothing where no verify ran."""
    words = [COMPARED_WORDS.get(c, c) for c in compared]
    if not words:
        return ""
    return ", by " + (words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}")


def verifies(run: dict) -> dict:
    totals = dict.fromkeys(VERIFY_KEYS, 0)
    rows, failures, compared = [], [], []
    for job in run["verify"]:
        row = {"id": job["id"], "files": job["files"], "bytes": job["bytes"], "state": job["state"]}
        doc = job["doc"]
        if doc:
            row |= {key: doc[key] for key in VERIFY_KEYS} | {"worker_seconds": doc["seconds"]}
            for key in VERIFY_KEYS:
                totals[key] += doc[key]
            compared += [c for c in doc["compared"] if c not in compared]
            failures += [
                {"stage": "verify", "partition": job["id"], **entry}
                for entry in doc["entries"]
                if entry["status"] != "same"
            ]
        elif job["error"]:
            failures.append(job_failure("verify", job, job["id"]))
        rows.append(row | {"job_seconds": job_seconds(job)})
    return {"rows": rows, "totals": totals, "failures": failures, "compared": compared}


def prune_jobs(run: dict) -> list[tuple[str | None, dict]]:
    """(part, job): one per part of the plan's files to delete, then the directories' (None)."""
    return [(job["id"], job) for job in run["prune"]] + [(None, run["prune_dirs"])]


def pruning(run: dict) -> tuple[dict | None, list[dict]]:
    """The prune jobs' documents as one, in the shape of one: counts and requests summed, the
    refusal (in the config's terms) and warning of the first that gave one; what the plan meant
    to delete; the deletion lists the jobs left; and every failure, named by its part. A final
    pass whose plan refused its prune before any copy has no prune job: its refusal, then."""
    failures, docs = [], []
    for part, job in prune_jobs(run):
        where = {"partition": part} if part is not None else {}
        doc = job["doc"]
        if doc is None:
            if job["error"]:
                failures.append(job_failure("prune", job, part))
            continue
        docs.append(doc)
        failures += [{"stage": "prune", **where, **f} for f in doc["failures"]]
    if not docs:
        by_plan, by_guard = plan_refusal(run), guard_refusal(run)
        if by_plan or by_guard:
            return none_deleted(by_plan or by_guard, "plan" if by_plan else "pipeline"), failures
        return None, failures
    refused = next((d["refused"] for d in docs if d["refused"]), None)
    if refused:
        refused = ferry_config.in_config_terms(refused)
        failures.insert(0, {"stage": "prune", "error": f"prune refused: {refused}"})
    summed = {key: sum(d[key] for d in docs) for key in PRUNE_COUNTS}
    return {
        "dry_run": docs[0]["dry_run"],
        **summed,
        "jobs": len(docs),
        "refused": refused,
        "refused_by": "prune" if refused else None,
        "warning": next((d["warning"] for d in docs if d["warning"]), None),
        "planned": planned_deletions(run["plan"]),
        # The deletion lists live in the run directory, wherever the engine ran prune from.
        "log": os.path.dirname(DELETED["prune"]) + "/",
        "lists": [job["deleted"] for _, job in prune_jobs(run) if job.get("deleted")],
        "requests": {k: sum(d["requests"][k] for d in docs) for k in ferry_docs.REQUEST_KINDS},
    }, failures


PRUNE_COUNTS = ("deleted", "would_delete", "dirs", "dirs_deleted", "failed")


def planned_deletions(plan: dict | None) -> dict | None:
    """What the plan found only on the destination: the files (and their bytes) and the
    directories they leave empty, all of which a final pass's prune deletes."""
    if plan is None:
        return None
    extra = plan["extra_on_dest"]
    return {"files": extra["files"], "bytes": extra["bytes"], "dirs": plan["prune_dirs"]}


def plan_refusal(run: dict) -> str | None:
    """Why `ferry plan` refused the final pass's prune (and so made no plan), in the config's
    terms: its log's last words (ferry_task.py says them again in those terms)."""
    for found in run["preparation"]:
        said = found["error"].removeprefix("ferry: ")
        if found["stage"] == "plan" and said.startswith(PLAN_REFUSED):
            return ferry_config.in_config_terms(said.removeprefix(PLAN_REFUSED))
    return None


# How `ferry plan` begins its refusal of the final pass's prune (worker/src/commands/plan.rs);
# a plan refused for another reason is no prune's.
PLAN_REFUSED = "plan refused: the final pass's prune would be refused: "
# How ferry_task.py's guard begins its refusal to run prune (a planned verify did not pass).
GUARD_REFUSED = "ferry: prune refused: "


def guard_refusal(run: dict) -> str | None:
    """Why the pipeline did not run prune at all: its guard's words in a prune job's log."""
    for _, job in prune_jobs(run):
        if (job["error"] or "").startswith(GUARD_REFUSED):
            return job["error"].removeprefix(GUARD_REFUSED)
    return None


# Who refused a pass's prune, as the report says it: prune itself, the plan before any copy, or
# the pipeline's guard (a planned verify that did not pass).
REFUSED_BY = {
    "prune": "nothing deleted",
    "plan": "by the plan, before any copy",
    "pipeline": "by the pipeline's guard before any deletion",
}


def none_deleted(refused: str, by: str) -> dict:
    """The prune of a pass refused before any prune job ran: nothing deleted, and why."""
    return {
        "dry_run": False,
        **dict.fromkeys(PRUNE_COUNTS, 0),
        "jobs": 0,
        "refused": refused,
        "refused_by": by,
        "warning": None,
        "planned": None,
        "log": None,
        "lists": [],
        "requests": dict.fromkeys(ferry_docs.REQUEST_KINDS, 0),
    }


def pruned(run: dict, prune: dict | None) -> bool:
    """Every prune job reported, and none refused."""
    done = all(job["doc"] for _, job in prune_jobs(run))
    return prune is not None and not prune["refused"] and done


def final_checking(run: dict) -> tuple[dict | None, list[dict]]:
    """The whole-tree check after prune: its counts, and a failure unless it passed."""
    doc = run["final_check"]["doc"]
    if doc is None:
        return None, []
    check = {key: doc[key] for key in VERIFY_KEYS} | {"seconds": doc["seconds"]}
    check["compared"] = doc["compared"]
    if doc["passed"]:
        return check, []
    error = "destination differs from source after prune"
    return check, [{"stage": "final_check", "error": error, **check}]


def dest_listing(run: dict, phase: str) -> tuple[dict, list[dict]]:
    """How the pass knew the destination (the state the last pass carried, or a fresh listing
    and why) and what it left for the next pass (docs/scale.md); and the carry step's failure."""
    summary = run["listings"]["list_dest"]
    listed = summary["carried"] if summary and phase != "baseline" else None
    carry = run["carry"]
    failures = [job_failure("carry", carry)] if carry["doc"] is None and carry["error"] else []
    left = carry["doc"]["doc"] if carry["doc"] else None
    return {"listed": listed, "left": left, "next": next_pass(run, listed, left, phase)}, failures


def next_pass(run: dict, listed: dict | None, left: dict | None, phase: str) -> str:
    """How the next pass will know the destination: "carried" from the state this pass left, or
    from the one it found, untouched because it wrote nothing (a pass takes the state with its
    first write: ferry copy/prune --carried); "unchanged" where it neither decided on the state
    nor wrote (stopped while listing: the next pass finds the state as this one did); else
    "fresh" (a listing of the whole destination)."""
    if left:
        return "carried"
    writers = [*run["copy"], *run["prune"], run["prune_dirs"]]
    wrote = any(job["state"] != "pending" for job in writers)
    if wrote:
        return "fresh"
    if listed is None:
        # A baseline's make_dest takes the state as it starts.
        return "fresh" if phase == "baseline" else "unchanged"
    return "carried" if listed["used"] else "fresh"


def listing_totals(run: dict) -> dict:
    """Each side's listing: its entries, its seconds (the longest list job's) and how many list
    jobs took it; and, with several, how the key space was cut among them (the shard step)."""
    shards = run["shards"]
    return {
        "source": _listing(run["listings"]["list_source"]),
        "dest": _listing(run["listings"]["list_dest"]),
        "shards": {"jobs": shards["jobs"], "basis": shards["basis"]} if shards else None,
    }


def _listing(listing: dict | None) -> dict | None:
    if listing is None:
        return None
    return {key: listing[key] for key in ("entries", "seconds", "jobs")}


def audit_failures(run: dict, phase: str) -> list[dict]:
    """The audit finds what only the destination holds in its plan: verify partitions look at
    the source's paths."""
    extra = run["plan"]["extra_on_dest"]["files"] if run["plan"] else 0
    if phase != "audit" or not extra:
        return []
    error = f"{extra} files only on the destination (listed in {DELETIONS})"
    return [{"stage": "audit", "error": error}]


def per_step(bench: dict[str, dict]) -> dict[str, dict]:
    """Each step's jobs, seconds (summed and longest), CPU, peak RSS and span (first start to
    last end: what a pass waits for, where `seconds` adds the partitions up)."""
    steps: dict[str, dict] = defaultdict(
        lambda: dict.fromkeys(("jobs", "seconds", "max_seconds", "cpu_seconds", "max_rss_mb"), 0)
    )
    spans: dict[str, tuple[float, float]] = {}
    for key, job in bench.items():
        step = key.split("/", 1)[0]
        s = steps[step]
        s["jobs"] += 1
        s["seconds"] += job["seconds"]
        s["max_seconds"] = max(s["max_seconds"], job["seconds"])
        s["cpu_seconds"] += job["cpu_seconds"] or 0.0
        s["max_rss_mb"] = max(s["max_rss_mb"], job["max_rss_mb"] or 0.0)
        end = job["start"] + job["seconds"]
        first, last = spans.get(step, (job["start"], end))
        spans[step] = (min(first, job["start"]), max(last, end))
    ordered = {step: steps[step] for step in STEP_ORDER if step in steps}
    ordered |= {step: s for step, s in steps.items() if step not in ordered}
    for step, s in ordered.items():
        s["span_seconds"] = spans[step][1] - spans[step][0]
        for key in ("seconds", "max_seconds", "cpu_seconds", "max_rss_mb", "span_seconds"):
            s[key] = round(float(s[key]), 3)
    return ordered


def per_node(bench: dict[str, dict], spans: list[dict]) -> dict[str, dict]:
    """What each node spent: its jobs, their seconds, CPU and peak RSS (from the timing files),
    the bytes its copies moved, and the attempts lost on it (a node lost, a job killed). Nodes
    by name; a job whose timing names no node is under "?"."""
    nodes: dict[str, dict] = defaultdict(
        lambda: dict.fromkeys(("jobs", "seconds", "cpu_seconds", "max_rss_mb", "bytes", "lost"), 0)
    )
    for job in bench.values():
        n = nodes[job["node"] or "?"]
        n["jobs"] += 1
        n["seconds"] += job["seconds"]
        n["cpu_seconds"] += job["cpu_seconds"] or 0.0
        n["max_rss_mb"] = max(n["max_rss_mb"], job["max_rss_mb"] or 0.0)
    for s in spans:
        if s["step"] == "copy":
            n = nodes[s["node"] or "?"]
            n["bytes"] += s["bytes"]
            n["lost"] += s["state"] == "lost"
    for n in nodes.values():
        for key in ("seconds", "cpu_seconds", "max_rss_mb"):
            n[key] = round(float(n[key]), 3)
    return dict(sorted(nodes.items()))


def requests(run: dict) -> dict:
    """{"total": {kind: n}, "by_step": {step: {kind: n}}} over every worker document the run
    left, failed jobs' included (their requests were made too), and the listings' summaries."""
    docs = list(run["listings"].items())
    docs += [(step, job["doc"]) for step in ("copy", "verify") for job in run[step]]
    # An attempt lost with its node made requests too: its last progress counts them.
    docs += [(step, p) for step in ("copy", "verify") for job in run[step] for p in job["lost"]]
    docs += [("prune", job["doc"]) for _, job in prune_jobs(run)]
    docs += [(step, run[step]["doc"]) for step in ("final_check", "carry")]
    by_step: dict[str, dict[str, int]] = {}
    for step, doc in docs:
        if doc is not None:
            counts = by_step.setdefault(step, dict.fromkeys(ferry_docs.REQUEST_KINDS, 0))
            for kind in counts:
                counts[kind] += doc["requests"][kind]
    total = {k: sum(c[k] for c in by_step.values()) for k in ferry_docs.REQUEST_KINDS}
    return {"total": total, "by_step": by_step}


def depth(run: dict) -> dict:
    """The copies' depth (the worker's `concurrency`): its mode and the largest limit settled on
    and tried over the partitions."""
    used = [job["doc"]["concurrency"] for job in run["copy"] if job["doc"]]
    return {
        "mode": used[0]["mode"] if used else None,
        "final": max((c["final"] for c in used), default=None),
        "peak": max((c["peak"] for c in used), default=None),
    }


def jobs(run: dict) -> list[dict]:
    """Every job with a time, for report.html's timeline: from its timing (its end is the
    file's time), or, for a copy or verify job without one (still running, or stopped), from
    its progress file up to its last rewrite."""
    spans = []
    shards = shard_ids(run["shards"]["jobs"]) if run["shards"] else []
    for step in STEP_ORDER:
        timing = run["timings"].get(timing_key(step)) if step in SINGLE_STEPS else None
        if timing:
            spans.append(timed(step, None, timing, 0, "done"))
        # A listing taken by several list jobs: one span each, in the step's lanes.
        for shard in shards if step in SHARDED else ():
            timing = run["timings"].get(timing_key(step, shard=shard))
            if timing:
                spans.append(timed(step, None, timing, 0, "done", shard))
    for step in ("copy", "verify"):
        for job in run[step]:
            spans += [progress_span(step, job["id"], p, "lost") for p in job["lost"]]
            timing, progress, doc = job["timing"], job["progress"], job["doc"]
            size = (doc["bytes"]["copied"] if step == "copy" else job["bytes"]) if doc else 0
            if timing:
                spans.append(timed(step, job["id"], timing, size, job["state"]))
            elif progress:
                spans.append(progress_span(step, job["id"], progress, job["state"]))
    return spans


def progress_span(step: str, part: str, progress: dict, state: str) -> dict:
    """A job's span from its progress file, up to its last rewrite."""
    seconds = progress["updated"] - progress["started"]
    out = span(step, part, progress["started"], seconds, progress["bytes"]["done"], state)
    return out | {"node": progress.get("node") or progress["host"]}


def lost_jobs(run: dict) -> list[dict]:
    """Every copy or verify attempt that never finished and was run again (its node lost, or its
    job killed): where it ran, how far it got, and where the job then ran."""
    return [
        {
            "step": step,
            "part": job["id"],
            "node": p.get("node") or p["host"],
            "bytes_done": p["bytes"]["done"],
            "rerun_on": job["timing"]["node"] if job["timing"] else None,
        }
        for step in ("copy", "verify")
        for job in run[step]
        for p in job["lost"]
    ]


def timed(step: str, part, timing: dict, size: int, state: str, shard=None) -> dict:
    """A job's span from its timing file, which names where it ran."""
    out = span(step, part, timing["start"], timing["seconds"], size, state, shard)
    return out | {"node": timing["node"]}


def span(step: str, part, start: float, seconds: float, size: int, state: str, shard=None) -> dict:
    """One job on the timeline; `node`: where it ran (its Slurm node, else its machine)."""
    return {
        "step": step,
        "part": part,
        "shard": shard,
        "node": None,
        "start": start,
        "end": start + seconds,
        "bytes": size,
        "state": state,
    }


def totals(run: dict, copy: dict, verify: dict, prune, final_check, dest) -> dict:
    plan = run["plan"] or {}
    source, planned = plan.get("source", {}), plan.get("to_copy", {})
    return {
        "files": {"source": source.get("files"), "planned": planned.get("files"), **copy["files"]},
        "bytes": {"source": source.get("bytes"), "planned": planned.get("bytes"), **copy["bytes"]},
        "retries": copy["retries"],
        "partitions": {
            "copy": len(copy["rows"]),
            "copy_done": sum(r["state"] == "done" for r in copy["rows"]),
            "verify": len(verify["rows"]),
            "verify_done": sum(r["state"] == "done" for r in verify["rows"]),
        },
        "verify": verify["totals"],
        # What the partitions' verify compared (the worker's `compared`; none when none ran).
        "verify_compared": verify["compared"],
        "prune": prune,
        "final_check": final_check,
        "dest_listing": dest,
        "listings": listing_totals(run),
        "requests": requests(run),
        "depth": depth(run),
    }


def times(run: dict, copy: dict, verify: dict, spans: list[dict], now: float) -> dict:
    bench = run["timings"]
    first = min((job["start"] for job in bench.values()), default=None)
    return {
        "elapsed_seconds": round(now - first, 3) if first else None,
        "first_job_started_at": iso(first),
        "job_seconds": round(sum(job["seconds"] for job in bench.values()), 3),
        "worker_copy_seconds": round(sum(r.get("worker_seconds", 0) for r in copy["rows"]), 3),
        "worker_verify_seconds": round(sum(r.get("worker_seconds", 0) for r in verify["rows"]), 3),
        "per_step": per_step(bench),
        "per_node": per_node(bench, spans),
    }


def finished(run: dict, opts, copy: dict, verify: dict, prune, final_check) -> bool:
    """Every step the phase needs left its result: an engine that carries on past a failed step
    (Nextflow) runs the report anyway, and a step that never ran is no success."""
    return (
        run["plan"] is not None
        and all(r["state"] == "done" for r in copy["rows"] + verify["rows"])
        and (opts.phase != "final" or pruned(run, prune))
        and (not opts.final_check or final_check is not None)
    )


def build(run: dict, opts, complete: bool = True) -> dict:
    """The report of the run: opts are its report_args (ferry_run.options); complete=False for
    the partial report of a run that ended in an error."""
    copy, verify = copies(run), verifies(run)
    prune, prune_failures = pruning(run) if opts.phase == "final" else (None, [])
    final_check, check_failures = final_checking(run) if opts.phase == "final" else (None, [])
    dest, carry_failures = dest_listing(run, opts.phase)
    failures = preparation_failures(run) + copy["failures"] + verify["failures"] + prune_failures
    failures += carry_failures + audit_failures(run, opts.phase) + check_failures
    whole = complete and finished(run, opts, copy, verify, prune, final_check) and not failures
    now = time.time()
    plan = run["plan"]
    spans = jobs(run)
    report = {
        "version": VERSION,
        "status": "complete" if whole else "incomplete",
        "run_name": opts.run_name,
        "phase": opts.phase,
        "pass": opts.pass_,
        "source": opts.source,
        "dest": opts.dest,
        "checksum_verified": opts.checksum,
        "generated_at": iso(now),
        "plan": {key: plan[key] for key in PLAN_KEYS} if plan else None,
        "totals": totals(run, copy, verify, prune, final_check, dest),
        "time": times(run, copy, verify, spans, now),
        "partitions": copy["rows"],
        "verify_partitions": verify["rows"],
        "jobs": spans,
        "lost_jobs": lost_jobs(run),
        "failures": failures,
        "ignored": copy["ignored"],
    }
    return check(report, f"the report of {opts.run_dir}")


def check(report: dict, where: str) -> dict:
    """The report, when it is what its schema says; else a DocumentError naming where and the
    key that is missing or wrong."""
    return ferry_docs.validate(_VALIDATOR, report, where, f"a ferry report (version {VERSION})")
