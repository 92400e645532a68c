#!/usr/bin/env python3
"""The replication benchmark: workflow/scripts/replicate.py against N independent downloads.

    .venv/bin/python benchmarks/replicate.py [--quick] [--no-docs]

For each dataset and N in (2, 4), on a fresh Azurite each time (restored from a seeded workspace,
as benchmarks/campaign.py does):
  replicate     mpirun -n N replicate.py: list once, each rank downloads its share, broadcast
  independent   N `ferry copy -r` at once, each downloading everything (what N nodes do alone)
  shard-alone   one `ferry copy --shard 0/N`: the download phase's lower bound
then a sweep of chunk size × depth over the broadcast alone (rank 0 already holds the data, so
nothing is downloaded), and a plain mpi4py Bcast of the same bytes from memory: the ceiling of
the "fabric", which on one host is memcpy through shared memory.

Results: benchmarks/results/replicate.json and .md; the block between the replicate markers in
docs/benchmarks.md is rewritten from them.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
# Reuses the campaigns' datasets, Azurite workspaces and environment.
from campaign import common as c  # noqa: E402
from campaign.datasets import Dataset  # noqa: E402
from campaign.report import update_block  # noqa: E402
from campaign.services import AzuriteHost  # noqa: E402

REPLICATE = "workflow/scripts/replicate.py"
MPI_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_mpi_yield_when_idle": "1",
}
PY = c.rel(Path(sys.executable))


def datasets(quick: bool) -> list:
    MiB, KiB = c.MiB, c.KiB
    big = 64 * MiB if quick else 256 * MiB
    small = 1000 if quick else 10_000
    mix = [(f"big/part-{i}.bin", big // 2) for i in range(2)] + [
        (f"small/d{i // 200:03d}/f{i:05d}.bin", 64 * KiB) for i in range(small // 5)
    ]
    return [
        Dataset(
            "rep-large",
            f"4 files of {c.human_bytes(big)}",
            [(f"f{i}.bin", big) for i in range(4)],
            seed=11,
        ),
        Dataset(
            "rep-small",
            f"{small:,} files of 64 KiB",
            [(f"d{i // 200:03d}/f{i:05d}.bin", 64 * KiB) for i in range(small)],
            seed=12,
        ),
        Dataset(
            "rep-mix",
            f"2 files of {c.human_bytes(big // 2)} + {small // 5:,} files of 64 KiB",
            mix,
            seed=13,
        ),
    ]


def timed(cmd: list, env: dict, tfile: Path) -> dict:
    """Run under GNU time: wall, CPU (the command and all its children) and the largest RSS."""
    full = [c.TIME, "-f", "%e %U %S %M", "-o", str(tfile), *cmd]
    t0 = time.monotonic()
    proc = subprocess.run(full, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"failed ({proc.returncode}): {shlex.join(cmd)}\n{proc.stderr[-3000:]}")
    _, user, system, rss = tfile.read_text().split()[-4:]
    return {
        "wall": round(wall, 3),
        "cpu": round(float(user) + float(system), 3),
        "rss_mib": round(int(rss) / 1024, 1),
        "stdout": proc.stdout,
        "stderr": proc.stderr,
    }


def mpirun(n: int) -> list:
    return ["mpirun", "-n", str(n), "--oversubscribe"]


def run_replicate(s, n: int, src: str, dests: Path, env: dict, work: Path, *opts) -> dict:
    report = work / "replicate.json"
    res = timed(
        [
            *mpirun(n),
            PY,
            "-m",
            "mpi4py",
            REPLICATE,
            src,
            f"{dests}/{{rank}}",
            "--ferry",
            s.ferry,
            "--json",
            str(report),
            *opts,
        ],
        env,
        work / "replicate.time",
    )
    rep = json.loads(report.read_text())
    ranks = rep["per_rank"]
    return {
        "wall": res["wall"],
        "cpu": res["cpu"],
        "read": rep["bytes"]["read_from_source"],
        "broadcast_s": rep["broadcast_seconds"],
        "broadcast_bytes": rep["bytes"]["broadcast"],
        "rank_rss_mib": max(r["peak_rss_mib"] for r in ranks),
        "worker_rss_mib": max(r["worker_peak_rss_mib"] for r in ranks),
        "stages_rank0": ranks[0]["seconds"],
    }


def run_independent(
    s, n: int, src: str, dests: Path, env: dict, work: Path, shard: bool = False
) -> dict:
    """N ferry copies at once (or, with shard, only the first of N shards)."""
    procs = []
    t0 = time.monotonic()
    for i in range(1 if shard else n):
        cmd = [
            c.TIME,
            "-f",
            "%e %U %S %M",
            "-o",
            str(work / f"copy-{i}.time"),
            s.ferry,
            "copy",
            "-r",
            src,
            str(dests / str(i)),
            "--json",
            "--no-progress",
        ] + (["--shard", f"0/{n}"] if shard else [])
        procs.append(
            subprocess.Popen(
                cmd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    outs = [p.communicate() for p in procs]
    wall = time.monotonic() - t0
    read, cpu, rss = 0, 0.0, 0.0
    for i, (p, (out, err)) in enumerate(zip(procs, outs)):
        if p.returncode != 0:
            raise RuntimeError(f"ferry copy {i} failed: {err[-2000:]}")
        read += json.loads(out)["bytes"]["copied"]
        _, user, system, kib = (work / f"copy-{i}.time").read_text().split()[-4:]
        cpu += float(user) + float(system)
        rss = max(rss, int(kib) / 1024)
    return {
        "wall": round(wall, 3),
        "cpu": round(cpu, 3),
        "read": read,
        "worker_rss_mib": round(rss, 1),
    }


def ceiling(total: int, chunk: int) -> None:
    """Under mpirun: Bcast `total` bytes from rank 0's memory in `chunk` pieces; rank 0 prints s."""
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    buf = np.full(chunk, 7, dtype=np.uint8)
    comm.Bcast(buf[: 1 << 20])  # connections and first-touch outside the clock
    comm.Barrier()
    t0 = time.monotonic()
    for start in range(0, total, chunk):
        comm.Bcast(buf[: min(chunk, total - start)], root=0)
    comm.Barrier()
    if comm.rank == 0:
        print(json.dumps({"seconds": time.monotonic() - t0}))


