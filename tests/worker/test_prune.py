"""`ferry prune` end to end: the final pass that deletes from DST what SRC no longer has.

Every run passes ``--log`` into the test's temp dir. What is left is checked by walking the
directory or listing the container with the SDK, never with ferry.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from support.blobs import file_blobs
from support.ferry import describe, ferry_env
from support.manifest import escape_path as escape
from support.manifest import parse_manifest, whole
from support.requests import assert_counted
from support.trees import File, Link, snapshot
from support.trees import make_tree as make_fresh_tree

# ---------------------------------------------------------------------------------------------
# helpers

# Every file these tests make, at the source or at the destination, has this mtime: what a
# prune deletes was copied before the source lost it, never newer than the whole source (prune
# refuses that: swapped arguments, or something writing at the destination).
AGED_NS = 1_600_000_000_000_000_000
AGED_META = {"mtime": "2020-09-13T12:26:40Z"}


def make_tree(root, spec: dict) -> dict:
    def aged(item):
        if isinstance(item, bytes):
            return File(item, mtime_ns=AGED_NS)
        if isinstance(item, File) and item.mtime_ns is None:
            return File(**{**item.__dict__, "mtime_ns": AGED_NS})
        return item

    made = make_fresh_tree(root, {k: aged(v) for k, v in spec.items()})
    for name, item in spec.items():
        if isinstance(item, Link):
            os.utime(Path(root) / os.fsdecode(name), ns=(AGED_NS, AGED_NS), follow_symlinks=False)
    return made


def src_spec(n: int = 30) -> dict:
    spec = {f"keep/k{i:02d}.txt": b"keep %d\n" % i for i in range(n)}
    spec.update(
        {
            "top.txt": b"top\n",
            "keep/deeper/x.bin": File(size=5000),
            "with space/also kept": b"kept\n",
            "-dash-kept": b"d\n",
        }
    )
    return spec


# What DST has beyond SRC: files at several depths, directories that become empty, odd names.
EXTRA_FILES = {
    b"extra-top.txt": b"x\n",
    b"keep/extra-in-kept-dir.txt": b"x\n",
    b"gone-dir/a/b/c.txt": b"c\n",
    b"gone-dir/a/d.txt": b"d\n",
    b"gone-dir/e.txt": b"e\n",
    b"with space/extra with space": b"s\n",
    b"-extra-dash": b"-\n",
    b"#extra-hash": b"#\n",
    b"extra\ttab": b"t\n",
    b"extra\nnewline": b"n\n",
    b"extra-\xff\xfe-not-utf8": b"u\n",
}
EXTRA_DIRS = [b"gone-dir/a/b", b"gone-dir/a", b"gone-dir", b"gone-empty-dir"]


def build_local(tmp_path: Path, run_ferry) -> tuple[Path, Path, dict]:
    """SRC, and DST = a ferry copy of SRC plus EXTRA_FILES and an empty directory SRC lacks."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    make_tree(src, src_spec())
    (src / "empty-kept-dir").mkdir()
    run_ferry("copy", src, dst, "--recursive")
    make_tree(dst, EXTRA_FILES)
    (dst / "gone-empty-dir").mkdir()
    return src, dst, snapshot(dst)


def log_paths(log: Path) -> list[bytes]:
    comments, entries = parse_manifest(log.read_text(encoding="utf-8"))
    assert comments and comments[0].startswith("#ferry-manifest"), comments
    return [e.path for e in entries]


def would_delete_lines(stdout: str) -> list[str]:
    out = []
    for line in stdout.splitlines():
        head, sep, path = line.partition("\t")
        assert (head, sep) == ("would delete", "\t"), f"unexpected dry-run line {line!r}"
        out.append(path)
    return out


def run_as_root_without_dac_override(run_ferry, *args) -> subprocess.CompletedProcess:
    """Run ferry as root minus CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH, so mode 000 really is unreadable."""
    cmd = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", *run_ferry.command(args)]
    return subprocess.run(
        cmd, env=ferry_env(), capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )


# ---------------------------------------------------------------------------------------------
# local destination


def test_dry_run_deletes_nothing_lists_and_logs(tmp_path, run_ferry):
    src, dst, before = build_local(tmp_path, run_ferry)
    log = tmp_path / "logs" / "dry.tsv"
    log.parent.mkdir()
    r = run_ferry("prune", "--yes", src, dst, "--dry-run", "--log", log)
    assert snapshot(dst) == before, "a dry run changed the destination"
    # The directories that would be left empty are listed too, as the real run deletes them.
    want = sorted(escape(p) for p in [*EXTRA_FILES, *EXTRA_DIRS])
    assert sorted(would_delete_lines(r.stdout)) == want
    assert sorted(log_paths(log)) == sorted([*EXTRA_FILES, *EXTRA_DIRS])
    assert (
        f"would delete {len(EXTRA_FILES) + len(EXTRA_DIRS)} of" in r.stderr and str(log) in r.stderr
    )

    j = run_ferry(
        "prune", "--yes", src, dst, "--dry-run", "--log", tmp_path / "logs" / "dry2.tsv", "--json"
    ).json
    assert (j["command"], j["dry_run"], j["deleted"], j["would_delete"], j["refused"]) == (
        "prune",
        True,
        0,
        len(EXTRA_FILES),
        None,
    ), j
    assert j["log"] == str(tmp_path / "logs" / "dry2.tsv")
    assert snapshot(dst) == before


def test_prune_deletes_exactly_dst_minus_src_and_logs_it(tmp_path, run_ferry):
    src, dst, before = build_local(tmp_path, run_ferry)
    log = tmp_path / "prune.tsv"
    j = run_ferry("prune", "--yes", "--max-delete", "100%", src, dst, "--log", log, "--json").json
    assert (j["dry_run"], j["deleted"], j["would_delete"], j["refused"]) == (
        False,
        len(EXTRA_FILES),
        len(EXTRA_FILES),
        None,
    ), j

    after = snapshot(dst)
    want = snapshot(src)
    assert set(after) == set(want), (sorted(set(after) - set(want)), sorted(set(want) - set(after)))
    # What stays is untouched: same content, same mtime.
    changed = [
        p
        for p in after
        if after[p].type == "f"
        and (after[p].md5, after[p].mtime_ns) != (before[p].md5, before[p].mtime_ns)
    ]
    assert not changed, changed
    # Every deletion is in the log: the files, and the directories that were emptied.
    assert sorted(log_paths(log)) == sorted([*EXTRA_FILES, *EXTRA_DIRS])
    assert not (dst / "gone-dir").exists() and not (dst / "gone-empty-dir").exists()
    assert (dst / "empty-kept-dir").is_dir(), "an empty directory the source has must stay"

    # Nothing left to do: a second prune deletes nothing.
    again = run_ferry(
        "prune",
        "--yes",
        "--max-delete",
        "100%",
        src,
        dst,
        "--log",
        tmp_path / "again.tsv",
        "--json",
    ).json
    assert (again["deleted"], again["would_delete"]) == (0, 0)
    assert log_paths(tmp_path / "again.tsv") == []


