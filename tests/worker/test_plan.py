"""`ferry plan` against hand-made listings: every verdict, deletes, names with escapes, spilling."""

from __future__ import annotations

import json
import os
import random
import re

import pytest
from support.manifest import whole

HEADER = "#ferry-manifest v1\tpath\ttype\tsize\tmtime\tmd5"
T0 = "1700000000.250000000"
T1 = "1700000100.250000000"
MD5_A, MD5_B = "a" * 32, "b" * 32

# (escaped path, type, size, mtime, md5) on each side; None: absent on that side.
CASES = {
    "new.txt": (("f", 10, T0, "-"), None),
    "same.txt": (("f", 5, T0, MD5_A), ("f", 5, T0, MD5_A)),
    "grew.txt": (("f", 6, T0, MD5_A), ("f", 5, T0, MD5_A)),
    # Touched at the source since: a destination newer than its source is refused (issue 42).
    "touched.txt": (("f", 5, T1, MD5_A), ("f", 5, T0, MD5_A)),
    "edited.txt": (("f", 5, T0, MD5_A), ("f", 5, T0, MD5_B)),
    "no-md5.txt": (("f", 5, T0, "-"), ("f", 5, T0, MD5_A)),
    # Half a microsecond apart: noise of a store that keeps fewer digits, not a change.
    "jitter.txt": (("f", 5, T0, MD5_A), ("f", 5, "1700000000.250000500", MD5_A)),
    "no-mtime.txt": (("f", 5, T0, MD5_A), ("f", 5, "-", MD5_A)),
    "was-a-dir": (("f", 3, T0, "-"), ("d", 0, T0, "-")),
    "tab\\there": (("f", 1, T0, MD5_A), ("f", 1, T0, MD5_A)),
    "new\\nline\\\\back": (("f", 2, T0, "-"), None),
    "bad-\\xff-byte": (("f", 4, T0, MD5_A), ("f", 4, T0, MD5_A)),
    "\\x23hash-first": (("f", 1, T0, "-"), None),
    "dir": (("d", 0, T0, "-"), ("d", 0, T1, "-")),
    "dir/inner": (("f", 7, T0, MD5_A), ("f", 7, T0, MD5_A)),
    "link": (("l", 4, T0, "-"), ("l", 4, T0, "-")),
    "gone.txt": (None, ("f", 9, T0, "-")),
    "gone\\tdir": (None, ("d", 0, T0, "-")),
    "gone\\tdir/x": (None, ("f", 1, T0, "-")),
    "gone-link": (None, ("l", 3, T0, "-")),
}

# What each compare mode makes of the files on both sides (anything absent is new; a file where
# the destination has a directory is a type change, which replaces the directory).
VERDICTS = {
    "size": {"grew.txt": "changed", "was-a-dir": "changed"},
    "size-mtime": {
        "grew.txt": "changed",
        "touched.txt": "undecided",
        "no-mtime.txt": "undecided",
        "was-a-dir": "changed",
    },
    # The symlink has no MD5 on either side. The same bytes by MD5 under another mtime: the mtime
    # alone is carried.
    "md5": {
        "grew.txt": "changed",
        "edited.txt": "changed",
        "no-md5.txt": "undecided",
        "link": "undecided",
        "was-a-dir": "changed",
        "touched.txt": "metadata-only",
    },
}
NEW = ["new.txt", "new\\nline\\\\back", "\\x23hash-first"]
SOURCE_FILES = [p for p, (s, _) in CASES.items() if s and s[0] != "d"]
EXTRA = ["gone.txt", "gone\\tdir/x", "gone-link"]


def write_listing(path, side: int, shuffle_seed: int) -> None:
    lines = [
        f"{p}\t{e[0]}\t{e[1]}\t{e[2]}\t{e[3]}" for p, sides in CASES.items() if (e := sides[side])
    ]
    random.Random(shuffle_seed).shuffle(lines)  # ferry ls does not sort
    path.write_text(whole("\n".join([HEADER, *lines])), encoding="utf-8")


@pytest.fixture
def listings(tmp_path):
    src, dst = tmp_path / "source.tsv", tmp_path / "dest.tsv"
    write_listing(src, 0, 1)
    write_listing(dst, 1, 2)
    return src, dst


