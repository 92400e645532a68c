#!/usr/bin/env python3
"""Round trips per file on an NFS-like mount, counted rather than timed.

Every case runs one command against a fresh tools/latencyfs mount at zero delay (no kernel
cache carried over from the case before) and records the requests the filesystem received, by
kind, with the most and the average in flight. Requests repeat within about 1% from run to run
where timings on this shared machine do not: each case runs --repeat times and both counts are
kept, so the spread is visible.

    .venv/bin/python benchmarks/opcount.py [--files 2000] [--flat] [--repeat 2] [--only GLOB]

Results: benchmarks/results/opcount.{json,md} (opcount-<D>ms with --delay D, opcount-flat… with
--flat), and the block
between the matching markers in docs/nfs.md. Needs root (FUSE mounts) and `make setup` (latencyfs, fpart, cpio, rsync).
"""

from __future__ import annotations

import argparse
import datetime as dt
import fnmatch
import hashlib
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

# Datasets, paths and the machine's description are shared with the campaigns.
from campaign.common import REPO, KiB, bench_env, log, rel  # noqa: E402
from campaign.datasets import files_dataset  # noqa: E402
from campaign.report import machine, update_block  # noqa: E402
from support.latencyfs import NO_ROUND_TRIP, LatencyFS, build  # noqa: E402

# Like NFS's acdirmin (30 s): no attribute or name the client learnt expires during a case, so
# counts do not depend on how fast the case ran. Misses are never cached (see docs/nfs.md).
# --cache 0 counts a client that trusts nothing it learnt (actimeo=0, lookupcache=none).
CACHE_SECONDS = 30
DOCS = REPO / "docs" / "nfs.md"
# The kinds shown as columns; the rest are summed into "other".
COLUMNS = (
    "lookup",
    "getattr",
    "setattr",
    "create",
    "mkdir",
    "rename",
    "unlink",
    "open",
    "read",
    "write",
    "flush",
    "release",
    "opendir",
    "readdir",
    "readdirplus",
    "releasedir",
)


@dataclass
class Case:
    name: str
    command: str  # run with the shell from the repo root; {src}, {dst}, {work} filled in
    dest_state: str  # "empty" or "copy" (a `cp -a` of the source, made before the mount)
    note: str = ""


def cases(n_jobs: int) -> list[Case]:
    # fpsync takes absolute paths only.
    fp = f'fpsync -n 16 -f {n_jobs} -t "$PWD/{{work}}/fpsync"'

    return [
        Case(
            "ferry copy",
            "{ferry} copy -r {src}/ {dst}",
            "empty",
            "baseline: the adaptive depth, from 64 files at once on a network filesystem",
        ),
        Case("ferry copy, unchanged re-run", "{ferry} copy -r {src}/ {dst}", "copy"),
        Case(
            "ferry copy --preserve mode,owner,times",
            "{ferry} copy -r --preserve mode,owner,times {src}/ {dst}",
            "empty",
            "what ferry kept before --preserve all: no xattrs, ACLs, holes, hard links or special files",
        ),
        Case(
            "ferry copy --preserve mode,owner,times, unchanged re-run",
            "{ferry} copy -r --preserve mode,owner,times {src}/ {dst}",
            "copy",
        ),
        Case(
            "ferry verify",
            "{ferry} verify {src}/ {dst}",
            "copy",
            "sizes (and symlink targets) only",
        ),
        Case(
            "ferry verify --checksum",
            "{ferry} verify --checksum {src}/ {dst}",
            "copy",
            "reads every file on both sides",
        ),
        Case(
            "ferry prune",
            "{ferry} prune --yes --log {work}/prune.tsv {src}/ {dst}",
            "copy",
            "nothing to delete",
        ),
        Case("ferry ls -r", "{ferry} ls -r {dst} > /dev/null", "copy"),
        Case(
            "find -printf",
            "find {dst} -printf '%P\\t%y\\t%s\\t%T@\\n' > /dev/null",
            "copy",
            "a listing with sizes and times",
        ),
        Case("cp -a", "cp -a {src} {dst}", "empty"),
        Case("rsync -a", "rsync -a {src}/ {dst}/", "empty"),
        Case("rsync -a, unchanged re-run", "rsync -a {src}/ {dst}/", "copy"),
        Case(
            "fpsync -m cpio",
            f'{fp} -m cpio "$PWD/{{src}}/" "$PWD/{{dst}}/"',
            "empty",
            "cpio -p keeps whole-second mtimes only",
        ),
        Case("fpsync (rsync)", f'{fp} "$PWD/{{src}}/" "$PWD/{{dst}}/"', "empty"),
        Case("fpsync (rsync), unchanged re-run", f'{fp} "$PWD/{{src}}/" "$PWD/{{dst}}/"', "copy"),
    ]


