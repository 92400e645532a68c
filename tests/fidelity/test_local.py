"""local -> local fidelity: what `cp -a` (and `rsync -aHAXS`) keep beyond the bytes — holes,
extended attributes and ACLs, fifos and device nodes, hard links — checked against the source,
with `cp -a` as the reference, and `--preserve` honoured when it leaves something out."""

from __future__ import annotations

import json
import os
import stat
import subprocess

import pytest
from support.holes import allocated, data_segments, write_at

MiB = 1 << 20


def sparse_tree(src):
    src.mkdir(parents=True)
    # One byte in 64 MiB: a block of data between two holes, the second one trailing.
    write_at(src / "one-byte", 40 * MiB + 3, b"x", 64 * MiB)
    # Data at both ends and a hole between.
    write_at(src / "ends", 0, b"head", 32 * MiB)
    with open(src / "ends", "r+b") as f:
        f.seek(32 * MiB - 4)
        f.write(b"tail")
    (src / "dense").write_bytes(os.urandom(3 * MiB))


def test_holes_stay_holes(tmp_path, run_ferry):
    src, dst, ref = tmp_path / "src", tmp_path / "dst", tmp_path / "cp-a"
    sparse_tree(src)
    subprocess.run(["cp", "-a", f"{src}/.", str(ref)], check=True)
    run_ferry("copy", "-r", src, dst)
    for name in ("one-byte", "ends", "dense"):
        s, d = src / name, dst / name
        assert d.read_bytes() == s.read_bytes(), name
        assert os.stat(d).st_size == os.stat(s).st_size, name
        # The same data segments as the source: nothing written where it has a hole, and a
        # trailing hole is still a hole (sized, not filled).
        assert data_segments(d) == data_segments(s), name
        assert allocated(d) <= allocated(ref / name), f"{name}: more allocated than cp -a gives"
    assert allocated(dst / "one-byte") <= 64 * 1024
    assert allocated(dst / "dense") >= 3 * MiB


def test_without_sparse_files_are_written_whole(tmp_path, run_ferry):
    src, dst = tmp_path / "src", tmp_path / "dst"
    sparse_tree(src)
    run_ferry("copy", "-r", src, dst, "--preserve", "all,no-sparse")
    assert (dst / "one-byte").read_bytes() == (src / "one-byte").read_bytes()
    assert allocated(dst / "one-byte") >= 64 * MiB
    assert data_segments(dst / "ends") == [(0, 32 * MiB)]


# --- extended attributes and ACLs -----------------------------------------------------------

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(
    not ROOT, reason="trusted.* attributes, chown and device nodes need root"
)


def kept_names(name: str) -> bool:
    return name.startswith(("user.", "trusted.", "security.")) or name in (
        "system.posix_acl_access",
        "system.posix_acl_default",
    )


def attrs(path, kinds=kept_names) -> dict[str, bytes]:
    """The attributes ferry keeps (ACLs included), by name."""
    return {
        n: os.getxattr(path, n, follow_symlinks=False)
        for n in os.listxattr(path, follow_symlinks=False)
        if kinds(n)
    }


def acl(path, default=False) -> str:
    args = ["getfacl", "-cpn"] + (["-d"] if default else []) + [str(path)]
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def xattr_tree(src):
    (src / "d" / "sub").mkdir(parents=True)
    (src / "f").write_bytes(b"attributes\n")
    (src / "d" / "g").write_bytes(b"in a directory with a default ACL\n")
    os.setxattr(src / "f", "user.colour", b"blue")
    os.setxattr(src / "f", "user.binary", bytes(range(256)) * 4)
    subprocess.run(["setfacl", "-m", "u:1234:rw,g:55:r", src / "f"], check=True)
    subprocess.run(["setfacl", "-d", "-m", "g:55:rx", src / "d"], check=True)
    subprocess.run(["setfacl", "-m", "u:4321:rx", src / "d" / "sub"], check=True)
    os.setxattr(src / "d", "user.project", b"ferry")
    if ROOT:
        os.setxattr(src / "f", "trusted.origin", b"lab")


def assert_same_attrs(src, dst, names=("f", "d", "d/g", "d/sub")):
    for n in names:
        assert attrs(dst / n) == attrs(src / n), n
        assert acl(dst / n) == acl(src / n), n
    assert acl(dst / "d", default=True) == acl(src / "d", default=True)


