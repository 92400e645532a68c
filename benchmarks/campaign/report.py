"""Results: machine description, markdown tables, charts, and the docs' generated blocks."""

from __future__ import annotations

import json
import platform
import subprocess
from pathlib import Path

from .common import RCLONE, REPO, SCENARIOS, GiB, KiB, Settings, first_line, log, rel


def machine() -> dict:
    cpu = "unknown"
    for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
        if line.startswith("Model name:"):
            cpu = line.split(":", 1)[1].strip()
    mem = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem = int(line.split()[1]) * KiB
    osname = "Linux"
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                osname = line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return {
        "nproc": int(first_line(["nproc"]) or 0),
        "cpu": cpu,
        "memory_gib": round(mem / GiB, 1),
        "os": osname,
        "kernel": platform.release(),
    }


def versions(scenario: str, s: Settings) -> dict:
    v = {"hyperfine": first_line(["hyperfine", "--version"])}
    if scenario == "local":
        v |= {
            "cp": first_line(["cp", "--version"]),
            "rsync": first_line(["rsync", "--version"]),
            "md5sum": first_line(["md5sum", "--version"]),
        }
    if scenario in ("azurite", "discard"):
        v["rclone"] = first_line([RCLONE, "version"])
    if scenario == "azurite":
        from importlib.metadata import version

        v["azure-storage-blob"] = (
            f"azure-storage-blob {version('azure-storage-blob')} (Python SDK peer)"
        )
        if (s.bin / "azcp" / "azcp").exists():
            v["azcp"] = first_line([str(s.bin / "azcp" / "azcp"), "--version"])
        try:
            v["azurite"] = (
                "azurite "
                + json.loads((REPO / "node_modules/azurite/package.json").read_text())["version"]
            )
        except OSError:
            v["azurite"] = "azurite unavailable"
        v["node"] = "node " + first_line(["node", "--version"])
    if scenario == "discard":
        v["go"] = first_line(["go", "version"])
        v["curl"] = " ".join(first_line(["curl", "--version"]).split()[:2])
    if scenario == "nfs":
        v |= {
            "fpart": first_line(["fpart", "-V"]),
            "rsync": first_line(["rsync", "--version"]),
            "cp": first_line(["cp", "--version"]),
            "cpio": first_line(["cpio", "--version"]),
            "libfuse": "libfuse " + first_line(["pkg-config", "--modversion", "fuse3"]),
        }
    if scenario == "partition":
        v["fpart"] = first_line(["fpart", "-V"])
        v["find"] = first_line(["find", "--version"])
    return v


def fmt(x, digits=2, none="–"):
    if x is None:
        return none
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.{digits}f}"


def compact(v):
    """A verification record without its empty fields, for one line of markdown."""
    if isinstance(v, dict):
        return {k: compact(x) for k, x in v.items() if x not in ([], "", None, {})}
    return v


def classes_recorded(res: dict) -> bool:
    return any("md5" in r for g in res["groups"] for r in g["rows"])


def concurrency_text(r: dict) -> str:
    """ferry's effective concurrency from its summaries (medians over runs): mode initial→final, peak."""
    c = r.get("concurrency")
    if not c:
        return "–" if "concurrency" not in r else "not reported"

    def n(x):
        return "–" if x is None else f"{x:,.0f}"  # a depth is a whole number; a median may be x.5

    return f"{c['mode']} {n(c['initial'])}→{n(c['final'])}, peak {n(c['peak'])}"


def row_context(r: dict) -> str:
    """Where a row ran (filesystems, user) and why it is set up so."""
    bits = []
    if r.get("src_fs") or r.get("dst_fs"):
        bits.append(
            f"{r.get('src_fs') or '?'} → {r.get('dst_fs') or '?'}, as {r.get('run_as') or '?'}"
        )
    text = f" ({'; '.join(bits)})" if bits else ""
    return text + (f". {r['note']}" if r.get("note") else "")