def test_dry_run_lists_what_the_real_run_deletes(tmp_path, run_ferry):
    """The dry run's list and log should be the real run's log: directories included."""
    src, dst, _ = build_local(tmp_path, run_ferry)
    run_ferry(
        "prune",
        "--yes",
        "--max-delete",
        "100%",
        src,
        dst,
        "--dry-run",
        "--log",
        tmp_path / "dry.tsv",
    )
    run_ferry("prune", "--yes", "--max-delete", "100%", src, dst, "--log", tmp_path / "real.tsv")
    dry, real = sorted(log_paths(tmp_path / "dry.tsv")), sorted(log_paths(tmp_path / "real.tsv"))
    assert dry == real, f"in the real run's log only: {sorted(set(real) - set(dry))}"


def test_prune_never_follows_a_symlink_out_of_dst(tmp_path, run_ferry):
    outside = tmp_path / "outside"
    make_tree(
        outside,
        {
            "precious.txt": b"do not touch\n",
            "sub/also.txt": b"nor this\n",
            "x": b"shadowed name\n",
            "y": b"only outside\n",
        },
    )
    (tmp_path / "outside-file.txt").write_bytes(b"outside file\n")
    outside_before = snapshot(outside)

    src, dst = tmp_path / "src", tmp_path / "dst"
    make_tree(
        src,
        {
            "a.txt": b"a\n",
            "shadow/x": b"in source\n",
            "kept-link": Link(str(outside)),
            **{f"pad/{i}": b"p" for i in range(20)},
        },
    )
    make_tree(
        dst,
        {
            "a.txt": b"a\n",
            **{f"pad/{i}": b"p" for i in range(20)},
            "kept-link": Link(str(outside)),  # the source has this link: it stays
            "link-out": Link(str(outside)),  # the source lacks it: the link (only) goes
            "link-to-file": Link(str(tmp_path / "outside-file.txt")),
            "shadow": Link(str(outside)),  # the source has a *directory* named shadow
            "gone/up": Link("../../outside"),  # inside a directory that goes
            "gone/f": b"f\n",
        },
    )
    log = tmp_path / "prune.tsv"
    run_ferry("prune", "--yes", "--max-delete", "100%", src, dst, "--log", log)

    assert snapshot(outside) == outside_before, "prune touched files outside DST"
    assert (tmp_path / "outside-file.txt").read_bytes() == b"outside file\n"
    left = snapshot(dst)
    assert not any(
        p in left for p in (b"link-out", b"link-to-file", b"gone/up", b"gone/f", b"gone")
    )
    assert left[b"kept-link"].type == "l" and left[b"shadow"].type == "l"
    assert sorted(log_paths(log)) == sorted(
        [b"link-out", b"link-to-file", b"gone/up", b"gone/f", b"gone"]
    )


# ---------------------------------------------------------------------------------------------
# refusals


def test_empty_source_is_refused(tmp_path, run_ferry):
    src, dst, before = build_local(tmp_path, run_ferry)
    empty = tmp_path / "empty-src"
    empty.mkdir()
    header_only = tmp_path / "header-only.tsv"
    header_only.write_bytes(run_ferry("ls", empty, "--recursive").stdout_bytes)
    for args in ([empty, dst], [src, dst, "--files-from", header_only]):
        log = tmp_path / "never.tsv"
        r = run_ferry("prune", "--yes", *args, "--log", log, check=1)
        assert (
            "refused" in r.stderr and "nothing deleted" in r.stderr and "no entries" in r.stderr
        ), r.stderr
        assert "--force" in r.stderr
        assert snapshot(dst) == before
        assert not log.exists(), "a refused prune wrote a deletion log"
        j = run_ferry("prune", "--yes", *args, "--log", log, "--json", check=1).json
        assert (
            j["refused"]
            and "no entries" in j["refused"]
            and (j["deleted"], j["would_delete"]) == (0, 0)
        ), j
    # --force is the way to say "yes, it really is empty".
    forced = run_ferry(
        "prune", "--yes", empty, dst, "--force", "--log", tmp_path / "forced.tsv", "--json"
    ).json
    assert forced["deleted"] == sum(1 for e in before.values() if e.type != "d")
    assert snapshot(dst) == {}


def _refused(r, *words):
    assert r.returncode == 1, f"{describe(r.args)}: exit {r.returncode}\n{r.stderr}"
    assert "prune refused, nothing deleted" in r.stderr and "source listing failed" in r.stderr, (
        r.stderr
    )
    for w in words:
        assert w in r.stderr, (w, r.stderr)


def test_failed_source_listing_is_refused(tmp_path, run_ferry):
    src, dst, before = build_local(tmp_path, run_ferry)
    log = tmp_path / "never.tsv"
    missing = tmp_path / "no-such-dir"
    not_a_dir = tmp_path / "a-file"
    not_a_dir.write_bytes(b"x")
    corrupt = tmp_path / "corrupt.tsv"
    corrupt.write_text("#ferry-manifest v1\npath\tf\t1\t-\t-\nother\tf\tnot-a-size\t-\t-\n")
    cases = [
        ([missing, dst], "no-such-dir"),
        ([not_a_dir, dst], "not a directory"),
        ([src, dst, "--files-from", tmp_path / "no-such-manifest.tsv"], "no-such-manifest.tsv"),
        ([src, dst, "--files-from", corrupt], "corrupt.tsv"),
    ]
    for args, word in cases:
        for force in ([], ["--force"]):
            r = run_ferry("prune", "--yes", *args, *force, "--log", log, check=False)
            _refused(r, word)
            assert snapshot(dst) == before, args
            assert not log.exists()


def test_partly_unreadable_source_is_refused(tmp_path, run_ferry):
    """One directory of SRC cannot be read: its files must not look deleted."""
    src, dst, before = build_local(tmp_path, run_ferry)
    os.chmod(src / "keep" / "deeper", 0)
    try:
        probe = run_as_root_without_dac_override(run_ferry, "ls", src, "--recursive")
        assert probe.returncode != 0, "precondition: the locked directory must be unreadable"
        r = run_as_root_without_dac_override(
            run_ferry, "prune", "--yes", src, dst, "--force", "--log", tmp_path / "never.tsv"
        )
        _refused(r, "Permission denied")
    finally:
        os.chmod(src / "keep" / "deeper", 0o755)
    assert snapshot(dst) == before
    assert not (tmp_path / "never.tsv").exists()


