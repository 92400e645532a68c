"""Scenario `sweep`: ferry's throughput against Azurite at fixed `--concurrency` values, straight
and with 20 ms added to every response (toxiproxy), beside one run without `--concurrency`
(adaptive); the ratio is adaptive ÷ the best fixed value of the same group.

The fastest of eight fixed values, each a median of a few noisy runs, is biased fast: it is
the value whose runs were luckiest as much as the best one (the winner's curse). So each sweep
group is followed by a confirmation group, measured afresh: adaptive against the fixed value
the sweep found fastest, two rows in more rounds. Its ratio is the one to quote; the sweep's
own is kept beside it."""

from __future__ import annotations

from ..common import Settings, q
from ..datasets import Dataset
from ..services import DelayedAzuriteHost
from ..timing import Group, Row
from .azurite import datasets

LEVELS = (1, 2, 4, 8, 16, 32, 64, 128)
CONFIRM_ROUNDS = 8  # two rows: four whole rotations, each row first four times
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


def sweep_group(
    s: Settings,
    host: DelayedAzuriteHost,
    gid: str,
    direction: str,
    key: str,
    ds: Dataset,
    delay: int,
    env: dict,
) -> Group:
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
    copy = (
        f"{s.ferry} copy -r {q(src)}/ {url}"
        if direction == "up"
        else f"{s.ferry} copy -r {url} {q(dst)}"
    )
    rows = [
        Row(f"--concurrency {c}", with_concurrency(copy, c), "peer", depth=c)
        for c in s.size(LEVELS, QUICK_LEVELS)
    ]
    rows.append(adaptive_row(copy))
    add_slots(host, gid, rows, seed, clear, direction, ds, src, dst)
    place = f"Azurite{f' {delay} ms away' if delay else ''}"
    delayed = (
        f"; every response delayed {delay} ms by toxiproxy (latency toxic, downstream)."
        if delay
        else "."
    )

    def confirm(result: dict) -> Group | None:
        fixed = [r for r in result["rows"] if r["role"] == "peer" and "wall_median" in r]
        if not fixed:
            return None
        best = min(fixed, key=lambda r: r["wall_median"])["depth"]
        pair = [
            adaptive_row(copy),
            Row(f"--concurrency {best}", with_concurrency(copy, best), "peer", depth=best),
        ]
        add_slots(host, f"{gid}-confirm", pair, seed, clear, direction, ds, src, dst)
        rounds = s.size(CONFIRM_ROUNDS, 2)
        return Group(
            f"{gid}-confirm",
            f"{what} {place}, {ds.desc}: adaptive against the fastest fixed value, again",
            ds.desc,
            ds.bytes,
            ds.files,
            pair,
            env,
            warm=warm,
            teardown=host.stop,
            rounds=rounds,
            server_cpu=lambda slot: host.server_cpu.get(slot, []),
            confirms=gid,
            notes=[
                f"A fresh Azurite per run{delayed} The fixed value is the one `{gid}` found fastest, "
                f"measured again beside adaptive in {rounds} rounds (each row first in half of them): the "
                "sweep's fastest of its medians is biased fast, so its ratio overstates adaptive's cost; "
                "this one does not."
            ],
        )

    return Group(
        gid,
        f"{what} {place}, {ds.desc}: throughput against --concurrency",
        ds.desc,
        ds.bytes,
        ds.files,
        rows,
        env,
        warm=warm,
        teardown=host.stop,
        server_cpu=lambda slot: host.server_cpu.get(slot, []),
        best_peer_only=True,
        followup=confirm,
        notes=[
            f"A fresh Azurite per run, as in `azurite`{delayed} Ratio: adaptive ÷ the fastest fixed "
            f"--concurrency; `{gid}-confirm` measures that pair again."
        ],
    )


def with_concurrency(copy: str, c: int) -> str:
    return copy.replace(" copy -r ", f" copy -r --concurrency {c} ", 1)


def adaptive_row(copy: str) -> Row:
    return Row(
        "adaptive",
        copy,
        "ferry",
        note="No --concurrency: ferry's own choice; its final value is marked on "
        "the chart (from its --json summary) when the binary reports it.",
    )


def add_slots(
    host: DelayedAzuriteHost,
    gid: str,
    rows: list[Row],
    seed,
    clear,
    direction: str,
    ds: Dataset,
    src,
    dst,
) -> None:
    """Each row its own Azurite workspace, restored from `seed` before every run."""
    for row in rows:
        row.slot = host.add_slot(
            f"sweep-{gid}-{row.name.strip('-').replace(' ', '-')}",
            seed,
            clear,
            many_files=ds.files >= 1000,
        )
        row.prepare, row.json, row.md5 = host.prepare_cmd(row.slot), True, True
        row.durable = direction == "down"
        row.src, row.dst = (src, None) if direction == "up" else (None, dst)
