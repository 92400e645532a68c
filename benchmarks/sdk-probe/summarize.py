#!/usr/bin/env python3
"""Markdown tables from compare.sh's TSVs.

    summarize.py RUNS.tsv [RUNS.tsv ...] [--builds BUILDS.tsv ...]

Several run files are pooled, so passes made at different times (and loads) on a shared machine
count together; medians are used because a single run slowed by a neighbour should not move them.
"""

import csv
import statistics
import sys


def read(paths):
    rows = []
    for p in paths:
        with open(p) as f:
            rows += list(csv.DictReader(f, delimiter="\t"))
    return rows


def main(argv):
    runs, builds, target = [], [], None
    for a in argv:
        if a == "--builds":
            target = builds
        else:
            (runs if target is None else target).append(a)
    if not runs:
        sys.exit(__doc__)
    rows = read(runs)
    groups = {}
    for r in rows:
        groups.setdefault((r["op"], int(r["size_mib"]), r["tool"]), []).append(r)
    med = statistics.median
    out = [
        "| op | size | tool | runs | wall s median (min–max) | MiB/s | CPU s (user+sys) | CPU s per GiB | peak RSS MiB | server CPU s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (op, size, tool), rs in groups.items():
        wall = [float(r["wall_s"]) for r in rs]
        cpu = [float(r["user_s"]) + float(r["sys_s"]) for r in rs]
        rss = [int(r["peak_rss_kib"]) / 1024 for r in rs]
        srv = [float(r["server_cpu_s"]) for r in rs]
        out.append(
            f"| {op} | {size} MiB | {tool} | {len(rs)} | {med(wall):.2f} ({min(wall):.2f}–{max(wall):.2f}) | "
            f"{size / med(wall):.0f} | {med(cpu):.2f} | {med(cpu) / size * 1024:.2f} | {med(rss):.0f} | {med(srv):.2f} |"
        )
    loads = [float(r["load1"]) for r in rows]
    out += [
        "",
        f"Load average (1 min) when each run started: median {med(loads):.2f}, range {min(loads):.2f}–{max(loads):.2f}.",
    ]
    if builds:
        cols = [
            "project",
            "clean_build_s",
            "build_cpu_s",
            "load1_before",
            "binary_bytes",
            "stripped_bytes",
            "crates_brief_cmd",
            "crates_unique",
            "crates_normal_unique",
        ]
        out += [
            "",
            "| project | clean release build s | build CPU s | load before | binary bytes | stripped bytes | "
            "crates (brief's command) | crates (unique) | crates (normal deps, unique) |",
            "|" + "---|" * len(cols),
        ]
        for b in read(builds):
            out.append("| " + " | ".join(b.get(k, "") for k in cols) + " |")
    print("\n".join(out))


if __name__ == "__main__":
    main(sys.argv[1:])
