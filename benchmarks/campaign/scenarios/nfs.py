"""Scenario `nfs`: copies to an NFS-like mount (tools/latencyfs)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from support.latencyfs import build as build_latencyfs
from ..checks import diff_trees
from ..common import KiB, MiB, Settings, bench_env, q, rel, rmtree, slug
from ..datasets import Dataset, files_dataset, stale_seed
from ..services import LatencyHost
from ..peers import mpirun, stage
from ..timing import Group, Row


NFS_DELAYS_MS = (1, 5)


def scenario_nfs(s: Settings, host: LatencyHost) -> list[Group]:
    build_latencyfs()
    base = s.data / "nfs"
    n = s.size(2_000, 300)
    flat = files_dataset("nfs-flat", f"{n:,} files of 0–32 KiB in one directory", n,
                         lambda r: r.randint(0, 32 * KiB), per_dir=n, seed=51)
    tree = files_dataset("nfs-tree", f"{n:,} files of 0–32 KiB in {n // 50} directories", n,
                         lambda r: r.randint(0, 32 * KiB), per_dir=50, seed=52)
    nlarge = s.size(50, 10)
    large = files_dataset("nfs-10MiB", f"{nlarge} files of 10 MiB in one directory", nlarge,
                          lambda r: 10 * MiB, per_dir=nlarge, seed=53)
    ferry_depth = 2 * min(max(os.cpu_count() or 8, 8), 96)  # --parallel-files' default
    mfu = stage(s, "mpifileutils", ("dcp", "dsync"), s.mpifileutils)
    seeds = s.work / "nfs" / "seeds"
    env = bench_env()
    groups = []
    for key, ds in (("flat", flat), ("tree", tree), ("10MiB", large)):
        phases = [p for p in ("baseline", "unchanged", "changed-1pct")
                  if any(s.selected(f"{p}-{key}-{d}ms") for d in NFS_DELAYS_MS)]
        if not phases:
            continue
        src = ds.materialize(base)
        seed_of = {"baseline": None}
        if "unchanged" in phases:
            seed_of["unchanged"] = seeds / f"{ds.name}-same"
        if "changed-1pct" in phases:
            seed_of["changed-1pct"] = seeds / f"{ds.name}-1pct"
        for phase in phases:
            seed = seed_of[phase]
            stamp = seeds / f"{ds.name}-{phase}.stamp"
            if seed is not None and not (stamp.exists() and stamp.read_text() == ds.stamp_text()):
                rmtree(seed)
                seed.parent.mkdir(parents=True, exist_ok=True)
                if phase == "unchanged":
                    subprocess.run(["cp", "-a", rel(src), rel(seed)], check=True)
                else:
                    stale_seed(src, seed, 100)
                stamp.write_text(ds.stamp_text())
            for delay in NFS_DELAYS_MS:
                gid = f"{phase}-{key}-{delay}ms"
                if s.selected(gid):
                    groups.append(nfs_group(s, host, gid, phase, ds, src, seed, delay, ferry_depth, mfu, env))
    return groups


def nfs_group(s: Settings, host: LatencyHost, gid: str, phase: str, ds: Dataset, src: Path, seed: Path | None,
              delay: int, ferry_depth: int, mfu: Path | None, env: dict) -> Group:
    def fpsync(n: int, tool: str) -> str:
        per_job = max(1, -(-ds.files // n))  # at least n jobs, whatever the tree's size
        mode = "-m cpio " if tool == "cpio" else ""
        return (f'fpsync -n {n} -f {per_job} -t "$PWD/{rel(host.backing.parent)}/fpsync-{gid}" {mode}'
                f'"$PWD/{rel(src)}/" "$PWD/{{dst}}/"')

    specs = [
        ("ferry", f"{s.ferry} copy -r {q(src)}/ {{dst}}", "ferry", ferry_depth),
        ("ferry --parallel-files 64", f"{s.ferry} copy -r --parallel-files 64 {q(src)}/ {{dst}}", "ferry", 64),
    ]
    if phase == "baseline":
        specs += [(f"fpsync -n {n} cpio", fpsync(n, "cpio"), "peer", n) for n in (16, 64)]
    specs += [(f"fpsync -n {n} rsync", fpsync(n, "rsync"), "peer", n) for n in (16, 64)]
    specs.append(("rsync -a", f"rsync -a {q(src)}/ {{dst}}/", "peer", 1))
    if phase == "baseline":
        specs.append(("cp -a", f"cp -a {q(src)}/. {{dst}}/", "peer", 1))
    if mfu is not None:
        # dcp copies SRC to TARGET, or into it when it exists: the empty destination goes first.
        specs.append(("dcp -n 16", f"rmdir {{dst}} && {mpirun(mfu, 16, f'dcp -q -p {q(src)} {{dst}}')}", "peer", 16)
                     if phase == "baseline" else
                     ("dsync -n 16", mpirun(mfu, 16, f"dsync -q {q(src)} {{dst}}"), "peer", 16))
    rows = []
    for name, cmd, role, depth in specs:
        slot = host.add_slot(f"{gid}-{slug(name)}", seed)
        rows.append(Row(name, cmd.format(dst=rel(host.dest(slot))), role, host.prepare_cmd(slot), slot, depth))

    def setup():
        host.delay_ms = delay

    def verify():
        res = {}
        for row in rows:
            d = host.backing / row.slot
            same = diff_trees(src, d)
            # Re-runs must leave every mtime equal to the source's (fpsync's cpio keeps seconds only).
            stale = 0
            if phase != "baseline" or "cpio" not in row.name:
                for p in src.rglob("*"):
                    if p.is_file() and p.stat().st_mtime_ns // 10**9 != (d / p.relative_to(src)).stat().st_mtime_ns // 10**9:
                        stale += 1
            res[row.name] = {"ok": same["ok"] and stale == 0, "diff": same["diff"], "mtime_differs": stale}
        if not s.keep:
            host.drop([r.slot for r in rows])
        return {"ok": all(r["ok"] for r in res.values()),
                "compared": "the last run's destination (underneath the mount) with the source: diff -rq, mtimes", **res}

    what = {"baseline": "baseline copy", "unchanged": "unchanged re-run",
            "changed-1pct": "re-run with 1% of the files changed"}[phase]
    notes = [f"Destination on latencyfs, {delay} ms per request, remounted before every run "
             f"(nothing cached from the run before); "
             + ("empty before every run." if seed is None else
                "restored underneath before every run from a copy of the source"
                + (" in which every 100th file has an mtime a day older." if phase == "changed-1pct" else "."))
             + " Latency limit = requests × delay ÷ depth: the wall time a tool keeping `depth` requests "
               "in flight all the time would need (depth: ferry's --parallel-files, fpsync's -n, 1 for "
               "rsync and cp); requests counted by latencyfs in each run (medians)."]
    return Group(gid, f"{what} to an NFS-like mount ({delay} ms a request), {ds.desc}", ds.desc,
                 ds.bytes if phase == "baseline" else 0, ds.files, rows, env, notes=notes, warm=[src],
                 verify=verify, setup=setup, teardown=host.stop, run_stats=lambda slot: host.counts.get(slot, []),
                 delay_ms=delay, best_peer_only=True)