def test_xattrs_and_acls_are_copied(tmp_path, run_ferry):
    src, dst, ref = tmp_path / "src", tmp_path / "dst", tmp_path / "cp-a"
    xattr_tree(src)
    subprocess.run(["cp", "-a", f"{src}/.", str(ref)], check=True)
    r = run_ferry("copy", "-r", src, dst, "--json")
    assert r.json["not_kept"] == {}
    assert_same_attrs(src, dst)
    assert_same_attrs(ref, dst)
    assert "user:1234:rw-" in acl(dst / "f") and "group:55:r-x" in acl(dst / "d", default=True)
    if ROOT:
        assert os.getxattr(dst / "f", "trusted.origin") == b"lab"


def test_listings_carry_an_attribute_digest_only_when_kept(tmp_path, run_ferry):
    src = tmp_path / "src"
    xattr_tree(src)
    (src / "plain").write_bytes(b"no attributes")

    def digests(*preserve):
        out = run_ferry("ls", "-r", src, *preserve, "--format", "jsonl").stdout
        return {e["path"]: e["xattrs"] for e in map(json.loads, out.splitlines())}

    full = digests()
    assert full["f"] and full["plain"] and full["f"] != full["plain"], full
    # The digest covers ACLs when they are kept, and only then.
    no_acls = digests("--preserve", "all,no-acls")
    assert no_acls["d/sub"] == no_acls["plain"] != full["d/sub"], no_acls
    assert set(digests("--preserve", "none").values()) == {None}


def test_a_rerun_after_attribute_changes_updates_only_metadata(tmp_path, run_ferry):
    src, dst = tmp_path / "src", tmp_path / "dst"
    xattr_tree(src)
    run_ferry("copy", "-r", src, dst)
    os.setxattr(src / "f", "user.colour", b"green")
    os.removexattr(src / "f", "user.binary")
    os.setxattr(src / "d" / "g", "user.new", b"1")
    subprocess.run(["setfacl", "-x", "u:4321", src / "d" / "sub"], check=True)
    subprocess.run(["setfacl", "-m", "u:77:r", src / "d" / "g"], check=True)
    subprocess.run(["setfacl", "-d", "-m", "u:88:r", src / "d"], check=True)
    r = run_ferry("copy", "-r", src, dst, "--json")
    assert r.json["files"]["metadata_only"] == 2 and r.json["files"]["copied"] == 0, r.json["files"]
    assert r.json["bytes"]["copied"] == 0
    assert_same_attrs(src, dst)
    assert "user.binary" not in attrs(dst / "f")
    # Nothing left to do.
    r = run_ferry("copy", "-r", src, dst, "--json")
    assert r.json["files"]["metadata_only"] == 0 and r.json["files"]["skipped"] == 2, r.json[
        "files"
    ]


@needs_root
def test_a_rerun_after_chmod_and_chown_updates_only_metadata(tmp_path, run_ferry):
    src, dst = tmp_path / "src", tmp_path / "dst"
    xattr_tree(src)
    run_ferry("copy", "-r", src, dst)
    os.chmod(src / "f", 0o600)
    os.chown(src / "d" / "g", 1234, 5678)
    r = run_ferry("copy", "-r", src, dst, "--json")
    assert r.json["files"]["metadata_only"] == 2 and r.json["bytes"]["copied"] == 0, r.json
    for n in ("f", "d/g"):
        s, d = os.stat(src / n), os.stat(dst / n)
        assert (d.st_mode, d.st_uid, d.st_gid) == (s.st_mode, s.st_uid, s.st_gid), n
    assert_same_attrs(src, dst)


@pytest.mark.parametrize(
    "preserve, has_xattrs, has_acls",
    [
        ("all,no-xattrs", False, True),
        ("all,no-acls", True, False),
        ("none", False, False),
    ],
)
def test_preserve_leaves_out_what_it_is_told(tmp_path, run_ferry, preserve, has_xattrs, has_acls):
    src, dst = tmp_path / "src", tmp_path / "dst"
    xattr_tree(src)
    run_ferry("copy", "-r", src, dst, "--preserve", preserve)
    got = attrs(dst / "f")
    assert ("user.colour" in got) == has_xattrs, got
    assert ("system.posix_acl_access" in got) == has_acls, got
    assert ("system.posix_acl_default" in attrs(dst / "d")) == has_acls
    assert ("user.project" in attrs(dst / "d")) == has_xattrs