@pytest.mark.parametrize("side", ["--files-from", "--dest-from"])
def test_a_listing_that_failed_leaves_no_manifest_to_prune_by(tmp_path, run_ferry, side):
    """Issue 45 (3): `ferry ls -r` fails on an unreadable directory (exit 2) and the manifest it
    wrote has no end record; prune then refuses it, naming it, and deletes nothing. Before, the
    manifest read as whole and the prune deleted what the listing had not reached."""
    src, dst, before = build_local(tmp_path, run_ferry)
    listing = tmp_path / "m.tsv"
    os.chmod(src / "keep" / "deeper", 0)
    try:
        with open(listing, "wb") as out:
            r = subprocess.run(
                ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
                + run_ferry.command(["ls", "-r", src]),
                env=ferry_env(),
                stdout=out,
                stderr=subprocess.PIPE,
                text=True,
                timeout=60,
            )
        assert r.returncode == 2, r.stderr
    finally:
        os.chmod(src / "keep" / "deeper", 0o755)
    text = listing.read_text()
    assert text.startswith("#ferry-manifest v2") and "#ferry-end" not in text, text
    # The destination's listing failing stands for a destination that lost files: as doubtful.
    ends = [src, dst, side, listing]
    r = run_ferry(
        "prune",
        "--yes",
        "--max-delete",
        "100%",
        *ends,
        "--force",
        "--log",
        tmp_path / "never.tsv",
        check=False,
    )
    assert r.returncode == 1 and "prune refused, nothing deleted" in r.stderr, r.stderr
    assert f"{listing}: no end record" in r.stderr and "list again" in r.stderr, r.stderr
    assert snapshot(dst) == before
    assert not (tmp_path / "never.tsv").exists()
    # Listed again, whole, the same manifest is acted on.
    with open(listing, "wb") as out:
        subprocess.run(
            run_ferry.command(["ls", "-r", src]), env=ferry_env(), stdout=out, check=True
        )
    assert listing.read_text().splitlines()[-1].startswith("#ferry-end\tentries=")
    if side == "--files-from":
        run_ferry("prune", "--yes", "--max-delete", "100%", *ends, "--log", tmp_path / "log.tsv")
        assert set(EXTRA_FILES) <= set(log_paths(tmp_path / "log.tsv"))
        assert not (dst / "extra-top.txt").exists() and (dst / "keep" / "deeper").is_dir()


def test_source_listing_failing_on_the_wire_is_refused(tmp_path, container, proxy, run_ferry):
    src = tmp_path / "src"
    make_tree(src, {f"f{i}": b"%d" % i for i in range(6)})
    run_ferry("copy", src, container, "--recursive")
    dst = tmp_path / "dst"
    run_ferry("copy", container, dst, "--recursive")
    make_tree(dst, {"extra": b"x"})
    before = snapshot(dst)
    proxy.add("status", method="GET", query={"comp": "list"}, status=500, count=50)
    r = run_ferry(
        "prune",
        "--yes",
        container.via(proxy.port),
        dst,
        "--max-retries",
        "1",
        "--force",
        "--log",
        tmp_path / "never.tsv",
        check=False,
    )
    _refused(r)
    assert snapshot(dst) == before
    assert proxy.requests(comp="list"), "the listing never went through the proxy"


def test_a_blob_listing_cut_on_the_wire_leaves_no_manifest_to_prune_by(
    tmp_path, container, proxy, run_ferry
):
    """Issue 45 (3), in Blob storage: the listing's second page fails, `ferry ls` exits 2 with the
    first page written and no end record, and a prune given that manifest refuses it."""
    src = tmp_path / "src"
    make_tree(src, {f"f{i}": b"%d" % i for i in range(6)})
    run_ferry("copy", src, container, "--recursive")
    dst = tmp_path / "dst"
    run_ferry("copy", container, dst, "--recursive")
    make_tree(dst, {"extra": b"x"})
    before = snapshot(dst)
    # Every page from a marker: the first page (and the probe and the level beside it) passes.
    proxy.add("status", method="GET", query={"comp": "list", "marker": None}, status=500, count=50)
    listing = tmp_path / "m.tsv"
    via = container.via(proxy.port)
    with open(listing, "wb") as out:
        args = ["ls", "-r", via, "--list-page-size", "2", "--max-retries", "1"]
        r = subprocess.run(run_ferry.command(args), env=ferry_env(), stdout=out, timeout=60)
    assert r.returncode == 2
    _, entries = parse_manifest(listing.read_text())
    assert len(entries) == 2 and "#ferry-end" not in listing.read_text(), entries
    r = run_ferry("prune", "--yes", container, dst, "--files-from", listing, "--force", check=False)
    assert r.returncode == 1 and f"{listing}: no end record" in r.stderr, r.stderr
    assert snapshot(dst) == before


# ---------------------------------------------------------------------------------------------
# from a plan: what `ferry plan`'s join decided, deleted in one job or in parts


def plan_final(tmp_path: Path, run_ferry, src: Path, dst: Path, parts: int = 3) -> Path:
    """`ferry plan --phase final` of SRC's and DST's listings, as a pipeline's pass makes it."""
    listings = {}
    for side, root in (("src", src), ("dst", dst)):
        listings[side] = tmp_path / f"{side}.tsv"
        listings[side].write_bytes(run_ferry("ls", "-r", root).stdout_bytes)
    out = tmp_path / "plan"
    run_ferry(
        "plan", listings["src"], listings["dst"], "--out", out, "--phase", "final",
        "--parts", str(parts),
    )  # fmt: skip
    return out


def test_a_plan_is_pruned_as_the_listings_are_listing_nothing(tmp_path, run_ferry):
    """`--plan` deletes what prune's own listings would, and restores the same directory mtimes:
    one rule, decided in the plan's join. The listings it would sort are absent, and it sorts
    nothing: it makes no scratch directory (here it could not)."""
    src, dst, before = build_local(tmp_path, run_ferry)
    twin = tmp_path / "twin"
    subprocess.run(["cp", "-a", dst, twin], check=True)
    plan = plan_final(tmp_path, run_ferry, src, dst)
    doc = json.loads((plan / "plan.json").read_text())
    assert doc["extra_on_dest"]["files"] == len(EXTRA_FILES)
    assert doc["prune_dirs"] == len(EXTRA_DIRS)
    assert sum(p["files"] for p in doc["prune_partitions"]) == len(EXTRA_FILES)
    # Cut as the plan was asked to cut (--parts 3), though nothing is copied.
    assert (len(doc["prune_partitions"]), doc["copy_partitions"]) == (3, []), doc
    for listing in ("src.tsv", "dst.tsv"):
        (tmp_path / listing).unlink()

    scratch = tmp_path / "a-file"
    scratch.write_text("")
    j = run_ferry(
        "prune",
        "--yes",
        "--max-delete",
        "100%",
        src,
        dst,
        "--plan",
        plan,
        "--log",
        tmp_path / "p.tsv",
        "--json",
        "--scratch",
        scratch,
    ).json
    run_ferry("prune", "--yes", "--max-delete", "100%", src, twin, "--log", tmp_path / "t.tsv")
    assert (j["deleted"], j["would_delete"], j["dirs"], j["refused"]) == (
        len(EXTRA_FILES),
        len(EXTRA_FILES),
        len(EXTRA_DIRS),
        None,
    ), j
    # Files are deleted many at a time, so logged as they finish; directories in their order.
    assert sorted(log_paths(tmp_path / "p.tsv")) == sorted(log_paths(tmp_path / "t.tsv"))
    assert log_paths(tmp_path / "p.tsv")[-len(EXTRA_DIRS) :] == EXTRA_DIRS
    assert snapshot(dst) == snapshot(twin) and set(snapshot(dst)) == set(snapshot(src))
    assert snapshot(dst) != before


