"""report.md: the run report (ferry_model.py) rendered for people, section by section. It
renders; every number comes from the report as it is."""

from __future__ import annotations

import ferry_projection
from ferry_model import REFUSED_BY, compared_words
from ferry_run_dir import REPORT
from ferrylib import fmt_bytes as human_bytes

SHOWN_IGNORED = 50
SHOWN_FAILURES = 200


def fmt_bytes(n) -> str:
    return human_bytes(n, decimals=2)


def fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def heading(report: dict) -> list[str]:
    return [
        f"# ferry {report['phase']} run `{report['run_name']}`: {report['status']}",
        "",
        f"- source: `{report['source']}`",
        f"- destination: `{report['dest']}`",
        f"- generated: {report['generated_at']}",
        "",
    ]


def totals(t: dict) -> list[str]:
    files, byts = t["files"], t["bytes"]
    return [
        "## Totals",
        "",
        "| | files | bytes |",
        "|---|---:|---:|",
        f"| at source | {fmt(files['source'])} | {fmt_bytes(byts['source'])} |",
        f"| planned for copy | {fmt(files['planned'])} | {fmt_bytes(byts['planned'])} |",
        f"| copied | {files['copied']} | {fmt_bytes(byts['copied'])} |",
        f"| skipped by ferry (already there) | {files['skipped']} | {fmt_bytes(byts['skipped'])} |",
        f"| of them, only metadata set (mode, owner, times, attributes) | {files['metadata_only']} | |",
        f"| entries of another type replaced | {files['replaced']} | |",
        f"| of them, destination entries deleted (each replaced entry and all under it) | {files['removed']} | |",
        f"| ignored by ferry (cannot exist at the destination) | {files['ignored']} | |",
        f"| failed | {files['failed']} | |",
        "",
    ]


def plan_line(plan: dict | None) -> list[str]:
    if not plan:
        return []
    c = plan["to_copy"]
    symlinks = plan["source"]["symlinks_not_migrated"]
    return [
        f"Plan: {c['new']} new, {c['changed']} changed, "
        f"{c['undecided']} left to ferry's `--compare {plan['compare']}`, "
        f"{c['metadata_only']} with new metadata only, "
        f"{c['type_changed']} of another type before, "
        f"{c['dirs']} directories and nodes to make or update, "
        f"{plan['unchanged']} unchanged; {plan['extra_on_dest']['files']} files "
        "on the destination are not at the source."
        + (f" {symlinks} symlinks are not migrated (blob storage has none)." if symlinks else ""),
        "",
    ]


def checks(report: dict) -> list[str]:
    """Retries, verify, prune and the final check, a line each."""
    t = report["totals"]
    retries, v = t["retries"], t["verify"]
    by_status = ", ".join(f"{k}: {n}" for k, n in retries["by_status"].items()) or "none"
    scope = report["plan"]["verify_scope"] if report["plan"] else "-"
    lines = [
        f"Retries: {retries['total']} ({by_status}).",
        "",
        f"Verify ({scope} files{compared_words(t['verify_compared'])}): {v['same']} same, {v['differ']} differ, "
        f"{v['missing_on_dst']} missing on destination, {v['missing_on_src']} missing on source, "
        f"{v['error']} errors.",
        "",
    ]
    lines += listing_line(t["listings"])
    lines += dest_listing(t["dest_listing"])
    if (p := t["prune"]) is not None:
        lines += [prune_line(p), ""]
    if (fc := t["final_check"]) is not None:
        lines += [
            f"Final check of the whole trees{compared_words(fc['compared'])}: {fc['same']} same, {fc['differ']} differ, "
            f"{fc['missing_on_dst']} missing on destination, {fc['missing_on_src']} extra on destination.",
            "",
        ]
    return lines


def prune_line(p: dict) -> str:
    """What prune deleted (and of what the plan found to delete), where its lists are, or why
    it was refused."""
    if p["refused"]:
        by = REFUSED_BY[p["refused_by"]]
        return f"Prune refused ({by}): {p['refused']}"
    planned = p["planned"]
    of = (
        f" (the plan's deletions: {planned['files']} files, {fmt_bytes(planned['bytes'])}, "
        f"{planned['dirs']} directories)"
        if planned
        else ""
    )
    lists = ", ".join(f"`{path}`" for path in p["lists"]) or f"`{p['log']}`"
    return (
        f"Prune: {p['deleted']} files and symlinks and {p['dirs_deleted']} directories deleted, "
        f"{p['would_delete']} would delete"
        + (" (dry run)" if p["dry_run"] else "")
        + of
        + f"; the deleted paths in {lists}."
    )


