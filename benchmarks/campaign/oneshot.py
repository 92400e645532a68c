"""What the benchmarks outside the hyperfine campaign (plan.py, prune_verify.py) share: a command
timed under GNU time, the median of repeated runs, the machine they ran on, and their results
written to benchmarks/results/ and into docs/benchmarks.md."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from .report import update_block

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results"
DOC = REPO / "docs" / "benchmarks.md"


def timed(cmd: list[str], work: Path, ok: tuple[int, ...] = (0,)) -> tuple[dict, str]:
    """Runs cmd under GNU time: wall seconds, CPU seconds and peak RSS (of the largest process),
    and its standard output."""
    stats, out = work / "time.txt", work / "stdout"
    started = time.monotonic()
    with open(out, "wb") as o:
        r = subprocess.run(
            ["/usr/bin/time", "-f", "%e %U %S %M", "-o", str(stats), *cmd],
            stdout=o,
            stderr=subprocess.PIPE,
            text=True,
        )
    if r.returncode not in ok:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr[-2000:]}")
    wall, user, system, rss_kib = stats.read_text().split()[-4:]
    return (
        {
            "seconds": float(wall),
            "cpu_seconds": round(float(user) + float(system), 2),
            "peak_rss_mib": round(int(rss_kib) / 1024, 1),
            "measured_for": round(time.monotonic() - started, 1),
        },
        out.read_text(),
    )


def median_of(runs: list[dict]) -> dict:
    """The run with the median wall time, with the count and the range of all of them."""
    runs = sorted(runs, key=lambda r: r["seconds"])
    return {
        **runs[len(runs) // 2],
        "runs": len(runs),
        "seconds_range": [runs[0]["seconds"], runs[-1]["seconds"]],
    }


def spread(row: dict) -> str:
    return (
        f" ({row['seconds_range'][0]:.1f}–{row['seconds_range'][1]:.1f})" if row["runs"] > 1 else ""
    )


def record(command: str, load_start: float, sizes: list[dict]) -> dict:
    return {
        "date": time.strftime("%Y-%m-%d"),
        "command": command,
        "machine": {
            "cpus": os.cpu_count(),
            "system": platform.platform(terse=True),
            "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30),
        },
        "load": [load_start, os.getloadavg()[0]],
        "sizes": sizes,
    }


def measured_on(res: dict, how: str) -> str:
    """The line under a table: when, where, under what load, how to read it, how to redo it."""
    m = res["machine"]
    return (
        f"Measured {res['date']} on {m['cpus']} CPUs, {m['memory_gib']} GiB, {m['system']}, load average "
        f"{res['load'][0]:.1f} at the start and {res['load'][1]:.1f} at the end (a shared machine: wall times "
        f"stretch with the load{how}. Reproduce: `{res['command']}`."
    )


def publish(
    name: str, block: str, res: dict | None, render: Callable[[dict], str], docs: bool
) -> str:
    """Writes results/NAME.json (unless res is None: the table is redone from it) and NAME.md, and
    the docs' block; returns the table."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    if res is None:
        res = json.loads(path.read_text())
    else:
        path.write_text(json.dumps(res, indent=2) + "\n")
    table = render(res)
    (RESULTS / f"{name}.md").write_text(table + "\n")
    if docs:
        update_block(DOC, block, table + "\n")
    return table
