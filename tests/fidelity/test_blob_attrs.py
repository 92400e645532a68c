"""Extended attributes, ACLs and capabilities through Blob storage: kept in blob metadata
(`ferry_xattrs`, docs/worker.md) where they fit, restored on download, and what does not fit
counted under `not_kept`. From tmpfs (which holds values ext4 has no room for) to ext4;
capabilities, `trusted.*` and the mount need root."""

from __future__ import annotations

import os
import subprocess

import pytest

ROOT = os.geteuid() == 0
KEPT = ("user.", "trusted.", "security.")

# cap_net_bind_service, permitted and effective, as setcap writes it (VFS_CAP_REVISION_2).
CAPABILITY = bytes.fromhex("01000002" + "00040000" + "00000000" + "00000000" + "00000000")


def attrs(path) -> dict[str, bytes]:
    return {
        n: os.getxattr(path, n, follow_symlinks=False)
        for n in os.listxattr(path, follow_symlinks=False)
        if n.startswith(KEPT) or n in ("system.posix_acl_access", "system.posix_acl_default")
    }


def acl(path, default=False) -> str:
    args = ["getfacl", "-cpn"] + (["-d"] if default else []) + [str(path)]
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def tree(src) -> None:
    (src / "d").mkdir(parents=True)
    (src / "f").write_bytes(b"attributes\n")
    (src / "multi.bin").write_bytes(os.urandom(3 << 20))
    (src / "big").write_bytes(b"a value too big for blob metadata\n")
    (src / "plain").write_bytes(b"none\n")
    os.setxattr(src / "f", "user.colour", b"blue")
    os.setxattr(src / "f", "user.binary", bytes(range(256)))
    subprocess.run(["setfacl", "-m", "u:1234:rw,g:55:r", src / "f"], check=True)
    subprocess.run(["setfacl", "-d", "-m", "g:55:rx", src / "d"], check=True)
    os.setxattr(src / "d", "user.project", b"ferry")
    os.setxattr(src / "multi.bin", "user.blocks", b"three")
    os.setxattr(src / "big", "user.huge", os.urandom(7000))
    if ROOT:
        os.setxattr(src / "f", "security.capability", CAPABILITY)
        os.setxattr(src / "f", "trusted.origin", b"lab")


@pytest.mark.skipif(not ROOT, reason="capabilities and trusted.* need root")
def test_xattrs_acls_and_capabilities_round_trip_through_blob(tmp_path, container, run_ferry):
    src = tmp_path / "src"
    src.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(src)], check=True)
    try:
        round_trip(src, tmp_path / "back", container, run_ferry)
    finally:
        subprocess.run(["umount", str(src)], check=True)


def round_trip(src, back, container, run_ferry) -> None:
    tree(src)
    up = run_ferry("copy", "-r", src, container, "--block-size", "1MiB", "--json")
    assert up.json["failures"] == [], up.json
    assert up.json["not_kept"] == {"xattrs": 1}, ("the 7000-byte value is counted", up.json)
    stored = container.client.get_blob_client("f").get_blob_properties().metadata
    assert "ferry_xattrs" in stored, stored
    assert "ferry_xattrs" not in container.blobs()["plain"].metadata
    # Attributes that did not fit are marked so: not known from the blob, so never "none".
    assert container.blobs()["big"].metadata["ferry_xattrs"] == "-"

    down = run_ferry("copy", "-r", container, back, "--json")
    assert down.json["failures"] == [] and down.json["not_kept"] == {}, down.json
    for name in ("f", "d", "multi.bin", "plain"):
        assert attrs(back / name) == attrs(src / name), name
    assert os.getxattr(back / "f", "security.capability") == CAPABILITY
    assert "user:1234:rw-" in acl(back / "f")
    assert acl(back / "d", default=True) == acl(src / "d", default=True)
    assert attrs(back / "big") == {}

    # Nothing changed: nothing carried either way.
    for a, b in ((src, container), (container, back)):
        again = run_ferry("copy", "-r", a, b, "--json")
        assert again.json["files"]["metadata_only"] == 0, again.json

    # An attribute changed and one removed at the source: a metadata update each way.
    os.setxattr(src / "f", "user.colour", b"green")
    os.removexattr(src / "d", "user.project")
    up = run_ferry("copy", "-r", src, container, "--json")
    assert (up.json["files"]["metadata_only"], up.json["bytes"]["copied"]) == (2, 0), up.json
    down = run_ferry("copy", "-r", container, back, "--json")
    assert (down.json["files"]["metadata_only"], down.json["bytes"]["copied"]) == (2, 0), down.json
    assert os.getxattr(back / "f", "user.colour") == b"green"
    assert "user.project" not in os.listxattr(back / "d")
    assert attrs(back / "f") == attrs(src / "f")


def test_attributes_removed_at_the_source_are_removed_by_a_download(tmp_path, container, run_ferry):
    """A blob that records POSIX attributes but no `ferry_xattrs` holds none: the listing says so,
    a download takes off what the blob no longer carries (as `rsync -X`), and verify names it."""
    src, back = tmp_path / "s", tmp_path / "d"
    (src / "dir").mkdir(parents=True)
    tool = src / "tool"
    tool.write_bytes(b"#!/bin/true\n")
    os.setxattr(tool, "user.tag", b"x")
    os.setxattr(tool, "security.capability", CAPABILITY)
    (src / "tagged").write_bytes(b"tag only\n")
    os.setxattr(src / "tagged", "user.tag", b"y")
    subprocess.run(["setfacl", "-m", "u:1234:rw", tool], check=True)
    subprocess.run(["setfacl", "-d", "-m", "g:55:rx", src / "dir"], check=True)
    for a, b in ((src, container), (container, back)):
        run_ferry("copy", "-r", a, b)
    assert attrs(back / "tool") == attrs(tool) != {}
    assert "system.posix_acl_default" in attrs(back / "dir")

    for name in ("user.tag", "security.capability"):
        os.removexattr(tool, name)
    os.removexattr(src / "tagged", "user.tag")
    subprocess.run(["setfacl", "-b", tool], check=True)
    subprocess.run(["setfacl", "-k", src / "dir"], check=True)
    assert attrs(tool) == {} and attrs(src / "dir") == {}
    run_ferry("copy", "-r", src, container)
    listed = run_ferry("ls", "-r", container).stdout.splitlines()
    rows = {r.split("\t")[0]: r.split("\t") for r in listed if not r.startswith("#")}
    assert rows["tool"][-1] != "-" and rows["dir"][-1] != "-", ("known: none", rows)

    before = run_ferry("verify", container, back, "--metadata", "--json", check=False)
    assert before.returncode == 1, before.stdout
    differ = {e["path"]: e["reason"] for e in before.json["entries"] if e["status"] == "differ"}
    # Directories are compared only between two sides that hold them (docs/worker.md).
    assert set(differ) == {"tool", "tagged"}, before.json
    assert "attributes" in differ["tagged"], differ
    down = run_ferry("copy", "-r", container, back, "--json")
    assert down.json["files"]["metadata_only"] == 3, down.json
    for name in ("tool", "tagged", "dir"):
        assert attrs(back / name) == {}, name
    assert run_ferry("verify", container, back, "--metadata").returncode == 0
    again = run_ferry("copy", "-r", container, back, "--json")
    assert again.json["files"]["metadata_only"] == 0, again.json
