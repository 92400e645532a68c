"""The run report as one self-contained HTML page (report.html beside report.json and report.md),
the same code for both engines: ferry_report.py writes it where it writes the other two.

    ferry_html.py RUN_DIR [--out FILE]     (re)build the page from RUN_DIR/report.json

What the page shows: the phase's totals; the migration history of every pass and its projection
of the final pass (workflow/scripts/ferry_history.py, as ferry_report.py put them in the report;
a run without a history shows itself as the only pass); delta and time per step per
pass; every copy and verify job on a timeline with its throughput; the failures.

Self-contained because it is read where it was made, often on a cluster's login node or from an
archive of the run, without network: plots are inline SVG drawn here (no JavaScript library, no
fonts, stylesheets or images fetched). A few lines of inline script check the page itself once it
has loaded: no error reported, nothing fetched, every plot (`svg.plot`) drew marks of a visible
size. The verdict goes to `document.body.dataset.checks` ("ok", or the failures), which a
headless browser reads back (tests/pipeline/test_report_html.py).
"""

from __future__ import annotations

import argparse
import datetime as dt
import html
import json
import os
import sys

import ferry_docs
import ferry_model
import ferry_run_dir
from ferry_run_dir import REPORT
from ferrylib import fmt_bytes

# One colour per step, in the pipeline's order (run_dir.json), so a step looks the same in
# every plot; "list" stands for both listings and making the destination.
COLOURS = {
    "list": "#7f8fa6",
    "list_source": "#7f8fa6",
    "list_dest": "#a4b0be",
    "make_dest": "#c8d0da",
    "plan": "#6ab04c",
    "copy": "#2e86de",
    "verify": "#f39c12",
    "prune": "#c0392b",
    "prune_dirs": "#e17055",
    "final_check": "#8e44ad",
    "replicate": "#16a085",
    "report": "#95a5a6",
    "planned": "#2e86de",
    "listing": "#7f8fa6",
}
OTHER_COLOUR = "#576574"
# The steps of a projected final pass (ferry_projection.project), in the order they happen.
PROJECTION_PARTS = ("listing", "plan", "copy", "verify", "prune", "final_check")
WIDTH = 860  # every plot's drawing width, px (the page is read at about 1400 px)


# ---------------------------------------------------------------------------------------------
# formatting


def esc(value) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def fmt_seconds(s) -> str:
    if s is None:
        return "-"
    s = float(s)
    if s < 60:
        return f"{s:.1f} s"
    if s < 3600:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.2f} h"


def fmt_count(n) -> str:
    if n is None:
        return "-"
    if isinstance(n, float) and not n.is_integer():
        return f"{n:,.1f}"
    return f"{int(n):,}"


def fmt_time(t) -> str:
    """A record's start or end, given as epoch seconds or ISO 8601: shown in UTC to the second."""
    if t is None or t == "":
        return "-"
    if isinstance(t, (int, float)):
        return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
    return str(t).replace("T", " ").split("+")[0].rstrip("Z")


def colour(step: str) -> str:
    return COLOURS.get(step, COLOURS.get(step.split("_")[0], OTHER_COLOUR))


# ---------------------------------------------------------------------------------------------
# SVG: every data-bearing shape has class "mark" (the page's checks count them)


def svg_open(name: str, height: int, title: str) -> list[str]:
    return [
        f'<svg class="plot" id="plot-{esc(name)}" role="img" aria-label="{esc(title)}" '
        f'width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" xmlns="http://www.w3.org/2000/svg">'
    ]


def rect(x, y, w, h, fill, tip: str, cls: str = "mark") -> str:
    # A zero-width bar is still drawn one pixel wide: a 0.1 s job must be visible on the plot.
    return (
        f'<rect class="{cls}" x="{x:.1f}" y="{y:.1f}" width="{max(w, 1):.1f}" height="{max(h, 1):.1f}" '
        f'fill="{fill}"><title>{esc(tip)}</title></rect>'
    )


def text(x, y, s, anchor="start", cls="lbl") -> str:
    return f'<text class="{cls}" x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}">{esc(s)}</text>'


def nice_max(v: float) -> float:
    """The axis end: 1, 2 or 5 times a power of ten at or above v."""
    if v <= 0:
        return 1.0
    power = 10 ** int(f"{v:e}".split("e")[1])
    for m in (1, 2, 5, 10):
        if m * power >= v:
            return float(m * power)
    return float(10 * power)