def test_a_plan_pruned_in_parts_then_its_directories(tmp_path, run_ferry):
    """Every part deletes its files alone (any order); --dirs then deletes the emptied
    directories and gives the ones that stay the source's mtime: the tree a whole prune leaves."""
    src, dst, _ = build_local(tmp_path, run_ferry)
    (src / "keep").touch()  # a kept directory whose mtime prune must restore
    os.utime(src / "keep", ns=(1_500_000_000_000_000_000, 1_500_000_000_000_000_000))
    plan = plan_final(tmp_path, run_ferry, src, dst, parts=3)
    parts = [p["id"] for p in json.loads((plan / "plan.json").read_text())["prune_partitions"]]
    assert len(parts) == 3
    deleted = []
    for part in reversed(parts):
        log = tmp_path / f"part-{part}.tsv"
        j = run_ferry(
            "prune",
            "--yes",
            "--max-delete",
            "100%",
            src,
            dst,
            "--plan",
            plan,
            "--part",
            part,
            "--log",
            log,
            "--json",
        ).json
        assert j["dirs"] == 0 and j["deleted"] == j["would_delete"] > 0, j
        assert all(d in [p for p in EXTRA_FILES] for d in log_paths(log))
        deleted += log_paths(log)
        assert (dst / "gone-dir").is_dir(), "a part deleted a directory"
    assert sorted(deleted) == sorted(EXTRA_FILES)
    j = run_ferry(
        "prune",
        "--yes",
        "--max-delete",
        "100%",
        src,
        dst,
        "--plan",
        plan,
        "--dirs",
        "--log",
        tmp_path / "dirs.tsv",
        "--json",
    ).json
    assert (j["deleted"], j["dirs"]) == (0, len(EXTRA_DIRS)), j
    assert log_paths(tmp_path / "dirs.tsv") == EXTRA_DIRS
    assert set(snapshot(dst)) == set(snapshot(src))
    assert (dst / "keep").stat().st_mtime_ns == (src / "keep").stat().st_mtime_ns


def test_every_part_of_a_plan_judges_max_delete_by_the_whole_pass(tmp_path, run_ferry):
    """A part holding 2 of 6 deletions is still refused at --max-delete 5: the gate is the
    pass's, not the part's, or cutting would slip past it."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    make_tree(src, {f"k/{i:02d}": b"k" for i in range(24)})
    run_ferry("copy", src, dst, "--recursive")
    make_tree(dst, {f"x/{i}": b"x" for i in range(6)})
    before = snapshot(dst)
    plan = plan_final(tmp_path, run_ferry, src, dst, parts=3)
    for part in ("00000", "00001", "00002"):
        r = run_ferry(
            "prune", "--yes", src, dst, "--plan", plan, "--part", part, "--max-delete", "5",
            "--log", tmp_path / "log.tsv", "--json", check=1,
        )  # fmt: skip
        # Directories count too: x/ beside its 6 files, of 24 + 6 files and k/, x/.
        assert "7 of 32 destination entries" in r.json["refused"], r.json
    assert snapshot(dst) == before
    r = run_ferry(
        "prune",
        "--yes",
        src,
        dst,
        "--plan",
        plan,
        "--part",
        "00007",
        "--log",
        tmp_path / "l",
        check=2,
    )
    assert "no deletion part" in r.stderr


def test_a_part_of_a_plan_that_cannot_be_read_is_named_and_nothing_goes(tmp_path, run_ferry):
    src, dst, before = build_local(tmp_path, run_ferry)
    plan = plan_final(tmp_path, run_ferry, src, dst, parts=3)
    (plan / "prune" / "part-00001.tsv").unlink()
    r = run_ferry(
        "prune",
        "--yes",
        "--max-delete",
        "100%",
        src,
        dst,
        "--plan",
        plan,
        "--part",
        "00001",
        "--log",
        tmp_path / "l",
        check=2,
    )
    assert "cannot read back the list of deletions" in r.stderr, r.stderr
    assert "part-00001.tsv" in r.stderr, r.stderr
    assert snapshot(dst) == before


def test_a_plan_without_a_destination_or_a_source_is_refused(tmp_path, run_ferry):
    src, dst = tmp_path / "src", tmp_path / "dst"
    make_tree(src, {"a": b"a"})
    make_tree(dst, {"a": b"a", "b": b"b"})
    listing = tmp_path / "src.tsv"
    listing.write_bytes(run_ferry("ls", "-r", src).stdout_bytes)
    run_ferry("plan", listing, "--out", tmp_path / "base", "--phase", "baseline")
    r = run_ferry(
        "prune", "--yes", src, dst, "--plan", tmp_path / "base", "--log", tmp_path / "l", check=1
    )
    assert "without a destination listing" in r.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    plan = plan_final(tmp_path, run_ferry, empty, dst)
    r = run_ferry("prune", "--yes", empty, dst, "--plan", plan, "--log", tmp_path / "l", check=1)
    assert "no entries at the source" in r.stderr and "--force" in r.stderr
    assert snapshot(dst) == {**snapshot(dst)} and (dst / "b").exists()


@pytest.mark.parametrize(
    "limit, allowed", [("6", False), ("7", True), ("21%", False), ("22%", True)]
)
def test_max_delete_count_and_percent(tmp_path, run_ferry, limit, allowed):
    src, dst = tmp_path / "src", tmp_path / "dst"
    make_tree(src, {f"k/{i:02d}": b"k" for i in range(24)})
    run_ferry("copy", src, dst, "--recursive")
    # 6 files and their directory x/ go, of 32 destination entries (30 files, k/ and x/): 21.9%.
    make_tree(dst, {f"x/{i}": b"x" for i in range(6)})
    before = snapshot(dst)
    log = tmp_path / "log.tsv"
    r = run_ferry(
        "prune",
        "--yes",
        src,
        dst,
        "--max-delete",
        limit,
        "--log",
        log,
        "--json",
        check=0 if allowed else 1,
    )
    if allowed:
        assert (r.json["deleted"], r.json["refused"]) == (6, None), r.json
        assert snapshot(dst) == snapshot(src)
        return
    assert r.json["refused"] and "7 of 32 destination entries" in r.json["refused"], r.json
    assert (r.json["deleted"], r.json["would_delete"]) == (0, 0)
    assert snapshot(dst) == before and not log.exists()
    text = run_ferry("prune", "--yes", src, dst, "--max-delete", limit, "--log", log, check=1)
    assert "refused" in text.stderr and "--force" in text.stderr and "--max-delete" in text.stderr
    # --force overrides the limit.
    forced = run_ferry(
        "prune", "--yes", src, dst, "--max-delete", limit, "--force", "--log", log, "--json"
    ).json
    assert forced["deleted"] == 6
    assert snapshot(dst) == snapshot(src)
    assert sorted(log_paths(log)) == sorted([f"x/{i}".encode() for i in range(6)] + [b"x"])


def test_default_max_delete_is_a_tenth_of_the_destination(tmp_path, run_ferry):
    """Issue 42: the worker's default is the pipeline's, 10%."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    make_tree(src, {f"k/{i}": b"k" for i in range(10)})
    run_ferry("copy", src, dst, "--recursive")
    # x/0 and x/ of 13 entries (k/, its 10 files, x/ and x/0): over a tenth.
    make_tree(dst, {"x/0": b"x"})
    before = snapshot(dst)
    r = run_ferry("prune", "--yes", src, dst, "--log", tmp_path / "log.tsv", check=1)
    assert "2 of 13 destination entries" in r.stderr and "--max-delete 10%" in r.stderr
    assert snapshot(dst) == before
    # One of 12: under a tenth, deleted.
    (dst / "x" / "0").unlink()
    (dst / "x").rmdir()
    make_tree(dst, {"x0": b"x"})
    run_ferry("prune", "--yes", src, dst, "--log", tmp_path / "log2.tsv")
    assert not (dst / "x0").exists()


