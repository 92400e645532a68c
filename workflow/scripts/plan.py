"""Checkpoint `plan`: decide what this phase copies and verifies, and cut it into partitions.

Inputs are `ferry ls` listings of the source and (incremental/final) the destination. Output is a
directory holding copy/part-NNNNN.tsv (what each transfer job copies), in the final phase also
verify/part-NNNNN.tsv (the whole source, for the full verify), and plan.json (counts for the report).

Comparing the two listings here, rather than handing every file to every transfer job, is what
makes an incremental pass over an unchanged tree cost about two listings: unchanged files never
reach a transfer job.  Files the listings cannot judge (e.g. no MD5 on one side) are not skipped
but passed on, and `ferry copy --compare` decides for them.
"""


import glob
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter

from ferrylib import Entry, iter_manifest, parse_size, part_id, read_manifest, write_json, write_manifest

# Below this the difference is float noise from printing nine decimals, not a modification.
MTIME_TOLERANCE = 1e-6


def classify(src: Entry, dst: Entry | None, compare: str) -> str:
    """'new', 'changed', 'undecided' (ferry decides) or 'same'."""
    if dst is None or dst.is_dir:
        return "new"
    if src.size is None or dst.size is None:
        return "undecided"
    if src.size != dst.size:
        return "changed"
    if compare == "size":
        return "same"
    if compare == "size-mtime":
        if src.mtime is None or dst.mtime is None:
            return "undecided"
        # Only equality is trusted; a destination that records upload time instead of the
        # source's mtime makes everything undecided, never wrongly skipped.
        return "same" if abs(src.mtime - dst.mtime) <= MTIME_TOLERANCE else "undecided"
    if src.md5 and dst.md5:
        return "same" if src.md5 == dst.md5 else "changed"
    return "undecided"


def summarize(entries) -> dict:
    return {
        "files": len(entries),
        "bytes": sum(e.size or 0 for e in entries),
    }


def ferry_partition(ferry: str, manifest: str, out: str, args: list[str], log) -> None:
    cmd = [ferry, "partition", manifest, "--out", out, *args]
    print("+", " ".join(cmd), file=log, flush=True)
    subprocess.run(cmd, check=True, stdout=log, stderr=log)


def fpart_partition(entries: list[Entry], out: str, args: list[str], log) -> None:
    """Pack with fpart in arbitrary-values mode (-a): sizes come from the listing, so fpart neither
    crawls nor stats the source again. fpart is fed each entry's index instead of its name,
    because it trims leading blanks from names, and the index maps its answer back exactly."""
    with tempfile.TemporaryDirectory(dir=out) as tmp:
        cmd = ["fpart", "-a", "-i", "-", "-o", os.path.join(tmp, "fp"), *args]
        print("+", " ".join(cmd), file=log, flush=True)
        feed = "".join(f"{e.size or 0} {index}\n" for index, e in enumerate(entries))
        subprocess.run(cmd, input=feed, text=True, check=True, stdout=log, stderr=log)
        outputs = sorted(glob.glob(os.path.join(tmp, "fp.*")), key=lambda p: int(p.rsplit(".", 1)[1]))
        placed = 0
        partitions = []
        for index, fp_out in enumerate(outputs):
            with open(fp_out, encoding="utf-8") as handle:
                members = [entries[int(line)] for line in handle if line.strip()]
            placed += len(members)
            name = f"part-{index:05d}.tsv"
            write_manifest(os.path.join(out, name), members, "fpart partition")
            partitions.append({"index": index, "file": name, **summarize(members)})
        if placed != len(entries):
            raise RuntimeError(f"fpart packed {placed} of {len(entries)} files")
    write_summary(out, "fpart", partitions)


def write_summary(out: str, mode: str, partitions: list[dict]) -> None:
    sizes = [p["bytes"] for p in partitions]
    mean = sum(sizes) / len(sizes) if sizes else 0
    write_json(
        os.path.join(out, "summary.json"),
        {
            "mode": mode,
            "parts": len(partitions),
            "files": sum(p["files"] for p in partitions),
            "bytes": sum(sizes),
            "imbalance_pct": round((max(sizes) / mean - 1) * 100, 2) if mean else 0.0,
            "partitions": partitions,
        },
    )