@pytest.mark.fuse
def test_a_destination_without_attributes_counts_them_not_kept(tmp_path, run_ferry):
    from support.latencyfs import LatencyFS

    src, backing = tmp_path / "src", tmp_path / "backing"
    xattr_tree(src)
    backing.mkdir()
    # latencyfs answers no xattr request: to the kernel a filesystem without attributes.
    fs = LatencyFS(backing, tmp_path / "mnt").mount()
    try:
        r = run_ferry("copy", "-r", src, fs.mountpoint / "dst", "--json")
        assert r.json["files"]["copied"] == 2 and r.json["files"]["failed"] == 0, r.json
        assert (
            r.json["not_kept"].get("xattrs", 0) >= 2 and r.json["not_kept"].get("acls", 0) >= 3
        ), r.json["not_kept"]
        assert (fs.mountpoint / "dst" / "f").read_bytes() == b"attributes\n"
    finally:
        fs.unmount()


# --- fifos, sockets, device nodes -----------------------------------------------------------


def special_tree(src):
    import socket

    (src / "dev").mkdir(parents=True)
    os.mkfifo(src / "fifo", 0o640)
    os.utime(src / "fifo", ns=(1_600_000_000_000_000_000, 1_600_000_000_123_456_789))
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(src / "sock"))
    s.close()
    if ROOT:
        os.mknod(src / "dev" / "null", 0o666 | 0o020000, os.makedev(1, 3))
        os.mknod(src / "dev" / "loop", 0o660 | 0o060000, os.makedev(7, 200))
        os.chown(src / "dev" / "loop", 0, 6)
        os.chown(src / "fifo", 1234, 5678)
        os.utime(src / "dev" / "loop", ns=(1_600_000_000_000_000_000, 1_600_000_000_987_654_321))


def node(path):
    st = os.lstat(path)
    return (
        stat.S_IFMT(st.st_mode),
        stat.S_IMODE(st.st_mode),
        st.st_rdev,
        st.st_uid,
        st.st_gid,
        st.st_mtime_ns,
    )


def test_fifos_and_devices_are_made_and_sockets_ignored(tmp_path, run_ferry):
    src, dst, ref = tmp_path / "src", tmp_path / "dst", tmp_path / "cp-a"
    special_tree(src)
    subprocess.run(["cp", "-a", f"{src}/.", str(ref)], check=True)
    r = run_ferry("copy", "-r", src, dst, "--json")
    nodes = ["fifo"] + (["dev/null", "dev/loop"] if ROOT else [])
    assert r.json["files"]["copied"] == len(nodes) and r.json["files"]["failed"] == 0, r.json
    for n in nodes:
        assert node(dst / n) == node(src / n) == node(ref / n), n
    assert stat.S_ISFIFO(os.lstat(dst / "fifo").st_mode)
    assert not os.path.lexists(dst / "sock")
    assert [i["path"] for i in r.json["ignored"]] == ["sock"] and "socket" in r.json["ignored"][0][
        "reason"
    ]
    assert not [n for n in os.listdir(dst) if n.startswith(".ferry-")], "no temp name left"
    # Made once: a second run finds them the same.
    r = run_ferry("copy", "-r", src, dst, "--json")
    assert r.json["files"]["copied"] == 0 and r.json["files"]["skipped"] == len(nodes), r.json[
        "files"
    ]
    # A new mode is set in place, not a new node.
    os.chmod(src / "fifo", 0o604)
    r = run_ferry("copy", "-r", src, dst, "--json")
    assert r.json["files"]["metadata_only"] == 1 and r.json["files"]["copied"] == 0, r.json["files"]
    assert node(dst / "fifo") == node(src / "fifo")


