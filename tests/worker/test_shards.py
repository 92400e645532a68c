"""A pass's listing spread over list jobs (`list.jobs`, docs/scale.md): `ferry shard` cuts the key
space into ranges, each `ferry ls --shards --shard K` lists one, and plan, prune and carry read
the N files as the one listing they stand for: the same plan, the same deletions, the same carried
state. The destination's carried-or-fresh decision is made once, by the shard step."""

from __future__ import annotations

import json

import pytest
from support.trees import ODD_NAMES, make_tree

# Names that sit apart in the listing's order though they share a directory: "a-b" between "a"
# and "a/x", so a cut may fall between a directory's name and its contents.
TREE = {
    **{f"a/x/f{i:02d}": b"x" * i for i in range(25)},
    **{f"a-b/f{i:02d}": b"y" * i for i in range(25)},
    **{f"a.c/deep/er/f{i:02d}": b"z" for i in range(25)},
    **{f"flat{i:03d}": b"f" for i in range(60)},
    **{f"odd/{name}": b"o" for name in ODD_NAMES},
}


def entries(listing: bytes) -> list[bytes]:
    return [line for line in listing.splitlines() if not line.startswith(b"#")]


def shard_listings(run_ferry, root, shards, jobs, tmp_path, stem, *flags):
    for k in range(1, jobs + 1):
        out = run_ferry("ls", "-r", root, "--shards", shards, "--shard", str(k), *flags)
        (tmp_path / f"{stem}-{k}.tsv").write_bytes(out.stdout_bytes)
    return str(tmp_path / f"{stem}-{{shard}}.tsv")


@pytest.mark.parametrize("jobs", [2, 3, 7])
def test_the_ranges_hold_every_entry_once_and_plan_as_one_listing(jobs, run_ferry, tmp_path):
    src = tmp_path / "src"
    make_tree(src, TREE)
    whole = run_ferry("ls", "-r", src).stdout_bytes
    (tmp_path / "whole.tsv").write_bytes(whole)
    shards = tmp_path / "shards.json"
    run_ferry("shard", src, "--jobs", str(jobs), "--out", shards)
    pattern = shard_listings(run_ferry, src, shards, jobs, tmp_path, "source")

    parts = [entries((tmp_path / f"source-{k}.tsv").read_bytes()) for k in range(1, jobs + 1)]
    assert sorted(sum(parts, [])) == sorted(entries(whole))
    assert all(parts), "a range of this tree came out empty"

    for listing, flags, out in [
        (tmp_path / "whole.tsv", [], tmp_path / "one"),
        (pattern, ["--shards", shards], tmp_path / "many"),
    ]:
        run_ferry("plan", listing, *flags, "--out", out, "--phase", "baseline", "--parts", "3")
    for f in sorted((tmp_path / "one").rglob("*")):
        if f.is_file():
            twin = tmp_path / "many" / f.relative_to(tmp_path / "one")
            assert twin.read_bytes() == f.read_bytes(), f.name


def test_a_listing_pattern_needs_its_shards_and_a_shard_its_range(run_ferry, tmp_path):
    src = tmp_path / "src"
    make_tree(src, {"f": b"1"})
    shards = tmp_path / "shards.json"
    run_ferry("shard", src, "--jobs", "2", "--out", shards)
    r = run_ferry(
        "plan", tmp_path / "s-{shard}.tsv", "--out", tmp_path / "p", "--phase", "baseline", check=2
    )
    assert "give --shards" in r.stderr
    r = run_ferry(
        "plan",
        tmp_path / "s.tsv",
        "--shards",
        shards,
        "--out",
        tmp_path / "p",
        "--phase",
        "baseline",
        check=2,
    )
    assert "{shard}" in r.stderr
    r = run_ferry("ls", "-r", src, "--shards", shards, "--shard", "3", check=2)
    assert "2 ranges" in r.stderr
    # A missing list job's file fails the plan; nothing is planned from part of a listing.
    (tmp_path / "s-1.tsv").write_bytes(
        run_ferry("ls", "-r", src, "--shards", shards, "--shard", "1").stdout_bytes
    )
    r = run_ferry(
        "plan",
        tmp_path / "s-{shard}.tsv",
        "--shards",
        shards,
        "--out",
        tmp_path / "p",
        "--phase",
        "baseline",
        check=2,
    )
    assert "s-2.tsv" in r.stderr and not (tmp_path / "p").exists()


def test_a_carried_destination_is_decided_once_and_cut_by_its_entry_counts(run_ferry, tmp_path):
    """The baseline leaves the state with its quantiles; the next pass's shard step judges and
    probes it once, cuts by its entry counts, and every list job hands on its range of it (no
    probe); nothing marks it taken before the pass writes; the carried ranges, the source's
    ranges, prune and carry all agree with one job's."""
    src, dest, state = tmp_path / "src", tmp_path / "dest", tmp_path / "state"
    make_tree(src, TREE)
    run_ferry("copy", "-r", src, dest)
    base = tmp_path / "base.tsv"
    base.write_bytes(run_ferry("ls", "-r", dest).stdout_bytes)
    run_ferry("carry", dest, "--state", state, "--pass", "baseline", "--observed", base)
    left = json.loads((state / "dest.json").read_text())
    assert 8 <= len(left["quantiles"]) <= left["entries"]

    # Between passes: one file gone at the source.
    (src / "flat000").unlink()
    shards = tmp_path / "shards.json"
    run_ferry(
        "shard", src, dest, "--jobs", "3", "--out", shards, "--carried", state, "--pass", "final"
    )
    doc = json.loads(shards.read_text())
    assert doc["basis"] == "carried"
    assert doc["carried"]["used"] and doc["carried"]["written_by"] == "baseline", doc
    assert json.loads((state / "dest.json").read_text())["taken_by"] is None

    carried = ["--carried", str(state), "--pass", "final"]
    dest_pattern = shard_listings(run_ferry, dest, shards, 3, tmp_path, "dest", *carried)
    src_pattern = shard_listings(run_ferry, src, shards, 3, tmp_path, "source")
    dest_parts = [entries((tmp_path / f"dest-{k}.tsv").read_bytes()) for k in (1, 2, 3)]
    assert sorted(sum(dest_parts, [])) == sorted(entries(base.read_bytes()))
    # Cut by the carried entry counts: within a few entries of even.
    sizes = [len(p) for p in dest_parts]
    assert max(sizes) - min(sizes) <= 3 * len(entries(base.read_bytes())) // 256 + 2, sizes

    # Prune and carry read the ranges as one listing.
    log = tmp_path / "deleted.tsv"
    run_ferry(
        "prune",
        "--yes",
        src,
        dest,
        "--files-from",
        src_pattern,
        "--dest-from",
        dest_pattern,
        "--shards",
        shards,
        "--log",
        log,
        "--json",
    )
    assert [e.split(b"\t")[0] for e in entries(log.read_bytes())] == [b"flat000"]
    run_ferry(
        "carry",
        dest,
        "--state",
        state,
        "--pass",
        "final",
        "--listing",
        dest_pattern,
        "--shards",
        shards,
        "--deleted",
        log,
    )
    now = json.loads((state / "dest.json").read_text())
    assert now["written_by"] == "final" and now["taken_by"] is None
    assert now["entries"] == len(entries(base.read_bytes())) - 1

    # A list job of a pass that no longer holds the state refuses instead of handing on another.
    r = run_ferry("ls", "-r", dest, "--shards", shards, "--shard", "1", *carried, check=2)
    assert "no longer the one final decided on" in r.stderr
