"""An incremental pass with the destination carried against one that lists it afresh.

    .venv/bin/python benchmarks/passes.py [--files 1000000] [--changed 0.001] [--rounds 2]
                                          [--parts 4] [--max-kib 4] [--no-docs]
                                          [--dest local|azurite] [--latency-ms 1000]

One generated tree (benchmarks/cutover.py's: small files in 20 directories) is migrated to a local
directory, or with `--dest azurite` to a container of an Azurite behind toxiproxy (the baseline
straight; every response of the incremental passes held `--latency-ms`, a stand-in for the
service's page time: distance, not Azurite, is what a fresh listing pays), with the Snakemake
pipeline as a user runs it: a baseline, then incremental passes, each
after `--changed` of the files were rewritten, alternately with `dest_listing: carried` and
`dest_listing: fresh` — carried, fresh, then fresh, carried in the next round, so that neither
always runs on a warmer cache. Recorded per pass from the migration's history: the wall time, the
destination listing's span, the entries listed and how the destination was known. The table gives
each mode's median (range) and the ratio carried ÷ fresh. Results: benchmarks/results/passes.json
and .md, and the block in docs/benchmarks.md (`passes-azurite` for `--dest azurite`). Scratch:
benchmarks/.data/passes/ (git-ignored), removed at the start.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "workflow" / "scripts"))

import cutover  # noqa: E402
import ferry_history  # noqa: E402
import ferry_projection  # noqa: E402
from campaign.common import AZ_ACCOUNT, AZ_KEY, bench_env, log  # noqa: E402
from campaign.oneshot import measured_on, publish, record  # noqa: E402

SCRATCH = cutover.REPO / "benchmarks" / ".data" / "passes"
sys.path.insert(0, str(cutover.REPO / "tests"))

from support.toxiproxy import start_toxiproxy  # noqa: E402


def rewrite(src: Path, share: float, rng: random.Random, max_kib: int) -> int:
    """Rewrites `share` of the source's files with new bytes and a new size."""
    files = sorted(p for p in src.rglob("*.dat"))
    chosen = rng.sample(files, max(1, round(len(files) * share)))
    for path in chosen:
        cutover.write(path, rng.randint(1, max_kib) << 10, rng)
    return len(chosen)


def measure(args) -> dict:
    shutil.rmtree(SCRATCH, ignore_errors=True)
    SCRATCH.mkdir(parents=True)
    if args.dest == "local":
        return passes(args, cutover.rel(SCRATCH / "dest"), bench_env({}), lambda: None)
    azurite = cutover.Azurite(SCRATCH / "azurite")
    toxi = start_toxiproxy(cutover.REPO, SCRATCH)
    try:
        proxy = toxi.proxy(azurite.port, name="az-passes")
        dest = f"http://127.0.0.1:{proxy.port}/{AZ_ACCOUNT}/passes/share"
        env = bench_env(
            {"AZURE_STORAGE_ACCOUNT": AZ_ACCOUNT, "AZURE_STORAGE_KEY": AZ_KEY, "FERRY_AUTH": "key"}
        )
        return passes(args, dest, env, lambda: proxy.toxic("latency", latency=args.latency_ms))
    finally:
        toxi.stop()
        azurite.stop()