@pytest.mark.parametrize("how", ["listings", "plan"])
def test_directories_count_against_max_delete(tmp_path, run_ferry, how):
    """Issue 45: one prune removed 600 empty directories while saying "deleted 0 of 1
    destination files". Directories go, so they count: in what goes and in the total."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    make_tree(src, {"k": b"k"})
    run_ferry("copy", src, dst, "--recursive")
    for i in range(600):
        (dst / f"e{i:03d}").mkdir()
    before = snapshot(dst)
    log = tmp_path / "log.tsv"
    where = ["--plan", plan_final(tmp_path, run_ferry, src, dst)] if how == "plan" else []
    if how == "plan":
        # All at once: the directories are the --dirs job's, and the whole pass's count.
        where.append("--dirs")
    r = run_ferry("prune", "--yes", src, dst, *where, "--log", log, "--json", check=1)
    assert "600 of 601 destination entries" in r.json["refused"], r.json
    assert snapshot(dst) == before and not log.exists()
    r = run_ferry("prune", "--yes", src, dst, *where, "--max-delete", "600", "--log", log, "--json")
    assert (r.json["dirs_deleted"], r.json["dest_entries"], r.json["failed"]) == (600, 601, 0)
    assert sorted(os.listdir(dst)) == ["k"] and len(log_paths(log)) == 600
    if how == "listings":
        text = run_ferry("prune", "--yes", src, dst, "--log", log)
        assert "deleted 0 of 1 destination entries" in text.stderr, text.stderr


def test_dry_run_past_max_delete_still_lists(tmp_path, run_ferry):
    """The refusal says 'review with --dry-run': a dry run must then show the list."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    make_tree(src, {"k": b"k"})
    run_ferry("copy", src, dst, "--recursive")
    make_tree(dst, {f"x{i}": b"x" for i in range(4)})
    before = snapshot(dst)
    log = tmp_path / "dry.tsv"
    r = run_ferry("prune", "--yes", src, dst, "--dry-run", "--log", log, check=False)
    assert snapshot(dst) == before
    assert sorted(would_delete_lines(r.stdout)) == [f"x{i}" for i in range(4)], (
        f"exit {r.returncode}; stdout {r.stdout!r}; stderr {r.stderr!r}"
    )
    assert sorted(log_paths(log)) == [f"x{i}".encode() for i in range(4)]


# ---------------------------------------------------------------------------------------------
# blob destination


BLOB_EXTRAS = [
    "extra.txt",
    "gone/deep/er.txt",
    "gone/x",
    "with space/extra one",
    "-dash",
    "#hash",
    "ünï/名前.txt",
    "keep/extra-beside-kept",
]


def test_prune_blobs_dry_run_then_real(tmp_path, container, run_ferry):
    src = tmp_path / "src"
    contents = make_tree(
        src,
        {
            **{f"keep/{i:02d}.txt": b"%d" % i for i in range(20)},
            "with space/kept": b"k",
            "top": b"t",
            "sub/empty": b"",
        },
    )
    run_ferry("copy", src, container, "--recursive")
    for name in BLOB_EXTRAS:
        container.client.upload_blob(name, b"extra " + name.encode(), metadata=AGED_META)
    everything = sorted(container.blobs())
    assert len(everything) == len(contents) + len(BLOB_EXTRAS) + len(
        ["keep", "with space", "sub"]
    ), "and the folder stubs"

    dry = run_ferry(
        "prune",
        "--yes",
        "--max-delete",
        "100%",
        src,
        container,
        "--dry-run",
        "--log",
        tmp_path / "dry.tsv",
    )
    assert sorted(container.blobs()) == everything
    assert sorted(would_delete_lines(dry.stdout)) == sorted(escape(n.encode()) for n in BLOB_EXTRAS)
    assert sorted(log_paths(tmp_path / "dry.tsv")) == sorted(n.encode() for n in BLOB_EXTRAS)

    j = run_ferry(
        "prune",
        "--yes",
        "--max-delete",
        "100%",
        src,
        container,
        "--log",
        tmp_path / "real.tsv",
        "--json",
    ).json
    assert (j["deleted"], j["would_delete"], j["refused"]) == (
        len(BLOB_EXTRAS),
        len(BLOB_EXTRAS),
        None,
    ), j
    assert sorted(file_blobs(container)) == sorted(p.decode() for p in contents)
    assert sorted(log_paths(tmp_path / "real.tsv")) == sorted(n.encode() for n in BLOB_EXTRAS)
    # The blobs that stay are the source's bytes.
    for rel, data in contents.items():
        assert container.client.download_blob(rel.decode()).readall() == data


def test_prune_blobs_refusals(tmp_path, container, run_ferry):
    src = tmp_path / "src"
    make_tree(src, {f"k{i}": b"k" for i in range(4)})
    run_ferry("copy", src, container, "--recursive")
    for i in range(6):
        container.client.upload_blob(f"x{i}", b"x", metadata=AGED_META)
    everything = sorted(container.blobs())
    empty = tmp_path / "empty"
    empty.mkdir()
    for args, status in (
        ([empty, container], "no entries"),
        ([tmp_path / "missing", container], "source listing failed"),
        ([src, container], "6 of 10"),
    ):
        r = run_ferry("prune", "--yes", *args, "--log", tmp_path / "never.tsv", check=1)
        assert "refused" in r.stderr and status in r.stderr, r.stderr
        assert sorted(container.blobs()) == everything
    assert not (tmp_path / "never.tsv").exists()