def y_axis(x0, y0, y1, top: float, fmt) -> list[str]:
    """Gridlines at 0, ½ and the top of a vertical axis from y0 (0) up to y1 (top)."""
    out = []
    for frac in (0, 0.5, 1):
        y = y0 - (y0 - y1) * frac
        out.append(f'<line class="grid" x1="{x0}" x2="{WIDTH - 10}" y1="{y:.1f}" y2="{y:.1f}"/>')
        out.append(text(x0 - 6, y + 4, fmt(top * frac), "end"))
    return out


def legend(steps, x: float, y: float) -> list[str]:
    out = []
    for step in steps:
        out.append(
            f'<rect x="{x:.1f}" y="{y - 9:.1f}" width="10" height="10" fill="{colour(step)}"/>'
        )
        out.append(text(x + 14, y, step))
        x += 24 + 7 * len(step)
    return out


def stacked_bars(name: str, title: str, columns: list[tuple[str, dict]], fmt) -> str:
    """One vertical bar per column, stacked by key (the steps); columns: [(label, {key: value})]."""
    keys = []
    for _label, parts in columns:
        keys += [k for k in parts if k not in keys]
    top = nice_max(max((sum(v or 0 for v in parts.values()) for _l, parts in columns), default=0))
    height, x0, y0, y1 = 260, 70, 210, 30
    out = svg_open(name, height, title) + y_axis(x0, y0, y1, top, fmt)
    slot = (WIDTH - x0 - 20) / max(len(columns), 1)
    bar = min(60, slot * 0.6)
    for i, (label, parts) in enumerate(columns):
        x = x0 + slot * i + (slot - bar) / 2
        y = y0
        for key in keys:
            value = parts.get(key) or 0
            if value <= 0:
                continue
            h = (y0 - y1) * value / top
            out.append(rect(x, y - h, bar, h, colour(key), f"{label}: {key} {fmt(value)}"))
            y -= h
        out.append(text(x + bar / 2, y0 + 16, label, "middle"))
        out.append(
            text(x + bar / 2, y - 4, fmt(sum(v or 0 for v in parts.values())), "middle", "val")
        )
    out += legend(keys, x0, height - 12)
    return "\n".join(out + ["</svg>"])


# ---------------------------------------------------------------------------------------------
# the data of each section


def single_run_history(report: dict) -> list[dict]:
    """The current run as the history's only record (the fields of ferry_history's the page
    reads; its requests unknown), for a run whose output directory has no history yet: the page
    then shows this pass alone rather than nothing."""
    t, tm = report["totals"], report["time"]
    plan = report["plan"]["to_copy"] if report["plan"] else dict.fromkeys(("files", "bytes"))
    return [
        {
            "phase": report["phase"],
            "pass": report["pass"],
            "status": report["status"],
            "started": tm["first_job_started_at"],
            "ended": report["generated_at"],
            "wall_seconds": tm["elapsed_seconds"],
            "source": {"files": t["files"]["source"], "bytes": t["bytes"]["source"]},
            "planned": {key: plan[key] for key in ("files", "bytes")},
            "copied": {"files": t["files"]["copied"], "bytes": t["bytes"]["copied"]},
            "failed": t["files"]["failed"],
            "requests": None,
            "steps": {
                step: {"seconds": stats["seconds"], "span": stats["span_seconds"]}
                for step, stats in tm["per_step"].items()
            },
        }
    ]


def step_seconds(value) -> float:
    """A step's time in a history record: its wall span (first start to last end), which adds
    up to the pass's time where jobs of one step ran side by side; else its summed seconds."""
    return value["span"] or value["seconds"] or 0.0


def request_total(rec: dict):
    """All Blob requests of a record (requests.total is {kind: count}); None: not known."""
    return None if rec["requests"] is None else sum(rec["requests"]["total"].values())


def load_history(root: str) -> tuple[list[dict], dict | None]:
    """(records, projection) from ferry_history, or ([], None) when there is none to read: the
    module is optional here, and a history that cannot be read must not cost the report."""
    try:
        import ferry_history  # noqa: PLC0415 - optional: the page degrades without it
        import ferry_projection
    except ImportError:
        return [], None
    try:
        history = ferry_history.load(root) or []
    except Exception as err:  # noqa: BLE001 - a broken history leaves the page without it
        print(f"ferry: {ferry_run_dir.REPORT['html']} without the history: {err}", file=sys.stderr)
        return [], None
    projection = None
    if history:
        try:
            projection = ferry_projection.project(history, phase="final")
        except Exception as err:  # noqa: BLE001
            print(
                f"ferry: {ferry_run_dir.REPORT['html']} without the projection: {err}",
                file=sys.stderr,
            )
    return history, projection