@needs_root
def test_a_device_renumbered_in_place_is_made_again(tmp_path, run_ferry):
    src, dst = tmp_path / "src", tmp_path / "dst"
    special_tree(src)
    run_ferry("copy", "-r", src, dst)
    before = os.lstat(src / "dev" / "null")
    os.unlink(src / "dev" / "null")
    os.mknod(src / "dev" / "null", 0o666 | 0o020000, os.makedev(1, 5))
    os.chmod(src / "dev" / "null", stat.S_IMODE(before.st_mode))
    os.utime(src / "dev" / "null", ns=(before.st_atime_ns, before.st_mtime_ns))
    r = run_ferry("copy", "-r", src, dst, "--json")
    assert r.json["files"]["copied"] == 1, r.json["files"]
    assert os.lstat(dst / "dev" / "null").st_rdev == os.makedev(1, 5)
    assert node(dst / "dev" / "null") == node(src / "dev" / "null")


def test_without_specials_fifos_and_devices_are_ignored_with_a_reason(tmp_path, run_ferry):
    src, dst = tmp_path / "src", tmp_path / "dst"
    special_tree(src)
    r = run_ferry("copy", "-r", src, dst, "--json", "--preserve", "all,no-specials")
    assert not os.path.lexists(dst / "fifo") and not os.path.lexists(dst / "dev" / "null")
    reasons = {i["path"]: i["reason"] for i in r.json["ignored"]}
    assert "specials" in reasons["fifo"] and "socket" in reasons["sock"], reasons
    assert r.json["files"]["copied"] == 0 and r.json["files"]["failed"] == 0


# --- hard links -----------------------------------------------------------------------------


def link_tree(src):
    for d in ("snap.1", "snap.2", "snap.3"):
        (src / d).mkdir(parents=True)
    (src / "snap.1" / "big").write_bytes(os.urandom(2 * MiB))
    os.link(src / "snap.1" / "big", src / "snap.2" / "big")
    os.link(src / "snap.1" / "big", src / "snap.3" / "renamed")
    (src / "snap.3" / "own").write_bytes(b"not linked")


def inode_groups(root) -> list[list[str]]:
    """Names of regular files under root grouped by inode."""
    by_ino: dict[int, list[str]] = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            p = os.path.join(dirpath, f)
            st = os.lstat(p)
            if stat.S_ISREG(st.st_mode):
                by_ino.setdefault(st.st_ino, []).append(os.path.relpath(p, root))
    return sorted(sorted(g) for g in by_ino.values())


def test_hard_links_are_written_once_and_linked(tmp_path, run_ferry):
    src, dst, ref = tmp_path / "src", tmp_path / "dst", tmp_path / "cp-a"
    link_tree(src)
    subprocess.run(["cp", "-a", f"{src}/.", str(ref)], check=True)
    r = run_ferry("copy", "-r", src, dst, "--json")
    assert inode_groups(dst) == inode_groups(src) == inode_groups(ref)
    assert os.stat(dst / "snap.2" / "big").st_nlink == 3
    assert (dst / "snap.3" / "renamed").read_bytes() == (src / "snap.1" / "big").read_bytes()
    # The bytes went once.
    assert r.json["bytes"]["copied"] == 2 * MiB + len(b"not linked"), r.json["bytes"]
    assert r.json["files"]["copied"] == 4 and r.json["files"]["failed"] == 0


def test_hard_link_groups_on_reruns(tmp_path, run_ferry):
    src, dst = tmp_path / "src", tmp_path / "dst"
    link_tree(src)
    run_ferry("copy", "-r", src, dst)
    r = run_ferry("copy", "-r", src, dst, "--json")
    assert r.json["files"]["copied"] == 0 and r.json["files"]["skipped"] == 4, r.json["files"]
    # A new name of the group is linked at the destination, with no bytes sent.
    os.link(src / "snap.1" / "big", src / "snap.3" / "big")
    r = run_ferry("copy", "-r", src, dst, "--json")
    assert r.json["files"]["copied"] == 1 and r.json["bytes"]["copied"] == 0, r.json
    assert inode_groups(dst) == inode_groups(src)
    # The group's bytes change: one copy, every name linked to it again.
    with open(src / "snap.2" / "big", "ab") as f:
        f.write(b"more")
    r = run_ferry("copy", "-r", src, dst, "--json")
    assert r.json["bytes"]["copied"] == 2 * MiB + 4, r.json["bytes"]
    assert inode_groups(dst) == inode_groups(src)
    assert (dst / "snap.3" / "renamed").read_bytes().endswith(b"more")
    # A destination name that is a separate copy joins the group.
    os.unlink(dst / "snap.3" / "renamed")
    (dst / "snap.3" / "renamed").write_bytes((src / "snap.1" / "big").read_bytes())
    os.utime(dst / "snap.3" / "renamed", ns=(0, os.stat(src / "snap.1" / "big").st_mtime_ns))
    run_ferry("copy", "-r", src, dst)
    assert inode_groups(dst) == inode_groups(src)