def run_case(
    case: Case, src: Path, base: Path, ferry: str, delay_ms: float, cache_s: float
) -> dict:
    backing, mnt, work = base / "backing", base / "mnt", base / "work"
    for p in (backing, work):
        shutil.rmtree(p, ignore_errors=True)
        p.mkdir(parents=True)
    if case.dest_state == "copy":
        subprocess.run(["cp", "-a", str(src), str(backing / "dst")], check=True)
    elif case.name.startswith("fpsync"):
        (backing / "dst").mkdir()  # fpsync syncs into an existing directory
    stats_file = work / "final.json"
    # A thread per request even at zero delay (where latencyfs defaults to one per CPU), so that
    # "in flight" is how many requests the command had outstanding.
    fs = LatencyFS(
        backing,
        mnt,
        delay_ms=delay_ms,
        attr_timeout=cache_s,
        entry_timeout=cache_s,
        threads=256,
        stats_file=stats_file,
    )
    cmd = case.command.format(ferry=ferry, src=rel(src), dst=rel(mnt / "dst"), work=rel(work))
    with fs:
        fs.reset()
        started = time.monotonic()
        proc = subprocess.run(cmd, shell=True, capture_output=True, text=True, env=bench_env())
        wall = time.monotonic() - started
        # Releases trail close() by a moment; take the counters once they stop moving.
        last, deadline = fs.stats()["total"], time.monotonic() + 3
        while time.monotonic() < deadline:
            time.sleep(0.1)
            now = fs.stats()["total"]
            if now == last:
                break
            last = now
        st = fs.stats()
    if proc.returncode != 0:
        raise RuntimeError(
            f"{case.name}: `{cmd}` failed ({proc.returncode}): {proc.stderr[-1500:]}"
        )
    return {
        "ops": st["ops"],
        "total": st["total"],
        "inflight_max": st["inflight_max"],
        "inflight_avg_busy": st["inflight_avg_busy"],
        "wall_s": round(wall, 3),
        "command": cmd,
    }


def summarize(name: str, case: Case, runs: list[dict], files: int) -> dict:
    totals = [r["total"] for r in runs]
    first = runs[0]
    return {
        "name": name,
        "command": first["command"],
        "note": case.note,
        "runs": runs,
        "total": totals,
        "per_file": round(statistics.median(totals) / files, 2),
        "spread_pct": round(100 * (max(totals) - min(totals)) / max(1, min(totals)), 2),
        "ops_median": {k: statistics.median([r["ops"][k] for r in runs]) for k in first["ops"]},
        "inflight_max": max(r["inflight_max"] for r in runs),
        "inflight_avg_busy": round(statistics.median([r["inflight_avg_busy"] for r in runs]), 2),
    }


def count(x: float) -> str:
    """A median count: "·" for none, one decimal when two runs straddle a whole number."""
    if not x:
        return "·"
    return f"{x:,.0f}" if x == int(x) else f"{x:,.1f}"


def delay_text(ms: float) -> str:
    return f"{ms:g} ms per request" if ms else "zero delay"


def cache_text(seconds: float) -> str:
    return f"attribute and entry cache {seconds:g} s" if seconds else "no attribute or entry cache"


def versus(res: dict, tool: str = "ferry copy", peer: str = "cp -a") -> str:
    """The request kinds where `tool` and `peer` differ, per file (medians), largest first."""
    by = {c["name"]: c for c in res["cases"]}
    if tool not in by or peer not in by:
        return ""
    a, b = by[tool]["ops_median"], by[peer]["ops_median"]
    diff = {
        k: (a.get(k, 0) - b.get(k, 0)) / res["files"]
        for k in set(a) | set(b)
        if k not in NO_ROUND_TRIP
    }
    kinds = sorted((k for k, d in diff.items() if abs(d) >= 0.005), key=lambda k: -abs(diff[k]))
    total = by[tool]["per_file"] - by[peer]["per_file"]
    parts = ", ".join(f"{k} {diff[k]:+.2f}" for k in kinds) or "none"
    return f"{tool} − {peer}, per file: {total:+.2f} requests ({parts})."