def listing_line(listings: dict) -> list[str]:
    """What each side's listing held, and how many list jobs took it."""
    said = []
    for side, name in (("source", "source"), ("dest", "destination")):
        one = listings[side]
        if one:
            jobs = f" by {one['jobs']} list jobs" if one["jobs"] > 1 else ""
            said.append(f"{name} {one['entries']:,} entries{jobs} ({fmt(one['seconds'])} s)")
    if not said:
        return []
    shards = listings["shards"]
    cut = (
        f"; the key space cut in {shards['jobs']} ranges by "
        + ("the carried listing" if shards["basis"] == "carried" else "a scan of the source")
        if shards
        else ""
    )
    return [f"Listings: {', '.join(said)}{cut}.", ""]


def dest_listing(d: dict) -> list[str]:
    """How the pass knew the destination, and what it carried to the next."""
    listed, left = d["listed"], d["left"]
    out = []
    if listed and listed["used"]:
        out.append(
            f"Destination: not listed; planned against the state {listed['written_by']} left "
            f"({listed['probed']} entries probed on the destination, all as carried)."
        )
    elif listed:
        out.append(f"Destination: listed fresh ({listed['reason']}).")
    if left:
        out.append(f"Carried to the next pass: {left['entries']:,} entries.")
    elif d["next"] == "carried":
        out.append(
            f"Carried to the next pass: the state {listed['written_by']} left, untouched (this "
            "pass wrote nothing to the destination)."
        )
    elif d["next"] == "unchanged":
        out.append(
            "Carried to the next pass: the state as this pass found it (it stopped before it "
            "decided on it, and wrote nothing to the destination)."
        )
    else:
        out.append("Carried to the next pass: nothing (the next pass lists the destination fresh).")
    return [*out, ""]