def test_without_links_each_name_is_a_copy(tmp_path, run_ferry):
    src, dst = tmp_path / "src", tmp_path / "dst"
    link_tree(src)
    r = run_ferry("copy", "-r", src, dst, "--json", "--preserve", "all,no-links")
    assert all(len(g) == 1 for g in inode_groups(dst)), inode_groups(dst)
    assert r.json["bytes"]["copied"] == 3 * 2 * MiB + len(b"not linked")


# --- link groups through the pipelines' plan --------------------------------------------------


def link_groups_tree(src):
    link_tree(src)
    # More groups and plain files, so that parts are cut between names of one group unless
    # the plan keeps them together.
    for i in range(12):
        (src / f"snap.{1 + i % 3}" / f"plain{i}").write_bytes(os.urandom(50_000 + i))
    (src / "snap.1" / "pair").write_bytes(b"two names")
    os.link(src / "snap.1" / "pair", src / "snap.3" / "pair")


def copy_in_parts(run_ferry, src, dst, plan_dir) -> list:
    parts = sorted((plan_dir / "copy").glob("part-*.tsv"))
    for p in parts:
        run_ferry("copy", src, dst, "--files-from", p)
    return parts


def listed(run_ferry, root, out):
    out.write_bytes(run_ferry("ls", "-r", root).stdout_bytes)
    return out


@pytest.mark.parametrize("cut", [["--parts", "3"], ["--max-files", "2"], ["--max-bytes", "60000"]])
def test_plan_keeps_a_link_group_in_one_part(tmp_path, run_ferry, cut):
    src, dst, plan = tmp_path / "src", tmp_path / "dst", tmp_path / "plan"
    link_groups_tree(src)
    run_ferry(
        "plan",
        listed(run_ferry, src, tmp_path / "src.tsv"),
        "--out",
        plan,
        "--phase",
        "baseline",
        *cut,
    )
    parts = copy_in_parts(run_ferry, src, dst, plan)
    assert len(parts) >= 3, parts
    holding = {}
    for i, p in enumerate(parts):
        for line in p.read_text().splitlines():
            if not line.startswith("#"):
                holding.setdefault(line.split("\t")[0], set()).add(i)
    group = ["snap.1/big", "snap.2/big", "snap.3/renamed"]
    assert len(set().union(*(holding[n] for n in group))) == 1, {n: holding[n] for n in group}
    assert inode_groups(dst) == inode_groups(src)


def test_plan_plans_a_whole_group_when_one_name_is_new(tmp_path, run_ferry):
    src, dst, plan = tmp_path / "src", tmp_path / "dst", tmp_path / "plan"
    link_groups_tree(src)
    run_ferry("copy", "-r", src, dst)
    os.link(src / "snap.1" / "big", src / "snap.3" / "big")
    run_ferry(
        "plan",
        listed(run_ferry, src, tmp_path / "src.tsv"),
        listed(run_ferry, dst, tmp_path / "dst.tsv"),
        "--out",
        plan,
        "--phase",
        "incremental",
        "--parts",
        "3",
    )
    doc = json.loads((plan / "plan.json").read_text())
    # The new name is copied (as a link); its three old names are planned so the part can link it.
    assert doc["to_copy"]["new"] == 1 and doc["to_copy"]["linked"] == 3, doc["to_copy"]
    copy_in_parts(run_ferry, src, dst, plan)
    assert inode_groups(dst) == inode_groups(src)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("engine", ["snakemake", "nextflow"])