def render_markdown(res: dict, heading: int = 1) -> str:
    h = "#" * heading
    m = res["machine"]
    for g in res["groups"]:  # results written before groups named their binary
        g.setdefault("ferry_sha256", res["ferry"]["sha256"])
    lines = [
        f"{h} Benchmark campaign: {res['scenario']}"
        f"{'' if res.get('scale', 'full') == 'full' and not res['quick'] else ' (' + res.get('scale', 'quick') + ')'}",
        "",
        f"- Measured {res['date']} on {m['nproc']} × {m['cpu']}, {m['memory_gib']} GiB RAM, {m['os']}, kernel {m['kernel']}.",
        (
            f"- Groups were measured at different times with different ferry binaries: "
            f"{', '.join(sorted({g.get('ferry_sha256', '?') for g in res['groups']}))} (sha256 prefixes; "
            f"each group names its own). Latest: "
            if len({g.get("ferry_sha256") for g in res["groups"]}) > 1
            else "- "
        )
        + f"{res['ferry']['version']} (snapshot of the worker binary, sha256 {res['ferry']['sha256']}…, "
        f"worker commit {res['ferry']['worker_commit']}{', with uncommitted changes' if res['ferry'].get('worker_tree_modified') else ''}).",
        f"- At least {res['runs']} run(s) per row, in whole rotations (as many rounds as a group has rows, each "
        "row first once; a group's notes say when it ran fewer); before every run the row's `--prepare` and "
        "a sync of the scratch filesystem; "
        "wall and CPU are medians; CPU = user + system of the measured command (hyperfine); "
        "peak RSS from GNU time `%M`."
        if "rounds" in res["groups"][0]
        else f"- {res['runs']} run(s) per row, one fresh `--prepare` before each, row order rotated between rounds; "
        "wall and CPU are medians; CPU = user + system of the measured command (hyperfine); "
        "peak RSS from GNU time `%M`.",
        f"- Load average (1 min) when the rounds started: {res['load1']['min']}–{res['load1']['max']} "
        f"(the machine is shared; {m['nproc']} cores).",
        f"- Reproduce: `{res['command']}`"
        + (
            f" (last refreshed in part with `{res['partial_command']}`)"
            if res.get("partial_command")
            else ""
        ),
        "- Tools: " + "; ".join(" ".join(v.split()) for v in res["versions"].values()) + ".",
        "",
        f"{h}# Ratios: ferry ÷ peer (below 1: ferry takes less)",
        "",
        "Each ferry row is paired only with peers of its class: both put or check MD5, or neither; "
        "both make what they wrote durable (fsync, sync), or neither"
        + (
            " (here: the fastest such peer only)."
            if any(g.get("best_peer_only") for g in res["groups"])
            else "."
        )
        if classes_recorded(res)
        else None,
        "" if classes_recorded(res) else None,
        "| group | ferry | peer | wall | CPU | peak RSS |",
        "|---|---|---|---:|---:|---:|",
    ]
    lines = [x for x in lines if x is not None]
    for g in res["groups"]:
        for r in g["ratios"]:
            lines.append(
                f"| {g['id']} | {r['ferry']} | {r['peer']} | {fmt(r['wall'])} | {fmt(r['cpu'])} | {fmt(r['rss'])} |"
            )
    for g in res["groups"]:
        unit = g.get("throughput_unit", "MiB/s")
        has_server = any("server_cpu_median" in r for r in g["rows"])
        has_tp = bool(g["bytes"])
        lines += [
            "",
            f"{h}# {g['id']}: {g['title']}",
            "",
            f"Dataset: {g['dataset']}{'' if g.get('scale', 'full') == 'full' else ' (' + g['scale'] + ' of full scale)'}. "
            f"Measured {g['date']}, load {g['load1']['min']}–{g['load1']['max']}, "
            f"{g['seconds']} s for the group"
            + (f", {g['rounds']} round(s)" if "rounds" in g else "")
            + (
                f", ferry sha256 {g['ferry_sha256']}…"
                if len({x.get("ferry_sha256") for x in res["groups"]}) > 1
                else ""
            )
            + ".",
            "",
        ]
        head = ["row", "wall s (median)", "min–max"]
        if has_tp:
            head += [unit, "CPU s", "CPU s/GiB"]
        else:
            head += ["CPU s"]
        head += ["peak RSS MiB"]
        has_class = any("md5" in r for r in g["rows"])
        if has_class:
            head += ["MD5", "durable"]
        has_conc = any("concurrency" in r for r in g["rows"])
        if has_conc:
            head += ["concurrency"]
        if has_server:
            head += ["Azurite CPU s"]
        has_requests = any("requests_median" in r for r in g["rows"])
        if has_requests:
            head += ["requests", "in flight (avg)", "depth", "latency limit s", "wall ÷ limit"]
        head += ["ok runs"]
        lines += ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
        for r in g["rows"]:
            if "wall_median" not in r:
                lines.append(
                    "| "
                    + " | ".join(
                        [r["name"], "failed"] + [""] * (len(head) - 3) + [f"0/{len(r['runs'])}"]
                    )
                    + " |"
                )
                continue
            cells = [r["name"], fmt(r["wall_median"]), f"{fmt(r['wall_min'])}–{fmt(r['wall_max'])}"]
            if has_tp:
                tp = r["gb_per_s"] if unit == "GB/s" else r["mib_per_s"]
                cells += [fmt(tp), fmt(r["cpu_median"]), fmt(r["cpu_s_per_gib"])]
            else:
                cells += [fmt(r["cpu_median"])]
            cells += [fmt(r.get("rss_mib_median"), 1)]
            if has_class:
                cells += ["yes" if r.get("md5") else "no", "yes" if r.get("durable") else "no"]
            if has_conc:
                cells += [concurrency_text(r)]
            if has_server:
                cells += [fmt(r.get("server_cpu_median"))]
            if has_requests:
                cells += [
                    f"{r['requests_median']:,.0f}" if "requests_median" in r else "–",
                    fmt(r.get("inflight_avg_median"), 1),
                    str(r.get("depth", "–")),
                    fmt(r.get("latency_limit_s")),
                    fmt(r.get("wall_over_limit"), 1),
                ]
            cells += [f"{r['ok_runs']}/{len(r['runs'])}"]
            lines.append("| " + " | ".join(cells) + " |")
        targets = [(r["name"], t) for r in g["rows"] for t in r.get("targets", [])]
        if targets:
            lines.append("")
            for name, t in targets:
                lines.append(
                    f"- Target for {name}: {t['target']} — {'met' if t['met'] else 'missed'} "
                    f"(measured {fmt(t['value'], 3)})."
                )
        lines += ["", "Commands (run from the repo root):", ""]
        lines += [f"- {r['name']}: `{r['command']}`{row_context(r)}" for r in g["rows"]]
        v = g.get("verification") or {}
        if v:
            status = "passed" if v.get("ok") else "FAILED"
            detail = compact({k: val for k, val in v.items() if k != "ok"})
            text = (
                json.dumps(detail, ensure_ascii=False)
                .replace('"ok": true, ', "")
                .replace(', "ok": true', "")
            )
            lines += ["", f"Verification outside the timed runs: **{status}** — `{text[:900]}`"]
        for n in g.get("notes", []):
            lines += ["", n]
    return "\n".join(lines) + "\n"