def paths_in(manifest) -> list[str]:
    lines = manifest.read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("#ferry-manifest v2")
    return [line.split("\t")[0] for line in lines[1:] if line and not line.startswith("#")]


def parts_of(plan_dir, sub: str) -> list[list[str]]:
    return [paths_in(p) for p in sorted((plan_dir / sub).glob("part-*.tsv"))]


@pytest.mark.parametrize("compare", ["size", "size-mtime", "md5"])
def test_incremental_verdicts_and_deletes(tmp_path, run_ferry, listings, compare):
    out = tmp_path / "plan"
    r = run_ferry(
        "plan",
        *listings,
        "--out",
        out,
        "--phase",
        "incremental",
        "--compare",
        compare,
        "--max-files",
        "3",
        "--json",
    )
    plan = json.loads((out / "plan.json").read_text())
    assert r.json == plan

    # A file where the destination has a directory waits for the final pass (issue 45): the
    # incremental copies it not, and says so.
    verdicts = {p: v for p, v in VERDICTS[compare].items() if p != "was-a-dir"}
    planned = sorted(NEW + list(verdicts))
    to_copy = sorted(NEW + [p for p, v in verdicts.items() if v != "metadata-only"])
    copied = parts_of(out, "copy")
    assert sorted(p for part in copied for p in part) == planned
    assert all(len(part) <= 3 for part in copied)
    size = {p: CASES[p][0][1] for p in SOURCE_FILES}
    assert plan == {
        "version": 1,
        "phase": "incremental",
        "compare": compare,
        "source": {
            "files": len(SOURCE_FILES),
            "bytes": sum(size.values()),
            "dirs": 1,
            "symlinks": 1,
            "symlinks_not_migrated": 0,
            "specials": 0,
        },
        "dest": {"files": 14, "bytes": 7 * 5 + 1 + 4 + 7 + 4 + 9 + 1 + 3},
        "dest_dirs": 3,
        "to_copy": {
            "files": len(to_copy),
            "bytes": sum(size[p] for p in to_copy),
            "new": len(NEW),
            "changed": sum(v == "changed" for v in verdicts.values()),
            "undecided": sum(v == "undecided" for v in verdicts.values()),
            # The directory's mtime differs, which is no reason to touch it.
            "metadata_only": sum(v == "metadata-only" for v in verdicts.values()),
            "type_changed": 0,
            "deferred": 1,
            "dirs": 0,
            "linked": 0,
        },
        "unchanged": len(SOURCE_FILES) - len(planned) - 1,
        "extra_on_dest": {"files": 3, "bytes": 13},
        "partitioning": {
            "tool": "ferry",
            "mode": "max-files",
            "parts": None,
            "max_files": 3,
            "max_bytes": None,
        },
        "copy_partitions": [
            {"id": f"{i:05d}", "files": len(part), "bytes": sum(size[p] for p in part)}
            for i, part in enumerate(copied)
        ],
        "verify_partitions": plan["copy_partitions"],
        "verify_scope": "copied",
        # Cut by the file cap, as the copy is: 3 files, one part.
        "prune_partitions": [{"id": "00000", "files": 3, "bytes": 13}],
        "prune_dirs": 1,
        "newer_at_dest": {"count": 0, "examples": []},
        "newer_deletions": {"count": 0, "examples": []},
    }
    # What the final pass would delete: files and links only on the destination; the directories
    # that leaves empty apart, for after every part.
    assert sorted(paths_in(out / "delete.tsv")) == sorted(EXTRA)
    assert paths_in(out / "prune" / "part-00000.tsv") == paths_in(out / "delete.tsv")
    assert paths_in(out / "prune" / "dirs.tsv") == ["gone\\tdir"]
    assert not (out / "verify").exists(), (
        "outside the final phase verify partitions are the copy partitions"
    )
    summary = json.loads((out / "copy" / "summary.json").read_text())
    assert [p["file"] for p in summary["partitions"]] == [
        f"part-{i:05d}.tsv" for i in range(len(copied))
    ]
    # Lines keep every field: mtime and MD5 reach ferry copy --compare unchanged (as v2 lines,
    # whose mode, owner, link and xattrs are unknown in these v1 listings).
    first = (
        (out / "copy" / "part-00000.tsv").read_text(encoding="utf-8").splitlines()[1].split("\t")
    )
    assert first[1:] == [str(v) for v in CASES[first[0]][0]] + ["-"] * 4