def pass_label(rec: dict) -> str:
    phase = rec["phase"]
    return f"{phase} {rec['pass']}" if rec["pass"] != 1 or phase == "incremental" else phase


# ---------------------------------------------------------------------------------------------
# the plots


def timeline(spans: list[dict], singles: list[dict]) -> str:
    """One lane per single step (per list job, when several took a listing) and per partition; a
    bar per job from its start to its end, labelled with its throughput (bytes over wall seconds
    of the job)."""
    t0 = min(s["start"] for s in spans + singles)
    t1 = max(s["end"] for s in spans + singles)
    span = max(t1 - t0, 1e-3)
    lanes = list(dict.fromkeys(("step", (s["step"], s.get("shard"))) for s in singles))
    lanes += [("part", p) for p in dict.fromkeys(s["part"] for s in spans)]
    lane_h, x0, top = 20, 130, 24
    height = top + lane_h * len(lanes) + 40
    out = svg_open("timeline", height, "copy and verify jobs over time")
    x_of = lambda t: x0 + (WIDTH - x0 - 20) * (t - t0) / span  # noqa: E731
    for frac in (0, 0.25, 0.5, 0.75, 1):
        x = x0 + (WIDTH - x0 - 20) * frac
        out.append(
            f'<line class="grid" x1="{x:.1f}" x2="{x:.1f}" y1="{top - 6}" y2="{height - 34}"/>'
        )
        out.append(text(x, height - 20, fmt_seconds(span * frac), "middle"))
    for i, (kind, name) in enumerate(lanes):
        y = top + i * lane_h
        label = f"part {name}" if kind == "part" else " ".join(str(n) for n in name if n)
        out.append(text(x0 - 8, y + 13, label, "end"))
        for s in singles if kind == "step" else spans:
            if ((s["step"], s.get("shard")) if kind == "step" else s["part"]) != name:
                continue
            seconds = s["end"] - s["start"]
            rate = s["bytes"] / seconds if seconds > 0 and s["bytes"] else None
            tip = (
                f"{s['step']} {('part ' + s['part']) if s['part'] else ''}"
                f"{('list job ' + s['shard']) if s.get('shard') else ''}: {fmt_seconds(seconds)}, "
                f"{fmt_bytes(s['bytes'])}"
                + (f", {fmt_bytes(rate)}/s" if rate else "")
                + ("" if s["state"] == "done" else f" ({s['state']})")
                + (f", on {s['node']}" if s.get("node") else "")
            )
            h = lane_h - 6 if kind == "step" else (lane_h - 6) / 2
            dy = 0 if kind == "step" or s["step"] == "copy" else h
            x = x_of(s["start"])
            w = x_of(s["end"]) - x
            out.append(
                rect(
                    x,
                    y + 2 + dy,
                    w,
                    h,
                    colour(s["step"]),
                    tip,
                    "mark" if s["state"] == "done" else "mark unfinished",
                )
            )
            if rate and w > 70 and s["step"] == "copy":
                out.append(text(x + 4, y + 2 + dy + h - 1, f"{fmt_bytes(rate)}/s", cls="inbar"))
    out += legend(
        ["copy", "verify"] + list(dict.fromkeys(s["step"] for s in singles)), x0, height - 4
    )
    return "\n".join(out + ["</svg>"])


def throughput_curve(spans: list[dict]) -> str | None:
    """Bytes per second of all copy jobs together over time: each job's average rate, summed over
    the jobs running at each moment (a step line)."""
    copies = [s for s in spans if s["step"] == "copy" and s["end"] > s["start"] and s["bytes"]]
    if not copies:
        return None
    times = sorted({s["start"] for s in copies} | {s["end"] for s in copies})
    t0, t1 = times[0], times[-1]
    steps = []
    for a, b in zip(times, times[1:]):
        rate = sum(
            s["bytes"] / (s["end"] - s["start"])
            for s in copies
            if s["start"] <= a and s["end"] >= b
        )
        steps.append((a, b, rate))
    top = nice_max(max(r for _a, _b, r in steps))
    height, x0, y0, y1 = 200, 90, 160, 20
    out = svg_open("throughput", height, "copy throughput over time") + y_axis(
        x0, y0, y1, top, lambda v: f"{fmt_bytes(v)}/s"
    )
    x_of = lambda t: x0 + (WIDTH - x0 - 20) * (t - t0) / max(t1 - t0, 1e-3)  # noqa: E731
    points = []
    for a, b, rate in steps:
        y = y0 - (y0 - y1) * rate / top
        points += [f"{x_of(a):.1f},{y:.1f}", f"{x_of(b):.1f},{y:.1f}"]
    out.append(
        f'<polyline class="mark line" fill="none" stroke="{colour("copy")}" stroke-width="2" '
        f'points="{" ".join(points)}"><title>all copy jobs together</title></polyline>'
    )
    for frac in (0, 0.5, 1):
        out.append(
            text(
                x0 + (WIDTH - x0 - 20) * frac, height - 18, fmt_seconds((t1 - t0) * frac), "middle"
            )
        )
    return "\n".join(out + ["</svg>"])


