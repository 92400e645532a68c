"""The final pass at scale: `ferry prune --dry-run --files-from` and `ferry verify` of whole trees.

    nice .venv/bin/python benchmarks/prune_verify.py [--entries 1000000,10000000] [--scratch DIR]
                                                     [--old-ferry PATH]

For each size it builds a source and a destination *tree* (real directories, real entries, walked
and lstat'ed by ferry like any other tree) and manifests of both (`ferry ls -r`), then runs
under GNU time (wall time, CPU time, peak RSS):

- `ferry prune SRC DST --dry-run --files-from source.tsv --json`: what the final pass would delete;
- `ferry plan source.tsv dest.tsv --phase final --parts 4`, then the pipelines' prune step as
  each build runs it: from the plan (`--plan DIR`), or, before it, from both listings sorted
  and joined again (`--files-from source.tsv --dest-from dest.tsv`);
- `ferry verify SRC DST --json`: the pipelines' final whole-tree check (`final_check`);
- `ferry verify SRC DST --files-from delta.tsv --json`: a final pass's verify of what it copied
  (the files that differ or are missing, 1.1% of them, a few in each directory): it looks those
  paths up, where a build that lists their directories reads the whole tree on both sides.

Ten million files would take ten million inodes (here, most of the disk's), so every file is a
hard link to one of a few hundred small files in a pool beside the trees: the trees have their
real number of directory entries, each with its own path, size and mtime as `lstat` reports them,
for the price of one inode per pool file. The destination differs from the source the way a final
pass finds it: 1% of the files have another size (linked to a pool file one byte longer), 0.1% are
missing, 0.1% exist only on the destination, and one directory in 500 (with its files) exists only
on the destination. Both runs are checked against those numbers.

Sizes under 5 M entries run `--repeat` times (median reported); larger ones run once: each is
minutes on a shared machine. `--old-ferry PATH` adds another build (say, the worker before
looking paths up), run in turn with this one, as many times, checked to give the same counts.

The trees are removed at the end unless `--keep-trees` (20 M directory entries at 10 M).
Results: benchmarks/results/prune_verify.json and .md, and the table in docs/benchmarks.md.
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

GENERATOR_VERSION = 3  # 3: listings end with their end record
PER_DIR = 1000
# Pool files: the source's and the destination's links to one pool file stay under ext4's 65,000
# links per inode at 10 M entries (2 × 10 M / 512 ≈ 39,000).
POOL = 512
CHANGED_POOL = 16
ONCE_FROM = 5_000_000


def log(msg: str) -> None:
    print(f"[prune-verify-bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def layout(entries: int, per_dir: int = PER_DIR):
    """Yields (directory, [(file name, pool name or None)] for the source, the same for the destination)."""
    dirs = max(1, entries // per_dir)
    for d in range(dirs):
        dpath = f"p{d % 37:02d}/d{d:06d}"
        only_on_dst = d % 500 == 499
        src, dst = [], []
        for j in range(per_dir):
            i = d * per_dir + j
            name = f"f{i:09d}.dat"
            pool = f"s{i % POOL:03d}"
            if not only_on_dst and i % 1000 != 2:
                src.append((name, pool))
            if i % 1000 != 1:
                dst.append((name, f"c{i % CHANGED_POOL:02d}" if i % 100 == 0 else pool))
        yield dpath, src, dst


def expected(entries: int, per_dir: int) -> dict:
    """What prune and verify must find, counted from the layout."""
    n = {"src": 0, "dst_only": 0, "src_only": 0, "differ": 0, "same": 0, "dirs_only_on_dst": 0}
    for _dpath, src, dst in layout(entries, per_dir):
        s, d = dict(src), dict(dst)
        n["src"] += len(s)
        n["dst_only"] += sum(1 for k in d if k not in s)
        n["src_only"] += sum(1 for k in s if k not in d)
        n["differ"] += sum(1 for k in s if k in d and s[k] != d[k])
        n["same"] += sum(1 for k in s if k in d and s[k] == d[k])
        n["dirs_only_on_dst"] += not s
    return n


def make_pool(pool: Path) -> None:
    pool.mkdir(parents=True, exist_ok=True)
    for k in range(POOL):
        (pool / f"s{k:03d}").write_bytes(b"x" * k)
    for k in range(CHANGED_POOL):
        # Size k + 1: a source file of index i ≡ k (mod 16) links to a pool file of size i % 512,
        # which is ≡ k (mod 16) too, so never the same size.
        (pool / f"c{k:02d}").write_bytes(b"x" * (k + 1))


def link_tree(pool: Path, root: Path, side: int, entries: int, per_dir: int) -> None:
    pool_fd = os.open(pool, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for dpath, *sides in layout(entries, per_dir):
            files = sides[side]
            if not files:
                continue
            d = root / dpath
            d.mkdir(parents=True, exist_ok=True)
            dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
            try:
                for name, src in files:
                    os.link(src, name, src_dir_fd=pool_fd, dst_dir_fd=dfd)
            finally:
                os.close(dfd)
    finally:
        os.close(pool_fd)


def trees(scratch: Path, entries: int, per_dir: int) -> Path:
    return scratch / f"trees-{entries}-{per_dir}"


def generate(scratch: Path, entries: int, per_dir: int, ferry: Path) -> tuple[Path, Path, Path]:
    """The two trees and the source's manifest (the destination's, dest.tsv, beside it)."""
    root = trees(scratch, entries, per_dir)
    src, dst, manifest, stamp = root / "src", root / "dst", root / "source.tsv", root / "stamp"
    if stamp.exists() and stamp.read_text() == f"{GENERATOR_VERSION}\n":
        return src, dst, manifest
    if root.exists():
        shutil.rmtree(root)
    log(f"building {entries:,}-entry trees of hard links in {root}")
    started = time.monotonic()
    make_pool(root / "pool")
    link_tree(root / "pool", src, 0, entries, per_dir)
    link_tree(root / "pool", dst, 1, entries, per_dir)
    for tree, listing in ((src, manifest), (dst, dest_listing(manifest))):
        with open(listing, "wb") as out:
            subprocess.run([str(ferry), "ls", "-r", str(tree)], check=True, stdout=out)
    stamp.write_text(f"{GENERATOR_VERSION}\n")
    log(f"built in {time.monotonic() - started:.0f} s")
    return src, dst, manifest


def check_plan(out: str, want: dict) -> dict:
    j = json.loads(out)
    found = {"extra_on_dest": j["extra_on_dest"]["files"], "source_files": j["source"]["files"]}
    need = {"extra_on_dest": want["dst_only"], "source_files": want["src"]}
    if found != need:
        raise RuntimeError(f"plan found {found}, want {need}")
    return found


def check_prune(out: str, want: dict) -> dict:
    j = json.loads(out)
    files = want["dst_only"]
    if (j["would_delete"], j["dirs"], j["refused"]) != (files, want["dirs_only_on_dst"], None):
        raise RuntimeError(
            f"prune found {j['would_delete']} files and {j['dirs']} directories, want {files} "
            f"and {want['dirs_only_on_dst']}: {out[:2000]}"
        )
    return {"would_delete": j["would_delete"], "dirs": j["dirs"]}


def check_verify(out: str, want: dict, whole: bool) -> dict:
    j = json.loads(out)
    got = {k: j[k] for k in ("same", "differ", "missing_on_dst", "missing_on_src", "error")}
    need = {
        "same": want["same"] if whole else 0,
        "differ": want["differ"],
        "missing_on_dst": want["src_only"],
        "missing_on_src": want["dst_only"] if whole else 0,
        "error": 0,
    }
    if got != need or len(j["entries"]) != sum(v for k, v in need.items() if k != "same"):
        raise RuntimeError(f"verify counted {got} with {len(j['entries'])} entries, want {need}")
    return got


def dest_listing(manifest: Path) -> Path:
    return manifest.with_name("dest.tsv")


def cases(src: Path, dst: Path, manifest: Path, work: Path) -> list[tuple[str, object, tuple]]:
    """(row, the command's arguments or a function of the build giving them, exit statuses)."""

    def plan_of(build: str) -> Path:
        return work / f"plan-{build.split()[-1].strip('()')}"

    def final_prune(build: str) -> list[str]:
        # The pipelines' prune step as each build runs it: this one from the plan; the build
        # before from the two listings the plan used, sorted and joined again.
        how = (
            ["--plan", str(plan_of(build))]
            if build == "ferry"
            else ["--files-from", str(manifest), "--dest-from", str(dest_listing(manifest))]
        )
        return ["prune", "--yes", str(src), str(dst), "--dry-run", *how, "--log", str(work / "prune.tsv"), "--json"]  # fmt: skip

    return [
        (
            "plan --phase final",
            lambda build: [
                "plan",
                str(manifest),
                str(dest_listing(manifest)),
                "--out",
                str(plan_of(build)),
                "--phase",
                "final",
                "--parts",
                "4",
                "--json",
            ],  # fmt: skip
            (0,),
        ),
        ("prune, the final pass's step", final_prune, (0,)),
        (
            "prune --dry-run --files-from",
            [
                "prune",
                "--yes",
                str(src),
                str(dst),
                "--dry-run",
                "--files-from",
                str(manifest),
                "--log",
                str(work / "prune.tsv"),
                "--json",
            ],
            (0,),
        ),
        ("verify", ["verify", str(src), str(dst), "--json"], (1,)),
        (
            "verify --files-from delta",
            ["verify", str(src), str(dst), "--files-from", str(delta(manifest, work)), "--json"],
            (1,),
        ),
    ]


def delta(manifest: Path, work: Path) -> Path:
    """The source's entries a final pass copies: those the destination holds with another size
    or lacks (`layout`: i % 100 == 0, i % 1000 == 1)."""
    out = work / "delta.tsv"
    with open(manifest) as src, open(out, "w") as dst:
        for line in src:
            path, kind = line.split("\t", 2)[:2]
            i = int(path.rsplit("/", 1)[-1][1:10]) if kind == "f" else None
            # The header, not the end record: it counts the whole listing, not this part of it.
            if line.startswith("#ferry-manifest") or (
                i is not None and (i % 100 == 0 or i % 1000 == 1)
            ):
                dst.write(line)
    return out


def bench(
    entries: int, per_dir: int, scratch: Path, ferry: Path, old: Path | None, repeat: int
) -> dict:
    src, dst, manifest = generate(scratch, entries, per_dir, ferry)
    want = expected(entries, per_dir)
    work = Path(tempfile.mkdtemp(prefix="bench-", dir=scratch))
    runs_each = repeat if entries < ONCE_FROM else 1
    rows = []
    try:
        builds = [("ferry", ferry)] + ([("ferry (old build)", old)] if old else [])
        for name, args, ok in cases(src, dst, manifest, work):
            runs = {build: [] for build, _ in builds}
            # In turn, a run of each build a round: the machine's load falls on both alike.
            for _ in range(runs_each):
                for build, binary in builds:
                    log(f"{entries:,}: {build} {name}")
                    argv = args(build) if callable(args) else args
                    # --scratch: this build's verbs that sort put their runs beside the trees
                    # (`plan` keeps its own beside its output).
                    here = build == "ferry" and argv[0] != "plan"
                    scratch_arg = ["--scratch", str(work)] if here else []
                    stats, out = timed([str(binary), *argv, *scratch_arg], work, ok)
                    stats["found"] = (
                        check_prune(out, want)
                        if name.startswith("prune")
                        else check_plan(out, want)
                        if name.startswith("plan")
                        else check_verify(out, want, whole=name == "verify")
                    )
                    runs[build].append(stats)
            for build, _ in builds:
                rows.append(
                    {
                        "build": build,
                        "step": name,
                        "entries": entries,
                        "per_dir": per_dir,
                        "command": f"ferry {name}",
                        **median_of(runs[build]),
                    }
                )
        leftovers = [
            p.name
            for p in work.iterdir()
            if p.name not in ("time.txt", "stdout", "prune.tsv", "delta.tsv")
            and not p.name.startswith("plan-")
        ]
        if leftovers:
            raise RuntimeError(f"scratch files left behind in {work}: {leftovers}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"entries": entries, "source_files": want["src"], "expected": want, "rows": rows}


def render(res: dict) -> str:
    lines = [
        "| entries | a directory | build | step | wall s | CPU s | peak RSS MiB | runs |",
        "|---:|---:|---|---|---:|---:|---:|---:|",
    ]
    for size in res["sizes"]:
        for r in size["rows"]:
            lines.append(
                f"| {r['entries']:,} | {r.get('per_dir', PER_DIR):,} | {r['build']} | `{r['step']}` | "
                f"{r['seconds']:.1f}{spread(r)} | {r['cpu_seconds']:.1f} | {r['peak_rss_mib']:.0f} | "
                f"{r['runs']} |"
            )
    lines += [
        "",
        measured_on(res, "). Rows of several runs: the median by wall time (range in brackets)"),
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--entries",
        default="1000000,10000000",
        help="comma-separated tree sizes (files in the source)",
    )
    ap.add_argument(
        "--scratch",
        type=Path,
        default=Path(os.environ.get("TMPDIR", "/tmp")) / "ferry-prune-verify-bench",
        help="where the trees go (not the repository); must allow hard links",
    )
    ap.add_argument("--ferry", type=Path, default=REPO / "worker" / "target" / "release" / "ferry")
    ap.add_argument(
        "--old-ferry", type=Path, help="another build to run in turn with this one, for comparison"
    )
    ap.add_argument(
        "--repeat", type=int, default=3, help=f"runs of each row below {ONCE_FROM:,} entries"
    )
    ap.add_argument(
        "--per-dir", type=int, default=PER_DIR, help="files a directory (the trees' shape)"
    )
    ap.add_argument(
        "--name",
        default="prune_verify",
        help="results/NAME.json and .md, and the docs' block of that name (- for _)",
    )
    ap.add_argument("--keep-trees", action="store_true", help="keep the trees for another run")
    ap.add_argument("--generate-only", action="store_true", help="build the trees and stop")
    ap.add_argument(
        "--no-docs", action="store_true", help="do not rewrite the table in docs/benchmarks.md"
    )
    ap.add_argument(
        "--docs-from-results",
        action="store_true",
        help="measure nothing: rewrite the .md and the docs table from results/prune_verify.json",
    )
    a = ap.parse_args(argv)
    block = a.name.replace("_", "-")
    if a.docs_from_results:
        print(publish(a.name, block, None, render, True))
        return 0
    a.scratch.mkdir(parents=True, exist_ok=True)
    sizes = [int(n) for n in a.entries.split(",")]
    if a.generate_only:
        for n in sizes:
            generate(a.scratch, n, a.per_dir, a.ferry)
        return 0
    load_start = os.getloadavg()[0]
    try:
        results = [bench(n, a.per_dir, a.scratch, a.ferry, a.old_ferry, a.repeat) for n in sizes]
    finally:
        if not a.keep_trees:
            for n in sizes:
                shutil.rmtree(trees(a.scratch, n, a.per_dir), ignore_errors=True)
    command = (
        "nice .venv/bin/python benchmarks/prune_verify.py"
        + (f" --entries {a.entries}" if a.entries != "1000000,10000000" else "")
        + (f" --per-dir {a.per_dir}" if a.per_dir != PER_DIR else "")
        + (f" --name {a.name}" if a.name != "prune_verify" else "")
        + (" --old-ferry OLD_BUILD" if a.old_ferry else "")
    )
    table = publish(a.name, block, record(command, load_start, results), render, not a.no_docs)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
