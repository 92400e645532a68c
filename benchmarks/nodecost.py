#!/usr/bin/env python3
"""What one large download costs a node: ferry against rclone, CPU (user + system), wall, page
faults and context switches, in paired rounds (issue #44 item 7).

One Azurite, one blob of --size MiB (uploaded once, with its Content-MD5), downloaded by each
row in turn, round after round, so every round pairs ferry with rclone under the same load.
Both check the download's MD5. The classes stay apart: `ferry --no-fsync` against rclone (neither
makes the file durable), ferry's default (fsync) against `rclone … && sync -f`. With --before, an
older ferry binary runs the same rows in the same rounds.

    .venv/bin/python benchmarks/nodecost.py [--rounds 3] [--size 300] [--before PATH]

Results: benchmarks/results/nodecost.{json,md} and the block between the `nodecost` markers in
docs/benchmarks.md. Resource use comes from wait4(2) of each command (its children included).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from campaign.common import (  # noqa: E402
    AZ_ACCOUNT,
    AZ_KEY,
    CONTAINER,
    RCLONE,
    MiB,
    bench_env,
    free_port,
    log,
    rel,
    rmtree,
)
from campaign.peers import FERRY_CONCURRENCY, RCLONE_TUNED  # noqa: E402
from campaign.report import machine, update_block  # noqa: E402
from campaign.services import azurite_answers, end_process, spawn_azurite  # noqa: E402

DOCS = Path("docs/benchmarks.md")
# Each ferry row and the peer of its class: (ferry row, peer row).
PAIRS = (
    ("ferry --no-fsync", "rclone"),
    ("ferry --no-fsync --concurrency 4", "rclone"),
    ("ferry --no-fsync", "rclone (tuned)"),
    ("ferry", "rclone (tuned) && sync -f"),
)


def rows(ferry: str, before: str | None, url: str, dst: str) -> dict[str, str]:
    remote = f"az:{CONTAINER}/nodecost"
    binaries = {"": ferry} | ({" (before)": before} if before else {})
    out = {}
    for label, binary in binaries.items():
        out[f"ferry{label}"] = f"{shlex.quote(binary)} copy -r {url}/ {dst}/"
        out[f"ferry --no-fsync{label}"] = f"{shlex.quote(binary)} copy -r --no-fsync {url}/ {dst}/"
    # rclone's default for a file this size is 4 streams: ferry held to the same count.
    out["ferry --no-fsync --concurrency 4"] = (
        f"{shlex.quote(ferry)} copy -r --no-fsync --concurrency 4 {url}/ {dst}/"
    )
    out["rclone"] = f"{RCLONE} copy {remote} {dst}"
    out["rclone (tuned)"] = f"{RCLONE} copy {remote} {dst} {RCLONE_TUNED}"
    out["rclone (tuned) && sync -f"] = f"{out['rclone (tuned)']} && sync -f {dst}"
    return out


def measure(cmd: str, env: dict, dst: Path) -> dict:
    """One run of `cmd` into an emptied `dst`, after a sync so no earlier run's writeback is
    counted."""
    rmtree(dst)
    dst.mkdir(parents=True)
    subprocess.run(["sync"], check=True)
    started = time.monotonic()
    proc = subprocess.Popen(cmd, shell=True, env=env, stdout=subprocess.DEVNULL)
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.monotonic() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"`{cmd}` failed ({proc.returncode})")
    return {
        "wall_s": round(wall, 3),
        "cpu_s": round(ru.ru_utime + ru.ru_stime, 3),
        "user_s": round(ru.ru_utime, 3),
        "sys_s": round(ru.ru_stime, 3),
        "faults": ru.ru_minflt + ru.ru_majflt,
        "ctx_switches": ru.ru_nvcsw + ru.ru_nivcsw,
        "max_rss_kib": ru.ru_maxrss,
    }


def seed(ferry: str, env: dict, url: str, work: Path, size_mib: int) -> None:
    src = work / "src"
    src.mkdir(parents=True, exist_ok=True)
    with open(src / "medium.bin", "wb") as f:
        for _ in range(size_mib):
            f.write(os.urandom(MiB))
    container = url.rsplit("/", 1)[0]
    subprocess.run([ferry, "mk", container], env=env, check=True, capture_output=True)
    subprocess.run([ferry, "copy", "-r", f"{src}/", f"{url}/"], env=env, check=True)


def summarize(runs: dict[str, list[dict]]) -> dict:
    med = {
        name: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for name, rs in runs.items()
    }
    ratios = []
    for ferry_row, peer in PAIRS:
        for label in ("", " (before)"):
            row = ferry_row + label
            if row not in runs:
                continue
            per_round = [
                (f["cpu_s"] / p["cpu_s"], f["wall_s"] / p["wall_s"])
                for f, p in zip(runs[row], runs[peer])
            ]
            ratios.append(
                {
                    "ferry": row,
                    "peer": peer,
                    "cpu": [round(c, 2) for c, _ in per_round],
                    "wall": [round(w, 2) for _, w in per_round],
                }
            )
    return {"median": med, "ratios": ratios}


def render(res: dict) -> str:
    m = res["machine"]
    lines = [
        f"Measured {res['date']} on {m['nproc']} × {m['cpu']}, kernel {m['kernel']}; one "
        f"{res['size_mib']} MiB blob from Azurite on loopback, every row once a round, "
        f"{res['rounds']} rounds; medians; resource use from wait4(2). Load average (1 min) "
        f"at the start: {res['load']}. Reproduce: `{res['command']}`.",
        "",
        "| row | CPU s (user + sys) | user s | sys s | wall s | page faults | context switches "
        "| peak RSS MiB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, x in res["median"].items():
        lines.append(
            f"| {name} | {x['cpu_s']:.3f} | {x['user_s']:.3f} | {x['sys_s']:.3f} | "
            f"{x['wall_s']:.2f} | {x['faults']:,.0f} | {x['ctx_switches']:,.0f} | "
            f"{x['max_rss_kib'] / 1024:.0f} |"
        )
    lines += [
        "",
        "Ratios, ferry ÷ peer, round by round (below 1: ferry spends less):",
        "",
        "| ferry | peer | CPU each round | wall each round |",
        "|---|---|---|---|",
    ]
    for r in res["ratios"]:
        cpu = " / ".join(f"{x:.2f}" for x in r["cpu"])
        wall = " / ".join(f"{x:.2f}" for x in r["wall"])
        lines.append(f"| {r['ferry']} | {r['peer']} | {cpu} | {wall} |")
    lines += ["", "Commands (from the repo root):", ""]
    lines += [f"- {name}: `{cmd}`" for name, cmd in res["commands"].items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        prog="benchmarks/nodecost.py", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size", type=int, default=300, help="MiB (default %(default)s)")
    ap.add_argument("--ferry", default="worker/target/release/ferry")
    ap.add_argument("--before", help="an older ferry binary, timed in the same rounds")
    ap.add_argument("--scratch", default="benchmarks/.data/nodecost")
    ap.add_argument("--results", default="benchmarks/results")
    ap.add_argument("--no-docs", action="store_true")
    a = ap.parse_args(argv)
    work = Path(a.scratch)
    rmtree(work)
    work.mkdir(parents=True)
    port = free_port()
    env = bench_env(
        {
            "AZURE_STORAGE_ACCOUNT": AZ_ACCOUNT,
            "AZURE_STORAGE_KEY": AZ_KEY,
            "FERRY_AUTH": "key",
            "RCLONE_CONFIG": str(work / "rclone.conf"),
            "RCLONE_CONFIG_AZ_TYPE": "azureblob",
            "RCLONE_CONFIG_AZ_ACCOUNT": AZ_ACCOUNT,
            "RCLONE_CONFIG_AZ_KEY": AZ_KEY,
            "RCLONE_CONFIG_AZ_ENDPOINT": f"http://127.0.0.1:{port}/{AZ_ACCOUNT}",
        }
    )
    (work / "rclone.conf").touch()
    url = f"http://127.0.0.1:{port}/{AZ_ACCOUNT}/{CONTAINER}/nodecost"
    dst = work / "dst"
    commands = rows(a.ferry, a.before, url, rel(dst))
    azurite = spawn_azurite(
        port, work / "azurite", work / "azurite.log", lambda: azurite_answers(port)
    )
    runs: dict[str, list[dict]] = {name: [] for name in commands}
    try:
        seed(a.ferry, env, url, work, a.size)
        load = os.getloadavg()[0]
        for k in range(a.rounds):
            # Each round starts at another row, so no row always follows the same one.
            names = list(commands)
            names = names[k % len(names) :] + names[: k % len(names)]
            for name in names:
                r = measure(commands[name], env, dst)
                runs[name].append(r)
                log(f"round {k + 1} {name}: {r['cpu_s']:.3f} s CPU, {r['wall_s']:.2f} s")
    finally:
        end_process(azurite)
    res = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "size_mib": a.size,
        "rounds": a.rounds,
        "concurrency": FERRY_CONCURRENCY,
        "load": f"{load:.2f}",
        "command": " ".join(["benchmarks/nodecost.py", *argv]),
        "commands": commands,
        "runs": runs,
        **summarize(runs),
    }
    results = Path(a.results)
    (results / "nodecost.json").write_text(json.dumps(res, indent=1) + "\n")
    (results / "nodecost.md").write_text("# What one large download costs a node\n\n" + render(res))
    if not a.no_docs:
        update_block(DOCS, "nodecost", render(res))
    log(f"results in {results / 'nodecost.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
