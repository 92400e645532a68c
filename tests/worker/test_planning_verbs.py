"""The commands the pipelines plan with: --compare modes, partition, prune."""

from __future__ import annotations

import json
import os

import pytest
from support.manifest import parse_manifest
from support.summary import section
from support.trees import File, make_tree, many_files_spec

T0 = 1_650_000_000_000_000_000


@pytest.fixture(params=["local", "blob"])
def destination(request, tmp_path):
    """Where --compare is exercised: a local directory or a fresh container."""
    if request.param == "local":
        return str(tmp_path / "dst")
    return request.getfixturevalue("container")


def test_compare_modes_decide_what_is_copied(tmp_path, run_ferry, destination):
    src = tmp_path / "src"
    make_tree(
        src, {"f.txt": File(data=b"aaaa", mtime_ns=T0), "other.txt": File(data=b"o", mtime_ns=T0)}
    )
    run_ferry("copy", src, destination, "--recursive")

    def copied(mode):
        r = run_ferry("copy", src, destination, "--recursive", "--compare", mode, "--json")
        return section(r.json, "files")["copied"]

    # Same size and mtime, other bytes: only md5 can tell.
    (src / "f.txt").write_bytes(b"bbbb")
    os.utime(src / "f.txt", ns=(T0, T0))
    assert copied("size") == 0
    assert copied("size-mtime") == 0
    assert copied("md5") == 1
    assert copied("md5") == 0, "after copying, md5 must see the two sides as equal"

    # A newer mtime with the same bytes: size ignores it, size-mtime does not.
    os.utime(src / "f.txt", ns=(T0 + 10**9, T0 + 10**9))
    assert copied("size") == 0
    assert copied("size-mtime") == 1
    assert copied("none") == 2, "--compare none copies everything"


def test_partition_by_parts_and_by_limits(tmp_path, run_ferry):
    src = tmp_path / "src"
    contents = make_tree(src, {**many_files_spec(90, per_dir=30), "big.bin": 500_000})
    manifest = tmp_path / "all.tsv"
    manifest.write_bytes(run_ferry("ls", src, "--recursive").stdout_bytes)
    _, all_entries = parse_manifest(manifest.read_text())
    all_files = {e.path for e in all_entries if e.type == "f"}
    assert all_files == set(contents)
    total_bytes = sum(map(len, contents.values()))

    def run(out, *limits):
        run_ferry("partition", manifest, "--out", out, *limits)
        summary = json.loads((out / "summary.json").read_text())
        parts = []
        for p in summary["partitions"]:
            _, entries = parse_manifest((out / p["file"]).read_text())
            files = [e for e in entries if e.type == "f"]
            assert (p["files"], p["bytes"]) == (len(files), sum(e.size for e in files)), p
            parts.append({e.path for e in files})
        union = set().union(*parts)
        assert union == all_files and sum(map(len, parts)) == len(all_files), (
            "parts must cover each file once"
        )
        assert (summary["parts"], summary["files"], summary["bytes"]) == (
            len(parts),
            len(all_files),
            total_bytes,
        ), summary
        assert isinstance(summary["imbalance_pct"], (int, float))
        return summary

    by_parts = run(tmp_path / "p4", "--parts", "4")
    assert by_parts["mode"] == "parts" and by_parts["parts"] == 4
    written = sorted(os.listdir(tmp_path / "p4"))
    assert [f for f in written if f.startswith("part-")] == [
        f"part-{i:05d}.tsv" for i in range(4)
    ], written
    assert "summary.json" in written

    by_files = run(tmp_path / "f25", "--max-files", "25")
    assert by_files["mode"] == "max-files"
    assert all(p["files"] <= 25 for p in by_files["partitions"])

    by_bytes = run(tmp_path / "b", "--max-bytes", "200000")
    assert by_bytes["mode"] == "max-bytes"
    # A file bigger than the limit cannot be split: it may stand alone in an oversized part.
    assert all(p["bytes"] <= 200_000 or p["files"] == 1 for p in by_bytes["partitions"])


def test_prune_dry_run_refusal_and_delete(tmp_path, container, run_ferry):
    src = tmp_path / "src"
    make_tree(src, {"keep/a.txt": b"a", "keep/b.txt": b"b"})
    run_ferry("copy", src, container, "--recursive")
    for extra in ("keep/stale.txt", "gone-dir/old.bin"):
        container.client.upload_blob(extra, b"no longer in the source")
    everything = sorted(container.blobs())

    dry = run_ferry(
        "prune",
        "--yes",
        src,
        container,
        "--dry-run",
        "--max-delete",
        "10",
        "--log",
        tmp_path / "dry.tsv",
        "--json",
    ).json
    assert (dry["command"], dry["dry_run"], dry["deleted"], dry["would_delete"]) == (
        "prune",
        True,
        0,
        2,
    ), dry
    assert sorted(container.blobs()) == everything

    refused = run_ferry(
        "prune",
        "--yes",
        src,
        container,
        "--max-delete",
        "1",
        "--log",
        tmp_path / "refused.tsv",
        "--json",
        check=1,
    ).json
    assert refused["refused"], refused
    assert refused["deleted"] == 0
    assert sorted(container.blobs()) == everything, "a refused prune deleted something"

    log = tmp_path / "deleted.txt"
    done = run_ferry(
        "prune", "--yes", src, container, "--max-delete", "2", "--log", log, "--json"
    ).json
    assert (done["dry_run"], done["deleted"], done["refused"]) == (False, 2, None), done
    assert sorted(container.blobs()) == ["keep", "keep/a.txt", "keep/b.txt"], (
        "the files and the folder stub of keep/"
    )
    assert done["log"] == str(log)
    logged = log.read_text()
    assert "keep/stale.txt" in logged and "gone-dir/old.bin" in logged