def projection_bar(projection: dict) -> str | None:
    parts = projection["steps"]
    total = sum(v or 0 for v in parts.values())
    if total <= 0:
        return None
    height, x0 = 70, 20
    out = svg_open("projection", height, "the projected final pass, part by part")
    x = x0
    for name in list(PROJECTION_PARTS) + [p for p in parts if p not in PROJECTION_PARTS]:
        value = parts.get(name) or 0
        if value <= 0:
            continue
        w = (WIDTH - x0 - 20) * value / total
        out.append(rect(x, 10, w, 26, colour(name), f"{name}: {fmt_seconds(value)}"))
        if w > 60:
            out.append(text(x + 4, 28, f"{name} {fmt_seconds(value)}", cls="inbar"))
        x += w
    out += legend([p for p in parts if parts.get(p)], x0, height - 8)
    return "\n".join(out + ["</svg>"])


def backtest_bars(backtest: list[dict]) -> str | None:
    """Projected against actual seconds of every pass that had a predecessor."""
    rows = [
        {
            "label": pass_label(b),
            "projected": b["projected_seconds"],
            "actual": b["actual_seconds"],
        }
        for b in backtest
    ]
    rows = [b for b in rows if b["projected"] is not None and b["actual"] is not None]
    if not rows:
        return None
    top = nice_max(max(max(b["projected"], b["actual"]) for b in rows))
    height, x0, y0, y1 = 220, 70, 170, 20
    out = svg_open("backtest", height, "projected against actual time of past passes") + y_axis(
        x0, y0, y1, top, fmt_seconds
    )
    slot = (WIDTH - x0 - 20) / len(rows)
    bar = min(30, slot * 0.3)
    for i, b in enumerate(rows):
        x = x0 + slot * i + slot / 2 - bar
        for j, (key, fill) in enumerate((("projected", "#b2bec3"), ("actual", colour("copy")))):
            h = (y0 - y1) * b[key] / top
            out.append(
                rect(
                    x + j * bar,
                    y0 - h,
                    bar - 2,
                    h,
                    fill,
                    f"{b['label']}: {key} {fmt_seconds(b[key])}",
                )
            )
        out.append(text(x + bar, y0 + 16, b["label"], "middle"))
    out += [
        f'<rect x="{x0}" y="{height - 17}" width="10" height="10" fill="#b2bec3"/>',
        text(x0 + 14, height - 8, "projected"),
        f'<rect x="{x0 + 90}" y="{height - 17}" width="10" height="10" fill="{colour("copy")}"/>',
        text(x0 + 104, height - 8, "actual"),
    ]
    return "\n".join(out + ["</svg>"])


# ---------------------------------------------------------------------------------------------
# the tables and sections


def table(head: list[str], rows: list[list], numeric_from: int = 1, cls: str = "") -> str:
    out = [
        f'<table class="{cls}"><thead><tr>'
        + "".join(f"<th>{esc(h)}</th>" for h in head)
        + "</tr></thead><tbody>"
    ]
    for row in rows:
        out.append(
            "<tr>"
            + "".join(
                f'<td class="num">{esc(c)}</td>' if i >= numeric_from else f"<td>{esc(c)}</td>"
                for i, c in enumerate(row)
            )
            + "</tr>"
        )
    if not rows:
        out.append(f'<tr><td colspan="{len(head)}" class="none">none</td></tr>')
    return "\n".join(out + ["</tbody></table>"])


