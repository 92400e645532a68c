#!/usr/bin/env python3
"""How many requests a second tools/latencyfs serves at zero delay, so that a benchmark on it
knows whether the filesystem or the tool under test was the limit.

N client processes stat one file in a loop on a mount whose caches are off (attribute and
entry timeouts 0), so every stat is requests to the filesystem; the rate is the filesystem's own
count over the window, and the daemon's CPU time per request comes from /proc.

    sudo .venv/bin/python benchmarks/latencyfs_rate.py [--seconds 3] [--clients 1,2,4,8]

Results: benchmarks/results/latencyfs-rate.{json,md}.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import multiprocessing
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from campaign.common import log, rel  # noqa: E402
from campaign.report import machine  # noqa: E402
from support.latencyfs import LatencyFS, build  # noqa: E402


def hammer(path: str, seconds: float) -> int:
    n, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(100):
            os.stat(path)
        n += 100
    return n


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="benchmarks/latencyfs_rate.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=3)
    ap.add_argument("--clients", default="1,2,4,8")
    ap.add_argument("--scratch", default="benchmarks/.data")
    ap.add_argument("--results", default="benchmarks/results")
    a = ap.parse_args(argv)
    build()
    base = Path(a.scratch) / "latencyfs-rate"
    shutil.rmtree(base, ignore_errors=True)
    (base / "backing").mkdir(parents=True)
    (base / "backing" / "file").write_bytes(b"x")
    rows = []
    with LatencyFS(base / "backing", base / "mnt", attr_timeout=0, entry_timeout=0) as fs:
        target = str(base / "mnt" / "file")
        for clients in (int(c) for c in a.clients.split(",")):
            with multiprocessing.Pool(clients) as pool:
                pool.starmap(hammer, [(target, 0.2)] * clients)  # warm up: threads, caches
                load = os.getloadavg()[0]
                fs.reset()
                cpu0 = cpu_seconds(fs.proc.pid)
                pool.starmap(hammer, [(target, a.seconds)] * clients)
                st = fs.snapshot()
                cpu = cpu_seconds(fs.proc.pid) - cpu0
            rate = st["total"] / st["window_s"]
            rows.append({"clients": clients, "requests": st["total"], "window_s": round(st["window_s"], 3),
                         "requests_per_s": round(rate), "daemon_cpu_us_per_request": round(cpu / st["total"] * 1e6, 2),
                         "inflight_max": st["inflight_max"], "load1": round(load, 2)})
            log(f"{clients} clients: {rate:,.0f} requests/s, daemon {rows[-1]['daemon_cpu_us_per_request']} µs "
                f"CPU a request, load {load:.1f}")
    shutil.rmtree(base, ignore_errors=True)
    m = machine()
    res = {"date": dt.datetime.now().astimezone().isoformat(timespec="seconds"), "machine": m, "rows": rows,
           "command": "sudo .venv/bin/python benchmarks/latencyfs_rate.py " + " ".join(argv)}
    out = Path(a.results)
    out.mkdir(parents=True, exist_ok=True)
    (out / "latencyfs-rate.json").write_text(json.dumps(res, indent=1) + "\n")
    lines = ["# latencyfs at zero delay: requests a second", "",
             f"Measured {res['date']} on {m['nproc']} × {m['cpu']}, kernel {m['kernel']}; each stat with caches "
             f"off is a lookup and getattr requests. Reproduce: `{res['command']}`.", "",
             "| client processes | requests/s | daemon CPU µs a request | most in flight | load (1 min) |",
             "|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['clients']} | {r['requests_per_s']:,} | {r['daemon_cpu_us_per_request']} | {r['inflight_max']} | "
              f"{r['load1']} |" for r in rows]
    (out / "latencyfs-rate.md").write_text("\n".join(lines) + "\n")
    log(f"results in {rel(out)}/latencyfs-rate.md")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
