"""Scenario `local`: local → local copies and MD5 comparisons."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from ..checks import diff_trees
from ..common import (
    MANY_FILES,
    KiB,
    MiB,
    Settings,
    bench_env,
    human_bytes,
    q,
    rel,
    rmtree,
    set_aside,
    set_aside_cmd,
    trash_dir,
)
from ..datasets import Dataset, files_dataset
from ..peers import fpsync
from ..timing import Group, Row


def scenario_local(s: Settings, _host: None = None) -> list[Group]:
    base = s.data / "local"
    small = files_dataset(
        "small-files", "", s.size(20_000, 4_000), lambda r: r.randint(0, 32 * KiB), seed=11
    )
    small.desc = f"{small.files:,} files of 0–32 KiB in {small.files // 200} directories"
    nlarge = s.size(200, 40)
    large = files_dataset(
        "10MiB-files", f"{nlarge} files of 10 MiB", nlarge, lambda r: 10 * MiB, per_dir=100, seed=12
    )
    out = s.work / "local"
    env = bench_env()
    groups = []
    for ds in (small, large):
        if not (s.selected(f"copy-{ds.name}") or s.selected(f"md5-{ds.name}")):
            continue
        src = ds.materialize(base)
        if s.selected(f"copy-{ds.name}"):
            groups.append(copy_group(s, ds, src, out / ds.name, env))
        if s.selected(f"md5-{ds.name}"):
            twin = out / f"{ds.name}-twin"
            stamp = out / f"{ds.name}-twin.stamp"
            if not (stamp.exists() and stamp.read_text() == ds.stamp_text()):
                rmtree(twin)
                twin.parent.mkdir(parents=True, exist_ok=True)
                subprocess.run(["cp", "-a", rel(src), rel(twin)], check=True)
                stamp.write_text(ds.stamp_text())
            batch = max(1, -(-2 * ds.files // 64))  # ~64 md5sum processes: both cores stay busy
            rows = [
                Row(
                    "ferry --compare md5",
                    f"{s.ferry} copy -r --compare md5 {q(src)}/ {q(twin)}",
                    "ferry",
                    md5=True,
                    json=True,
                    src=src,
                    dst=twin,
                ),
                Row(
                    "md5sum ×2 procs",
                    f"find {q(src)} {q(twin)} -type f -print0 | xargs -0 -P2 -n {batch} md5sum > /dev/null",
                    "peer",
                    md5=True,
                    src=src,
                    dst=twin,
                ),
                Row(
                    "rsync -a --checksum (md5)",
                    f"rsync -a --checksum --checksum-choice=md5 {q(src)}/ {q(twin)}/",
                    "peer",
                    md5=True,
                    src=src,
                    dst=twin,
                ),
            ]

            def verify(src=src, twin=twin, ds=ds):
                proc = subprocess.run(
                    [
                        s.ferry,
                        "copy",
                        "-r",
                        "--compare",
                        "md5",
                        "--json",
                        rel(src) + "/",
                        rel(twin),
                    ],
                    capture_output=True,
                    text=True,
                    env=env,
                )
                summary = json.loads(proc.stdout or "{}")
                files = summary.get("files", {})
                same = diff_trees(src, twin)
                return {
                    "ok": proc.returncode == 0
                    and files.get("copied") == 0
                    and files.get("skipped") == ds.files
                    and same["ok"],
                    "ferry_files": files,
                    "twin_identical": same["ok"],
                }

            groups.append(
                Group(
                    f"md5-{ds.name}",
                    f"compare by MD5 against an identical copy, {ds.desc}",
                    ds.desc,
                    2 * ds.bytes,
                    2 * ds.files,
                    rows,
                    env,
                    warm=[src, twin],
                    verify=verify,
                    notes=[
                        "Every row reads and hashes both trees (source and its identical twin): "
                        f"{human_bytes(2 * ds.bytes)}. ferry hashes both sides of each pair and copies "
                        "nothing; md5sum is the hashing floor on two cores; rsync --checksum "
                        "(forced to MD5) is the tool that does the same job."
                    ],
                )
            )
    return groups


# What ferry kept before issue 29's defaults (hard links, holes, xattrs, ACLs and fifos were
# not): the row that states what keeping them costs.
PRESERVE_BEFORE = "ferry --no-fsync --preserve mode,owner,times"
PRESERVE_NOTE = (
    "What ferry kept before `--preserve all` became the default: the same copy without "
    "reading or writing extended attributes, ACLs, holes and hard links."
)


def copy_group(s: Settings, ds: Dataset, src: Path, out: Path, env: dict) -> Group:
    """ferry against cp, rsync and fpsync, each class twice: as the tools run by default (nothing
    synced) and durable (every file fsynced, or the destination's filesystem synced at the end),
    since ferry fsyncs by default and --no-fsync turns it off."""
    d = {
        n: out / n
        for n in (
            "ferry",
            "ferry-nofsync",
            "ferry-nofsync-before",
            "cp",
            "cp-sync",
            "rsync",
            "rsync-fsync",
            "fpsync-rsync",
            "fpsync-cpio",
        )
    }
    n = 4  # fpsync workers: two cores, the rest waiting on the disk
    work = s.work / "fpsync"
    sync_note = "sync -f: syncfs(2) of the destination's filesystem, as ferry does for each batch and at the end."
    rows = [
        Row(
            "ferry",
            f"{s.ferry} copy -r {q(src)}/ {q(d['ferry'])}",
            "ferry",
            durable=True,
            json=True,
            note="ferry's default: files committed in batches, each after one syncfs of the destination, then the filesystem synced at the end.",
        ),
        Row(
            "ferry --no-fsync",
            f"{s.ferry} copy -r --no-fsync {q(src)}/ {q(d['ferry-nofsync'])}",
            "ferry",
            json=True,
        ),
        Row(
            PRESERVE_BEFORE,
            f"{s.ferry} copy -r --no-fsync --preserve mode,owner,times {q(src)}/ "
            f"{q(d['ferry-nofsync-before'])}",
            "ferry",
            json=True,
            note=PRESERVE_NOTE,
        ),
        Row("cp -a", f"cp -a {q(src)} {q(d['cp'])}", "peer"),
        Row(
            "cp -a && sync -f",
            f"cp -a {q(src)} {q(d['cp-sync'])} && sync -f {q(d['cp-sync'])}",
            "peer",
            durable=True,
            note=sync_note,
        ),
        Row("rsync -a", f"rsync -a {q(src)}/ {q(d['rsync'])}/", "peer"),
        Row(
            "rsync -a --fsync",
            f"rsync -a --fsync {q(src)}/ {q(d['rsync-fsync'])}/",
            "peer",
            durable=True,
            note="rsync's --fsync: every written file fsynced.",
        ),
        Row(
            f"fpsync -n {n} rsync",
            fpsync(src, d["fpsync-rsync"], n, "rsync", ds.files, work / "rsync"),
            "peer",
            note=f"{n} workers on two cores; at least {n} jobs.",
        ),
        Row(
            f"fpsync -n {n} cpio",
            fpsync(src, d["fpsync-cpio"], n, "cpio", ds.files, work / "cpio"),
            "peer",
        ),
    ]
    # Every row's output goes before every run, not just its own. Many small files are moved
    # aside instead of deleted (see set_aside). fpsync wants its destination to exist.
    clear = (
        set_aside_cmd(out, trash_dir(s))
        if ds.files >= MANY_FILES
        else f"rm -rf {q(out)} && mkdir -p {q(out)}"
    )
    for row, dst in zip(rows, d.values()):
        row.prepare = f"{clear} && mkdir -p {q(d['fpsync-rsync'])} {q(d['fpsync-cpio'])}"
        row.src, row.dst = src, dst

    def verify():
        res = {}
        for row, dst in zip(rows, d.values()):
            set_aside(out, trash_dir(s))
            subprocess.run(row.prepare, shell=True, check=True)
            subprocess.run(
                row.cmd,
                shell=True,
                env=env,
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            res[row.name] = diff_trees(src, dst)
        if not s.keep:
            set_aside(out, trash_dir(s))
        return {
            "ok": all(r["ok"] for r in res.values()),
            "compared": "each command run once more, then diff -rq source destination",
            **res,
        }

    return Group(
        f"copy-{ds.name}",
        f"local → local copy, {ds.desc}",
        ds.desc,
        ds.bytes,
        ds.files,
        rows,
        env,
        warm=[src],
        verify=verify,
        notes=["All destinations removed before every run; source in the page cache."],
    )