def passes(args, dest: str, env: dict, far: Callable[[], object]) -> dict:
    """The baseline, then `far()` (the distance, where there is one), then the passes."""
    src, outdir = SCRATCH / "src", SCRATCH / "results"
    rng = random.Random(cutover.SEED)
    source_bytes = cutover.make_tree(src, args.files, rng, args.max_kib)
    log(f"{args.files} files ({source_bytes / 2**20:.0f} MiB) to {args.dest}")
    cutover.run_pass(src, dest, outdir, "baseline", 1, args.parts, env)
    far()
    modes = []
    for r in range(args.rounds):
        modes += ["carried", "fresh"] if r % 2 == 0 else ["fresh", "carried"]
    changed = []
    for n, mode in enumerate(modes, start=1):
        changed.append(rewrite(src, args.changed, rng, args.max_kib))
        cutover.run_pass(
            src,
            dest,
            outdir,
            "incremental",
            n,
            args.parts,
            env,
            extra=[f"dest_listing={mode}"],
        )
    history = ferry_history.load(str(outdir / cutover.RUN_NAME))
    records = [r for r in history if r.get("phase") == "incremental"]
    rows = []
    for mode, rec, n in zip(modes, records, changed):
        report = json.loads(
            (outdir / cutover.RUN_NAME / rec["run_dir"] / "report.json").read_text()
        )
        rows.append(
            {
                "mode": mode,
                "pass": rec.get("pass"),
                "changed": n,
                "planned_files": (rec.get("planned") or {}).get("files"),
                "wall_seconds": rec.get("wall_seconds"),
                "list_dest_seconds": ferry_projection.span(rec, "list_dest"),
                "dest_entries": (rec.get("dest") or {}).get("files"),
                # How the pass knew the destination (the probe may have sent a carried pass to a
                # fresh listing): the report says.
                "listed": report["totals"]["dest_listing"]["listed"],
            }
        )
    return {
        "files": args.files,
        "bytes": source_bytes,
        "changed": args.changed,
        "dest": args.dest,
        "latency_ms": args.latency_ms if args.dest == "azurite" else None,
        "passes": rows,
    }


def render(res: dict) -> str:
    m = res["measurement"]

    def stats(mode: str, key: str) -> tuple[float, float, float]:
        xs = [p[key] for p in m["passes"] if p["mode"] == mode and p[key] is not None]
        return statistics.median(xs), min(xs), max(xs)

    lines = [
        f"An incremental pass over {m['files']:,} files ({m['changed']:.1%} rewritten before each), "
        + (
            f"local disk to Azurite, every response of the passes held {m['latency_ms']} ms "
            "(toxiproxy)"
            if m.get("dest") == "azurite"
            else "local disk to local disk"
        )
        + " through the Snakemake pipeline; median (range) of the passes in each mode, run "
        "alternately.",
        "",
        "| destination known by | passes | pass wall s | destination listing s |",
        "|---|---:|---:|---:|",
    ]
    medians = {}
    for mode in ("carried", "fresh"):
        wall, list_dest = stats(mode, "wall_seconds"), stats(mode, "list_dest_seconds")
        medians[mode] = (wall[0], list_dest[0])
        count = sum(p["mode"] == mode for p in m["passes"])
        lines.append(
            f"| {mode} | {count} | {wall[0]:.1f} ({wall[1]:.1f}–{wall[2]:.1f}) | "
            f"{list_dest[0]:.1f} ({list_dest[1]:.1f}–{list_dest[2]:.1f}) |"
        )
    lines += [
        "",
        f"Carried ÷ fresh: {medians['carried'][0] / medians['fresh'][0]:.2f}× the pass, "
        f"{medians['carried'][1] / medians['fresh'][1]:.2f}× the destination's listing. "
        + measured_on(res, ")"),
    ]
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--files", type=int, default=1_000_000)
    p.add_argument("--changed", type=float, default=0.001, help="share of files rewritten a pass")
    p.add_argument("--rounds", type=int, default=2, help="pairs of passes, one in each mode")
    p.add_argument("--parts", type=int, default=4)
    p.add_argument("--max-kib", type=int, default=4)
    p.add_argument("--no-docs", action="store_true")
    p.add_argument("--dest", choices=("local", "azurite"), default="local")
    p.add_argument("--latency-ms", type=int, default=1000, help="with --dest azurite")
    args = p.parse_args()
    load_start = os.getloadavg()[0]
    measurement = measure(args)
    flags = (
        f"--files {args.files} --changed {args.changed} --rounds {args.rounds} "
        f"--parts {args.parts} --max-kib {args.max_kib}"
    )
    if args.dest == "azurite":
        flags += f" --dest azurite --latency-ms {args.latency_ms}"
    res = record(f".venv/bin/python benchmarks/passes.py {flags}", load_start, [])
    del res["sizes"]
    res["measurement"] = measurement
    name = "passes" if args.dest == "local" else "passes-azurite"
    print(publish(name, name, res, render, docs=not args.no_docs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
