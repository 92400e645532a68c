#!/usr/bin/env python3
"""How many requests a second tools/latencyfs serves, and at what CPU cost to the machine, so
that a benchmark on it knows whether the filesystem or the tool under test was the limit.

N client processes stat one file in a loop on a mount whose caches are off (attribute and
entry timeouts 0), so every stat is two requests (lookup, getattr); the rate is the
filesystem's own count over the window, and the daemon's CPU time per request comes from /proc.
This machine is shared and its load moves: every case runs --runs times, the builds compared
take turns (in alternating order), and the table gives the median, the range, and how much CPU
other work took meanwhile.

    sudo .venv/bin/python benchmarks/latencyfs_rate.py [--seconds 3] [--clients 1,2,4,8] [--runs 5]
                                                       [--against REV] [--threads N] [--delay MS]

--against REV also builds tools/latencyfs as it was at git revision REV (in the scratch
directory) and measures both. --delay gives every request a delay (the rate is then the
clients' round trips; what matters is the daemon's CPU a request, which the tool measured on the
mount does not get). Results: benchmarks/results/latencyfs-rate.{json,md} (at a delay:
latencyfs-rate-MSms), and the block between the matching markers in docs/nfs.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import multiprocessing
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from campaign.common import REPO, log, rel  # noqa: E402
from campaign.report import machine, update_block  # noqa: E402
from support.latencyfs import BINARY, LatencyFS, build  # noqa: E402

NAME = "latencyfs-rate"


def hammer(path: str, seconds: float) -> float:
    """Stat path for `seconds`; the CPU time that took (this process's)."""
    cpu0, end = time.process_time(), time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(100):
            os.stat(path)
    return time.process_time() - cpu0


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy_seconds() -> float:
    """CPU time the whole machine has not been idle, steal (the hypervisor's) included."""
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(
        int, Path("/proc/stat").read_text().split()[1:9]
    )
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=REPO, check=True, capture_output=True, text=True
    ).stdout.strip()


def build_at(rev: str, scratch: Path) -> tuple[str, Path]:
    """tools/latencyfs as of git revision rev, built with that revision's Makefile."""
    short = git("rev-parse", "--short", f"{rev}^{{commit}}")
    d = scratch / f"latencyfs-{short}"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    for name in ("latencyfs.c", "Makefile"):
        (d / name).write_text(git("show", f"{short}:tools/latencyfs/{name}") + "\n")
    subprocess.run(["make", "-s", "-C", str(d)], check=True)
    return short, d / "latencyfs"


def this_build() -> tuple[str, Path]:
    build()
    sources = ["tools/latencyfs/latencyfs.c", "tools/latencyfs/Makefile"]
    changed = subprocess.run(
        ["git", "diff", "--quiet", "HEAD", "--", *sources], cwd=REPO
    ).returncode
    return git("rev-parse", "--short", "HEAD") + (" + changes" if changed else ""), BINARY


def measure(fs: LatencyFS, target: str, clients: int, seconds: float) -> dict:
    with multiprocessing.Pool(clients) as pool:
        pool.starmap(hammer, [(target, 0.2)] * clients)  # warm up: threads, caches
        load = os.getloadavg()[0]
        fs.reset()
        cpu0, busy0 = cpu_seconds(fs.proc.pid), machine_busy_seconds()
        client_cpu = sum(pool.starmap(hammer, [(target, seconds)] * clients))
        st = fs.snapshot()
        cpu, busy = cpu_seconds(fs.proc.pid) - cpu0, machine_busy_seconds() - busy0
    # The load average counts this benchmark's own clients; what the rest of the machine took
    # while it ran is the busy time the daemon and the clients did not use.
    others = max(0.0, busy - cpu - client_cpu) / st["window_s"]
    return {
        "requests": st["total"],
        "window_s": round(st["window_s"], 3),
        "requests_per_s": round(st["total"] / st["window_s"]),
        "daemon_cpu_us_per_request": round(cpu / st["total"] * 1e6, 2),
        "inflight_max": st["inflight_max"],
        "load1": round(load, 2),
        "other_cpus": round(others, 2),
    }


def summarize(build: str, clients: int, runs: list[dict]) -> dict:
    rates = [r["requests_per_s"] for r in runs]
    return {
        "build": build,
        "clients": clients,
        "requests_per_s": round(statistics.median(rates)),
        "min": min(rates),
        "max": max(rates),
        "daemon_cpu_us_per_request": round(
            statistics.median(r["daemon_cpu_us_per_request"] for r in runs), 2
        ),
        "inflight_max": max(r["inflight_max"] for r in runs),
        "other_cpus": round(statistics.median(r["other_cpus"] for r in runs), 2),
        "other_cpus_max": max(r["other_cpus"] for r in runs),
        "load1": round(statistics.median(r["load1"] for r in runs), 1),
        "runs": runs,
    }


def name(delay_ms: float) -> str:
    return f"{NAME}-{delay_ms:g}ms" if delay_ms else NAME