# ---------------------------------------------------------------------------------------------
# blob destination at scale: deletions in Blob Batch requests of up to 256

SAS_ONLY = {"AZURE_STORAGE_KEY": None, "AZURE_STORAGE_ACCOUNT": None, "FERRY_AUTH": None}
KEEP = {"keep/k0.txt": b"k0", "keep/k1.txt": b"k1", "top.txt": b"t"}


def blob_dest_with_extras(
    tmp_path: Path, container, run_ferry, dirs: int, per_dir: int
) -> tuple[Path, list[str], list[str]]:
    """SRC holds KEEP; the container holds KEEP and ``dirs`` directories of ``per_dir`` files each
    beyond it, every directory a folder stub (ferry's copy writes them), the first one nested in
    another that holds nothing else. Returns SRC, the extra files and the extra directories."""
    src, full = tmp_path / "src", tmp_path / "full"
    make_tree(src, KEEP)
    names = ["gone00/inner", *(f"gone{d:02d}" for d in range(1, dirs))]
    extra = {f"{d}/f{i:03d}": b"x" for d in names for i in range(per_dir)}
    make_tree(full, {**KEEP, **extra})
    run_ferry("copy", full, container, "--recursive")
    return src, sorted(extra), sorted([*names, "gone00"])


def test_prune_blobs_in_batches_counted(tmp_path, container, proxy, run_ferry):
    src, files, dirs = blob_dest_with_extras(tmp_path, container, run_ferry, dirs=12, per_dir=50)
    assert len(files) == 600 and len(dirs) == 13
    log = tmp_path / "prune.tsv"
    j = run_ferry(
        "prune",
        "--yes",
        src,
        container.via(proxy.port),
        "--max-delete",
        "100%",
        "--log",
        log,
        "--json",
    ).json
    assert (j["deleted"], j["dirs"], j["failed"], j["refused"]) == (600, 13, 0, None), j
    assert sorted(file_blobs(container)) == sorted(KEEP)
    assert sorted(container.blobs()) == sorted([*KEEP, "keep"]), (
        "the emptied directories' stubs went too"
    )

    # 600 files in batches of 256, 256 and 88; then the stubs: "gone00/inner" alone (its parent
    # must wait for it), then the other twelve in one batch. A group of one goes as a plain
    # Delete Blob: the same one request.
    assert_counted(j["requests"], proxy, "prune in batches")
    assert (j["requests"]["batches"], j["requests"]["deletes"]) == (3 + 1, 1), j["requests"]
    assert len(proxy.requests("POST", comp="batch")) == 4

    # The log holds every deletion once, each directory after everything inside it.
    logged = [p.decode() for p in log_paths(log)]
    assert sorted(logged) == sorted([*files, *dirs])
    at = {p: i for i, p in enumerate(logged)}
    for p in logged:
        parent = p.rsplit("/", 1)[0] if "/" in p else None
        if parent is not None:
            assert at[p] < at[parent], (p, parent)


def test_a_deletion_refused_inside_a_batch_fails_that_path_alone(tmp_path, container, run_ferry):
    src, files, _ = blob_dest_with_extras(tmp_path, container, run_ferry, dirs=2, per_dir=150)
    leased = container.client.get_blob_client("gone01/f007")
    lease = leased.acquire_lease()
    try:
        log = tmp_path / "prune.tsv"
        r = run_ferry(
            "prune",
            "--yes",
            src,
            container,
            "--max-delete",
            "100%",
            "--log",
            log,
            "--json",
            check=1,
        )
        j = r.json
        assert (j["deleted"], j["failed"]) == (299, 1), j
        assert [f["path"] for f in j["failures"]] == ["gone01/f007"], j["failures"]
        assert (
            "412" in j["failures"][0]["error"] and "LeaseIdMissing" in j["failures"][0]["error"]
        ), j["failures"]
        assert sorted(file_blobs(container)) == sorted([*KEEP, "gone01/f007"])
        logged = {p.decode() for p in log_paths(log)}
        assert "gone01/f007" not in logged and set(files) - logged == {"gone01/f007"}
        # Alone, it is one Delete Blob, refused for the same reason, and said so.
        alone = run_ferry("rm", container.at("gone01/f007"), "--json", check=1).json
        assert "LeaseIdMissing" in alone["failures"][0]["error"], alone
    finally:
        lease.release()


def test_a_batch_that_failed_on_the_way_is_sent_again(tmp_path, container, proxy, run_ferry):
    src, files, dirs = blob_dest_with_extras(tmp_path, container, run_ferry, dirs=4, per_dir=100)
    # One batch answered 503 without reaching the service; another done by the service but its
    # answer cut short, so that its second attempt finds its blobs gone (404: deleted all the same).
    busy = proxy.add(
        "status",
        method="POST",
        query={"comp": "batch"},
        status=503,
        headers={"Retry-After": "0"},
        count=1,
    )
    cut = proxy.add(
        "truncate", method="POST", query={"comp": "batch"}, skip=1, body_bytes=64, count=1
    )
    log = tmp_path / "prune.tsv"
    j = run_ferry(
        "prune",
        "--yes",
        src,
        container.via(proxy.port),
        "--max-delete",
        "100%",
        "--log",
        log,
        "--json",
    ).json
    assert busy.fired == 1 and cut.fired == 1
    assert (j["deleted"], j["failed"]) == (400, 0), j
    assert sorted(file_blobs(container)) == sorted(KEEP)
    assert_counted(j["requests"], proxy, "prune with a batch sent again")
    # 400 files: two batches; the stubs: "gone00/inner" alone, then four; and the two sent again.
    assert (j["requests"]["batches"], j["requests"]["deletes"]) == (2 + 1 + 2, 1), j["requests"]
    assert sorted(p.decode() for p in log_paths(log)) == sorted([*files, *dirs])


def test_prune_blobs_in_batches_with_a_sas_only(tmp_path, container, proxy, run_ferry):
    src, files, dirs = blob_dest_with_extras(tmp_path, container, run_ferry, dirs=3, per_dir=100)
    dest = container.signed(write=True, port=proxy.port)
    j = run_ferry(
        "prune",
        "--yes",
        src,
        dest,
        "--max-delete",
        "100%",
        "--log",
        tmp_path / "prune.tsv",
        "--json",
        env=SAS_ONLY,
    ).json
    assert (j["deleted"], j["failed"]) == (300, 0), j
    assert sorted(container.blobs()) == sorted([*KEEP, "keep"])
    assert_counted(j["requests"], proxy, "prune with a SAS")
    assert j["requests"]["batches"] == 2 + 1 and j["requests"]["deletes"] == 1, j["requests"]
    # The service checked each part's own SAS (in its request line): with a key in the
    # environment instead, a part without authorization would have been refused.