@pytest.mark.pipeline
def test_the_pipeline_keeps_link_groups_across_parts(tmp_path, ferry_bin, engine):
    from support.nextflow import nextflow, params_for
    from support.pipeline import base_config, pipeline, report

    src, dst, outdir = tmp_path / "src", tmp_path / "nfs" / "share", tmp_path / "results"
    link_groups_tree(src)

    def run(phase: str) -> None:
        if engine == "snakemake":
            pipeline(
                *base_config(ferry_bin, outdir, src, dst, phase),
                "plan={tool: ferry, mode: max-files, max_files: 3}",
            )
        else:
            nextflow(
                tmp_path / "launch",
                params=params_for(
                    ferry_bin, outdir, src, dst, phase, plan={"mode": "max-files", "max_files": 3}
                ),
            )

    run("baseline")
    assert len(report(outdir, "baseline")["partitions"]) >= 3
    assert inode_groups(dst) == inode_groups(src)
    os.link(src / "snap.1" / "big", src / "snap.2" / "again")
    run("incremental")
    assert inode_groups(dst) == inode_groups(src)


# --- everything at once, against cp -a --------------------------------------------------------


def test_a_tree_of_every_kind_matches_the_source_and_cp_a(tmp_path, run_ferry):
    src, dst, ref = tmp_path / "src", tmp_path / "dst", tmp_path / "cp-a"
    src.mkdir()
    sparse_tree(src / "holes")
    xattr_tree(src / "attrs")
    special_tree(src / "nodes")
    link_tree(src / "links")
    os.symlink("attrs/f", src / "symlink")
    if ROOT:
        # The kernel lets a symlink hold trusted.* (not user.*).
        os.setxattr(src / "symlink", "trusted.note", b"on the link itself", follow_symlinks=False)
    subprocess.run(["cp", "-a", f"{src}/.", str(ref)], check=True)
    r = run_ferry("copy", "-r", src, dst, "--json")
    assert r.json["files"]["failed"] == 0 and r.json["not_kept"] == {}, r.json
    assert [i["path"] for i in r.json["ignored"]] == ["nodes/sock"]
    want, got, cp = {}, {}, {}
    for snap, root in ((want, src), (got, dst), (cp, ref)):
        for dirpath, dirs, files in os.walk(root):
            for n in dirs + files:
                p = os.path.join(dirpath, n)
                rel = os.path.relpath(p, root)
                if rel == "nodes/sock":
                    continue
                st = os.lstat(p)
                data = (
                    open(p, "rb").read()
                    if stat.S_ISREG(st.st_mode)
                    else os.readlink(p)
                    if stat.S_ISLNK(st.st_mode)
                    else None
                )
                snap[rel] = (
                    stat.S_IFMT(st.st_mode),
                    st.st_mode if not stat.S_ISLNK(st.st_mode) else None,
                    st.st_uid,
                    st.st_gid,
                    st.st_rdev,
                    st.st_size,
                    data,
                    attrs(p),
                    None if stat.S_ISDIR(st.st_mode) else st.st_mtime_ns,
                    data_segments(p) if stat.S_ISREG(st.st_mode) else None,
                )
    assert got == want
    assert got == cp
    assert inode_groups(dst) == inode_groups(src) == inode_groups(ref)
    assert os.lstat(dst).st_mtime_ns == os.lstat(src).st_mtime_ns


@pytest.mark.fuse
def test_a_filesystem_without_attributes_is_asked_once_a_listing(tmp_path, ferry_bin):
    # latencyfs, like an NFS server without xattr support, has none: its first answer tells,
    # and a listing of 40 entries must not ask 40 times (a round trip each on NFS).
    from support.latencyfs import LatencyFS

    backing = tmp_path / "backing"
    for i in range(40):
        (backing / f"d{i % 4}").mkdir(parents=True, exist_ok=True)
        (backing / f"d{i % 4}" / f"f{i}").write_bytes(b"x")
    fs = LatencyFS(backing, tmp_path / "mnt").mount()
    try:
        trace = tmp_path / "trace"
        subprocess.run(
            [
                "strace",
                "-f",
                "-qq",
                "-o",
                trace,
                "-e",
                "trace=llistxattr,listxattr,flistxattr",
                ferry_bin,
                "ls",
                "-r",
                fs.mountpoint,
            ],
            check=True,
            capture_output=True,
        )
        calls = [
            line
            for line in trace.read_text().splitlines()
            if "listxattr(" in line and "resumed" not in line
        ]
        # Listing threads that asked before the first answer came back may ask too.
        assert 1 <= len(calls) <= 8, calls
    finally:
        fs.unmount()
    # On a filesystem that has them, each entry is asked.
    subprocess.run(
        [
            "strace",
            "-f",
            "-qq",
            "-o",
            trace,
            "-e",
            "trace=llistxattr",
            ferry_bin,
            "ls",
            "-r",
            backing,
        ],
        check=True,
        capture_output=True,
    )
    assert len([line for line in trace.read_text().splitlines() if "llistxattr(" in line]) >= 44


