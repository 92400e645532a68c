"""Scenario `local`: local → local copies and MD5 comparisons."""

from __future__ import annotations

import json
import subprocess

from ..checks import diff_trees
from ..common import (
    KiB, MANY_FILES, MiB, Settings, bench_env, human_bytes, q, rel, rmtree, set_aside,
    set_aside_cmd, trash_dir
)
from ..datasets import files_dataset
from ..timing import Group, Row


def scenario_local(s: Settings) -> list[Group]:
    base = s.data / "local"
    small = files_dataset("small-files", "", s.size(20_000, 4_000), lambda r: r.randint(0, 32 * KiB), seed=11)
    small.desc = f"{small.files:,} files of 0–32 KiB in {small.files // 200} directories"
    nlarge = s.size(200, 40)
    large = files_dataset("10MiB-files", f"{nlarge} files of 10 MiB", nlarge, lambda r: 10 * MiB, per_dir=100, seed=12)
    out = s.work / "local"
    env = bench_env()
    groups = []
    for ds in (small, large):
        if not (s.selected(f"copy-{ds.name}") or s.selected(f"md5-{ds.name}")):
            continue
        src = ds.materialize(base)
        if s.selected(f"copy-{ds.name}"):
            dests = {n: out / ds.name / n for n in ("ferry", "cp", "rsync")}
            rows = [
                Row("ferry", f"{s.ferry} copy -r {q(src)}/ {q(dests['ferry'])}", "ferry"),
                Row("cp -a", f"cp -a {q(src)} {q(dests['cp'])}", "peer"),
                Row("rsync -a", f"rsync -a {q(src)}/ {q(dests['rsync'])}/", "peer"),
            ]
            # Every row's output goes before every run, not just its own: deleting a tree drops its
            # dirty pages, so one row's writeback never lands in the next row's timing. Many small
            # files are moved aside instead (see set_aside); they are little dirty data anyway.
            for row in rows:
                if ds.files >= MANY_FILES:
                    row.prepare = set_aside_cmd(out / ds.name, trash_dir(s))
                else:
                    row.prepare = f"rm -rf {q(out / ds.name)} && mkdir -p {q(out / ds.name)}"

            def verify(src=src, dests=dests, rows=rows, ds=ds):
                res = {}
                for row, d in zip(rows, dests.values()):
                    set_aside(out / ds.name, trash_dir(s))
                    (out / ds.name).mkdir(parents=True)
                    subprocess.run(row.cmd, shell=True, env=env, check=True,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    res[row.name] = diff_trees(src, d)
                if not s.keep:
                    set_aside(out / ds.name, trash_dir(s))
                return {"ok": all(r["ok"] for r in res.values()),
                        "compared": "each command run once more, then diff -rq source destination", **res}

            groups.append(Group(
                f"copy-{ds.name}", f"local → local copy, {ds.desc}", ds.desc, ds.bytes, ds.files, rows, env,
                warm=[src], verify=verify,
                notes=["All destinations removed before every run; source in the page cache."]))
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
                Row("ferry --compare md5", f"{s.ferry} copy -r --compare md5 {q(src)}/ {q(twin)}", "ferry"),
                Row("md5sum ×2 procs", f"find {q(src)} {q(twin)} -type f -print0 | xargs -0 -P2 -n {batch} md5sum > /dev/null", "peer"),
                Row("rsync -a --checksum (md5)", f"rsync -a --checksum --checksum-choice=md5 {q(src)}/ {q(twin)}/", "peer"),
            ]

            def verify(src=src, twin=twin, ds=ds):
                proc = subprocess.run([s.ferry, "copy", "-r", "--compare", "md5", "--json", rel(src) + "/", rel(twin)],
                                      capture_output=True, text=True, env=env)
                summary = json.loads(proc.stdout or "{}")
                files = summary.get("files", {})
                same = diff_trees(src, twin)
                return {"ok": proc.returncode == 0 and files.get("copied") == 0 and files.get("skipped") == ds.files
                        and same["ok"], "ferry_files": files, "twin_identical": same["ok"]}

            groups.append(Group(
                f"md5-{ds.name}", f"compare by MD5 against an identical copy, {ds.desc}", ds.desc,
                2 * ds.bytes, 2 * ds.files, rows, env, warm=[src, twin], verify=verify,
                notes=["Every row reads and hashes both trees (source and its identical twin): "
                       f"{human_bytes(2 * ds.bytes)}. ferry hashes both sides of each pair and copies "
                       "nothing; md5sum is the hashing floor on two cores; rsync --checksum "
                       "(forced to MD5) is the tool that does the same job."]))
    return groups
