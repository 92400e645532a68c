"""Local -> local copies: metadata, symlinks, empty dirs, hostile names; the manifest round trip."""

from __future__ import annotations

import json
import os
import resource
import subprocess

import pytest
from support.manifest import escape_path, parse_manifest, unescape_path
from support.trees import (
    LOCAL_ONLY_NAMES,
    Dir,
    File,
    Link,
    describe_differences,
    files_only,
    make_tree,
    many_files_spec,
    odd_names_spec,
    snapshot,
)

BASE_NS = 1_600_000_000_000_000_000


def metadata_tree() -> dict:
    return {
        "exec.sh": File(data=b"#!/bin/sh\necho hi\n", mode=0o755, mtime_ns=BASE_NS + 111_111_111),
        "private": File(data=b"private\n", mode=0o600, mtime_ns=BASE_NS + 222_222_222),
        "read-only": File(data=b"read only\n", mode=0o444, mtime_ns=BASE_NS + 333_333_333),
        "owned-by-1234": File(
            data=b"owned\n", mode=0o640, owner=(1234, 1234), mtime_ns=BASE_NS + 444_444_444
        ),
        "empty": File(data=b"", mode=0o644, mtime_ns=BASE_NS + 555_555_555),
        "sub/deeper/file.bin": File(size=300_000, mode=0o604, mtime_ns=BASE_NS + 666_666_666),
        "empty-dir": Dir(mode=0o750),
        "nested/empty/dirs": Dir(),
        "link-relative": Link("sub/deeper/file.bin"),
        "link-absolute": Link("/etc/hostname"),
        "link-dangling": Link("does/not/exist"),
        "link-to-dir": Link("sub"),
    }


def assert_same_tree(src, dst, check_owner: bool = True):
    want, got = snapshot(src), snapshot(dst)
    assert set(got) == set(want), describe_differences(
        {p: e.type for p, e in want.items()}, {p: e.type for p, e in got.items()}
    )
    problems = []
    for rel, w in sorted(want.items()):
        g = got[rel]
        if g.type != w.type:
            problems.append(f"{rel!r}: type {g.type} != {w.type}")
            continue
        if w.type == "l":
            if g.target != w.target:
                problems.append(f"{rel!r}: link target {g.target!r} != {w.target!r}")
            continue
        if g.mode != w.mode:
            problems.append(f"{rel!r}: mode {oct(g.mode)} != {oct(w.mode)}")
        if w.type == "f":
            if g.md5 != w.md5:
                problems.append(f"{rel!r}: content differs")
            if g.mtime_ns != w.mtime_ns:
                problems.append(f"{rel!r}: mtime {g.mtime_ns} != {w.mtime_ns}")
            if check_owner and (g.uid, g.gid) != (w.uid, w.gid):
                problems.append(f"{rel!r}: owner {g.uid}:{g.gid} != {w.uid}:{w.gid}")
    assert not problems, "\n".join(problems)


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_local_copy_keeps_mode_mtime_owner_symlinks_and_empty_dirs(tmp_path, run_ferry):
    src, dst = tmp_path / "src", tmp_path / "dst"
    make_tree(src, {**metadata_tree(), **odd_names_spec(local_only=True)})
    assert os.stat(src / "owned-by-1234").st_uid == 1234
    run_ferry("copy", src, dst, "--recursive")
    assert_same_tree(src, dst)
    assert os.path.islink(dst / "link-to-dir"), "a symlink to a directory must stay a symlink"


def test_copy_puts_contents_under_destination(tmp_path, run_ferry):
    src = tmp_path / "src"
    make_tree(src, {"a.txt": b"a", "sub/b.txt": b"b"})
    for dst, arg in ((tmp_path / "plain", str(src)), (tmp_path / "slash", str(src) + "/")):
        run_ferry("copy", arg, dst, "--recursive")
        assert sorted(p.decode() for p in snapshot(dst)) == ["a.txt", "sub", "sub/b.txt"], arg


