"""The plan step at scale: `ferry plan` against the Python step it replaced, on synthetic listings.

    nice .venv/bin/python benchmarks/plan.py [--entries 1000000,10000000] [--scratch DIR]

For each size it writes a source and a destination listing (1% of the files changed in size, 0.1%
new, 0.1% only on the destination, a directory entry per 1,000 files; the source in a scattered
walk order, as `ferry ls` gives it) into the scratch directory (default $TMPDIR; 10 M entries are
about 1 GB per listing), then plans an incremental pass with the pipeline's default partitioning
(max-files 50,000 + max-bytes 64 GiB) both ways under GNU time: wall time, CPU time and peak RSS
(ferry's rows three times, the median reported; the old step, which needs gigabytes, once).
ferry alone is also run with `--parts 16` (LPT) and in the final phase (copy and verify parts),
the modes that hold the most.

The old step is workflow/scripts/plan.py as it was before `ferry plan` (commit OLD_COMMIT), taken
from git history at run time (a shallow clone lacks it: fetch that commit, or pass --no-old) and
driven through its main() with a small stand-in for Snakemake's `snakemake` object; it calls
`ferry partition` as it always did. Both plans are checked to agree: the same counts in plan.json
and the same set of files to copy.

Results: benchmarks/results/plan.json and plan.md, and the table in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from campaign.oneshot import REPO, measured_on, median_of, publish, record, spread, timed  # noqa: E402

# The last commit with workflow/scripts/plan.py, the Python plan step.
OLD_COMMIT = "af39b4bfc9fa18010f6130e88aba1e6dedaaf54d"
GENERATOR_VERSION = 2  # 2: listings end with their end record
PER_DIR = 1000
DEFAULT_PARTITION = {
    "tool": "ferry",
    "mode": "max-files-bytes",
    "parts": 16,
    "max_files": 50000,
    "max_bytes": "64GiB",
}


def log(msg: str) -> None:
    print(f"[plan-bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def scattered(n: int, salt: int) -> list[int] | range:
    """A fixed permutation of range(n) without a shuffle of n items: i*step mod n, step coprime."""
    step = next(k for k in range(n // 2 + salt, n + salt + 2) if _gcd(k, n) == 1) if n > 1 else 1
    return [(i * step) % n for i in range(n)]


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a


def generate(scratch: Path, entries: int) -> tuple[Path, Path]:
    root = scratch / f"listings-{entries}"
    source, dest, stamp = root / "source.tsv", root / "dest.tsv", root / "stamp"
    if (
        stamp.exists()
        and stamp.read_text() == f"{GENERATOR_VERSION}\n"
        and source.exists()
        and dest.exists()
    ):
        return source, dest
    root.mkdir(parents=True, exist_ok=True)
    log(f"generating {entries:,}-entry listings in {root}")
    dirs = max(1, entries // PER_DIR)
    header = "#ferry-manifest v1\tpath\ttype\tsize\tmtime\tmd5\n"
    in_dir = scattered(PER_DIR, 7)
    with open(source, "w") as fs, open(dest, "w") as fd:
        fs.write(header)
        fd.write(header)
        # The source in a scattered walk order; the destination in another.
        for out, order, side in ((fs, scattered(dirs, 1), "src"), (fd, scattered(dirs, 3), "dst")):
            count, total = 0, 0
            for d in order:
                dpath = f"p{d % 37:02d}/d{d:06d}"
                chunk = [f"{dpath}\td\t0\t1700000000.000000000\t-\n"]
                for j in in_dir:
                    i = d * PER_DIR + j
                    if (side == "src" and i % 1000 == 2) or (side == "dst" and i % 1000 == 1):
                        continue  # 0.1% new at the source, 0.1% only on the destination
                    size = (i * 2654435761) % 3_000_000
                    if side == "dst" and i % 100 == 0:
                        size += 1  # 1% changed
                    chunk.append(
                        f"{dpath}/f{i:09d}.dat\tf\t{size}\t{1_700_000_000 + i % 86400}.{(i * 7) % 10**9:09d}\t-\n"
                    )
                    total += size
                count += len(chunk)
                out.write("".join(chunk))
            # A whole listing, as `ferry ls` ends one: plan refuses a listing without it.
            out.write(f"#ferry-end\tentries={count}\tbytes={total}\n")
    stamp.write_text(f"{GENERATOR_VERSION}\n")
    return source, dest


DRIVER = """
import json, sys, types
args = json.loads(sys.argv[1])
sys.path.insert(0, args["lib"])
import plan
ns = types.SimpleNamespace
plan.main(ns(
    params=ns(phase=args["phase"], compare="size-mtime", dest_is_blob=False, partition=args["partition"], ferry=args["ferry"]),
    input=ns(source=args["source"], dest=args["dest"]),
    output=ns(plan=args["out"]),
    log=[args["log"]],
))
"""


OLD_FILES = ("plan.py", "ferrylib.py")


def check_old_step_in_history() -> None:
    """The old step comes from git history, which a shallow clone (or a copy without .git) does
    not have: say so before minutes of generating listings, and how to get it."""
    missing = [
        name
        for name in OLD_FILES
        if subprocess.run(
            ["git", "-C", str(REPO), "cat-file", "-e", f"{OLD_COMMIT}:workflow/scripts/{name}"],
            capture_output=True,
        ).returncode
        != 0
    ]
    if not missing:
        return
    shallow = (
        subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--is-shallow-repository"],
            capture_output=True,
            text=True,
        ).stdout.strip()
        == "true"
    )
    why = "this clone is shallow" if shallow else "this checkout does not have that commit"
    raise SystemExit(
        f"plan.py: the old Python step ({', '.join(missing)} at commit {OLD_COMMIT[:12]}) is read from git "
        f"history, and {why}.\n"
        f"  Fetch it:            git fetch --depth 1 origin {OLD_COMMIT}   (or: git fetch --unshallow)\n"
        "  Or time ferry alone: benchmarks/plan.py --no-old"
    )


def old_step(work: Path) -> Path:
    """plan.py and ferrylib.py as they were, with a driver standing in for Snakemake."""
    lib = work / "old-plan"
    lib.mkdir(parents=True, exist_ok=True)
    for name in OLD_FILES:
        text = subprocess.run(
            ["git", "-C", str(REPO), "show", f"{OLD_COMMIT}:workflow/scripts/{name}"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        if name == "ferrylib.py":
            # The old step reads back the parts `ferry partition` writes, and the worker's lines
            # have four more columns (manifest v2) since: its parser is shown the five it knew,
            # as the worker of its day wrote them.
            v1 = '            fields = line.split("\\t")\n'
            assert text.count(v1) == 1, "the old manifest parser is not where it was"
            text = text.replace(v1, '            fields = line.split("\\t")[:5]\n')
        (lib / name).write_text(text)
    (lib / "driver.py").write_text(DRIVER)
    return lib


def copied_set(plan_dir: Path) -> set[str]:
    found = set()
    for part in sorted((plan_dir / "copy").glob("part-*.tsv")):
        with open(part) as f:
            found.update(
                line.split("\t", 1)[0] for line in f if line.strip() and not line.startswith("#")
            )
    return found


def agree(new: Path, old: Path) -> dict:
    a, b = json.loads((new / "plan.json").read_text()), json.loads((old / "plan.json").read_text())
    keys = (
        "phase",
        "compare",
        "source",
        "dest",
        "to_copy",
        "unchanged",
        "extra_on_dest",
        "verify_scope",
    )

    def same(x, y) -> bool:
        # Counts ferry plan added since (specials, linked, ...) must be zero on these listings,
        # which hold none of what they count; the rest must be equal.
        if isinstance(x, dict) and isinstance(y, dict):
            return all(x.get(k) == v for k, v in y.items()) and not any(
                x[k] for k in x.keys() - y.keys()
            )
        return x == y

    differ = [k for k in keys if not same(a[k], b[k])]
    same_files = copied_set(new) == copied_set(old)
    if differ or not same_files:
        raise RuntimeError(
            f"ferry plan and the old step disagree: keys {differ}, same files to copy: {same_files}"
        )
    return {"plan_json_counts_equal": True, "files_to_copy_equal": True, "to_copy": a["to_copy"]}


def ferry_args(partition: dict) -> list[str]:
    if partition["mode"] == "parts":
        return ["--parts", str(partition["parts"])]
    return ["--max-files", str(partition["max_files"]), "--max-bytes", str(partition["max_bytes"])]


def bench(entries: int, scratch: Path, ferry: Path, with_old: bool, repeat: int) -> dict:
    source, dest = generate(scratch, entries)
    work = Path(tempfile.mkdtemp(prefix="plan-bench-", dir=scratch))
    rows = []
    try:
        part16 = {**DEFAULT_PARTITION, "mode": "parts"}
        cases = [
            ("incremental", DEFAULT_PARTITION),
            ("incremental", part16),
            ("final", DEFAULT_PARTITION),
        ]
        for phase, partition in cases:
            out = work / f"ferry-{phase}-{partition['mode']}"
            cmd = [
                str(ferry),
                "plan",
                str(source),
                str(dest),
                "--out",
                str(out),
                "--phase",
                phase,
                *ferry_args(partition),
            ]
            log(f"{entries:,}: {' '.join(cmd[1:2] + cmd[4:])}")
            rows.append(
                {
                    "tool": "ferry plan",
                    "phase": phase,
                    "partition": partition["mode"],
                    "entries": entries,
                    "command": "ferry plan SOURCE DEST --out DIR --phase "
                    + phase
                    + " "
                    + " ".join(ferry_args(partition)),
                    **median_of([timed(cmd, work)[0] for _ in range(repeat)]),
                }
            )
        if with_old:
            lib = old_step(work)
            out = work / "old-incremental"
            args = {
                "lib": str(lib),
                "phase": "incremental",
                "partition": DEFAULT_PARTITION,
                "ferry": str(ferry),
                "source": str(source),
                "dest": str(dest),
                "out": str(out),
                "log": str(work / "old.log"),
            }
            log(f"{entries:,}: the old Python step (plan.py at {OLD_COMMIT[:8]})")
            row = {
                "tool": "plan.py (old step)",
                "phase": "incremental",
                "partition": DEFAULT_PARTITION["mode"],
                "entries": entries,
                "command": f"python3 plan.py (git show {OLD_COMMIT[:8]}) via a stand-in snakemake object",
                **timed([sys.executable, str(lib / "driver.py"), json.dumps(args)], work)[0],
                "runs": 1,
            }
            row["agreement"] = agree(work / "ferry-incremental-max-files-bytes", out)
            rows.append(row)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {
        "entries": entries,
        "listing_bytes": source.stat().st_size + dest.stat().st_size,
        "rows": rows,
    }


def render(res: dict) -> str:
    lines = [
        "| entries | step | phase | partitioning | wall s | CPU s | peak RSS MiB | runs |",
        "|---:|---|---|---|---:|---:|---:|---:|",
    ]
    for size in res["sizes"]:
        for r in size["rows"]:
            lines.append(
                f"| {r['entries']:,} | {r['tool']} | {r['phase']} | {r['partition']} | {r['seconds']:.1f}{spread(r)} | "
                f"{r['cpu_seconds']:.1f} | {r['peak_rss_mib']:.0f} | {r['runs']} |"
            )
    lines += [
        "",
        "| entries | ferry plan ÷ old step: wall time | CPU time | peak RSS |",
        "|---:|---:|---:|---:|",
    ]
    for size in res["sizes"]:
        rows = {(r["tool"], r["phase"], r["partition"]): r for r in size["rows"]}
        new, old = (
            rows.get(("ferry plan", "incremental", "max-files-bytes")),
            rows.get(("plan.py (old step)", "incremental", "max-files-bytes")),
        )
        if new and old:
            lines.append(
                f"| {size['entries']:,} | {new['seconds'] / old['seconds']:.3f} | "
                f"{new['cpu_seconds'] / old['cpu_seconds']:.3f} | {new['peak_rss_mib'] / old['peak_rss_mib']:.3f} |"
            )
    lines += [
        "",
        measured_on(
            res,
            ", CPU times much less). ferry rows: the median of the runs by wall time "
            "(range in brackets); the old step runs once",
        ),
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--entries", default="1000000,10000000", help="comma-separated listing sizes")
    ap.add_argument(
        "--scratch",
        type=Path,
        default=Path(os.environ.get("TMPDIR", "/tmp")) / "ferry-plan-bench",
        help="where listings and plans go (not the repository: 10 M entries are ~2 GB)",
    )
    ap.add_argument("--ferry", type=Path, default=REPO / "worker" / "target" / "release" / "ferry")
    ap.add_argument("--no-old", action="store_true", help="only ferry plan")
    ap.add_argument(
        "--repeat", type=int, default=3, help="runs of each ferry row (the median is reported)"
    )
    ap.add_argument(
        "--no-docs", action="store_true", help="do not rewrite the table in docs/benchmarks.md"
    )
    a = ap.parse_args(argv)
    if not a.no_old:
        check_old_step_in_history()
    a.scratch.mkdir(parents=True, exist_ok=True)
    load_start = os.getloadavg()[0]
    sizes = [
        bench(int(n), a.scratch, a.ferry, not a.no_old, a.repeat) for n in a.entries.split(",")
    ]
    command = "nice .venv/bin/python benchmarks/plan.py" + (
        f" --entries {a.entries}" if a.entries != "1000000,10000000" else ""
    )
    table = publish("plan", "plan", record(command, load_start, sizes), render, not a.no_docs)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
