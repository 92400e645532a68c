"""What a tree keeps through Blob storage beyond its bytes: POSIX attributes in every style of
blob metadata that azcopy, rclone and Azure Managed Lustre use, symlinks and folders as azcopy
and blobfuse2 store them, metadata-only updates, type changes, and blob -> blob properties.
Blobs are planted through the Python SDK exactly as the other tools write them."""

from __future__ import annotations

import json
import os
import stat

import pytest

NS = 1_000_000_000
MTIME_NS = 1_700_000_000 * NS + 123_456_789


def umask() -> int:
    m = os.umask(0o022)
    os.umask(m)
    return m


def plant(container, name: str, data: bytes = b"payload\n", **metadata: str) -> None:
    container.client.get_blob_client(name).upload_blob(data, metadata=metadata or None, overwrite=True)


def metadata(container, name: str) -> dict:
    return container.client.get_blob_client(name).get_blob_properties().metadata


def listing(run_ferry, location) -> dict:
    out = run_ferry("ls", "-r", location, "--format", "jsonl").stdout
    return {e["path"]: e for e in map(json.loads, out.splitlines())}


# Each style as its writer stores mode 0640, the mtime above (AMLFS: whole seconds, given at
# +0200), owner 1234 and group 5678.
STYLES = {
    "azcopy-standard": ({"permissions": str(stat.S_IFREG | 0o640), "modtime": str(MTIME_NS), "posix_owner": "1234",
                         "posix_group": "5678", "posix_atime": str(MTIME_NS), "posix_ctime": str(MTIME_NS)}, MTIME_NS),
    "amlfs": ({"permissions": "0640", "modtime": "2023-11-15 00:13:20 +0200", "owner": "1234", "group": "5678"},
              1_700_000_000 * NS),
    "rclone": ({"mtime": "2023-11-14T22:13:20.123456789Z", "mode": "100640", "uid": "1234", "gid": "5678"}, MTIME_NS),
}


@pytest.mark.parametrize("style", sorted(STYLES))
def test_each_style_of_posix_metadata_is_restored_on_download(tmp_path, container, run_ferry, style):
    meta, mtime_ns = STYLES[style]
    plant(container, "d/a.txt", **meta)
    listed = listing(run_ferry, container)["d/a.txt"]
    assert (listed["mode"], listed["uid"], listed["gid"]) == ("0640", 1234, 5678), listed
    run_ferry("copy", "-r", container, tmp_path / "dst")
    st = os.lstat(tmp_path / "dst/d/a.txt")
    assert (stat.S_IMODE(st.st_mode), st.st_mtime_ns, st.st_uid, st.st_gid) == (0o640, mtime_ns, 1234, 5678)


def test_a_blob_without_posix_metadata_gets_a_new_files_mode(tmp_path, container, run_ferry):
    plant(container, "bare.txt")
    plant(container, "big.bin", os.urandom(9 << 20))  # more than one ranged GET: the other path
    run_ferry("copy", "-r", container, tmp_path / "dst")
    for name in ("bare.txt", "big.bin"):
        assert stat.S_IMODE(os.lstat(tmp_path / "dst" / name).st_mode) == 0o666 & ~umask(), name


@pytest.mark.parametrize("size", [10, 5 << 20], ids=["one-put", "blocks"])
def test_uploads_store_what_rclone_and_azcopy_restore(tmp_path, container, run_ferry, size):
    src = tmp_path / "src"
    src.mkdir()
    f = src / "f.bin"
    f.write_bytes(os.urandom(size))
    os.chown(f, 1234, 5678)
    os.chmod(f, 0o4751)  # after chown, which clears set-id bits
    os.utime(f, ns=(MTIME_NS, MTIME_NS))
    run_ferry("copy", "-r", src, container, "--block-size", "1MiB")
    m = metadata(container, "f.bin")
    mode = stat.S_IFREG | 0o4751
    assert {k: m.get(k) for k in ("mtime", "mode", "uid", "gid")} == {
        "mtime": "2023-11-14T22:13:20.123456789Z", "mode": f"{mode:o}", "uid": "1234", "gid": "5678"}, m
    assert {k: m.get(k) for k in ("permissions", "modtime", "posix_owner", "posix_group")} == {
        "permissions": str(mode), "modtime": str(MTIME_NS), "posix_owner": "1234", "posix_group": "5678"}, m

    run_ferry("copy", "-r", src, container.at("aml"), "--block-size", "1MiB", "--posix-style", "amlfs")
    m = metadata(container, "aml/f.bin")
    assert {k: m.get(k) for k in ("permissions", "modtime", "owner", "group", "mode", "uid")} == {
        "permissions": "4751", "modtime": "2023-11-14 22:13:20 +0000", "owner": "1234", "group": "5678",
        "mode": f"{mode:o}", "uid": "1234"}, m
    assert "posix_owner" not in m

    # And back: the owner is restored (the tests run as root), the mode with its set-uid bit.
    run_ferry("copy", "-r", container, tmp_path / "back")
    for name in ("f.bin", "aml/f.bin"):
        st = os.lstat(tmp_path / "back" / name)
        assert (stat.S_IMODE(st.st_mode), st.st_mtime_ns, st.st_uid, st.st_gid) == (0o4751, MTIME_NS, 1234, 5678), name


def test_a_chmod_or_chown_between_passes_sends_no_bytes(tmp_path, container, run_ferry):
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    for name in ("d/a.txt", "d/b.txt", "big.bin"):
        (src / name).write_bytes(os.urandom(3 << 20 if name == "big.bin" else 100))
    run_ferry("copy", "-r", src, container, "--block-size", "1MiB")
    # A key of the user's own, which the metadata update must keep.
    blob = container.client.get_blob_client("d/a.txt")
    blob.set_blob_metadata({**blob.get_blob_properties().metadata, "project": "apollo"})
    etag_b = container.client.get_blob_client("d/b.txt").get_blob_properties().etag

    os.chmod(src / "d/a.txt", 0o600)
    os.chown(src / "big.bin", 4321, 8765)
    out = run_ferry("copy", "-r", src, container, "--json")
    files, sent = out.json["files"], out.json["bytes"]["copied"]
    assert (files["copied"], files["metadata_only"], files["skipped"], sent) == (0, 2, 3, 0), out.json

    a = metadata(container, "d/a.txt")
    assert (a["mode"], a["permissions"], a["project"]) == ("100600", str(stat.S_IFREG | 0o600), "apollo"), a
    big = metadata(container, "big.bin")
    assert (big["uid"], big["gid"], big["posix_owner"], big["posix_group"]) == ("4321", "8765", "4321", "8765"), big
    assert container.client.get_blob_client("d/b.txt").get_blob_properties().etag == etag_b, "an unchanged blob was touched"
    again = run_ferry("copy", "-r", src, container, "--json")
    assert (again.json["files"]["metadata_only"], again.json["files"]["skipped"]) == (0, 3), again.json