def test_ls_then_files_from_round_trips_every_name(tmp_path, run_ferry):
    src, dst = tmp_path / "src", tmp_path / "dst"
    make_tree(
        src,
        {
            **odd_names_spec(prefix="", local_only=True),
            **many_files_spec(30, prefix="many/", per_dir=10),
            "#top-level-hash": File(data=b"leading hash at the start of the whole path\n"),
            "exact-ns": File(data=b"t\n", mtime_ns=BASE_NS + 123_456_789),
            "a-link": Link("exact-ns"),
            "empty-dir": Dir(),
        },
    )
    snap = snapshot(src)

    ls = run_ferry("ls", src, "--recursive")
    text = ls.stdout_bytes.decode("utf-8")  # the manifest is UTF-8 whatever the names are
    comments, entries = parse_manifest(text)
    assert comments and comments[0].startswith("#ferry-manifest v2"), comments[:1]
    listed = {e.path: e for e in entries}
    # Every file and symlink must be listed, and every empty directory (nothing else would
    # recreate it); whether directories with contents get a line of their own is left open.
    has_children = {os.path.dirname(p) for p in snap}
    must = {p for p, e in snap.items() if e.type != "d" or p not in has_children}
    assert must <= set(listed) <= set(snap), describe_differences(
        {p: 1 for p in must}, {p: 1 for p in listed if p in must or p not in snap}
    )
    for rel, e in listed.items():
        s = snap[rel]
        assert e.type == s.type, rel
        if s.type == "f":
            assert e.size == s.size, rel
            assert e.mtime_ns == s.mtime_ns, f"{rel!r}: manifest mtime {e.mtime} vs {s.mtime_ns} ns"
            assert e.md5 in (None, s.md5), rel
    # The escaped forms are the contract's, byte for byte.
    lines = {
        line.split("\t")[0] for line in text.splitlines() if line and not line.startswith("#ferry")
    }
    for raw in [b"tab\there.txt", b"new\nline.txt", b"#top-level-hash", *LOCAL_ONLY_NAMES]:
        assert escape_path(raw) in lines, f"{raw!r} should be listed as {escape_path(raw)!r}"

    manifest = tmp_path / "manifest.tsv"
    manifest.write_bytes(ls.stdout_bytes)
    run_ferry("copy", src, dst, "--files-from", manifest)
    assert_same_tree(src, dst, check_owner=False)


def test_ls_jsonl_has_the_manifest_fields(tmp_path, run_ferry):
    src = tmp_path / "src"
    make_tree(
        src, {"tab\tname": File(data=b"12345", mtime_ns=BASE_NS + 5), "d/x": b"", "l": Link("d/x")}
    )
    out = run_ferry("ls", src, "--recursive", "--format", "jsonl").stdout
    rows = [json.loads(line) for line in out.splitlines() if line.strip()]
    by_path = {unescape_path(r["path"]): r for r in rows}
    assert {b"tab\tname", b"d/x", b"l"} <= set(by_path) <= {b"tab\tname", b"d", b"d/x", b"l"}
    assert by_path[b"tab\tname"]["path"] == "tab\\tname"
    row = by_path[b"tab\tname"]
    assert (row["type"], row["size"]) == ("f", 5)
    assert abs(row["mtime"] - (BASE_NS + 5) / 1e9) < 1e-6
    assert row["md5"] in (None, "827ccb0eea8a706c4c34a16891f84e7b")
    assert by_path[b"l"]["type"] == "l" and by_path[b"d/x"]["type"] == "f"
    assert by_path.get(b"d", {"type": "d"})["type"] == "d"
    for r in rows:
        assert set(r) == {
            "path",
            "type",
            "size",
            "mtime",
            "md5",
            "mode",
            "uid",
            "gid",
            "link",
            "xattrs",
        }, r


def test_files_from_accepts_bare_paths_as_fpart_writes_them(tmp_path, run_ferry):
    src, dst = tmp_path / "src", tmp_path / "dst"
    make_tree(src, {"a.txt": b"a", "sub/b.txt": b"bb", "sub/c.txt": b"ccc", "not-listed.txt": b"x"})
    manifest = tmp_path / "bare.txt"
    manifest.write_text("# a comment line\na.txt\n\nsub/b.txt\nsub/c.txt\n")
    result = run_ferry("copy", src, dst, "--files-from", manifest, "--json")
    assert result.json["files"]["copied"] == 3 and result.json["bytes"]["copied"] == 6
    assert sorted(p.decode() for p in files_only(snapshot(dst))) == [
        "a.txt",
        "sub/b.txt",
        "sub/c.txt",
    ]


def test_shards_partition_the_files(tmp_path, run_ferry):
    src, dst = tmp_path / "src", tmp_path / "dst"
    contents = make_tree(src, many_files_spec(40, per_dir=10))
    totals = []
    for i in range(3):
        r = run_ferry("copy", src, dst, "--recursive", "--shard", f"{i}/3", "--json")
        totals.append(r.json["files"]["copied"])
        assert r.json["files"]["failed"] == 0
    assert sum(totals) == len(contents), f"shards copied {totals}, want {len(contents)} in all"
    assert all(t > 0 for t in totals), f"a shard got nothing: {totals}"
    got = set(files_only(snapshot(dst)))
    assert got == set(contents)


def test_a_symlink_named_as_the_source_is_followed(tmp_path, run_ferry):
    # As `cp -rH`, `rsync src/` and fpsync: the user named the tree the link points to.
    real = tmp_path / "real"
    make_tree(real, {"a.txt": File(data=b"a"), "sub/b.txt": File(data=b"b")})
    (tmp_path / "link").symlink_to(real)
    for spelling in ("link", "link/"):
        dst = tmp_path / f"dst-{spelling.strip('/')}{len(spelling)}"
        run_ferry("copy", "-r", str(tmp_path / spelling), dst)
        assert not dst.is_symlink() and (dst / "sub" / "b.txt").read_bytes() == b"b"
        run_ferry("verify", str(tmp_path / spelling), dst)
    _, listed = parse_manifest(run_ferry("ls", "-r", tmp_path / "link").stdout)
    assert {e.path for e in listed if e.type == "f"} == {b"a.txt", b"sub/b.txt"}

    # A link to a file copies the file's bytes under the link's own name.
    (tmp_path / "file-link").symlink_to(real / "a.txt")
    out = tmp_path / "single"
    out.mkdir()
    run_ferry("copy", tmp_path / "file-link", f"{out}/")
    assert not (out / "file-link").is_symlink() and (out / "file-link").read_bytes() == b"a"