def history_section(history: list[dict], own: bool) -> str:
    rows = []
    for rec in history:
        planned = rec["planned"]
        rows.append(
            [
                pass_label(rec),
                rec["status"],
                fmt_time(rec["started"]),
                fmt_seconds(rec["wall_seconds"]),
                fmt_count(rec["source"]["files"]),
                fmt_bytes(rec["source"]["bytes"]),
                fmt_count(planned["files"]),
                fmt_bytes(planned["bytes"]),
                fmt_count(rec["copied"]["files"]),
                fmt_count(rec["failed"]),
                fmt_count(request_total(rec)),
            ]
        )
    note = (
        ""
        if not own
        else '<p class="note">No migration history beside this run yet (it is written by '
        "every phase into the run's output directory): this pass is shown alone.</p>"
    )
    return note + table(
        [
            "pass",
            "status",
            "started (UTC)",
            "took",
            "source files",
            "source bytes",
            "planned files",
            "planned bytes",
            "copied",
            "failed",
            "Blob requests",
        ],
        rows,
        numeric_from=3,
    )


def per_pass_plots(history: list[dict]) -> str:
    delta = [(pass_label(r), {"planned": r["planned"]["files"] or 0}) for r in history]
    times = [
        (
            pass_label(r),
            {k: step_seconds(v) for k, v in r["steps"].items() if step_seconds(v)},
        )
        for r in history
    ]
    parts = [
        '<div class="plots">',
        "<figure>"
        + stacked_bars("delta", "files planned per pass", delta, fmt_count)
        + "<figcaption>The delta: files each pass found new or changed.</figcaption></figure>",
    ]
    if any(cols for _l, cols in times):
        parts.append(
            "<figure>"
            + stacked_bars("steps", "time per step per pass", times, fmt_seconds)
            + "<figcaption>Where each pass's time went, step by step.</figcaption></figure>"
        )
    return "\n".join(parts + ["</div>"])


def projection_section(projection: dict | None) -> str:
    if not projection:
        return (
            '<p class="note">No projection: it needs the migration history of earlier passes '
            "(workflow/scripts/ferry_history.py).</p>"
        )
    if not projection.get("ok", True):
        return f'<p class="note">No projection yet: {esc(projection.get("why_not") or "too few passes")}.</p>'
    out = [f'<p class="headline" id="projection-line">{esc(projection_line(projection))}</p>']
    final = projection.get("final_pass")
    if final:
        # Whether the final pass would go through as the migration stands (ferry_projection.verdict).
        clear = final["goes_through"] and not final["problems"]
        said = final["said"][:1].upper() + final["said"][1:]
        out.append(f'<p class="{"ok" if clear else "warn"}" id="final-pass">{esc(said)}.</p>')
    converging = projection["converging"]
    out.append(
        f'<p class="{"ok" if converging in ("converging", "steady") else "warn"}">The passes: '
        f"<b>{esc(converging)}</b>"
        + (f" ({esc(projection['why'])})" if projection["why"] else "")
        + ".</p>"
    )
    bar = projection_bar(projection)
    if bar:
        out.append(f"<figure>{bar}</figure>")
    assumptions = projection["assumptions"]
    if assumptions:
        out.append(
            "<details open><summary>Assumptions</summary><ul>"
            + "".join(f"<li>{esc(a)}</li>" for a in assumptions)
            + "</ul></details>"
        )
    backtest = projection["backtest"]
    if backtest:
        out.append("<h3>The projection on past passes</h3>")
        plot = backtest_bars(backtest)
        if plot:
            out.append(f"<figure>{plot}</figure>")
        out.append(
            table(
                ["pass", "projected", "actual", "error", "requests projected", "requests actual"],
                [
                    [
                        pass_label(b),
                        fmt_seconds(b["projected_seconds"]),
                        fmt_seconds(b["actual_seconds"]),
                        "-" if b["error_pct"] is None else f"{b['error_pct']:+.0f} %",
                        fmt_count(b["projected_requests"]),
                        fmt_count(b["actual_requests"]),
                    ]
                    for b in backtest
                ],
                numeric_from=1,
            )
        )
    return "\n".join(out)


def projection_line(projection: dict) -> str:
    """The projection in one sentence: ferry_history's own line, else made from its parts."""
    if projection.get("line"):
        # ferry_history's line continues a sentence ("a final pass …"); here it starts one.
        return projection["line"][:1].upper() + projection["line"][1:]
    steps = projection.get("steps") or {}
    shown = " + ".join(f"{name} {fmt_seconds(steps[name])}" for name in steps if steps.get(name))
    requests = projection.get("requests")
    return (
        f"A final pass started now would take ≈ {fmt_seconds(projection.get('seconds'))} ({shown})"
        + (f", with {fmt_count(requests)} Blob requests" if requests else "")
        + "."
    )


