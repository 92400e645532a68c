"""Verification outside the timed runs."""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import random
import subprocess
from pathlib import Path

from .common import AZ_ACCOUNT, AZ_KEY, CONTAINER, MiB, rel
from .datasets import md5_tree

READ_BACK_SAMPLE = 300


def verify_blobs(endpoint: str, prefix: str, src: Path, require_md5: bool = True) -> dict:
    """Independent check of an upload with the Python SDK: every file present with the same
    size and a Content-MD5 equal to the file's MD5; then the bytes read back and hashed, for
    every blob of 1 MiB or more (those were assembled from blocks) and a seeded sample of
    READ_BACK_SAMPLE smaller ones (a single Put Blob whose Content-MD5 Azurite checked on arrival;
    reading back ten thousand of them through one emulator would take minutes). A tool that sets
    no Content-MD5 (require_md5=False) may leave blobs without one; any it has must match."""
    from azure.storage.blob import BlobServiceClient  # only the azurite scenario needs the SDK

    expected = md5_tree(src)
    svc = BlobServiceClient(
        endpoint, credential={"account_name": AZ_ACCOUNT, "account_key": AZ_KEY}
    )
    cc = svc.get_container_client(CONTAINER)
    sizes = {str(p.relative_to(src)): p.stat().st_size for p in src.rglob("*") if p.is_file()}
    seen, problems, missing_md5 = {}, [], 0
    for b in cc.list_blobs(name_starts_with=prefix):
        name = b.name[len(prefix) :]
        seen[name] = b.size
        if name in sizes and b.size != sizes[name]:
            problems.append(f"{name}: size {b.size} != {sizes[name]}")
        md5 = b.content_settings.content_md5
        if not md5:
            missing_md5 += 1
        elif bytes(md5).hex() != expected.get(name):
            problems.append(f"{name}: Content-MD5 {bytes(md5).hex()} != {expected.get(name)}")

    def readback(name: str) -> str | None:
        h = hashlib.md5()
        for chunk in cc.download_blob(prefix + name, max_concurrency=2).chunks():
            h.update(chunk)
        return None if h.hexdigest() == expected[name] else f"{name}: bytes read back differ"

    present = sorted(n for n in seen if n in expected)
    big = [n for n in present if seen[n] >= MiB]
    small = [n for n in present if seen[n] < MiB]
    if len(small) > READ_BACK_SAMPLE:
        small = random.Random(5).sample(small, READ_BACK_SAMPLE)
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        problems += [p for p in ex.map(readback, big + small) if p]
    missing = sorted(set(expected) - set(seen))
    extra = sorted(set(seen) - set(expected))
    ok = not problems and not missing and not extra and (missing_md5 == 0 or not require_md5)
    return {
        "ok": ok,
        "blobs": len(seen),
        "missing": missing[:5],
        "extra": extra[:5],
        "without_content_md5": missing_md5,
        "problems": problems[:5],
        "read_back": len(big) + len(small),
    }


def diff_trees(a: Path, b: Path) -> dict:
    proc = subprocess.run(
        ["diff", "-rq", "--no-dereference", rel(a), rel(b)], capture_output=True, text=True
    )
    return {"ok": proc.returncode == 0, "diff": (proc.stdout + proc.stderr)[:800]}


def check_partition(
    out: Path, fpart_out: Path, lines: int, total: int, mode: str, limit: int
) -> dict:
    """ferry's parts against the documented rules (docs/worker.md): all entries and bytes, N
    parts for --parts; for the input-order modes fpart's live-mode rule — a part closes as soon as
    it holds F entries or S bytes — so the same parts as `fpart -L` on the same input."""
    summary = json.loads((out / "summary.json").read_text())
    parts = summary["partitions"]
    ok = summary["files"] == lines and summary["bytes"] == total
    counted, rule_broken = 0, 0
    for p in parts:
        sizes = []
        with open(out / p["file"]) as f:
            for line in f:
                if line.strip() and not line.startswith("#"):
                    sizes.append(int(line.split("\t")[2]))
        counted += len(sizes)
        if mode == "max-files" and len(sizes) > limit:
            rule_broken += 1
        # Only the entry that tipped a part over S may take it past S.
        if mode == "max-bytes" and sizes and sum(sizes) - sizes[-1] >= limit:
            rule_broken += 1
    if mode == "parts":
        ok &= len(parts) == limit
    ok &= counted == lines and rule_broken == 0
    theirs = fpart_part_counts(fpart_out)
    same = [p["files"] for p in parts] == theirs
    if mode != "parts":
        ok &= same
    return {
        "ok": ok,
        "parts": len(parts),
        "files": summary["files"],
        "lines_in_parts": counted,
        "parts_breaking_the_rule": rule_broken,
        "fpart_parts": len(theirs),
        "fpart_lines": sum(theirs),
        "same_parts_as_fpart": same,
        "imbalance_pct": summary.get("imbalance_pct"),
    }


def fpart_part_counts(out: Path) -> list[int]:
    """Lines per fpart output file, in partition order (part.0 first if fpart made one)."""
    counts = []
    for p in sorted(out.glob("part.*"), key=lambda p: int(p.suffix[1:])):
        with open(p, "rb") as f:
            counts.append(sum(1 for _ in f))
    return counts


def count_fpart(out: Path) -> int:
    return sum(fpart_part_counts(out))