def test_rm_of_a_symlink_removes_the_link_and_never_its_target(tmp_path, run_ferry):
    target = tmp_path / "target.txt"
    target.write_bytes(b"keep me")
    (tmp_path / "link").symlink_to(target)
    run_ferry("rm", tmp_path / "link")
    assert not os.path.lexists(tmp_path / "link") and target.read_bytes() == b"keep me"


@pytest.mark.parametrize("dst_exists", [False, True])
def test_the_destination_root_gets_the_source_roots_metadata(tmp_path, run_ferry, dst_exists):
    src, dst = tmp_path / "src", tmp_path / "dst"
    make_tree(src, {"f.txt": File(data=b"f", mtime_ns=BASE_NS)})
    os.chmod(src, 0o750)
    os.utime(src, ns=(BASE_NS, BASE_NS + 123_456_789))
    if dst_exists:
        dst.mkdir(mode=0o700)
    run_ferry("copy", "-r", f"{src}/", dst)
    got = os.stat(dst)
    assert (oct(got.st_mode & 0o7777), got.st_mtime_ns) == (oct(0o750), BASE_NS + 123_456_789)


def test_an_unchanged_rerun_changes_nothing_at_all(tmp_path, run_ferry):
    # Not a byte, not a mode, not a time: every inode's ctime stays, so no call changed anything.
    src, dst = tmp_path / "src", tmp_path / "dst"
    make_tree(src, {**metadata_tree(), **many_files_spec(200)})
    run_ferry("copy", "-r", f"{src}/", dst)

    def ctimes():
        return {p: os.lstat(p).st_ctime_ns for p in [dst, *dst.rglob("*")]}

    before = ctimes()
    out = run_ferry("copy", "-r", f"{src}/", dst, "--json").json
    assert out["files"]["copied"] == 0
    assert ctimes() == before


@pytest.mark.parametrize("soft, hard", [(256, 4096), (256, 256)])
def test_a_tree_of_more_directories_than_the_open_files_limit_copies(
    tmp_path, run_ferry, soft, hard
):
    # Each directory handle ferry keeps and each staged file is a descriptor, and trees hold
    # more directories than the usual soft limit (1,024). ferry raises the soft limit to the
    # hard one, and fits its handles, threads and batches under what it gets.
    src = tmp_path / "src"
    files = make_tree(src, many_files_spec(600, per_dir=1))

    def limit():
        return resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    for flags in ([], ["--no-fsync"]):
        dst = tmp_path / f"dst{len(flags)}"
        cmd = run_ferry.command(["copy", "-r", *flags, f"{src}/", dst, "--json"])
        proc = subprocess.run(
            cmd, env=run_ferry.env(None), capture_output=True, timeout=110, preexec_fn=limit
        )
        assert proc.returncode == 0, proc.stderr.decode()[-2000:]
        assert json.loads(proc.stdout)["files"]["copied"] == len(files)
        assert snapshot(dst) == snapshot(src)


def test_the_depth_is_reported_adaptive_unless_fixed(tmp_path, run_ferry):
    src = tmp_path / "src"
    make_tree(src, many_files_spec(50))
    adaptive = run_ferry("copy", "-r", f"{src}/", tmp_path / "a", "--json").json["concurrency"]
    assert (
        adaptive["mode"] == "adaptive" and adaptive["min"] <= adaptive["final"] <= adaptive["max"]
    ), adaptive
    assert adaptive["peak"] >= adaptive["initial"] >= 1
    fixed = run_ferry(
        "copy", "-r", f"{src}/", tmp_path / "f", "--parallel-files", "3", "--json"
    ).json["concurrency"]
    assert (fixed["mode"], fixed["initial"], fixed["final"], fixed["peak"], fixed["trace"]) == (
        "fixed",
        3,
        3,
        3,
        [],
    )
    line = run_ferry("copy", "-r", f"{src}/", tmp_path / "g").stderr
    assert "in flight: adaptive" in line, line


@pytest.mark.parametrize("compare", ["none", "size-mtime"])
def test_an_existing_directory_gets_the_sources_metadata_whatever_the_compare(
    tmp_path, run_ferry, compare
):
    src, dst = tmp_path / "src", tmp_path / "dst"
    make_tree(src, {"sub/f.txt": File(data=b"f", mtime_ns=BASE_NS)})
    os.chmod(src / "sub", 0o751)
    os.utime(src / "sub", ns=(BASE_NS, BASE_NS + 7))
    (dst / "sub").mkdir(parents=True)
    os.chmod(dst / "sub", 0o700)
    run_ferry("copy", "-r", "--compare", compare, f"{src}/", dst)
    got = os.stat(dst / "sub")
    assert (oct(got.st_mode & 0o7777), got.st_mtime_ns) == (oct(0o751), BASE_NS + 7)