def totals_section(report: dict) -> str:
    t = report["totals"]
    tm = report["time"]
    cards = [
        (
            "at the source",
            f"{fmt_count(t['files']['source'])} files",
            fmt_bytes(t["bytes"]["source"]),
        ),
        ("planned", f"{fmt_count(t['files']['planned'])} files", fmt_bytes(t["bytes"]["planned"])),
        ("copied", f"{fmt_count(t['files']['copied'])} files", fmt_bytes(t["bytes"]["copied"])),
        (
            "failed",
            f"{fmt_count(t['files']['failed'])} files",
            f"{len(report['failures'])} failures",
        ),
        (
            "elapsed",
            fmt_seconds(tm["elapsed_seconds"]),
            f"{fmt_seconds(tm['job_seconds'])} of jobs",
        ),
        (
            "partitions",
            f"{t['partitions']['copy_done']}/{t['partitions']['copy']} copied",
            f"{t['partitions']['verify_done']}/{t['partitions']['verify']} verified",
        ),
    ]
    return (
        '<div class="cards">'
        + "".join(
            f'<div class="card"><div class="k">{esc(k)}</div><div class="v">{esc(v)}</div><div class="s">{esc(s)}</div></div>'
            for k, v, s in cards
        )
        + "</div>"
    )


def checks_section(report: dict) -> str:
    """A line each: what verify and the final check compared and found, what the copy replaced,
    and the deletions (what prune deleted, with links to its lists, or why it was refused)."""
    t = report["totals"]
    words = ferry_model.compared_words
    v, scope = t["verify"], report["plan"]["verify_scope"] if report["plan"] else "-"
    lines = [
        f"<b>Verify</b> ({esc(scope)} files{esc(words(t['verify_compared']))}): "
        + verify_counts(v, "missing on source")
    ]
    if (fc := t["final_check"]) is not None:
        lines.append(
            f"<b>Final check</b> of the whole trees{esc(words(fc['compared']))}: "
            + verify_counts(fc, "extra on destination")
        )
    files = t["files"]
    if files["replaced"]:
        lines.append(
            f"<b>Replaced</b>: {fmt_count(files['replaced'])} entries of another type at the "
            f"destination (with what was under them, {fmt_count(files['removed'])} entries deleted)"
        )
    lines.append(deletions_line(report))
    return '<ul class="checks">' + "".join(f"<li>{line}</li>" for line in lines) + "</ul>"


def verify_counts(v: dict, only_on_dest: str) -> str:
    return esc(
        f"{fmt_count(v['same'])} same, {fmt_count(v['differ'])} differ, "
        f"{fmt_count(v['missing_on_dst'])} missing on destination, "
        f"{fmt_count(v['missing_on_src'])} {only_on_dest}, {fmt_count(v['error'])} errors"
    )


def deletions_line(report: dict) -> str:
    """The pass's deletions: only a final pass deletes; the others say what it will find."""
    p = report["totals"]["prune"]
    if p is None and report["phase"] == "final":
        return "<b>Deletions</b>: none (prune did not run; see the failures)"
    if p is None:
        extra = report["plan"]["extra_on_dest"] if report["plan"] else None
        found = (
            f"; the plan found {fmt_count(extra['files'])} files ({fmt_bytes(extra['bytes'])}) "
            "only on the destination, for the final pass to delete"
            if extra and extra["files"]
            else ""
        )
        return f"<b>Deletions</b>: none (only the final pass deletes){esc(found)}"
    if p["refused"]:
        by = ferry_model.REFUSED_BY[p["refused_by"]]
        return f'<b>Deletions</b>: <span class="refused">prune refused ({esc(by)})</span>: {esc(p["refused"])}'
    planned = p["planned"]
    of = (
        f" of the plan's {fmt_count(planned['files'])} files ({fmt_bytes(planned['bytes'])}) and "
        f"{fmt_count(planned['dirs'])} directories"
        if planned
        else ""
    )
    done = (
        f"{fmt_count(p['would_delete'])} would be deleted (dry run)"
        if p["dry_run"]
        else f"{fmt_count(p['deleted'])} files and symlinks and "
        f"{fmt_count(p['dirs_deleted'])} directories deleted"
    )
    links = ", ".join(f'<a href="{esc(path)}">{esc(path)}</a>' for path in p["lists"])
    return (
        f"<b>Deletions</b>: {esc(done + of)}"
        + (f"; failed {fmt_count(p['failed'])}" if p["failed"] else "")
        + (f"; the deleted paths: {links}" if links else "")
    )