def main(argv) -> int:
    if argv[:1] == ["_ceiling"]:
        ceiling(int(argv[1]), int(argv[2]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--quick",
        action="store_true",
        help="datasets a quarter of the size; results in the scratch dir",
    )
    ap.add_argument("--no-docs", action="store_true", help="leave docs/benchmarks.md alone")
    ap.add_argument("--scratch", default="benchmarks/.data")
    ap.add_argument("--ferry", default="worker/target/release/ferry")
    a = ap.parse_args(argv)
    s = c.Settings(
        scratch=Path(a.scratch),
        results=Path("benchmarks/results"),
        runs=1,
        quick=a.quick,
        only=[],
        keep=False,
        update_docs=False,
        ferry_source=Path(a.ferry),
    )
    ferry_info = c.snapshot_ferry(s)
    host = AzuriteHost(s)
    work = s.scratch / "replicate-work"
    c.rmtree(work)
    work.mkdir(parents=True)
    env = {**host.ferry_env(), **MPI_ENV}
    cases, sweep, ceilings = [], [], []
    started = time.monotonic()
    try:
        for ds in datasets(a.quick):
            src = ds.materialize(s.data)
            seed = host.seed_with(ds, src)
            url = host.url(f"data/{ds.name}")
            for n in (2, 4):
                for kind in ("replicate", "independent", "shard-alone"):
                    dests = work / "dest"
                    slot = host.add_slot(f"rep-{ds.name}", seed, clear=[dests])
                    host.reset(slot)  # a fresh Azurite on a fresh copy of the seeded workspace
                    load = round(os.getloadavg()[0], 2)
                    if kind == "replicate":
                        r = run_replicate(s, n, url, dests, env, work)
                    else:
                        r = run_independent(
                            s, n, url, dests, env, work, shard=kind == "shard-alone"
                        )
                    host.stop()
                    # What serving the run cost the source: the part of the bill replication cuts.
                    r["azurite_cpu"] = host.server_cpu.get(slot, [None])[-1]
                    r.update(
                        {
                            "dataset": ds.name,
                            "desc": ds.desc,
                            "bytes": ds.bytes,
                            "files": ds.files,
                            "ranks": n,
                            "kind": kind,
                            "load1": load,
                        }
                    )
                    cases.append(r)
                    c.log(
                        f"{ds.name} N={n} {kind}: {r['wall']:.1f} s, read {c.human_bytes(r['read'])}, "
                        f"cpu {r['cpu']:.1f} s (load {load})"
                    )
                    c.rmtree(dests)
            host.drop_slot(f"rep-{ds.name}")

        # The broadcast alone: rank 0 holds the large dataset already; the others receive it all.
        ds = datasets(a.quick)[0]
        src = ds.materialize(s.data)
        dests = work / "sweep"
        subprocess.run(
            [s.ferry, "copy", "-r", str(src), str(dests / "0"), "--no-progress"],
            env=env,
            check=True,
            capture_output=True,
        )
        n = 4
        for chunk_mib in (4, 16, 64, 256):
            for depth in (1, 2, 4):
                for r in range(1, n):
                    c.rmtree(dests / str(r))
                load = round(os.getloadavg()[0], 2)
                r = run_replicate(
                    s,
                    n,
                    str(src),
                    dests,
                    env,
                    work,
                    "--chunk-size",
                    f"{chunk_mib}MiB",
                    "--depth",
                    str(depth),
                )
                r.update(
                    {
                        "chunk_mib": chunk_mib,
                        "depth": depth,
                        "ranks": n,
                        "load1": load,
                        "bytes": ds.bytes,
                        "gib_per_s": round(ds.bytes / c.GiB / r["broadcast_s"], 3),
                    }
                )
                sweep.append(r)
                c.log(
                    f"sweep chunk {chunk_mib} MiB depth {depth}: broadcast {r['broadcast_s']:.2f} s "
                    f"({r['gib_per_s']} GiB/s per receiver), rank RSS {r['rank_rss_mib']} MiB"
                )
        for n in (2, 4):
            for chunk_mib in (64,):
                load = round(os.getloadavg()[0], 2)
                res = timed(
                    [
                        *mpirun(n),
                        PY,
                        "-m",
                        "mpi4py",
                        "benchmarks/replicate.py",
                        "_ceiling",
                        str(ds.bytes),
                        str(chunk_mib * c.MiB),
                    ],
                    env,
                    work / "ceiling.time",
                )
                secs = json.loads(res["stdout"].strip().splitlines()[-1])["seconds"]
                ceilings.append(
                    {
                        "ranks": n,
                        "chunk_mib": chunk_mib,
                        "seconds": round(secs, 3),
                        "bytes": ds.bytes,
                        "gib_per_s": round(ds.bytes / c.GiB / secs, 3),
                        "load1": load,
                    }
                )
                c.log(f"plain Bcast N={n}: {ds.bytes / c.GiB / secs:.2f} GiB/s per receiver")
        c.rmtree(dests)
    finally:
        host.stop()
        c.rmtree(work)
    doc = {
        "benchmark": "replicate",
        "quick": a.quick,
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "seconds": round(time.monotonic() - started, 1),
        "cpus": os.cpu_count(),
        "ferry": ferry_info,
        "command": "nice .venv/bin/python benchmarks/replicate.py"
        + (" --quick" if a.quick else ""),
        "cases": cases,
        "sweep": sweep,
        "ceiling": ceilings,
    }
    out_dir = s.scratch / "results-quick" if a.quick else s.results
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "replicate.json").write_text(json.dumps(doc, indent=1) + "\n")
    md = render(doc)
    (out_dir / "replicate.md").write_text(md)
    if not a.no_docs and not a.quick:
        update_block(Path("docs/benchmarks.md"), "replicate", md)
    print(md)
    return 0