def test_without_log_the_deletions_are_recorded_in_the_state_directory_not_the_current_one(
    tmp_path, run_ferry
):
    src, dst, _ = build_local(tmp_path, run_ferry)
    cwd, state = tmp_path / "cwd", tmp_path / "state"
    cwd.mkdir()
    j = run_ferry(
        "prune",
        "--yes",
        "--max-delete",
        "100%",
        src,
        dst,
        "--json",
        cwd=cwd,
        env={"XDG_STATE_HOME": str(state)},
    ).json
    assert list(cwd.iterdir()) == [], "prune wrote into the current directory"
    log = Path(j["log"])
    assert log.parent == state / "ferry" and log.name.startswith("prune-"), j
    assert sorted(log_paths(log)) == sorted([*EXTRA_FILES, *EXTRA_DIRS])
    # Without XDG_STATE_HOME, the XDG default under HOME.
    src, dst, _ = build_local(tmp_path / "again", run_ferry)
    j = run_ferry(
        "prune",
        "--yes",
        "--max-delete",
        "100%",
        src,
        dst,
        "--json",
        cwd=cwd,
        env={"XDG_STATE_HOME": None, "HOME": str(tmp_path / "home")},
    ).json
    assert Path(j["log"]).parent == tmp_path / "home" / ".local" / "state" / "ferry"


# ---------------------------------------------------------------------------------------------
# bounded memory: both listings sorted on disk (in --scratch) and merge-joined

# Runs of about 1 KiB: every listing here is sorted in many runs, merged back.
SMALL_RUNS = {"FERRY_SORT_MEMORY": "1KiB"}


def assert_empty(scratch: Path, when: str):
    left = sorted(p.name for p in scratch.iterdir())
    assert not left, f"scratch files left behind {when}: {left}"


def test_scratch_is_removed_after_success_refusal_and_failure(tmp_path, run_ferry):
    src, dst, before = build_local(tmp_path, run_ferry)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    manifest = tmp_path / "source.tsv"
    manifest.write_bytes(run_ferry("ls", src, "--recursive").stdout_bytes)
    empty = tmp_path / "empty-src"
    empty.mkdir()

    def prune(*args, check):
        return run_ferry("prune", "--yes", *args, "--scratch", scratch, env=SMALL_RUNS, check=check)

    prune(src, dst, "--dry-run", "--files-from", manifest, "--log", tmp_path / "dry.tsv", check=0)
    assert_empty(scratch, "after a dry run")
    refusals = {
        "an empty source": [empty, dst],
        "a failed listing": [tmp_path / "missing", dst],
        "a corrupt manifest": [src, dst, "--files-from", tmp_path / "no-such.tsv"],
        "--max-delete": [src, dst, "--max-delete", "1"],
    }
    for when, args in refusals.items():
        r = prune(*args, "--log", tmp_path / "never.tsv", check=1)
        assert "refused" in r.stderr, (when, r.stderr)
        assert_empty(scratch, f"after a refusal on {when}")
    # A failure after the listings were sorted: the log cannot be written.
    everything = ["--max-delete", "100%"]
    r = prune(src, dst, *everything, "--log", tmp_path / "no-such-dir" / "log.tsv", check=2)
    assert "no-such-dir" in r.stderr, r.stderr
    assert_empty(scratch, "after a failure")
    assert snapshot(dst) == before

    prune(src, dst, *everything, "--log", tmp_path / "real.tsv", check=0)
    assert_empty(scratch, "after a prune")
    assert set(snapshot(dst)) == set(snapshot(src))


def test_default_scratch_is_tmpdir_and_is_removed(tmp_path, run_ferry):
    src, dst, _ = build_local(tmp_path, run_ferry)
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    j = run_ferry(
        "prune",
        "--yes",
        "--max-delete",
        "100%",
        src,
        dst,
        "--log",
        tmp_path / "log.tsv",
        "--json",
        env={**SMALL_RUNS, "TMPDIR": str(tmpdir)},
    ).json
    assert j["deleted"] == len(EXTRA_FILES), j
    assert_empty(tmpdir, "in TMPDIR")
    r = run_ferry(
        "prune",
        "--yes",
        "--max-delete",
        "100%",
        src,
        dst,
        "--log",
        tmp_path / "log2.tsv",
        "--scratch",
        tmp_path / "not-there",
        check=2,
    )
    assert "scratch" in r.stderr and "not-there" in r.stderr, r.stderr


def test_manifest_failing_midway_is_refused(tmp_path, run_ferry):
    """The bad line comes after many good ones: runs are spilled, then the listing fails."""
    src, dst, before = build_local(tmp_path, run_ferry)
    # The listing without its end record, a bad line, then the record counting them all: whole,
    # so that the prune reads up to the bad line (and past it, to a duplicate found once sorted).
    good = run_ferry("ls", src, "--recursive").stdout.rsplit("#ferry-end", 1)[0]
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    last = good.count("\n") + 1
    cases = {
        "bad-size.tsv": (good + "late\tf\tnot-a-size\t-\t-\n", "bad-size.tsv:"),
        "unsafe.tsv": (good + "keep/../escape\tf\t1\t-\t-\n", "unsafe path"),
        # Found once sorted, yet named with its lines as when the manifest is read whole.
        "twice.tsv": (
            good + "top.txt\tf\t4\t-\t-\n",
            f"twice.tsv:{last}: top.txt: listed twice (first on line",
        ),
    }
    for name, (text, word) in cases.items():
        (tmp_path / name).write_text(whole(text))
        for force in ([], ["--force"]):
            r = run_ferry(
                "prune",
                "--yes",
                src,
                dst,
                "--files-from",
                tmp_path / name,
                *force,
                "--scratch",
                scratch,
                "--log",
                tmp_path / "never.tsv",
                env=SMALL_RUNS,
                check=False,
            )
            _refused(r, word)
            assert_empty(scratch, f"after {name}")
    assert snapshot(dst) == before
    assert not (tmp_path / "never.tsv").exists()


def test_local_listing_failing_midway_is_refused_with_small_runs(tmp_path, run_ferry):
    src, dst, before = build_local(tmp_path, run_ferry)
    make_tree(src, {f"more/{i:03d}/f": b"m" for i in range(60)})
    os.chmod(src / "more" / "030", 0)
    try:
        r = run_as_root_without_dac_override(
            run_ferry,
            "prune",
            "--yes",
            src,
            dst,
            "--force",
            "--log",
            tmp_path / "never.tsv",
            "--scratch",
            tmp_path,
            "--sort-memory",
            "1KiB",
        )
    finally:
        os.chmod(src / "more" / "030", 0o755)
    _refused(r, "Permission denied")
    assert snapshot(dst) == before
    assert not any(p.name.startswith("ferry-scratch-") for p in tmp_path.iterdir())


# Names around the byte '/' (0x2f): '-' and '.' sort before it, '0' and '\\' after, a tab first.
ORDER_NAMES = [b"a", b"a-b", b"a.b", b"a0", b"a\tb", b"a\\b", b"a\xffb", b"b"]