def render(res: dict) -> str:
    m = res["machine"]
    threads = f"--threads {res['threads']}" if res["threads"] else "default threads"
    delay = res.get("delay_ms", 0)
    lines = [
        f"Measured {res['date']} on {m['nproc']} × {m['cpu']}, kernel {m['kernel']}, a machine shared with "
        f"other work; each stat with caches off is a lookup and a getattr request"
        f"{f', each delayed {delay:g} ms' if delay else ''}; {threads}; "
        f"{res['runs']} runs of {res['seconds']:g} s per row, builds in turns; median (range). Other work: "
        f"the CPUs' worth the rest of the machine used meanwhile (median / most); the load average "
        f"counts the clients too. Reproduce: `{res['command']}`.",
        "",
        "| build | client processes | requests/s | range | daemon CPU µs a request | most in flight | "
        "other work, CPUs | load (1 min) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r['build']} | {r['clients']} | {r['requests_per_s']:,} | {r['min']:,}–{r['max']:,} | "
        f"{r['daemon_cpu_us_per_request']} | {r['inflight_max']} | {r['other_cpus']:.2f} / "
        f"{r['other_cpus_max']:.2f} | {r['load1']} |"
        for r in res["rows"]
    ]
    return "\n".join(lines) + "\n"


def write(results: Path, res: dict, docs: bool) -> None:
    block, delay = render(res), res.get("delay_ms", 0)
    title = (
        f"{delay:g} ms a request: requests a second and their CPU"
        if delay
        else "zero delay: requests a second"
    )
    (results / f"{name(delay)}.md").write_text(f"# latencyfs at {title}\n\n" + block)
    if docs:
        update_block(REPO / "docs" / "nfs.md", name(delay), block)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        prog="benchmarks/latencyfs_rate.py", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument(
        "--seconds", type=float, default=3, help="length of one measurement (default %(default)s)"
    )
    ap.add_argument(
        "--clients", default="1,2,4,8", help="client processes, one row each (default %(default)s)"
    )
    ap.add_argument(
        "--runs", type=int, default=5, help="measurements per row (default %(default)s)"
    )
    ap.add_argument(
        "--against", metavar="REV", help="also measure tools/latencyfs as of this git revision"
    )
    ap.add_argument("--threads", type=int, help="latencyfs --threads (default: its own default)")
    ap.add_argument(
        "--delay", type=float, default=0, metavar="MS", help="latencyfs --delay (default 0)"
    )
    ap.add_argument("--scratch", default="benchmarks/.data")
    ap.add_argument("--results", default="benchmarks/results")
    ap.add_argument(
        "--no-docs", action="store_true", help="don't rewrite the matching block of docs/nfs.md"
    )
    ap.add_argument(
        "--report", action="store_true", help="only redo the table and docs from the results' JSON"
    )
    a = ap.parse_args(argv)
    results = Path(a.results)
    if a.report:
        write(results, json.loads((results / f"{name(a.delay)}.json").read_text()), not a.no_docs)
        return 0
    scratch = Path(a.scratch)
    builds = [this_build()] + ([build_at(a.against, scratch)] if a.against else [])
    clients = [int(c) for c in a.clients.split(",")]
    base = scratch / NAME
    shutil.rmtree(base, ignore_errors=True)
    (base / "backing").mkdir(parents=True)
    (base / "backing" / "file").write_bytes(b"x")
    runs: dict[tuple[str, int], list[dict]] = {}
    for i in range(a.runs):
        for label, binary in builds if i % 2 == 0 else builds[::-1]:
            with LatencyFS(
                base / "backing",
                base / "mnt",
                attr_timeout=0,
                entry_timeout=0,
                threads=a.threads,
                delay_ms=a.delay,
                binary=binary,
            ) as fs:
                for c in clients:
                    r = measure(fs, str(base / "mnt" / "file"), c, a.seconds)
                    runs.setdefault((label, c), []).append(r)
                    log(
                        f"run {i + 1}, {label}, {c} clients: {r['requests_per_s']:,} requests/s, daemon "
                        f"{r['daemon_cpu_us_per_request']} µs CPU a request, other work {r['other_cpus']} CPUs, "
                        f"load {r['load1']}"
                    )
    shutil.rmtree(base, ignore_errors=True)
    res = {
        "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": machine(),
        "seconds": a.seconds,
        "runs": a.runs,
        "threads": a.threads,
        "delay_ms": a.delay,
        "command": shlex.join(["sudo", ".venv/bin/python", "benchmarks/latencyfs_rate.py", *argv]),
        "rows": [summarize(label, c, runs[label, c]) for label, _ in builds for c in clients],
    }
    results.mkdir(parents=True, exist_ok=True)
    (results / f"{name(a.delay)}.json").write_text(
        json.dumps(res, indent=1, ensure_ascii=False) + "\n"
    )
    write(results, res, not a.no_docs)
    log(f"results in {rel(results)}/{name(a.delay)}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
