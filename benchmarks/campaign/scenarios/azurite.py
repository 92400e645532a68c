"""Scenario `azurite`: uploads to and downloads from a fresh Azurite per run."""

from __future__ import annotations

import subprocess

from ..checks import diff_trees, verify_blobs
from ..common import (
    CONTAINER, GiB, KiB, MANY_FILES, MiB, RCLONE, Settings, q, set_aside, slug, trash_dir
)
from ..datasets import files_dataset, one_file_dataset
from ..services import AzuriteHost
from ..timing import Group, Row


def scenario_azurite(s: Settings, host: AzuriteHost) -> list[Group]:
    base = s.data / "azurite"
    datasets = [
        ("medium-file", one_file_dataset("medium-file", s.size(300 * MiB, 64 * MiB))),
        ("large-file", one_file_dataset("large-file", s.size(GiB, 256 * MiB))),
        ("16KiB-files", files_dataset("16KiB-files", "", s.size(2_000, 500), lambda r: 16 * KiB, seed=21)),
        ("small-files", files_dataset("small-files", "", s.size(10_000, 2_000), lambda r: r.randint(0, 8 * KiB), seed=22)),
    ]
    datasets[2][1].desc = f"{datasets[2][1].files:,} files of 16 KiB"
    datasets[3][1].desc = f"{datasets[3][1].files:,} files of 0–8 KiB"
    env = host.tools_env()
    out = s.work / "azurite"
    groups = []
    for key, ds in datasets:
        if not (s.selected(f"up-{key}") or s.selected(f"down-{key}")):
            continue
        src = ds.materialize(base)
        if s.selected(f"up-{key}"):
            prefix = f"up/{ds.name}/"
            specs = [("ferry", f"{s.ferry} copy -r {q(src)}/ {host.url(prefix)}", "ferry")]
            notes = ["A fresh Azurite, restored from a seed holding only the empty container, before every run."]
            # The flag only changes staged blocks; files up to the 4 MiB block size go up in one
            # Put Blob either way, so the row would time the same requests twice.
            if max(sz for _, sz in ds.entries) > 4 * MiB:
                specs.append(("ferry --no-block-md5",
                              f"{s.ferry} copy -r --no-block-md5 {q(src)}/ {host.url(prefix)}", "ferry"))
            else:
                notes.append("No `--no-block-md5` row: every file fits in one Put Blob (≤ 4 MiB block "
                             "size), so the flag changes no request.")
            specs.append(("rclone", f"{RCLONE} copy {q(src)} az:{CONTAINER}/{prefix.rstrip('/')}", "peer"))
            rows = []
            for name, cmd, role in specs:
                slot = host.add_slot(f"up-{key}-{slug(name)}", host.seed_empty())
                rows.append(Row(name, cmd, role, host.prepare_cmd(slot), slot))

            def verify(rows=rows, prefix=prefix, src=src):
                res = {}
                for row in rows:
                    host.open_slot(row.slot)
                    try:
                        res[row.name] = verify_blobs(host.endpoint, prefix, src)
                    finally:
                        host.stop()
                    if not s.keep:
                        host.drop_slot(row.slot)
                return {"ok": all(r["ok"] for r in res.values()), **res}

            groups.append(Group(
                f"up-{key}", f"upload to Azurite, {ds.desc}", ds.desc, ds.bytes, ds.files, rows, env,
                warm=[src], verify=verify, teardown=host.stop, server_cpu=lambda slot: host.server_cpu.get(slot, []),
                notes=notes))
        if s.selected(f"down-{key}"):
            seed = host.seed_with(ds, src)
            prefix = f"data/{ds.name}/"
            dests = {"ferry": out / ds.name / "ferry", "rclone": out / ds.name / "rclone"}
            specs = [
                ("ferry", f"{s.ferry} copy -r {host.url(prefix)} {q(dests['ferry'])}", "ferry"),
                ("rclone", f"{RCLONE} copy az:{CONTAINER}/{prefix.rstrip('/')} {q(dests['rclone'])}", "peer"),
            ]
            rows = []
            for name, cmd, role in specs:
                # All downloads are cleared before each run (dirty pages dropped, as for local).
                slot = host.add_slot(f"down-{key}-{slug(name)}", seed, list(dests.values()),
                                     many_files=ds.files >= MANY_FILES)
                rows.append(Row(name, cmd, role, host.prepare_cmd(slot), slot))

            def verify(rows=rows, src=src, dests=dests):
                res = {}
                for row in rows:
                    host.reset(row.slot)
                    host.server_cpu.pop(row.slot, None)
                    try:
                        subprocess.run(row.cmd, shell=True, env=env, check=True, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL)
                    finally:
                        host.current = None
                        host.stop()
                    res[row.name] = diff_trees(src, dests[row.name])
                if not s.keep:
                    for row in rows:
                        host.drop_slot(row.slot)
                    for d in dests.values():
                        set_aside(d, trash_dir(s))
                return {"ok": all(r["ok"] for r in res.values()),
                        "compared": "each command run once more on a fresh Azurite, then diff -rq source download", **res}

            groups.append(Group(
                f"down-{key}", f"download from Azurite, {ds.desc}", ds.desc, ds.bytes, ds.files, rows, env,
                verify=verify, teardown=host.stop, server_cpu=lambda slot: host.server_cpu.get(slot, []),
                notes=["A fresh Azurite restored from a seed holding the dataset (uploaded once by ferry, "
                       "with Content-MD5) before every run; the local destination removed too."]))
    return groups