def render_chart(res: dict, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter
    except ImportError:
        log("matplotlib is not installed (make setup installs it); no chart")
        return False
    labels, data = [], {"wall": [], "cpu": [], "rss": []}
    for g in res["groups"]:
        for r in g["ratios"]:
            labels.append(f"{g['id']}: {r['ferry']} ÷ {r['peer']}")
            for k in data:
                data[k].append(r[k] if r[k] else float("nan"))
    if not labels:
        return False
    height = 0.27
    fig, ax = plt.subplots(figsize=(10, 0.55 * len(labels) + 1.6))
    ys = range(len(labels))
    colors = {"wall": "#1f77b4", "cpu": "#ff7f0e", "rss": "#2ca02c"}
    names = {"wall": "wall time", "cpu": "CPU seconds", "rss": "peak RSS"}
    for i, k in enumerate(("wall", "cpu", "rss")):
        pos = [y + (i - 1) * height for y in ys]
        ax.barh(pos, data[k], height=height, color=colors[k], label=names[k])
        for y, v in zip(pos, data[k]):
            if v == v:  # not NaN
                ax.annotate(
                    f"{v:.2f}",
                    (v, y),
                    xytext=(3, 0),
                    textcoords="offset points",
                    va="center",
                    fontsize=6.5,
                )
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_xscale("log")
    values = [v for k in data for v in data[k] if v == v]
    lo, hi = min(values + [1.0]) / 1.3, max(values + [1.0]) * 1.5
    ax.set_xlim(lo, hi)
    # Plain numbers on the log axis: 0.5 and 2 read better than 5×10⁻¹ and 2×10⁰.
    ticks = [
        t
        for t in (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1, 1.5, 2, 3, 5, 10, 20, 50)
        if lo <= t <= hi
    ]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_yticks(list(ys))
    ax.set_yticklabels(labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("ferry ÷ peer (log scale; left of 1 = ferry uses less)")
    ax.set_title(
        f"ferry benchmark campaign '{res['scenario']}', {res['date'][:10]}, "
        f"load {res['load1']['min']}–{res['load1']['max']}",
        fontsize=10,
        pad=22,
    )
    ax.legend(fontsize=8, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, frameon=False)
    ax.grid(axis="x", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def render_sweep_chart(res: dict, path: Path) -> bool:
    """Throughput against --concurrency, one panel a group; the adaptive run drawn at the final
    concurrency its summary reported (a dashed line across when the binary reports none)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib is not installed (make setup installs it); no chart")
        return False
    groups = [g for g in res["groups"] if not g.get("confirms")]
    if not groups:
        return False
    # adaptive ÷ the fastest fixed value, as measured again by the confirmation group
    confirmed = {
        g["confirms"]: g["ratios"][0]["wall"]
        for g in res["groups"]
        if g.get("confirms") and g["ratios"]
    }
    cols = min(4, len(groups))
    nrows = -(-len(groups) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(3.6 * cols, 3.2 * nrows), squeeze=False)
    for ax, g in zip(axes.flat, groups):
        fixed = sorted(
            (r["depth"], r["mib_per_s"])
            for r in g["rows"]
            if r["role"] == "peer" and r.get("depth") and "mib_per_s" in r
        )
        if fixed:
            ax.plot(*zip(*fixed), marker="o", color="#1f77b4", label="fixed --concurrency")
        for r in g["rows"]:
            if r["role"] != "ferry" or "mib_per_s" not in r:
                continue
            final = (r.get("concurrency") or {}).get("final")
            if final:
                ax.plot(
                    [final],
                    [r["mib_per_s"]],
                    marker="*",
                    markersize=14,
                    color="#d62728",
                    linestyle="none",
                    label=f"adaptive (final {final:g})",
                )
            else:
                ax.axhline(
                    r["mib_per_s"],
                    color="#d62728",
                    linestyle="--",
                    label="adaptive (final not reported)",
                )
        ax.set_xscale("log", base=2)
        ax.set_xlabel("--concurrency", fontsize=8)
        ax.set_ylabel("MiB/s (median)", fontsize=8)
        again = (
            f"\nadaptive ÷ fastest fixed, again: {confirmed[g['id']]:.2f}"
            if g["id"] in confirmed
            else ""
        )
        ax.set_title(g["id"] + again, fontsize=9)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    for ax in list(axes.flat)[len(groups) :]:
        ax.set_visible(False)
    fig.suptitle(
        f"ferry throughput against --concurrency, {res['date'][:10]}, load "
        f"{res['load1']['min']}–{res['load1']['max']}",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def write_results(s: Settings, res: dict) -> None:
    s.results.mkdir(parents=True, exist_ok=True)
    base = s.results / res["scenario"]
    base.with_suffix(".json").write_text(json.dumps(res, indent=1, ensure_ascii=False) + "\n")
    base.with_suffix(".md").write_text(render_markdown(res))
    (render_sweep_chart if res["scenario"] == "sweep" else render_chart)(
        res, base.with_suffix(".png")
    )


DOCS = REPO / "docs" / "benchmarks.md"


def replace_block(text: str, name: str, body: str) -> str:
    """The text between `<!-- results:NAME:begin -->` and its end marker replaced; unchanged when
    the page has no such block."""
    begin, end = f"<!-- results:{name}:begin -->", f"<!-- results:{name}:end -->"
    if begin not in text or end not in text:
        return text
    pre, rest = text.split(begin, 1)
    _, post = rest.split(end, 1)
    return f"{pre}{begin}\n{body}{end}{post}"


def update_block(doc: Path, name: str, body: str) -> None:
    """`replace_block` on a page of the docs, in place."""
    if doc.exists():
        doc.write_text(replace_block(doc.read_text(), name, body))


def summary_block(results: dict[str, dict]) -> str:
    """When and how each scenario's recorded results were measured, and how long it took."""
    lines = [
        "| scenario | measured | scale | runs per row (at least) | groups | time in the groups | "
        "whole campaign | load (1 min) |",
        "|---|---|---|---:|---:|---:|---:|---|",
    ]
    for sc in SCENARIOS:
        res = results.get(sc)
        if res is None:
            lines.append(f"| `{sc}` | not recorded yet | | | | | | |")
            continue
        group_s = sum(g.get("seconds", 0) for g in res["groups"])
        lines.append(
            f"| `{sc}` | {res['date'][:16].replace('T', ' ')} | {res.get('scale', 'quick' if res['quick'] else 'full')} | "
            f"{res['runs']} | {len(res['groups'])} | {fmt(group_s / 60, 1)} min | "
            f"{fmt(res['seconds'] / 60, 1)} min | {res['load1']['min']}–{res['load1']['max']} |"
        )
    return (
        "\n".join(lines)
        + "\n\nA campaign refreshed in part (`--only`) keeps its other groups from earlier runs: "
        '"time in the groups" adds up every recorded group, "whole campaign" is the last invocation.\n'
    )


def findings_block(results: dict[str, dict]) -> str:
    """Each ferry row against the fastest peer of its class (ratios below 1: ferry takes less)."""
    lines = [
        "| scenario | group | ferry row | fastest peer of its class | wall | CPU | ferry |",
        "|---|---|---|---|---:|---:|---|",
    ]
    unclassed = []
    for sc, res in results.items():
        if not classes_recorded(res):
            unclassed.append(f"`{sc}`")
            continue
        for g in res["groups"]:
            best: dict[str, dict] = {}
            for r in g["ratios"]:
                if r["ferry"] not in best or r["wall"] > best[r["ferry"]]["wall"]:
                    best[r["ferry"]] = r
            for r in best.values():
                verdict = (
                    "faster"
                    if r["wall"] < 0.95
                    else "slower"
                    if r["wall"] > 1.05
                    else "on par (±5%)"
                )
                lines.append(
                    f"| `{sc}` | {g['id']} | {r['ferry']} | {r['peer']} | {fmt(r['wall'])} | "
                    f"{fmt(r['cpu'])} | {verdict} |"
                )
    if unclassed:
        lines += [
            "",
            f"Not in this table: {', '.join(unclassed)}, recorded before rows declared their class "
            "(MD5, durable), so their ratios pair every ferry row with every peer; see their blocks.",
        ]
    return "\n".join(lines) + "\n"


def update_docs(results_dir: Path) -> None:
    """Rewrite the page's generated blocks from the results files — each scenario's tables, the
    summary of the campaigns and the findings table — so the docs quote no number no run produced."""
    if not DOCS.exists():
        return
    text = DOCS.read_text()
    results = {
        sc: json.loads((results_dir / f"{sc}.json").read_text())
        for sc in SCENARIOS
        if (results_dir / f"{sc}.json").exists()
    }
    for sc, res in results.items():
        body = render_markdown(res, heading=3).split("\n", 2)[2]  # the doc has its own heading
        chart = (
            f"![{sc} chart](../{rel(results_dir)}/{sc}.png)\n\n"
            if (results_dir / f"{sc}.png").exists()
            else ""
        )
        text = replace_block(text, sc, chart + body)
    text = replace_block(text, "summary", summary_block(results))
    text = replace_block(text, "findings", findings_block(results))
    DOCS.write_text(text)