def render(doc: dict) -> str:
    lines = [
        f"Measured {doc['date']} by `{doc['command']}` ({doc['seconds']:.0f} s, {doc['cpus']} CPUs, "
        f"{doc['ferry']['version']}). One run per row; load average (1 min) per row.",
        "",
    ]
    lines += [
        "| dataset | N | how | wall s | Blob bytes read | × dataset | CPU s | Azurite CPU s | peak RSS per rank MiB | load |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in doc["cases"]:
        rss = (
            f"{r['rank_rss_mib']:.0f} (rank) + {r['worker_rss_mib']:.0f} (worker)"
            if r["kind"] == "replicate"
            else f"{r['worker_rss_mib']:.0f} (worker)"
        )
        lines.append(
            f"| {r['desc']} | {r['ranks']} | {r['kind']} | {r['wall']:.1f} | {c.human_bytes(r['read'])} | "
            f"{r['read'] / r['bytes']:.2f} | {r['cpu']:.1f} | {r['azurite_cpu']} | {rss} | {r['load1']} |"
        )
    lines += [
        "",
        "Replicate ÷ peer, wall time (below 1: replicate takes less):",
        "",
        "| dataset | N | ÷ independent | ÷ shard-alone | broadcast share of replicate's wall |",
        "|---|---|---|---|---|",
    ]
    by = {(r["dataset"], r["ranks"], r["kind"]): r for r in doc["cases"]}
    for (name, n, kind), r in by.items():
        if kind != "replicate":
            continue
        ind, sh = by.get((name, n, "independent")), by.get((name, n, "shard-alone"))
        lines.append(
            f"| {r['desc']} | {n} | {r['wall'] / ind['wall']:.2f} | {r['wall'] / sh['wall']:.2f} | "
            f"{r['broadcast_s'] / r['wall']:.0%} |"
        )
    lines += [
        "",
        f"Broadcast alone (N = 4, rank 0 already holds {c.human_bytes(doc['sweep'][0]['bytes'])}; "
        "GiB/s per receiver; rank RSS is the replicate process, without the worker):",
        "",
        "| chunk | depth | broadcast s | GiB/s | peak rank RSS MiB | load |",
        "|---|---|---|---|---|---|",
    ]
    for r in doc["sweep"]:
        lines.append(
            f"| {r['chunk_mib']} MiB | {r['depth']} | {r['broadcast_s']:.2f} | {r['gib_per_s']:.2f} | "
            f"{r['rank_rss_mib']:.0f} | {r['load1']} |"
        )
    lines += [
        "",
        "Plain mpi4py `Bcast` of the same bytes from memory (no disk, no files): the ceiling here.",
        "",
        "| N | chunk | seconds | GiB/s per receiver | load |",
        "|---|---|---|---|---|",
    ]
    for r in doc["ceiling"]:
        lines.append(
            f"| {r['ranks']} | {r['chunk_mib']} MiB | {r['seconds']:.2f} | {r['gib_per_s']:.2f} | {r['load1']} |"
        )
    best = max(doc["sweep"], key=lambda r: r["gib_per_s"])
    top = {r["ranks"]: r for r in doc["ceiling"]}.get(4)
    if top:
        lines += [
            "",
            f"Best broadcast setting: {best['chunk_mib']} MiB × {best['depth']}, "
            f"{best['gib_per_s']:.2f} GiB/s = {best['gib_per_s'] / top['gib_per_s']:.0%} of the plain Bcast "
            f"({top['gib_per_s']:.2f} GiB/s) at N = 4.",
        ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