def order_tree(root: Path, extra: bool):
    """Each name as a directory holding files named the same way, and the names as files beside."""
    spec = {}
    for d in ORDER_NAMES:
        for f in ORDER_NAMES:
            spec[d + b"/" + f] = b"kept " + d + f
    for d in ORDER_NAMES[:4]:
        spec[d + b".file"] = b"file"
    if extra:
        # Beside, inside and between the kept names, and whole directories that go.
        for d in ORDER_NAMES:
            spec[d + b"/" + b"a.c"] = b"extra"
            spec[d + b"/" + b"a.b.d/x"] = b"extra"
            spec[d + b"/" + b"a-/y"] = b"extra"
            spec[d + b"-gone/" + b"a/b"] = b"extra"
        spec[b"a.b/a.b.d/deeper/x"] = b"extra"
    make_tree(root, spec)


def test_ordering_edge_cases_across_the_merge_join(tmp_path, run_ferry):
    src, dst = tmp_path / "src", tmp_path / "dst"
    order_tree(src, extra=False)
    order_tree(dst, extra=True)
    s, d = snapshot(src), snapshot(dst)
    want = sorted(p for p in d if p not in s)
    for args in ([], ["--files-from", tmp_path / "source.tsv"]):
        (tmp_path / "source.tsv").write_bytes(run_ferry("ls", src, "--recursive").stdout_bytes)
        dry = run_ferry(
            "prune",
            "--yes",
            src,
            dst,
            *args,
            "--dry-run",
            "--max-delete",
            "100%",
            "--log",
            tmp_path / "dry.tsv",
            env=SMALL_RUNS,
        )
        assert sorted(log_paths(tmp_path / "dry.tsv")) == want
        assert sorted(would_delete_lines(dry.stdout)) == sorted(escape(p) for p in want)
        # Each directory is listed after everything under it.
        order = log_paths(tmp_path / "dry.tsv")
        for i, p in enumerate(order):
            assert not any(q.startswith(p + b"/") for q in order[i + 1 :]), (
                f"{p!r} listed before what is under it"
            )
    run_ferry(
        "prune",
        "--yes",
        src,
        dst,
        "--max-delete",
        "100%",
        "--log",
        tmp_path / "real.tsv",
        env=SMALL_RUNS,
    )
    assert sorted(log_paths(tmp_path / "real.tsv")) == want
    assert {p: (e.type, e.md5) for p, e in snapshot(dst).items()} == {
        p: (e.type, e.md5) for p, e in s.items()
    }


def wait_for(what, cond, timeout: float = 30):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_mid_listing_removes_the_scratch(tmp_path, container, proxy, run_ferry, sig):
    """Slurm's time limit (SIGTERM) or Ctrl-C while the destination is listed: sorted runs of the
    source are on disk by then, and must go; nothing is deleted."""
    src = tmp_path / "src"
    make_tree(src, {f"d{i:02d}/f{j}": b"x" for i in range(20) for j in range(5)})
    run_ferry("copy", src, container, "--recursive")
    container.client.upload_blob("extra", b"x", metadata=AGED_META)
    before = sorted(container.blobs())
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    stall = proxy.add(
        "stall", method="GET", query={"comp": "list"}, stall_timeout=60, after_stall="drop"
    )
    proc = run_ferry.spawn(
        "prune",
        "--yes",
        src,
        container.via(proxy.port),
        "--scratch",
        scratch,
        "--log",
        tmp_path / "never.tsv",
        env=SMALL_RUNS,
        log_dir=tmp_path,
    )
    try:
        wait_for("the destination listing to stall", lambda: proxy.stalled == 1)
        [work] = list(scratch.iterdir())
        assert len(list(work.glob("source-*.run"))) > 1, (
            "the source was sorted in runs before the listing"
        )
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == 128 + sig
    finally:
        proc.kill()
        proxy.release(stall)
    assert_empty(scratch, f"after {sig.name}")
    assert f"stopped by {sig.name}" in (tmp_path / "ferry.stderr").read_text()
    assert sorted(container.blobs()) == before
    assert not (tmp_path / "never.tsv").exists()


# ---------------------------------------------------------------------------------------------
# Asking first (issue 42): on a terminal without --yes, prune shows what goes and asks; with no
# terminal it needs --yes.


def prune_on_a_terminal(run_ferry, args, answer: bytes) -> tuple[int, str]:
    """Runs prune with stdin and stderr on a pseudo-terminal, answers the question, and returns
    the exit status and what the terminal showed."""
    import pty

    controller, terminal = pty.openpty()
    proc = subprocess.Popen(
        run_ferry.command(("prune", *args)),
        env=run_ferry.env(None),
        cwd=run_ferry.workdir,
        stdin=terminal,
        stdout=subprocess.DEVNULL,
        stderr=terminal,
    )
    os.close(terminal)
    shown = b""
    try:
        while b"[y/N]" not in shown:
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # closed: the process ended
                chunk = b""
            assert chunk, f"prune ended without asking: {shown!r}"
            shown += chunk
        os.write(controller, answer + b"\n")
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # the terminal closed with the process
                break
            if not chunk:
                break
            shown += chunk
        return proc.wait(timeout=60), shown.decode("utf-8", "replace")
    finally:
        os.close(controller)
        if proc.poll() is None:
            proc.kill()


@pytest.mark.parametrize("answer", [b"n", b"", b"yes please", b"y", b"YES"])
def test_on_a_terminal_prune_shows_what_goes_and_asks(tmp_path, run_ferry, answer):
    src, dst, before = build_local(tmp_path, run_ferry)
    args = [src, dst, "--max-delete", "100%", "--log", tmp_path / "p.tsv"]
    status, shown = prune_on_a_terminal(run_ferry, args, answer)
    n = len(EXTRA_FILES)
    assert f"would delete {n} files and symlinks" in shown, shown
    assert "extra-top.txt" in shown and "… and 1 more" in shown, shown
    assert f"Delete {n + len(EXTRA_DIRS)} entries (" in shown, shown
    if answer.lower() in (b"y", b"yes"):
        assert status == 0, shown
        assert not (dst / "extra-top.txt").exists()
    else:
        assert status == 1 and "nothing deleted" in shown, shown
        assert snapshot(dst) == before, "a no deletes nothing"


def test_without_a_terminal_prune_needs_yes(tmp_path, run_ferry):
    src, dst, before = build_local(tmp_path, run_ferry)
    r = run_ferry("prune", src, dst, "--max-delete", "100%", check=2)
    assert "--yes" in r.stderr and "--dry-run" in r.stderr, r.stderr
    assert snapshot(dst) == before
    run_ferry("prune", src, dst, "--max-delete", "100%", "--dry-run")
    run_ferry("prune", src, dst, "--max-delete", "100%", "--yes")
    assert not (dst / "extra-top.txt").exists()
