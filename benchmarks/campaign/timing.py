"""Timing: hyperfine, one run per command per round, order rotated between rounds; medians and
ratios."""

from __future__ import annotations

import datetime as dt
import json
import os
import shlex
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .common import TIME, GiB, MiB, Settings, log, q, rel, rmtree
from .datasets import warm


@dataclass
class Row:
    name: str
    cmd: str
    role: str  # "ferry" (the subject), "peer", or "reference" (shown, in no ratio)
    prepare: str = ":"
    slot: str | None = None  # Azurite workspace (or latencyfs destination) this row runs against
    depth: int | None = None  # requests the row keeps in flight at most, for its latency limit
    # What the row does that costs, so that ratios pair like with like (see `same_class`):
    md5: bool = False  # puts Content-MD5 on what it uploads / checks MD5 of what it reads
    durable: bool = False  # fsyncs (or syncs) what it wrote before it exits
    note: str = ""  # why the row is set up as it is; printed under the group's table
    src: Path | None = None  # local source and destination, for the filesystem types recorded
    dst: Path | None = None  # per run (None: a blob URL)
    json: bool = False  # a ferry copy: its --json summary is kept per run (concurrency)
    delay_ms: float | None = None  # the filesystem's delay for this row, where not the group's

    @property
    def shown(self) -> str:
        """The command as recorded: with the per-run JSON file ferry's summary goes to."""
        return f"{self.cmd} --json > run.json" if self.json else self.cmd


@dataclass
class Group:
    id: str
    title: str
    dataset: str
    bytes: int
    files: int
    rows: list[Row]
    env: dict
    notes: list[str] = field(default_factory=list)
    warm: list[Path] = field(default_factory=list)
    verify: Callable[[], dict] | None = None
    # row name → [(metric, ">=", "<=" or "<", limit, text)], reported as met/missed (evaluate_targets)
    targets: dict = field(default_factory=dict)
    setup: Callable[[], None] | None = None
    teardown: Callable[[], None] | None = None
    server_cpu: Callable[[str], list] | None = None  # slot → CPU seconds of the server, per run
    run_stats: Callable[[str], list] | None = None  # slot → the filesystem's counters, per run
    delay_ms: float | None = None  # latency added to every filesystem request
    best_peer_only: bool = False  # ratios against the fastest peer only
    rounds: int | None = (
        None  # fewer rounds than whole rotations (nfs at full scale); labelled in notes
    )
    first: int = 0  # the row that goes first in round 0 (rotates across such groups)
    throughput_unit: str = "MiB/s"
    # Called with this group's result once it is measured: a group to measure next, or None.
    followup: Callable[[dict], Group | None] | None = None
    confirms: str | None = None  # the id of the group whose finding this one measures again


def wrap(cmd: str, rss_file: Path) -> str:
    """Measure peak RSS with GNU time around the command. A shell is added only when the command
    needs one; then %M is the largest single process of the pipeline, not their sum."""
    needs_shell = any(c in cmd for c in "|;&<>$*?`") or cmd.startswith("cd ")
    inner = f"sh -c {shlex.quote(cmd)}" if needs_shell else cmd
    return f"{TIME} -f %M -o {q(rss_file)} {inner}"


def read_rss_kib(path: Path) -> int | None:
    try:
        lines = path.read_text().split()
        return int(lines[-1])
    except (OSError, ValueError, IndexError):
        return None


def same_class(a: dict, b: dict) -> bool:
    """Two rows are compared only when they do the same costly things: MD5 and durability."""
    return a.get("md5", False) == b.get("md5", False) and a.get("durable", False) == b.get(
        "durable", False
    )