def test_final_verifies_what_it_copies_and_the_audit_everything(tmp_path, run_ferry, listings):
    final, audit = tmp_path / "final", tmp_path / "audit"
    common = ["--compare", "size", "--parts", "2"]
    run_ferry("plan", *listings, "--out", final, "--phase", "final", *common)
    plan = json.loads((final / "plan.json").read_text())
    # The downtime's verify checks what the pass wrote: the copy parts themselves.
    assert plan["verify_scope"] == "copied"
    assert plan["verify_partitions"] == plan["copy_partitions"]
    assert sorted(p for part in parts_of(final, "copy") for p in part) == sorted(
        NEW + ["grew.txt", "was-a-dir"]
    )
    assert len(plan["copy_partitions"]) == 2
    # The audit copies nothing and verifies every source entry, directories and nodes included
    # (at the end of its first part).
    run_ferry("plan", *listings, "--out", audit, "--phase", "audit", *common)
    plan = json.loads((audit / "plan.json").read_text())
    assert plan["verify_scope"] == "all" and plan["copy_partitions"] == []
    assert parts_of(audit, "copy") == []
    dirs = [p for p, (s, _) in CASES.items() if s and s[0] == "d"]
    verified = [p for part in parts_of(audit, "verify") for p in part]
    assert sorted(verified) == sorted(SOURCE_FILES + dirs)
    assert parts_of(audit, "verify")[0][-len(dirs) :] == sorted(dirs)
    assert [p["files"] for p in plan["verify_partitions"]] == [
        len([p for p in part if p not in dirs]) for part in parts_of(audit, "verify")
    ]


def test_baseline_copies_everything_and_skips_symlinks_for_blob(tmp_path, run_ferry, listings):
    out = tmp_path / "plan"
    run_ferry("plan", listings[0], "--out", out, "--phase", "baseline", "--skip-symlinks", "--auto")
    plan = json.loads((out / "plan.json").read_text())
    files = [p for p in SOURCE_FILES if p != "link"]
    # And the directory to make, at the end of the first part.
    assert sorted(p for part in parts_of(out, "copy") for p in part) == sorted(files + ["dir"])
    assert parts_of(out, "copy")[0][-1] == "dir" and plan["to_copy"]["dirs"] == 1
    assert plan["compare"] == "none" and plan["dest"] is None and plan["unchanged"] == 0
    assert plan["to_copy"]["new"] == len(files) and plan["to_copy"]["files"] == len(files)
    assert plan["source"]["symlinks"] == 1 and plan["source"]["symlinks_not_migrated"] == 1
    assert plan["extra_on_dest"] == {"files": 0, "bytes": 0}
    assert plan["partitioning"]["mode"] == "auto" and len(plan["copy_partitions"]) == 1
    assert paths_in(out / "delete.tsv") == []


def test_nothing_to_copy_gives_no_partitions(tmp_path, run_ferry, listings):
    out = tmp_path / "plan"
    run_ferry(
        "plan", listings[0], listings[0], "--out", out, "--phase", "incremental", "--parts", "4"
    )
    plan = json.loads((out / "plan.json").read_text())
    assert plan["copy_partitions"] == [] and plan["to_copy"]["files"] == 0
    assert plan["unchanged"] == len(SOURCE_FILES)
    assert json.loads((out / "copy" / "summary.json").read_text())["mode"] == "empty"
    assert list((out / "copy").glob("part-*")) == []


@pytest.mark.parametrize(
    "args, message",
    [
        (("--phase", "baseline", "DEST"), "takes no destination listing"),
        (("--phase", "incremental"), "give DEST_LISTING"),
        (("--phase", "final"), "give DEST_LISTING"),
        (
            ("--phase", "incremental", "DEST", "--parts", "2", "--max-files", "3"),
            "cannot be used with",
        ),
        (("--phase", "incremental", "DEST", "--auto", "--max-bytes", "1G"), "cannot be used with"),
        (("--phase", "incremental", "DEST", "--max-files", "0"), "at least 1"),
    ],
)
def test_bad_arguments_are_refused(tmp_path, run_ferry, listings, args, message):
    out = tmp_path / "plan"
    args = [str(listings[1]) if a == "DEST" else a for a in args]
    r = run_ferry("plan", listings[0], *args, "--out", out, check=2)
    assert message in r.stderr
    assert not out.exists()