def timeline_section(report: dict) -> str:
    spans = [j for j in report["jobs"] if j["part"] is not None]
    singles = [j for j in report["jobs"] if j["part"] is None]
    if not spans and not singles:
        return '<p class="note">No job timings in the run directory: no timeline.</p>'
    out = [
        f"<figure>{timeline(spans, singles)}<figcaption>Each job from its start to its end (copy above, verify "
        "below in each partition's lane); the label is the job's bytes over its wall time.</figcaption></figure>"
    ]
    curve = throughput_curve(spans)
    if curve:
        out.append(
            f"<figure>{curve}<figcaption>All copy jobs together: each job's average rate, summed over the "
            "jobs running at each moment.</figcaption></figure>"
        )
    return "\n".join(out)


def nodes_section(report: dict) -> str:
    """What each node spent, when the jobs ran on more than one."""
    nodes = report["time"]["per_node"]
    if len(nodes) < 2:
        return ""
    rows = [
        [
            node,
            fmt_count(n["jobs"]),
            fmt_seconds(n["seconds"]),
            fmt_seconds(n["cpu_seconds"]),
            f"{n['max_rss_mb']:.0f} MiB",
            fmt_bytes(n["bytes"]),
            fmt_count(n["lost"]),
        ]
        for node, n in nodes.items()
    ]
    head = ["node", "jobs", "wall", "CPU", "max RSS", "copied", "copy attempts lost"]
    return "<h3>By node</h3>" + table(head, rows, numeric_from=1)


def failures_section(report: dict) -> str:
    rows = []
    for f in report["failures"][:500]:
        rows.append(
            [
                f.get("stage"),
                f.get("partition", "-"),
                f.get("path", "-"),
                f.get("error") or f.get("reason") or f.get("status", ""),
            ]
        )
    more = len(report["failures"]) - len(rows)
    return table(["step", "partition", "path", "why"], rows, numeric_from=99, cls="failures") + (
        f'<p class="note">… and {more} more in {ferry_run_dir.REPORT["json"]}.</p>'
        if more > 0
        else ""
    )


def partitions_section(report: dict) -> str:
    rows = [
        [
            p["id"],
            p["state"],
            fmt_count(p["files"]),
            fmt_bytes(p["bytes"]),
            fmt_count(p.get("copied")),
            fmt_count(p.get("skipped")),
            fmt_count(p.get("failed")),
            fmt_count(p.get("retries")),
            fmt_seconds(p.get("job_seconds")),
        ]
        for p in report["partitions"]
    ]
    return table(
        ["partition", "state", "files", "bytes", "copied", "skipped", "failed", "retries", "job"],
        rows,
        numeric_from=2,
    )


# ---------------------------------------------------------------------------------------------
# the page

STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px auto;max-width:1100px;color:#222;padding:0 16px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:15px} .meta{color:#555} .meta code{background:#f4f4f4;padding:1px 4px}
.status-complete{color:#2d7d32} .status-incomplete{color:#c0392b}
.cards{display:flex;flex-wrap:wrap;gap:10px} .card{border:1px solid #ddd;border-radius:6px;padding:8px 12px;min-width:140px}
.card .k{color:#666;font-size:12px} .card .v{font-size:18px;font-weight:600} .card .s{color:#666;font-size:12px}
table{border-collapse:collapse;margin:6px 0;font-size:13px} th,td{border:1px solid #ddd;padding:3px 8px;text-align:left}
th{background:#f6f6f6} td.num{text-align:right;font-variant-numeric:tabular-nums} td.none{color:#888;font-style:italic}
table.failures td{max-width:520px;overflow-wrap:anywhere}
figure{margin:8px 0} figcaption{color:#555;font-size:12px} .plots{display:flex;flex-wrap:wrap;gap:10px}
.plots svg{width:540px;height:auto}
svg.plot{max-width:100%;height:auto;background:#fff} svg .grid{stroke:#e5e5e5} svg .lbl{font-size:11px;fill:#444}
svg .val{font-size:10px;fill:#333} svg .inbar{font-size:10px;fill:#fff} svg .unfinished{opacity:.55}
ul.checks{padding-left:20px} .refused{color:#c0392b;font-weight:600}
.headline{font-size:16px} .ok{color:#2d7d32} .warn{color:#b9770e} .note{color:#666;font-style:italic}
"""

# The page's own checks, run when it has loaded: errors (script errors, resources that failed to
# load, console.error) are collected from the start, so this sits first in <head>.
CHECKS = """
(function(){
  var problems=[];
  window.addEventListener('error',function(e){problems.push('error: '+(e.message||(e.target&&e.target.outerHTML)||e));},true);
  var ce=console.error;console.error=function(){problems.push('console.error: '+[].slice.call(arguments).join(' '));return ce.apply(console,arguments);};
  function check(){
    var plots=document.querySelectorAll('svg.plot');
    for(var i=0;i<plots.length;i++){
      var marks=plots[i].querySelectorAll('.mark'),drawn=0;
      for(var j=0;j<marks.length;j++){var r=marks[j].getBoundingClientRect();if(r.width>0&&r.height>0)drawn++;}
      if(!drawn)problems.push('plot '+plots[i].id+' drew nothing');
    }
    var fetched=(performance.getEntriesByType&&performance.getEntriesByType('resource'))||[];
    for(var k=0;k<fetched.length;k++)problems.push('fetched '+fetched[k].name);
    document.body.dataset.plots=String(plots.length);
    document.body.dataset.checks=problems.length?problems.join('; '):'ok';
  }
  window.addEventListener('load',check);
})();
"""


def page(report: dict, history: list[dict], projection: dict | None) -> str:
    own = not history
    history = history or single_run_history(report)
    title = f"ferry {report['phase']} run {report['run_name']}: {report['status']}"
    body = [
        f"<h1>ferry {esc(report['phase'])} run <code>{esc(report['run_name'])}</code>: "
        f'<span class="status-{esc(report["status"])}">{esc(report["status"])}</span></h1>',
        f'<p class="meta">from <code>{esc(report["source"])}</code> to <code>{esc(report["dest"])}</code> · '
        f"generated {esc(fmt_time(report['generated_at']))} UTC</p>",
        totals_section(report),
        "<h2>Checks and deletions</h2>",
        checks_section(report),
        "<h2>The final pass, projected</h2>",
        projection_section(projection),
        "<h2>Migration history</h2>",
        history_section(history, own),
        per_pass_plots(history),
        "<h2>This pass over time</h2>",
        timeline_section(report),
        nodes_section(report),
        "<h2>Copy partitions</h2>",
        partitions_section(report),
        f"<h2>Failures ({len(report['failures'])})</h2>",
        failures_section(report),
    ]
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{esc(title)}</title>",
            f"<script>{CHECKS}</script>",
            f"<style>{STYLE}</style>",
            "</head><body>",
            *body,
            "</body></html>",
            "",
        ]
    )


def history_root(run_dir: str) -> str:
    """The run's output directory (<outdir>/<run_name>), where every phase appends its history."""
    return os.path.dirname(os.path.abspath(run_dir.rstrip("/")))


def write(report: dict, html_path: str) -> None:
    """The page of `report`, with the history and projection it carries (ferry_report.py puts
    them there with --history, for either engine); without them, the pass alone."""
    history, projection = report.get("history") or [], report.get("projection")
    tmp = f"{html_path}.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(page(report, history, projection))
    os.replace(tmp, html_path)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="ferry_html.py",
        description=f"{REPORT['html']} of a run directory, from its {REPORT['json']}",
    )
    p.add_argument("run_dir")
    p.add_argument("--report", help=f"the report JSON (default RUN_DIR/{REPORT['json']})")
    p.add_argument("--out", help="the page (default: the report's name with .html)")
    p.add_argument("--history", help="where the migration history is (default: RUN_DIR's parent)")
    args = p.parse_args(argv)
    source = args.report or ferry_run_dir.report_paths(args.run_dir, complete=True)["json"]
    with open(source, encoding="utf-8") as handle:
        report = json.load(handle)
    if report.get("version") != ferry_model.VERSION:
        p.error(
            f"{source}: a report of version {report.get('version', 1)}; this page renders version "
            f"{ferry_model.VERSION}: make the report again (ferry_report.py build)"
        )
    try:
        ferry_model.check(report, source)
    except ferry_docs.DocumentError as err:
        p.error(str(err))
    out = args.out or os.path.splitext(source)[0] + ".html"
    if "history" not in report:
        # A report made without --history (by hand): the history beside the run, if any.
        report["history"], report["projection"] = load_history(
            args.history or history_root(args.run_dir)
        )
    write(report, out)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