def rounds_for(runs: int, rows: int) -> int:
    """Whole rotations: one rotation is as many rounds as the group has rows, each row going
    first once, so no row owes its time to its place (cache, writeback) more than another."""
    return -(-runs // rows) * rows


def probe_cmd(row: Row, out: Path) -> str:
    """Shell for the end of a row's prepare: the filesystem types of its source and destination
    (the nearest existing ancestor: a destination may not exist yet) and the user it runs as. A
    side without a path is a blob URL when the other side has one; "-" when neither has."""
    parts = []
    remote = "echo blob" if row.src or row.dst else "echo -"
    for p in (row.src, row.dst):
        parts.append(
            remote
            if p is None
            else f'd={q(p)}; while [ ! -e "$d" ]; do d=$(dirname "$d"); done; findmnt -n -o FSTYPE -T "$d"'
        )
    return "{ " + "; ".join(parts) + "; id -un; } > " + q(out)


def read_probe(path: Path) -> dict:
    try:
        src, dst, user = path.read_text().split()[:3]
        return {"src_fs": src, "dst_fs": dst, "run_as": user}
    except (OSError, ValueError):
        return {}


def read_concurrency(path: Path) -> dict | None:
    """ferry's effective concurrency from its --json summary; None when the binary predates it."""
    try:
        c = json.loads(path.read_text()).get("concurrency")
    except (OSError, ValueError, AttributeError):
        return None
    return (
        {k: c.get(k) for k in ("mode", "initial", "final", "peak")} if isinstance(c, dict) else None
    )


def run_group(s: Settings, scenario: str, g: Group) -> dict:
    rounds = g.rounds or rounds_for(s.runs, len(g.rows))
    # Each round starts `step` rows further on, so the rounds spread the first places evenly.
    step = 1
    if g.rounds is None and s.rounds and s.rounds < rounds:
        rounds, step = s.rounds, -(-len(g.rows) // s.rounds)
        g.notes.append(
            f"{rounds} round(s) instead of a whole rotation of {len(g.rows)} (`--rounds`): each round "
            f"starts {step} row(s) further on."
        )
    log(f"{scenario}/{g.id}: {g.title} — {len(g.rows)} rows × {rounds} rounds")
    gdir = s.scratch / "runs" / scenario / g.id
    rmtree(gdir)
    gdir.mkdir(parents=True)
    if g.setup:
        g.setup()
    if g.warm:
        warm(g.warm)
    runs: dict[str, list] = {r.name: [] for r in g.rows}
    loads = []
    started = time.monotonic()
    try:
        for rnd in range(rounds):
            k = (rnd * step + g.first) % len(g.rows)
            order = g.rows[k:] + g.rows[:k]
            export = gdir / f"round-{rnd}.json"
            args = [
                "hyperfine",
                "--runs",
                "1",
                "--style",
                "none",
                "--ignore-failure",
                "--export-json",
                rel(export),
            ]
            files = []
            for i, row in enumerate(order):
                base = gdir / f"round-{rnd}-{i}"
                files.append(base)
                cmd = f"{row.cmd} --json > {q(base.with_suffix('.json'))}" if row.json else row.cmd
                # After the row's own reset: writeback settled (the scratch filesystem synced), so
                # no run pays for the dirty pages of the one before; then the probe.
                prepare = f"{row.prepare} && sync -f {q(s.scratch)} && {probe_cmd(row, base.with_suffix('.probe'))}"
                args += [
                    "--prepare",
                    prepare,
                    f"--command-name={row.name}",
                    wrap(cmd, base.with_suffix(".rss")),
                ]
            load = os.getloadavg()[0]
            loads.append(load)
            proc = subprocess.run(args, env=g.env, capture_output=True, text=True)
            if proc.returncode != 0:
                raise RuntimeError(f"hyperfine failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
            results = json.loads(export.read_text())["results"]
            line = []
            for pos, (row, res, base) in enumerate(zip(order, results, files)):
                rec = {
                    "round": rnd,
                    "position": pos,
                    "wall": res["times"][0],
                    "user": res["user"],
                    "system": res["system"],
                    "exit": res["exit_codes"][0],
                    "rss_kib": read_rss_kib(base.with_suffix(".rss")),
                    "load1": round(load, 2),
                    **read_probe(base.with_suffix(".probe")),
                }
                if row.json:
                    rec["concurrency"] = read_concurrency(base.with_suffix(".json"))
                runs[row.name].append(rec)
                line.append(
                    f"{row.name} {rec['wall']:.2f}s"
                    + ("" if rec["exit"] == 0 else f" (exit {rec['exit']})")
                )
            log(f"  round {rnd + 1}/{rounds}: " + ", ".join(line))
    finally:
        if g.teardown:
            g.teardown()
    if g.server_cpu:
        for row in g.rows:
            for rec, cpu in zip(runs[row.name], g.server_cpu(row.slot) if row.slot else []):
                rec["server_cpu"] = cpu
    if g.run_stats:
        for row in g.rows:
            for rec, st in zip(runs[row.name], g.run_stats(row.slot) if row.slot else []):
                rec["requests"] = st["total"]
                rec["inflight_avg"] = round(st["inflight_avg_busy"], 2)
                rec["inflight_max"] = st["inflight_max"]
    verification = {}
    if g.verify:
        log(f"  verifying {g.id} outside the timed runs")
        try:
            verification = g.verify()
        except Exception as e:  # a failed check is a result worth recording, not a crash
            verification = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        log(
            f"  verification: {'ok' if verification.get('ok') else 'FAILED'}"
            + ("" if verification.get("ok") else f" {json.dumps(verification)[:600]}")
        )
    rows = [summarize_row(r, runs[r.name], g) for r in g.rows]
    evaluate_targets(rows, g)
    return {
        "id": g.id,
        "title": g.title,
        "dataset": g.dataset,
        "scale": s.scale,
        "bytes": g.bytes,
        "files": g.files,
        "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "rounds": rounds,
        "load1": {"min": round(min(loads), 2), "max": round(max(loads), 2)} if loads else None,
        "seconds": round(time.monotonic() - started, 1),
        "notes": g.notes,
        "ferry_sha256": s.ferry_sha256,
        "throughput_unit": g.throughput_unit,
        "delay_ms": g.delay_ms,
        "rows": rows,
        "ratios": ratios(rows, g.best_peer_only),
        "best_peer_only": g.best_peer_only,
        "verification": verification,
        **({"confirms": g.confirms} if g.confirms else {}),
    }


def distinct(values) -> str | None:
    """The values a row's runs recorded, as one string ("ext4" or "ext4, tmpfs")."""
    seen = sorted({str(v) for v in values if v is not None})
    return ", ".join(seen) if seen else None


def concurrency_summary(ok: list[dict]) -> dict | None:
    got = [r["concurrency"] for r in ok if r.get("concurrency")]
    if not got:
        return None
    out = {"mode": distinct(c.get("mode") for c in got)}
    for k in ("initial", "final", "peak"):
        vals = [c[k] for c in got if isinstance(c.get(k), (int, float))]
        out[k] = statistics.median(vals) if vals else None
    return out


def summarize_row(row: Row, runs: list, g: Group) -> dict:
    ok = [r for r in runs if r["exit"] == 0]
    out = {
        "name": row.name,
        "role": row.role,
        "command": row.shown,
        "md5": row.md5,
        "durable": row.durable,
        "runs": runs,
        "ok_runs": len(ok),
        "src_fs": distinct(r.get("src_fs") for r in runs),
        "dst_fs": distinct(r.get("dst_fs") for r in runs),
        "run_as": distinct(r.get("run_as") for r in runs),
    }
    if row.note:
        out["note"] = row.note
    if row.json:
        # None when the binary's summary has no "concurrency" object (older workers).
        out["concurrency"] = concurrency_summary(ok)
    depth = row.depth
    if depth is None and (out.get("concurrency") or {}).get("mode") == "adaptive":
        # Where an adaptive run settled (its limit at the end, median over runs).
        depth = out["concurrency"]["final"]
    if depth is not None:
        out["depth"] = depth
    if not ok:
        return out
    wall = statistics.median(r["wall"] for r in ok)
    cpu = statistics.median(r["user"] + r["system"] for r in ok)
    rss = [r["rss_kib"] for r in ok if r["rss_kib"] is not None]
    out.update(
        {
            "wall_median": wall,
            "wall_min": min(r["wall"] for r in ok),
            "wall_max": max(r["wall"] for r in ok),
            "cpu_median": cpu,
            "user_median": statistics.median(r["user"] for r in ok),
            "system_median": statistics.median(r["system"] for r in ok),
            "rss_mib_median": statistics.median(rss) / 1024 if rss else None,
            "rss_mib_max": max(rss) / 1024 if rss else None,
        }
    )
    if g.bytes:
        out["mib_per_s"] = g.bytes / MiB / wall
        out["gb_per_s"] = g.bytes / 1e9 / wall
        out["cpu_s_per_gib"] = cpu / (g.bytes / GiB)
    server = [r["server_cpu"] for r in ok if r.get("server_cpu") is not None]
    if server:
        out["server_cpu_median"] = statistics.median(server)
    requests = [r["requests"] for r in ok if r.get("requests") is not None]
    if requests:
        out["requests_median"] = statistics.median(requests)
        out["inflight_avg_median"] = statistics.median(
            r["inflight_avg"] for r in ok if "inflight_avg" in r
        )
        delay = g.delay_ms if row.delay_ms is None else row.delay_ms
        if delay and depth:
            # The floor for a tool that keeps `depth` requests in flight all the time.
            out["latency_limit_s"] = out["requests_median"] * delay / 1000 / depth
            out["wall_over_limit"] = (
                wall / out["latency_limit_s"] if out["latency_limit_s"] else None
            )
    return out


def evaluate_targets(rows: list[dict], g: Group) -> None:
    """Targets reported as met or missed, never asserted. A metric is a row's own figure
    ("wall_median") or its wall time over another row's ("wall/ROW NAME")."""
    by_name = {r["name"]: r for r in rows}
    for row in rows:
        met = []
        for metric, op, limit, text in g.targets.get(row["name"], []):
            if metric.startswith("wall/"):
                other = by_name.get(metric[5:], {})
                value = (
                    row["wall_median"] / other["wall_median"]
                    if "wall_median" in row and other.get("wall_median")
                    else None
                )
            else:
                value = row.get(metric)
            ok = value is not None and (
                value <= limit if op == "<=" else value >= limit if op == ">=" else value < limit
            )
            met.append({"target": text, "metric": metric, "value": value, "met": ok})
        if met:
            row["targets"] = met


def ratios(rows: list[dict], best_peer_only: bool = False) -> list[dict]:
    """ferry ÷ peer for every ferry row and every peer row of the same class (or the fastest
    such peer only); a ferry row with no peer of its class gets no ratio."""
    out = []
    for a in rows:
        if a["role"] != "ferry" or "wall_median" not in a:
            continue
        peers = [b for b in rows if b["role"] == "peer" and "wall_median" in b and same_class(a, b)]
        if best_peer_only and peers:
            peers = [min(peers, key=lambda b: b["wall_median"])]
        for b in peers:
            r = {"ferry": a["name"], "peer": b["name"], "wall": a["wall_median"] / b["wall_median"]}
            r["cpu"] = a["cpu_median"] / b["cpu_median"] if b["cpu_median"] > 0 else None
            ra, rb = a.get("rss_mib_median"), b.get("rss_mib_median")
            r["rss"] = ra / rb if ra and rb else None
            out.append(r)
    return out