def test_an_attribute_the_destination_has_no_room_for_never_costs_the_file(tmp_path, run_ferry):
    """tmpfs holds a 60 KiB value, ext4 without `ea_inode` does not (ENOSPC): the file is written
    without it and the attribute counted, as for a filesystem without attributes."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(src)], check=True)
    try:
        (src / "big").write_bytes(b"data\n")
        os.setxattr(src / "big", "user.big", b"x" * 60 * 1024)
        (src / "small").write_bytes(b"small\n")
        os.setxattr(src / "small", "user.small", b"y")
        dst.mkdir()
        try:
            os.setxattr(dst, "user.probe", b"x" * 60 * 1024)
            pytest.fail(
                "this filesystem holds a 60 KiB attribute: the case needs one that does not"
            )
        except OSError:
            pass
        r = run_ferry("copy", "-r", src, dst, "--json", check=True)
        assert r.json["files"]["copied"] == 2 and r.json["files"]["failed"] == 0, r.json
        assert r.json["not_kept"] == {"xattrs": 1}, r.json["not_kept"]
        assert (dst / "big").read_bytes() == b"data\n"
        assert os.getxattr(dst / "small", "user.small") == b"y"
        assert "user.big" not in os.listxattr(dst / "big")
    finally:
        subprocess.run(["umount", str(src)], check=True)


# --- capabilities, and first writes under default ACLs, set-gid directories, grpid mounts ------

CAP = "security.capability"


def capability(path) -> bytes | None:
    try:
        return os.getxattr(path, CAP, follow_symlinks=False)
    except OSError:
        return None


def set_capability(path, caps: str = "cap_net_raw+ep") -> None:
    subprocess.run(["setcap", caps, str(path)], check=True)


@needs_root
def test_a_capability_survives_a_chmod_or_chown_between_passes(tmp_path, run_ferry):
    """The kernel removes security.capability on every chown, even to the same owner: a pass
    that only sets metadata must leave the destination's capability as the source's."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    for name in ("chmodded", "chowned", "plain"):
        (src / name).write_bytes(b"\x7fELF binary " + name.encode())
        os.chmod(src / name, 0o755)
    set_capability(src / "chmodded")
    set_capability(src / "chowned", "cap_net_bind_service+ep")
    r = run_ferry("copy", "-r", src, dst, "--json")
    assert r.json["files"]["copied"] == 3 and r.json["not_kept"] == {}, r.json
    assert capability(dst / "chmodded") == capability(src / "chmodded") is not None
    os.chmod(src / "chmodded", 0o750)
    os.chown(src / "chowned", 1234, 5678)
    set_capability(src / "chowned", "cap_net_bind_service+ep")  # the chown took it away
    os.chmod(src / "plain", 0o700)
    r = run_ferry("copy", "-r", src, dst, "--json")
    assert r.json["files"]["metadata_only"] == 3 and r.json["bytes"]["copied"] == 0, r.json
    for name in ("chmodded", "chowned", "plain"):
        s, d = os.stat(src / name), os.stat(dst / name)
        assert (d.st_mode, d.st_uid, d.st_gid) == (s.st_mode, s.st_uid, s.st_gid), name
        assert capability(dst / name) == capability(src / name), name
    assert capability(dst / "chowned") is not None
    r = run_ferry("verify", src, dst, "--metadata", "--json")
    assert r.json["differ"] == 0, r.json
    # Converged.
    r = run_ferry("copy", "-r", src, dst, "--json")
    assert r.json["files"]["metadata_only"] == 0 and r.json["files"]["skipped"] == 3, r.json