def partition(entries: list[Entry], out: str, settings: dict, ferry: str, log) -> list[dict]:
    """Write out/part-*.tsv + out/summary.json; return [{id, files, bytes}] in order."""
    os.makedirs(out, exist_ok=True)
    if not entries:
        # Nothing to do is a normal incremental outcome; no worker call, no jobs.
        write_summary(out, "empty", [])
        return []
    mode = settings["mode"]
    parts = min(settings["parts"], len(entries))
    max_files = str(settings["max_files"])
    max_bytes = str(parse_size(settings["max_bytes"]))
    if settings["tool"] == "fpart":
        args = {
            "parts": ["-n", str(parts)],
            "max-files": ["-f", max_files],
            "max-bytes": ["-s", max_bytes],
            "max-files-bytes": ["-f", max_files, "-s", max_bytes],
        }[mode]
        fpart_partition(entries, out, args, log)
    else:
        args = {
            "parts": ["--parts", str(parts)],
            "max-files": ["--max-files", max_files],
            "max-bytes": ["--max-bytes", max_bytes],
            "max-files-bytes": ["--max-files", max_files, "--max-bytes", max_bytes],
        }[mode]
        whole = os.path.join(out, "all.tsv")
        write_manifest(whole, entries, "input of ferry partition")
        ferry_partition(ferry, whole, out, args, log)
        os.remove(whole)
    found = sorted(glob.glob(os.path.join(out, "part-*.tsv")))
    result = []
    for manifest in found:
        members = list(iter_manifest(manifest))
        result.append({"id": part_id(manifest), **summarize(members)})
    if sum(p["files"] for p in result) != len(entries):
        raise RuntimeError(
            f"partitions under {out} hold {sum(p['files'] for p in result)} entries, expected {len(entries)}"
        )
    return result


def main(smk) -> None:
    phase = smk.params.phase
    compare = smk.params.compare
    out = smk.output.plan
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)

    source = read_manifest(smk.input.source)
    # Directories are implied by the files under them; ferry copy creates what it needs.
    # Blob storage has no symlinks (ferry copy ignores them and verify skips them), so planning
    # them would make every later pass see them as new.
    src_files = [
        e for e in source.values() if not e.is_dir and not (smk.params.dest_is_blob and e.type == "l")
    ]
    dest = read_manifest(smk.input.dest) if phase != "baseline" else {}
    dst_files = [e for e in dest.values() if not e.is_dir]

    verdicts: Counter = Counter()
    to_copy: list[Entry] = []
    for entry in src_files:
        verdict = "new" if phase == "baseline" else classify(entry, dest.get(entry.path), compare)
        verdicts[verdict] += 1
        if verdict != "same":
            to_copy.append(entry)
    extra = [e for e in dst_files if e.path not in source]

    with open(smk.log[0], "w", encoding="utf-8") as log:
        copy_parts = partition(to_copy, os.path.join(out, "copy"), smk.params.partition, smk.params.ferry, log)
        verify_parts = (
            partition(src_files, os.path.join(out, "verify"), smk.params.partition, smk.params.ferry, log)
            if phase == "final"
            else copy_parts
        )

    kinds = Counter(e.type or "?" for e in source.values())
    write_json(
        os.path.join(out, "plan.json"),
        {
            "phase": phase,
            "compare": compare if phase != "baseline" else "none",
            "source": {
                **summarize(src_files),
                "dirs": kinds.get("d", 0),
                "symlinks": kinds.get("l", 0),
                "symlinks_not_migrated": kinds.get("l", 0) if smk.params.dest_is_blob else 0,
            },
            "dest": summarize(dst_files) if phase != "baseline" else None,
            "to_copy": {
                **summarize(to_copy),
                "new": verdicts["new"],
                "changed": verdicts["changed"],
                "undecided": verdicts["undecided"],
            },
            "unchanged": verdicts["same"],
            "extra_on_dest": summarize(extra),
            "partitioning": dict(smk.params.partition),
            "copy_partitions": copy_parts,
            "verify_partitions": verify_parts,
            "verify_scope": "all" if phase == "final" else "copied",
        },
    )


if __name__ == "__main__":
    if "snakemake" not in globals():
        sys.exit("plan.py is run by Snakemake's script directive (rule plan)")
    main(snakemake)  # noqa: F821 - injected by Snakemake
