"""Scenario `azurite`: uploads to and downloads from a fresh Azurite per run, ferry against
rclone (defaults and tuned), the Python SDK (defaults and tuned) and azcp (when --azcp is given)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from ..checks import diff_trees, verify_blobs
from ..common import (
    CONTAINER,
    MANY_FILES,
    GiB,
    KiB,
    MiB,
    Settings,
    log,
    q,
    set_aside,
    slug,
    trash_dir,
)
from ..datasets import Dataset, files_dataset, one_file_dataset
from ..peers import (
    FERRY_CONCURRENCY,
    PYSDK_NOTE,
    PYSDK_TUNED_NOTE,
    RCLONE_DEFAULT_NOTE,
    RCLONE_TUNED_NOTE,
    pysdk,
    rclone,
    stage,
)
from ..services import AZCP_ACCOUNT_URL, AzuriteHost
from ..timing import Group, Row

AZCP_NOTE = (
    "azcp built from its public repository with one change for the measurement (it has no endpoint "
    "option): each request, signed for the account's https URL, is sent to the loopback Azurite "
    "(AZCP_BLOB_ENDPOINT) with the account host kept in the Host header; see docs/benchmarks.md. "
    "Its defaults: --concurrency 64, --parallel-files 16, 4 MiB blocks"
)
AZCP_MD5 = "; --check-md5 sets Content-MD5 on upload and checks it on download (off by default)."


def datasets(s: Settings) -> list[tuple[str, Dataset]]:
    out = [
        ("medium-file", one_file_dataset("medium-file", s.size(300 * MiB, 64 * MiB))),
        ("large-file", one_file_dataset("large-file", s.size(GiB, 256 * MiB))),
        (
            "16KiB-files",
            files_dataset("16KiB-files", "", s.size(2_000, 500), lambda r: 16 * KiB, seed=21),
        ),
        (
            "small-files",
            files_dataset(
                "small-files", "", s.size(10_000, 2_000), lambda r: r.randint(0, 8 * KiB), seed=22
            ),
        ),
    ]
    out[2][1].desc = f"{out[2][1].files:,} files of 16 KiB"
    out[3][1].desc = f"{out[3][1].files:,} files of 0–8 KiB"
    return out


def scenario_azurite(s: Settings, host: AzuriteHost) -> list[Group]:
    env = host.tools_env()
    azcp = stage(s, "azcp", ("azcp",), s.azcp)
    if azcp is None:
        log("azurite: no --azcp PATH given, so no azcp rows (see docs/benchmarks.md for its build)")
    groups = []
    for key, ds in datasets(s):
        if not (s.selected(f"up-{key}") or s.selected(f"down-{key}")):
            continue
        src = ds.materialize(s.data / "azurite")
        if s.selected(f"up-{key}"):
            groups.append(upload_group(s, host, key, ds, src, env, azcp))
        if s.selected(f"down-{key}"):
            groups.append(download_group(s, host, key, ds, src, env, azcp))
    return groups


def upload_group(
    s: Settings, host: AzuriteHost, key: str, ds: Dataset, src: Path, env: dict, azcp: Path | None
) -> Group:
    prefix = f"up/{ds.name}/"
    url, remote = host.url(prefix), f"az:{CONTAINER}/{prefix.rstrip('/')}"
    notes = [
        "A fresh Azurite, restored from a seed holding only the empty container, before every run."
    ]
    rows = [
        Row(
            "ferry",
            f"{s.ferry} copy -r {q(src)}/ {url}",
            "ferry",
            md5=True,
            json=True,
            note="ferry's default: Content-MD5 on the blob and on every staged block.",
        )
    ]
    # The flag only changes staged blocks; files up to the 4 MiB block size go up in one Put Blob
    # either way, so the row would time the same requests twice.
    if max(sz for _, sz in ds.entries) > 4 * MiB:
        rows.append(
            Row(
                "ferry --no-block-md5",
                f"{s.ferry} copy -r --no-block-md5 {q(src)}/ {url}",
                "ferry",
                md5=True,
                json=True,
            )
        )
    else:
        notes.append(
            "No `--no-block-md5` row: every file fits in one Put Blob (≤ 4 MiB block size), so the "
            "flag changes no request."
        )
    rows += [
        Row(
            "ferry --no-put-md5 --no-block-md5",
            f"{s.ferry} copy -r --no-put-md5 --no-block-md5 {q(src)}/ {url}",
            "ferry",
            json=True,
            note="No MD5 at all: the class of azcp's default.",
        ),
        Row("rclone", rclone(q(src), remote), "peer", md5=True, note=RCLONE_DEFAULT_NOTE),
        Row(
            "rclone (tuned)",
            rclone(q(src), remote, tuned=True),
            "peer",
            md5=True,
            note=RCLONE_TUNED_NOTE,
        ),
        Row(
            "python sdk",
            pysdk("upload", src, host.endpoint, prefix),
            "peer",
            md5=True,
            note=PYSDK_NOTE,
        ),
        Row(
            f"python sdk ×{FERRY_CONCURRENCY}",
            pysdk("upload", src, host.endpoint, prefix, FERRY_CONCURRENCY),
            "peer",
            md5=True,
            note=PYSDK_TUNED_NOTE,
        ),
    ]
    if azcp is not None:
        cmd = f"{q(azcp)}/azcp copy {q(src)}/ {AZCP_ACCOUNT_URL}/{CONTAINER}/{prefix} --recursive"
        rows += [
            Row("azcp", cmd, "peer", note=AZCP_NOTE + "."),
            Row(
                "azcp --check-md5",
                f"{cmd} --check-md5",
                "peer",
                md5=True,
                note=AZCP_NOTE + AZCP_MD5,
            ),
        ]
    for row in rows:
        row.slot = host.add_slot(f"up-{key}-{slug(row.name)}", host.seed_empty())
        row.prepare, row.src = host.prepare_cmd(row.slot), src

    def verify():
        res = {}
        for row in rows:
            host.open_slot(row.slot)
            try:
                res[row.name] = verify_blobs(host.endpoint, prefix, src, require_md5=row.md5)
            finally:
                host.stop()
            if not s.keep:
                host.drop_slot(row.slot)
        return {"ok": all(r["ok"] for r in res.values()), **res}

    return Group(
        f"up-{key}",
        f"upload to Azurite, {ds.desc}",
        ds.desc,
        ds.bytes,
        ds.files,
        rows,
        env,
        warm=[src],
        verify=verify,
        teardown=host.stop,
        server_cpu=lambda slot: host.server_cpu.get(slot, []),
        notes=notes,
    )


def download_group(
    s: Settings, host: AzuriteHost, key: str, ds: Dataset, src: Path, env: dict, azcp: Path | None
) -> Group:
    seed = host.seed_with(ds, src)
    prefix = f"data/{ds.name}/"
    url, remote = host.url(prefix), f"az:{CONTAINER}/{prefix.rstrip('/')}"
    out = s.work / "azurite" / ds.name
    specs = [
        (
            "ferry",
            lambda d: f"{s.ferry} copy -r {url} {q(d)}",
            "ferry",
            True,
            "ferry's default: the MD5 of every download checked against its Content-MD5; every file fsynced.",
        ),
        (
            "ferry --no-fsync",
            lambda d: f"{s.ferry} copy -r --no-fsync {url} {q(d)}",
            "ferry",
            False,
            "",
        ),
        ("rclone", lambda d: rclone(remote, q(d)), "peer", False, RCLONE_DEFAULT_NOTE),
        (
            "rclone (tuned)",
            lambda d: rclone(remote, q(d), tuned=True),
            "peer",
            False,
            RCLONE_TUNED_NOTE,
        ),
        (
            "rclone (tuned) && sync -f",
            lambda d: f"{rclone(remote, q(d), tuned=True)} && sync -f {q(d)}",
            "peer",
            True,
            "The tuned rclone, then syncfs(2) of the destination's filesystem: the durable class.",
        ),
        (
            "python sdk",
            lambda d: pysdk("download", d, host.endpoint, prefix),
            "peer",
            False,
            PYSDK_NOTE,
        ),
        (
            f"python sdk ×{FERRY_CONCURRENCY}",
            lambda d: pysdk("download", d, host.endpoint, prefix, FERRY_CONCURRENCY),
            "peer",
            False,
            PYSDK_TUNED_NOTE,
        ),
    ]
    if azcp is not None:
        specs.append(
            (
                "azcp --check-md5",
                lambda d: (
                    f"{q(azcp)}/azcp copy {AZCP_ACCOUNT_URL}/{CONTAINER}/{prefix} "
                    f"{q(d)}/ --recursive --check-md5"
                ),
                "peer",
                False,
                AZCP_NOTE + AZCP_MD5,
            )
        )
    dests = [out / slug(name) for name, *_ in specs]
    rows = []
    for (name, cmd, role, durable, note), dst in zip(specs, dests):
        # Every download is cleared before each run (dirty pages dropped, as for local).
        slot = host.add_slot(
            f"down-{key}-{slug(name)}", seed, dests, many_files=ds.files >= MANY_FILES
        )
        rows.append(
            Row(
                name,
                cmd(dst),
                role,
                host.prepare_cmd(slot),
                slot,
                md5=True,
                durable=durable,
                note=note,
                dst=dst,
                json=role == "ferry",
            )
        )

    def verify():
        res = {}
        for row in rows:
            host.reset(row.slot)
            host.server_cpu.pop(row.slot, None)
            try:
                subprocess.run(
                    row.cmd,
                    shell=True,
                    env=env,
                    check=True,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            finally:
                host.current = None
                host.stop()
            res[row.name] = diff_trees(src, row.dst)
        if not s.keep:
            for row in rows:
                host.drop_slot(row.slot)
            for d in dests:
                set_aside(d, trash_dir(s))
        return {
            "ok": all(r["ok"] for r in res.values()),
            "compared": "each command run once more on a fresh Azurite, then diff -rq source download",
            **res,
        }

    # The seed's extents are read before the group, so no row's downloads come from disk while
    # another's come from the page cache (every workspace hard-links the same extents).
    return Group(
        f"down-{key}",
        f"download from Azurite, {ds.desc}",
        ds.desc,
        ds.bytes,
        ds.files,
        rows,
        env,
        warm=[seed],
        verify=verify,
        teardown=host.stop,
        server_cpu=lambda slot: host.server_cpu.get(slot, []),
        notes=[
            "A fresh Azurite restored from a seed holding the dataset (uploaded once by ferry, "
            "with Content-MD5) before every run; every local destination removed too."
        ],
    )