def test_duplicate_path_fails_and_keeps_the_previous_plan(tmp_path, run_ferry, listings):
    out = tmp_path / "plan"
    run_ferry("plan", *listings, "--out", out, "--phase", "incremental")
    before = (out / "plan.json").read_bytes()
    broken = tmp_path / "dup.tsv"
    broken.write_text(
        whole(listings[1].read_text().rsplit("#ferry-end", 1)[0] + "same.txt\tf\t1\t-\t-\n")
    )
    r = run_ferry("plan", listings[0], broken, "--out", out, "--phase", "incremental", check=2)
    assert 'destination listing names "same.txt" more than once' in r.stderr
    assert (out / "plan.json").read_bytes() == before, (
        "a failed plan must not touch the last good one"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "dest.tsv",
        "dup.tsv",
        "plan",
        "source.tsv",
    ], "no staging left"


def test_malformed_line_is_named(tmp_path, run_ferry, listings):
    bad = tmp_path / "bad.tsv"
    bad.write_text(listings[0].read_text() + "x\tf\tnot-a-size\t-\t-\n")
    r = run_ferry("plan", bad, "--out", tmp_path / "plan", "--phase", "baseline", check=2)
    assert "bad.tsv:" in r.stderr and "bad size" in r.stderr
    assert not (tmp_path / "plan").exists()


def test_an_existing_plan_is_replaced_whole(tmp_path, run_ferry, listings):
    out = tmp_path / "plan"
    (out / "copy").mkdir(parents=True)
    (out / "copy" / "part-00099.tsv").write_text("stale")
    run_ferry("plan", *listings, "--out", out, "--phase", "incremental", "--max-files", "100")
    assert sorted(p.name for p in (out / "copy").iterdir()) == ["part-00000.tsv", "summary.json"]


def big_listings(tmp_path, n: int):
    """n files at the source in random order; the destination has most of them, some changed."""
    rng = random.Random(5)
    odd = "-tab\\there"  # an escaped tab, as ferry ls writes it
    names = [f"d{rng.randrange(40):02d}/f{i:05d}{odd if i % 97 == 0 else ''}" for i in range(n)]
    src = [f"{p}\tf\t{rng.randrange(10**6)}\t{T0}\t-" for p in names]
    dst = [
        line if i % 10 else line.replace("\tf\t", "\tf\t1", 1)
        for i, line in enumerate(src)
        if i % 50
    ]
    dst += [f"only-dest/{i}\tf\t1\t{T0}\t-" for i in range(30)]
    rng.shuffle(src)
    rng.shuffle(dst)
    paths = tmp_path / "src.tsv", tmp_path / "dst.tsv"
    for path, lines in zip(paths, (src, dst)):
        path.write_text(whole("\n".join([HEADER, *lines])))
    return paths


