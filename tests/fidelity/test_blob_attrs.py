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
    for name in ("plain", "big"):
        assert "ferry_xattrs" not in container.blobs()[name].metadata, name

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