def time_table(tm: dict) -> list[str]:
    lines = [
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
    for step, s in tm["per_step"].items():
        lines.append(
            f"| {step} | {s['jobs']} | {fmt(s['seconds'])} | {fmt(s['max_seconds'])} | "
            f"{fmt(s['cpu_seconds'])} | {fmt(s['max_rss_mb'])} |"
        )
    return lines


def node_table(nodes: dict[str, dict]) -> list[str]:
    """What each node spent, when the jobs ran on more than one."""
    if len(nodes) < 2:
        return []
    lines = [
        "",
        "### By node",
        "",
        "| node | jobs | wall s | CPU s | max RSS MiB | copied | copy attempts lost |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for node, n in nodes.items():
        lines.append(
            f"| {node} | {n['jobs']} | {fmt(n['seconds'])} | {fmt(n['cpu_seconds'])} | "
            f"{fmt(n['max_rss_mb'])} | {fmt_bytes(n['bytes'])} | {n['lost']} |"
        )
    return lines


def copy_table(rows: list[dict]) -> list[str]:
    lines = [
        "",
        "### Copy partitions",
        "",
        "| partition | state | files | bytes | copied | skipped | failed | retries | ferry s | job s |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for p in rows:
        counts = (p.get(k) for k in ("copied", "skipped", "failed", "retries", "worker_seconds"))
        lines.append(
            f"| {p['id']} | {p['state']} | {p['files']} | {fmt_bytes(p['bytes'])} | "
            + " | ".join(fmt(c) for c in counts)
            + f" | {fmt(p['job_seconds'])} |"
        )
    if not rows:
        lines.append("| (nothing to copy) | | | | | | | | | |")
    return lines


def verify_table(rows: list[dict]) -> list[str]:
    lines = [
        "",
        "### Verify partitions",
        "",
        "| partition | state | files | same | differ | missing on dst | errors | ferry s | job s |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    keys = ("same", "differ", "missing_on_dst", "error", "worker_seconds")
    for p in rows:
        lines.append(
            f"| {p['id']} | {p['state']} | {p['files']} | "
            + " | ".join(fmt(p.get(k)) for k in keys)
            + f" | {fmt(p['job_seconds'])} |"
        )
    if not rows:
        lines.append("| (nothing to verify) | | | | | | | | |")
    return lines


def ignored(items: list[dict]) -> list[str]:
    if not items:
        return []
    lines = ["", "## Not migrated", ""]
    lines += [f"- `{item['path']}`: {item['reason']}" for item in items[:SHOWN_IGNORED]]
    if len(items) > SHOWN_IGNORED:
        lines.append(f"- ... and {len(items) - SHOWN_IGNORED} more in {REPORT['json']}")
    return lines


def migration(report: dict) -> list[str]:
    """The projection of the final pass and the history, where the report carries them."""
    lines = []
    if report.get("projection") is not None:
        lines += ["", "## Projection of the final pass", ""]
        lines += projection_markdown(report["projection"])
    if report.get("history") is not None:
        lines += ["", "## History of the migration", ""]
        lines += history_markdown(report["history"])
    return lines


def failures(items: list[dict]) -> list[str]:
    lines = ["", "## Failures", ""]
    if not items:
        return lines + ["None."]
    for f in items[:SHOWN_FAILURES]:
        where = f"partition {f['partition']}" if "partition" in f else f["stage"]
        what = f.get("error") or f.get("reason") or f.get("status", "")
        path = f" `{f['path']}`" if f.get("path") else ""
        lines.append(f"- {f['stage']} ({where}){path}: {what}")
    if len(items) > SHOWN_FAILURES:
        lines.append(f"- ... and {len(items) - SHOWN_FAILURES} more in {REPORT['json']}")
    return lines


def lost(items: list[dict]) -> list[str]:
    """The attempts that never finished (a node lost, a job killed) and where each ran again."""
    if not items:
        return []
    lines = ["", "## Attempts lost and run again", ""]
    for j in items:
        again = f"ran again on {j['rerun_on']}" if j["rerun_on"] else "not run again yet"
        lines.append(
            f"- {j['step']} partition {j['part']} on {j['node']}: lost after "
            f"{fmt_bytes(j['bytes_done'])}; {again}"
        )
    return lines


def markdown(report: dict) -> str:
    lines = heading(report) + totals(report["totals"]) + plan_line(report["plan"])
    lines += checks(report) + time_table(report["time"]) + node_table(report["time"]["per_node"])
    lines += copy_table(report["partitions"]) + verify_table(report["verify_partitions"])
    lines += ignored(report["ignored"]) + migration(report) + failures(report["failures"])
    lines += lost(report["lost_jobs"])
    return "\n".join(lines) + "\n"


# --- the migration's history and the projection (ferry_history.py, ferry_projection.py) ---------


def deleted_files(rec: dict) -> int | None:
    """What the pass's prune deleted: 0 for a pass that runs none (baseline, incremental, audit),
    None where the record does not say (a final pass recorded before records said it)."""
    return None if rec["deleted"] is None else rec["deleted"]["files"]


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
        planned, copied = r["planned"], r["copied"]
        deleted = deleted_files(r)
        lines.append(
            f"| {r['run_dir'] or r['phase']} | {r['pass']} | {r['status']} | {r['engine']} | "
            f"{r['started'] or '-'} | {ferry_projection.duration(r['wall_seconds'])} | {r['source']['files'] or '-'} | "
            f"{planned['files']} | {human_bytes(planned['bytes'])} | {planned['deleted']} | "
            f"{'-' if deleted is None else deleted} | "
            f"{copied['files']} | {human_bytes(copied['bytes'])} | {r['verified']['files']} | "
            f"{r['failed']} | {r['retries']} | {ferry_projection.actual_requests(r):,} | {r['partitions']} |"
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
        f"**{ferry_projection.line(p)[0].upper() + ferry_projection.line(p)[1:]}.**",
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
            f"{ferry_projection.duration(b['projected_seconds'])} | {ferry_projection.duration(b['actual_seconds'])} | "
            f"{pct} | {b['projected_requests']:,} | {b['actual_requests']:,} |"
        )
    if not p["backtest"]:
        lines.append("| (no pass with a predecessor yet) | | | | | | | |")
    return lines