@pytest.mark.parametrize(
    "split",
    [("--parts", "5"), ("--max-bytes", "20MiB"), ("--partitioner", "fpart", "--parts", "3")],
)
def test_spilled_runs_give_the_same_plan(tmp_path, run_ferry, split):
    """A sort memory of a few KiB forces dozens of runs per listing; the plan must be byte for
    byte the one made in memory."""
    src, dst = big_listings(tmp_path, 4000)
    outputs = []
    for memory in ("64MiB", "8KiB"):
        out = tmp_path / f"plan-{memory}"
        r = run_ferry(
            "plan",
            src,
            dst,
            "--out",
            out,
            "--phase",
            "final",
            *split,
            env={"FERRY_PLAN_SORT_MEMORY": memory},
        )
        runs = int(re.search(r"\((\d+) sorted runs\)", r.stderr).group(1))
        assert runs == 2 if memory == "64MiB" else runs > 20, r.stderr
        outputs.append(
            {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
        )
    assert outputs[0] == outputs[1]
    plan = json.loads(outputs[0]["plan.json"])
    assert plan["source"]["files"] == 4000 and plan["to_copy"]["new"] == 80
    assert (
        plan["to_copy"]["changed"] == 4000 // 10 - 4000 // 50
        and plan["extra_on_dest"]["files"] == 30
    )
    copy = [
        p
        for name, data in outputs[0].items()
        if name.startswith("copy/part-")
        for p in data.decode().splitlines()[1:]
        if not p.startswith("#")
    ]
    assert len(copy) == len(set(copy)) == plan["to_copy"]["files"]


def test_parts_balance_like_ferry_partition_and_keep_directories_together(tmp_path, run_ferry):
    """--parts deals runs of neighbouring files out by LPT: within 2 % of the balance of `ferry
    partition --parts` (LPT over single files, fpart's -n), with each directory in a part or two
    rather than in all of them, so the jobs that list their part's directories list each about
    once between them."""
    src, _ = big_listings(tmp_path, 20000)
    out = tmp_path / "plan"
    run_ferry("plan", src, "--out", out, "--phase", "baseline", "--parts", "4")
    run_ferry("partition", src, "--out", tmp_path / "partition", "--parts", "4")
    size = {
        line.split("\t")[0]: int(line.split("\t")[2])
        for line in src.read_text().splitlines()
        if not line.startswith("#")
    }
    ours = parts_of(out, "copy")
    theirs = [paths_in(p) for p in sorted((tmp_path / "partition").glob("part-*.tsv"))]
    assert sorted(p for part in ours for p in part) == sorted(size)

    def spread(parts):
        loads = [sum(size[p] for p in part) for part in parts]
        return max(loads) / (sum(loads) / len(loads)) - 1

    def listings(parts):
        return sum(len({p.split("/")[0] for p in part}) for part in parts)

    assert len(ours) == 4 and spread(ours) < 0.02 and spread(theirs) < 0.01, (
        spread(ours),
        spread(theirs),
    )
    # 40 directories of 500 files, 5,000 files a part: the jobs list 40 directories between them
    # at best; LPT over files has every directory in every part.
    assert listings(ours) <= 2 * 40 and listings(theirs) == 4 * 40, (
        listings(ours),
        listings(theirs),
    )


def test_a_directorys_mtime_alone_is_planned_where_the_destination_keeps_it(run_ferry, tmp_path):
    """Blob storage keeps a directory's mtime in its folder stub, which nothing written into the
    folder moves: with --dir-mtimes (the pipeline passes it for a Blob destination) a directory
    touched alone at the source is planned as metadata; a local destination's directories move
    with every write into them, and are not."""
    for side, mtime in (("src", 1_600_000_000), ("dst", 1_700_000_000)):
        (tmp_path / side / "d").mkdir(parents=True)
        (tmp_path / side / "d" / "f").write_bytes(b"same")
        os.utime(tmp_path / side / "d" / "f", (1_500_000_000, 1_500_000_000))
        os.utime(tmp_path / side / "d", (mtime, mtime))
        (tmp_path / f"{side}.tsv").write_bytes(run_ferry("ls", "-r", tmp_path / side).stdout_bytes)
    common = [tmp_path / "src.tsv", tmp_path / "dst.tsv", "--phase", "incremental"]
    run_ferry("plan", *common, "--out", tmp_path / "without")
    run_ferry("plan", *common, "--out", tmp_path / "with", "--dir-mtimes")
    without = json.loads((tmp_path / "without" / "plan.json").read_text())
    planned = json.loads((tmp_path / "with" / "plan.json").read_text())
    assert without["to_copy"]["dirs"] == 0 and without["to_copy"]["files"] == 0
    assert planned["to_copy"]["dirs"] == 1 and planned["to_copy"]["files"] == 0


def test_a_directory_turned_into_a_file_waits_for_the_final_pass(tmp_path, run_ferry):
    """Issue 45 item 1: an incremental pass that finds a directory turned into a file must not
    delete the directory's contents before the window. It leaves the file out (and says so);
    the final pass copies it, and its plan has what was under the directory among the
    deletions, which prune then finds done."""
    from support.trees import make_tree

    src, dst = tmp_path / "src", tmp_path / "dst"
    make_tree(dst, {f"data/u{i:02d}": b"old\n" for i in range(50)} | {"k": b"k"})
    make_tree(src, {"data": b"tiny\n", "k": b"k", "new.txt": b"n"})

    def plan(phase: str) -> tuple:
        for side, root in (("s", src), ("d", dst)):
            (tmp_path / f"{side}.tsv").write_bytes(run_ferry("ls", "-r", root).stdout_bytes)
        out = tmp_path / phase
        doc = run_ferry(
            "plan", tmp_path / "s.tsv", tmp_path / "d.tsv", "--out", out, "--phase", phase,
            "--parts", "2", "--json",
        ).json  # fmt: skip
        for part in sorted((out / "copy").glob("part-*.tsv")):
            copied = run_ferry("copy", src, dst, "--files-from", part, "--json").json
            assert copied["failures"] == [], copied
        return out, doc

    out, doc = plan("incremental")
    assert (doc["to_copy"]["deferred"], doc["to_copy"]["type_changed"]) == (1, 0), doc["to_copy"]
    assert doc["to_copy"]["new"] == 1, doc["to_copy"]  # new.txt
    assert "data" not in [p for part in parts_of(out, "copy") for p in part]
    assert sorted(os.listdir(dst / "data")) == [f"u{i:02d}" for i in range(50)]
    assert (dst / "new.txt").read_bytes() == b"n"

    out, doc = plan("final")
    assert (doc["to_copy"]["deferred"], doc["to_copy"]["type_changed"]) == (0, 1), doc["to_copy"]
    assert doc["extra_on_dest"]["files"] == 50 and doc["dest_dirs"] == 1, doc
    assert sorted(paths_in(out / "delete.tsv")) == [f"data/u{i:02d}" for i in range(50)]
    assert (dst / "data").read_bytes() == b"tiny\n"
    for part in doc["prune_partitions"]:
        run_ferry(
            "prune", "--yes", src, dst, "--plan", out, "--part", part["id"], "--force",
            "--log", tmp_path / f"pruned-{part['id']}.tsv",
        )  # fmt: skip
    run_ferry(
        "prune", "--yes", src, dst, "--plan", out, "--dirs", "--force", "--log", tmp_path / "d.log"
    )
    assert sorted(os.listdir(dst)) == ["data", "k", "new.txt"]
    assert (dst / "data").read_bytes() == b"tiny\n"


def test_a_listing_that_did_not_complete_is_refused_by_name(tmp_path, run_ferry, listings):
    """Issue 45 (3): a listing without its end record (its `ferry ls` failed, or the file was cut)
    or whose record disagrees with its lines plans nothing: the plan's deletions would stand on
    part of a tree."""
    out = tmp_path / "plan"
    text = listings[1].read_text()
    cut, edited = tmp_path / "cut.tsv", tmp_path / "edited.tsv"
    cut.write_text(text.rsplit("#ferry-end", 1)[0])
    edited.write_text(text.replace("\n", "\n#", 2).replace("\n#", "\n", 1))
    for bad, says in ((cut, "no end record"), (edited, "the end record counts")):
        for pair in ((listings[0], bad), (bad, listings[1])):
            r = run_ferry("plan", *pair, "--out", out, "--phase", "final", check=2)
            assert f"{bad}" in r.stderr and says in r.stderr and "list again" in r.stderr, r.stderr
            assert not out.exists()


def test_a_final_plan_past_max_delete_is_refused_before_anything_is_copied(
    tmp_path, run_ferry, listings
):
    """Issue 42 (6): the final pass's deletions judged by its plan, as its prune will judge them,
    so that a pass whose prune would be refused stops before its first copy, not inside the
    window after the last. Refused: exit 1, nothing written, the count and the first paths."""
    src, dst = listings
    common = [src, dst, "--phase", "final"]
    out = run_ferry("plan", *common, "--out", tmp_path / "p", "--max-delete", "3", check=1)
    assert "the final pass's prune would be refused: 4 of" in out.stderr, out.stderr
    assert "gone-link" in out.stderr and "--force" in out.stderr
    assert not (tmp_path / "p").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".p.")] == []
    run_ferry("plan", *common, "--out", tmp_path / "p", "--max-delete", "4")
    run_ferry("plan", *common, "--out", tmp_path / "f", "--max-delete", "3", "--force")
    assert json.loads((tmp_path / "f" / "plan.json").read_text())["prune_dirs"] == 1
    # A source that listed nothing is refused as prune refuses it, unless --force.
    empty = tmp_path / "empty.tsv"
    empty.write_text(whole(HEADER), encoding="utf-8")
    out = run_ferry(
        "plan",
        empty,
        dst,
        "--phase",
        "final",
        "--out",
        tmp_path / "e",
        "--max-delete",
        "100%",
        check=1,
    )
    assert "found no entries at the source" in out.stderr and not (tmp_path / "e").exists()