def entry_state(root) -> dict:
    """Mode, owner, ACLs and kept attributes of every entry below root, by relative path."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(dirpath, n)
            st = os.lstat(p)
            out[os.path.relpath(p, root)] = (
                st.st_mode,
                st.st_uid,
                st.st_gid,
                attrs(p),
                acl(p) + (acl(p, default=True) if stat.S_ISDIR(st.st_mode) else ""),
            )
    return out


def first_write_tree(src) -> None:
    (src / "d" / "e").mkdir(parents=True)
    (src / "plain").write_bytes(b"no ACL\n")
    (src / "d" / "g").write_bytes(b"an ACL of its own\n")
    (src / "d" / "e" / "h").write_bytes(b"deeper\n")
    os.mkfifo(src / "d" / "fifo", 0o640)
    subprocess.run(["setfacl", "-m", "u:55:r", src / "d" / "g"], check=True)
    for p in (src / "d", src / "d" / "e"):
        os.chmod(p, 0o755)


def test_first_writes_under_a_default_acl_get_the_sources_acls(tmp_path, run_ferry):
    """A destination directory with a default ACL: each new file, node and directory gets the
    source's ACL or none, and the source's mode, on the first pass (as rsync -aHAXS and cp -a
    give them), not the inherited grants and a mode the default ACL allowed (0775)."""
    src, dst, ref = tmp_path / "src", tmp_path / "dst", tmp_path / "rsync"
    first_write_tree(src)
    for d in (dst, ref):
        d.mkdir()
        subprocess.run(["setfacl", "-d", "-m", "u:1234:rwx,g::rwx", d], check=True)
        # The tree lands below the directory with the default ACL, which stays as it is.
        (d / "into").mkdir()
        subprocess.run(["setfacl", "-d", "-m", "u:1234:rwx,g::rwx", d / "into"], check=True)
    subprocess.run(["rsync", "-aHAXS", "--numeric-ids", f"{src}/", str(ref / "into")], check=True)
    r = run_ferry("copy", "-r", src / "d", dst / "into" / "d", "--json")
    assert r.json["files"]["failed"] == 0 and r.json["not_kept"] == {}, r.json
    want = entry_state(src / "d")
    assert entry_state(dst / "into" / "d") == want
    assert entry_state(ref / "into" / "d") == want
    # Nothing left for a second pass.
    r = run_ferry("copy", "-r", src / "d", dst / "into" / "d", "--json")
    assert r.json["files"]["metadata_only"] == 0 and r.json["files"]["copied"] == 0, r.json


@needs_root
def test_first_writes_under_a_set_gid_directory_get_the_sources_group(tmp_path, run_ferry):
    """Root-owned source entries copied as root into a set-gid directory of another group: the
    source's group (0), and no set-gid bit on the new directories."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    first_write_tree(src)
    dst.mkdir()
    os.chown(dst, 0, 55)
    os.chmod(dst, 0o2775)
    r = run_ferry("copy", "-r", src / "d", dst / "d", "--json")
    assert r.json["files"]["failed"] == 0, r.json
    assert entry_state(dst / "d") == entry_state(src / "d")
    s, d = os.stat(src / "d"), os.stat(dst / "d")
    assert (d.st_mode, d.st_gid) == (s.st_mode, s.st_gid)


@pytest.fixture
def grpid_mount(tmp_path):
    """An ext4 filesystem mounted with `grpid`: every new entry gets its directory's group."""
    image, mnt = tmp_path / "grpid.img", tmp_path / "grpid"
    with open(image, "wb") as f:
        f.truncate(64 * MiB)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True)
    mnt.mkdir()
    subprocess.run(["mount", "-o", "loop,grpid", str(image), str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


@needs_root
def test_first_writes_on_a_grpid_mount_get_the_sources_group(tmp_path, run_ferry, grpid_mount):
    src = tmp_path / "src"
    first_write_tree(src)
    os.chown(grpid_mount, 0, 55)
    r = run_ferry("copy", "-r", src / "d", grpid_mount / "d", "--json")
    assert r.json["files"]["failed"] == 0, r.json
    assert entry_state(grpid_mount / "d") == entry_state(src / "d")
    assert os.stat(grpid_mount / "d").st_gid == 0