def render(res: dict) -> str:
    m = res["machine"]
    lines = [
        f"Counted {res['date']} on {m['nproc']} × {m['cpu']}, kernel {m['kernel']}; ferry {res['ferry']['version']} "
        f"(sha256 {res['ferry']['sha256']}…). Dataset: {res['dataset']}. Fresh latencyfs mount per run, "
        f"{delay_text(res['delay_ms'])}, "
        f"{cache_text(res['cache_seconds'])}, no negative cache, writeback cache on; "
        f"{res['repeat']} run(s) per case; in flight = average while any request was, and the most. "
        f"Reproduce: `{res['command']}`.",
        "",
        "| case | requests (each run) | per file | spread | "
        + " | ".join(COLUMNS)
        + " | other | in flight avg / max | wall s |",
        "|---|---:|---:|---:|" + "---:|" * (len(COLUMNS) + 3),
    ]
    for c in res["cases"]:
        ops = c["ops_median"]
        other = sum(v for k, v in ops.items() if k not in COLUMNS and k not in NO_ROUND_TRIP)
        cells = [
            c["name"],
            " / ".join(f"{t:,}" for t in c["total"]),
            f"{c['per_file']:.2f}",
            f"{c['spread_pct']:.1f}%",
        ]
        cells += [count(ops[k]) for k in COLUMNS]
        cells += [
            count(other),
            f"{c['inflight_avg_busy']:.1f} / {c['inflight_max']}",
            f"{statistics.median(r['wall_s'] for r in c['runs']):.2f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    if diff := versus(res):
        lines += ["", diff]
    lines += ["", "Commands (from the repo root; `dst` is on the mount):", ""]
    lines += [
        f"- {c['name']}: `{c['command']}`" + (f" — {c['note']}" if c["note"] else "")
        for c in res["cases"]
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="benchmarks/opcount.py", description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--files",
        type=int,
        default=2000,
        help="files in the tree (50 a directory; default %(default)s)",
    )
    ap.add_argument("--flat", action="store_true", help="all the files in one directory")
    ap.add_argument(
        "--cache",
        type=float,
        default=CACHE_SECONDS,
        help="seconds attributes and names are trusted (default %(default)s; 0: uncached)",
    )
    ap.add_argument("--repeat", type=int, default=2, help="runs per case (default %(default)s)")
    ap.add_argument(
        "--delay",
        type=float,
        default=0,
        help="ms per request (default 0: counts; 1: in-flight depth)",
    )
    ap.add_argument(
        "--only", action="append", default=[], metavar="GLOB", help="only cases whose name matches"
    )
    ap.add_argument(
        "--scratch", default="benchmarks/.data", help="datasets and mounts (default %(default)s)"
    )
    ap.add_argument("--ferry", default="worker/target/release/ferry")
    ap.add_argument("--results", default="benchmarks/results")
    ap.add_argument(
        "--no-docs", action="store_true", help="don't rewrite the matching block of docs/nfs.md"
    )
    ap.add_argument(
        "--report", action="store_true", help="only redo the tables and docs from the results' JSON"
    )
    a = ap.parse_args(argv)
    results = Path(a.results)
    if a.report:
        for f in sorted(results.glob("opcount*.json")):
            write(results, f.stem, json.loads(f.read_text()), not a.no_docs)
        return 0
    if os.geteuid() != 0:
        sys.exit("opcount: FUSE mounts need root here")
    build()
    scratch = Path(a.scratch)
    per_dir = a.files if a.flat else 50
    ds = files_dataset(
        f"opcount-{'flat-' if a.flat else ''}{a.files}",
        "",
        a.files,
        lambda r: r.randint(0, 32 * KiB),
        per_dir=per_dir,
        seed=41,
    )
    ds.desc = f"{ds.files:,} files of 0–32 KiB in " + (
        "one directory" if a.flat else f"{ds.files // per_dir} directories"
    )
    src = ds.materialize(scratch / "data")
    bindir = scratch / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    ferry = bindir / "ferry-opcount"
    shutil.copy2(a.ferry, ferry)
    version = subprocess.run(
        [str(ferry), "--version"], capture_output=True, text=True
    ).stdout.strip()
    sha = hashlib.sha256(ferry.read_bytes()).hexdigest()[:16]
    base = scratch / "opcount"
    out = []
    n_jobs = max(1, -(-a.files // 16))  # one fpsync job per worker slot
    for case in cases(n_jobs):
        if a.only and not any(fnmatch.fnmatch(case.name, p) for p in a.only):
            continue
        runs = []
        for i in range(a.repeat):
            r = run_case(case, src, base, rel(ferry), a.delay, a.cache)
            log(
                f"{case.name} run {i + 1}: {r['total']:,} requests ({r['total'] / a.files:.2f} a file), "
                f"in flight avg {r['inflight_avg_busy']:.1f} max {r['inflight_max']}, {r['wall_s']:.2f} s"
            )
            runs.append(r)
        out.append(summarize(case.name, case, runs, a.files))
    shutil.rmtree(base, ignore_errors=True)
    res = {
        "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": machine(),
        "ferry": {"version": version, "sha256": sha},
        "dataset": ds.desc,
        "files": a.files,
        "repeat": a.repeat,
        "cache_seconds": a.cache,
        "delay_ms": a.delay,
        "command": shlex.join(["sudo", ".venv/bin/python", "benchmarks/opcount.py", *argv]),
        "cases": out,
    }
    results.mkdir(parents=True, exist_ok=True)
    name = (
        "opcount"
        + ("-flat" if a.flat else "")
        + (f"-{a.delay:g}ms" if a.delay else "")
        + ("-uncached" if not a.cache else "")
    )
    (results / f"{name}.json").write_text(json.dumps(res, indent=1, ensure_ascii=False) + "\n")
    write(results, name, res, not a.no_docs)
    log(f"results in {rel(results)}/{name}.md")
    return 0


def write(results: Path, name: str, res: dict, docs: bool) -> None:
    block = render(res)
    (results / f"{name}.md").write_text(
        f"# Requests per command on an NFS-like mount (latencyfs, {delay_text(res['delay_ms'])})\n\n"
        + block
    )
    if docs:
        update_block(DOCS, name, block)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
