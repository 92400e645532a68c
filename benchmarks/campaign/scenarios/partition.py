"""Scenario `partition`: `ferry partition` against fpart, and listing a large tree."""

from __future__ import annotations

import subprocess

from ..checks import check_partition, count_fpart
from ..common import GiB, Settings, bench_env, human_bytes, q, rel
from ..datasets import make_manifest, make_tree
from ..timing import Group, Row


def scenario_partition(s: Settings, _host: None = None) -> list[Group]:
    big = s.size(1_000_000, 100_000)
    small = big // 10
    out = s.work / "partition"
    env = bench_env()
    groups = []
    modes = [
        ("parts", "--parts 16", "-n 16", 16, "16 parts balanced by size (LPT)"),
        (
            "max-files",
            "--max-files 10000",
            "-L -f 10000",
            10000,
            "at most 10,000 files a part, input order",
        ),
        (
            "max-bytes",
            "--max-bytes 10GiB",
            f"-L -s {10 * GiB}",
            10 * GiB,
            "parts closed on reaching 10 GiB, input order",
        ),
    ]
    for lines, suffix in ((big, ""), (small, "-tenth")):
        for mode, fflag, pflag, limit, desc in modes:
            gid = f"{mode}{suffix}"
            if not s.selected(gid):
                continue
            man, sizes, total = make_manifest(s, lines)
            fo, po = out / gid / "ferry", out / gid / "fpart"
            rows = [
                Row(
                    "ferry partition",
                    f"{s.ferry} partition {q(man)} --out {q(fo)} {fflag}",
                    "ferry",
                    f"rm -rf {q(fo)}",
                    src=man,
                    dst=fo,
                ),
                Row(
                    f"fpart -a {pflag}",
                    f"fpart -a {pflag} -i {q(sizes)} -o {q(po)}/part",
                    "peer",
                    f"rm -rf {q(po)} && mkdir -p {q(po)}",
                    src=sizes,
                    dst=po,
                ),
            ]
            if mode == "parts":
                targets = {
                    "ferry partition": [
                        ("wall_median", "<", 1.0, "wall < 1 s"),
                        ("rss_mib_median", "<", 300, "peak RSS < 300 MiB"),
                    ]
                }
            else:
                targets = {"ferry partition": [("rss_mib_median", "<", 50, "peak RSS < 50 MiB")]}

            def verify(fo=fo, po=po, lines=lines, total=total, mode=mode, limit=limit):
                res = check_partition(fo, po, lines, total, mode, limit)
                res["ok"] = res["ok"] and res["fpart_lines"] == lines
                return res

            groups.append(
                Group(
                    gid,
                    f"partition a {lines:,}-line manifest: {desc}",
                    f"manifest of {lines:,} files ({human_bytes(total)} in total)",
                    0,
                    lines,
                    rows,
                    env,
                    warm=[man.parent],
                    verify=verify,
                    targets=targets,
                    notes=[
                        "fpart reads the same entries as `size path` lines (-a: no crawling). "
                        "For the input-order modes fpart runs live (-L), the streaming equivalent; "
                        "-n cannot be combined with -L."
                    ],
                )
            )
    if s.selected("list-tree"):
        dirs = s.size(1000, 100)
        tree = make_tree(s, dirs, 1000)
        files = dirs * 1000
        base = out / "list-tree"
        outs = {n: base / n for n in ("ferry", "fpart", "fpart-live", "find")}
        rows = [
            Row("ferry ls -r", f"{s.ferry} ls -r {q(tree)} > {q(outs['ferry'])}/list.tsv", "ferry"),
            Row("fpart -f 100000", f"fpart -f 100000 -o {q(outs['fpart'])}/part {q(tree)}", "peer"),
            Row(
                "fpart -L -f 100000",
                f"fpart -L -f 100000 -o {q(outs['fpart-live'])}/part {q(tree)}",
                "peer",
            ),
            Row(
                "find -printf",
                f"find {q(tree)} -printf '%P\\t%y\\t%s\\t%T@\\n' > {q(outs['find'])}/list.tsv",
                "peer",
            ),
        ]
        for row, d in zip(rows, outs.values()):
            row.prepare, row.src, row.dst = f"rm -rf {q(d)} && mkdir -p {q(d)}", tree, d

        def warm_tree():
            subprocess.run(["find", rel(tree), "-printf", ""], check=True)

        def verify():
            with open(outs["ferry"] / "list.tsv") as f:
                kinds = [line.split("\t")[1] for line in f if not line.startswith("#")]
            fp, fpl = count_fpart(outs["fpart"]), count_fpart(outs["fpart-live"])
            ok = (
                kinds.count("f") == files
                and kinds.count("d") == dirs
                and fp == files
                and fpl == files
            )
            return {
                "ok": ok,
                "ferry_files": kinds.count("f"),
                "ferry_dirs": kinds.count("d"),
                "fpart_entries": fp,
                "fpart_live_entries": fpl,
            }

        groups.append(
            Group(
                "list-tree",
                f"list a tree of {files:,} empty files in {dirs:,} directories",
                f"{files:,} files",
                0,
                files,
                rows,
                env,
                setup=warm_tree,
                verify=verify,
                notes=[
                    "Output written to a file by every row; the tree's inodes are in cache (one "
                    "untimed `find` first)."
                ],
            )
        )
    return groups
