"""Scenario `sweep`: ferry's throughput against Azurite at fixed `--concurrency` values, straight
and with 20 ms added to every response (toxiproxy), beside one run without `--concurrency`
(adaptive); the ratio is adaptive ÷ the best fixed value of the same group."""

from __future__ import annotations

from ..common import Settings, q
from ..datasets import Dataset
from ..services import DelayedAzuriteHost
from ..timing import Group, Row
from .azurite import datasets

LEVELS = (1, 2, 4, 8, 16, 32, 64, 128)
QUICK_LEVELS = (1, 4, 16, 64)
SWEPT = ("16KiB-files", "medium-file")


def scenario_sweep(s: Settings, host: DelayedAzuriteHost) -> list[Group]:
    env = host.tools_env()
    groups = []
    for key, ds in datasets(s):
        if key not in SWEPT:
            continue
        for direction in ("up", "down"):
            for delay in (0, host.delay_ms):
                gid = f"{direction}-{key}-{delay}ms"
                if s.selected(gid):
                    groups.append(sweep_group(s, host, gid, direction, key, ds, delay, env))
    return groups


def sweep_group(s: Settings, host: DelayedAzuriteHost, gid: str, direction: str, key: str, ds: Dataset,
                delay: int, env: dict) -> Group:
    src = ds.materialize(s.data / "azurite")
    port = host.delayed_port if delay else None
    dst = s.work / "sweep" / ds.name
    if direction == "up":
        seed, clear, prefix = host.seed_empty(), [], f"up/{ds.name}/"
        what, warm = "upload to", [src]
    else:
        seed, clear, prefix = host.seed_with(ds, src), [dst], f"data/{ds.name}/"
        what, warm = "download from", [seed]
    url = host.url(prefix, port)
    copy = f"{s.ferry} copy -r {q(src)}/ {url}" if direction == "up" else f"{s.ferry} copy -r {url} {q(dst)}"
    levels = s.size(LEVELS, QUICK_LEVELS)
    rows = [Row(f"--concurrency {c}", copy.replace(" copy -r ", f" copy -r --concurrency {c} ", 1), "peer", depth=c)
            for c in levels]
    rows.append(Row("adaptive", copy, "ferry", note="No --concurrency: ferry's own choice; its final value is "
                    "marked on the chart (from its --json summary) when the binary reports it."))
    for row in rows:
        row.slot = host.add_slot(f"sweep-{gid}-{row.name.strip('-').replace(' ', '-')}", seed, clear,
                                 many_files=ds.files >= 1000)
        row.prepare, row.json, row.md5 = host.prepare_cmd(row.slot), True, True
        row.durable = direction == "down"
        row.src, row.dst = (src, None) if direction == "up" else (None, dst)
    return Group(gid, f"{what} Azurite{f' {delay} ms away' if delay else ''}, {ds.desc}: throughput against "
                 "--concurrency", ds.desc, ds.bytes, ds.files, rows, env, warm=warm, teardown=host.stop,
                 server_cpu=lambda slot: host.server_cpu.get(slot, []), best_peer_only=True,
                 notes=["A fresh Azurite per run, as in `azurite`"
                        + (f"; every response delayed {delay} ms by toxiproxy (latency toxic, downstream)."
                           if delay else ".") + " Ratio: adaptive ÷ the fastest fixed --concurrency."])
