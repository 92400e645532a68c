"""Scenario `discard`: ferry's own upload ceiling against a server that keeps nothing."""

from __future__ import annotations

import shlex
import subprocess

from ..common import (
    AZ_ACCOUNT,
    AZ_KEY,
    CONTAINER,
    GiB,
    MiB,
    Settings,
    bench_env,
    human_bytes,
    q,
    rel,
)
from ..datasets import one_file_dataset
from ..peers import RCLONE_DEFAULT_NOTE, RCLONE_TUNED_NOTE, rclone
from ..services import DiscardServer
from ..timing import Group, Row


def scenario_discard(s: Settings, server: DiscardServer) -> list[Group]:
    if not s.selected("upload-ceiling"):
        return []
    size = s.size(2 * GiB, 512 * MiB)
    ds = one_file_dataset("ceiling-file", size)
    src = ds.materialize(s.data / "discard")
    server.start()
    account = f"http://127.0.0.1:{server.port}/{AZ_ACCOUNT}"
    env = bench_env(
        {
            "FERRY_AUTH": "anonymous",
            "RCLONE_CONFIG": rel(s.scratch / "rclone.conf"),
            "RCLONE_CONFIG_AZ_TYPE": "azureblob",
            "RCLONE_CONFIG_AZ_ACCOUNT": AZ_ACCOUNT,
            "RCLONE_CONFIG_AZ_KEY": AZ_KEY,
            "RCLONE_CONFIG_AZ_ENDPOINT": account,
        }
    )
    (s.scratch / "rclone.conf").touch()
    file = q(src / f"{ds.name}.bin")
    specs = [
        (
            "ferry, no MD5",
            f"{s.ferry} copy {file} {account}/{CONTAINER}/f1/ --no-put-md5 --no-block-md5",
            "ferry",
            False,
            "",
        ),
        (
            "ferry, blob MD5",
            f"{s.ferry} copy {file} {account}/{CONTAINER}/f2/ --no-block-md5",
            "ferry",
            True,
            "",
        ),
        (
            "ferry, blob + block MD5 (default)",
            f"{s.ferry} copy {file} {account}/{CONTAINER}/f3/",
            "ferry",
            True,
            "",
        ),
        ("rclone", rclone(file, f"az:{CONTAINER}/r/"), "peer", True, RCLONE_DEFAULT_NOTE),
        (
            "rclone (tuned)",
            rclone(file, f"az:{CONTAINER}/t/", tuned=True),
            "peer",
            True,
            RCLONE_TUNED_NOTE,
        ),
        (
            "curl -T (one PUT)",
            f"curl -sf -o /dev/null -T {file} {account}/{CONTAINER}/c/{ds.name}.bin",
            "peer",
            False,
            "The simplest possible client: one PUT of the whole file, no hashing.",
        ),
    ]
    # The server remembers committed sizes (rclone reads them back); forget them before each run.
    reset = f"curl -sf -X POST http://127.0.0.1:{server.port}/__reset"
    rows = [
        Row(n, c, r, reset, md5=md5, note=note, src=src, json=r == "ferry")
        for n, c, r, md5, note in specs
    ]

    def verify():
        res = {}
        for row in rows:
            subprocess.run(shlex.split(reset), check=True)
            before = server.stats()
            proc = subprocess.run(row.cmd, shell=True, env=env, capture_output=True, text=True)
            after = server.stats()
            got = after["body_bytes"] - before["body_bytes"]
            res[row.name] = {
                "ok": proc.returncode == 0 and got == size,
                "bytes_received": got,
                "requests": after["requests"] - before["requests"],
                "blocks": after["blocks"] - before["blocks"],
            }
        return {"ok": all(r["ok"] for r in res.values()), "expected_bytes": size, **res}

    return [
        Group(
            "upload-ceiling",
            f"upload of {human_bytes(size)} to a loopback server that discards",
            ds.desc,
            size,
            1,
            rows,
            env,
            warm=[src],
            verify=verify,
            teardown=None,
            throughput_unit="GB/s",
            targets={"ferry, no MD5": [("gb_per_s", ">=", 3.0, "≥ 3 GB/s")]},
            notes=[
                "ferry runs with FERRY_AUTH=anonymous; rclone signs with the dev key (ignored). "
                "GB/s = 10^9 bytes per second of wall time, process start included."
            ],
        )
    ]
