#!/usr/bin/env python3
"""A peer for the benchmark campaigns: a tree up to or down from Blob storage with the official
Python SDK (azure-storage-blob), the way a small script would do it, with MD5 both ways.

    pysdk.py upload   SRC_DIR  --account-url URL --container C --prefix P [--concurrency N]
    pysdk.py download DST_DIR  --account-url URL --container C --prefix P [--concurrency N]

Upload: each file's MD5 is computed first and set as its Content-MD5 (the SDK stores one on a
block-list upload only when given). Download: each blob's bytes are hashed again after writing
and compared with the Content-MD5 of the listing; a mismatch or a blob without one fails.
The account key comes from AZURE_STORAGE_KEY (account: AZURE_STORAGE_ACCOUNT).

Without --concurrency the SDK's defaults stand: one file at a time, and for one file a single
request up to 64 MiB (max_single_put_size), then 4 MiB blocks, one in flight (max_concurrency 1).
With --concurrency N: N files at once, and 4 MiB blocks or ranges, N in flight for a file larger
than that (the datasets are either one large file or many small ones, so N requests at most).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from azure.storage.blob import BlobServiceClient, ContentSettings

MiB = 1 << 20


def md5_file(path: Path) -> bytes:
    h = hashlib.md5()
    with open(path, "rb") as f:
        while chunk := f.read(4 * MiB):
            h.update(chunk)
    return h.digest()


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("direction", choices=["upload", "download"])
    ap.add_argument("local")
    ap.add_argument("--account-url", required=True)
    ap.add_argument("--container", required=True)
    ap.add_argument("--prefix", default="")
    ap.add_argument("--concurrency", type=int, help="files at once and requests per large file")
    a = ap.parse_args(argv)
    tuned = (
        {
            "max_single_put_size": 4 * MiB,
            "max_block_size": 4 * MiB,
            "max_chunk_get_size": 4 * MiB,
            "max_single_get_size": 4 * MiB,
        }
        if a.concurrency
        else {}
    )
    svc = BlobServiceClient(
        a.account_url,
        credential={
            "account_name": os.environ["AZURE_STORAGE_ACCOUNT"],
            "account_key": os.environ["AZURE_STORAGE_KEY"],
        },
        **tuned,
    )
    cc = svc.get_container_client(a.container)
    per_file = a.concurrency or 1
    root = Path(a.local)

    def upload(path: Path) -> None:
        name = a.prefix + path.relative_to(root).as_posix()
        settings = ContentSettings(content_md5=bytearray(md5_file(path)))
        with open(path, "rb") as f:
            cc.upload_blob(
                name,
                f,
                length=path.stat().st_size,
                overwrite=True,
                content_settings=settings,
                max_concurrency=per_file,
            )

    def download(blob) -> None:
        path = root / blob.name[len(a.prefix) :]
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            cc.download_blob(blob.name, max_concurrency=per_file).readinto(f)
        expected = blob.content_settings.content_md5
        if not expected:
            raise RuntimeError(f"{blob.name}: no Content-MD5 to check against")
        if md5_file(path) != bytes(expected):
            raise RuntimeError(f"{blob.name}: MD5 of the download differs from its Content-MD5")

    if a.direction == "upload":
        items, work = sorted(p for p in root.rglob("*") if p.is_file()), upload
    else:
        items, work = list(cc.list_blobs(name_starts_with=a.prefix)), download
    with ThreadPoolExecutor(a.concurrency or 1) as ex:
        for _ in ex.map(work, items):  # re-raises the first failure
            pass
    print(f"{a.direction}: {len(items)} files", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
