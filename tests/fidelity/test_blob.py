"""What a tree keeps through Blob storage beyond its bytes: POSIX attributes in every style of
blob metadata that azcopy, rclone and Azure Managed Lustre use, symlinks and folders as azcopy
and blobfuse2 store them, metadata-only updates, type changes, and blob -> blob properties.
Blobs are planted through the Python SDK exactly as the other tools write them."""

from __future__ import annotations

import base64
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
    container.client.get_blob_client(name).upload_blob(
        data, metadata=metadata or None, overwrite=True
    )


def metadata(container, name: str) -> dict:
    return container.client.get_blob_client(name).get_blob_properties().metadata


def listing(run_ferry, location) -> dict:
    out = run_ferry("ls", "-r", location, "--format", "jsonl").stdout
    return {e["path"]: e for e in map(json.loads, out.splitlines())}


# Each style as its writer stores mode 0640, the mtime above (AMLFS: whole seconds, given at
# +0200), owner 1234 and group 5678.
STYLES = {
    "azcopy-standard": (
        {
            "permissions": str(stat.S_IFREG | 0o640),
            "modtime": str(MTIME_NS),
            "posix_owner": "1234",
            "posix_group": "5678",
            "posix_atime": str(MTIME_NS),
            "posix_ctime": str(MTIME_NS),
        },
        MTIME_NS,
    ),
    "amlfs": (
        {
            "permissions": "0640",
            "modtime": "2023-11-15 00:13:20 +0200",
            "owner": "1234",
            "group": "5678",
        },
        1_700_000_000 * NS,
    ),
    "rclone": (
        {"mtime": "2023-11-14T22:13:20.123456789Z", "mode": "100640", "uid": "1234", "gid": "5678"},
        MTIME_NS,
    ),
}


@pytest.mark.parametrize("style", sorted(STYLES))
def test_each_style_of_posix_metadata_is_restored_on_download(
    tmp_path, container, run_ferry, style
):
    meta, mtime_ns = STYLES[style]
    plant(container, "d/a.txt", **meta)
    listed = listing(run_ferry, container)["d/a.txt"]
    assert (listed["mode"], listed["uid"], listed["gid"]) == ("0640", 1234, 5678), listed
    run_ferry("copy", "-r", container, tmp_path / "dst")
    st = os.lstat(tmp_path / "dst/d/a.txt")
    assert (stat.S_IMODE(st.st_mode), st.st_mtime_ns, st.st_uid, st.st_gid) == (
        0o640,
        mtime_ns,
        1234,
        5678,
    )


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
        "mtime": "2023-11-14T22:13:20.123456789Z",
        "mode": f"{mode:o}",
        "uid": "1234",
        "gid": "5678",
    }, m
    assert {k: m.get(k) for k in ("permissions", "modtime", "posix_owner", "posix_group")} == {
        "permissions": str(mode),
        "modtime": str(MTIME_NS),
        "posix_owner": "1234",
        "posix_group": "5678",
    }, m

    run_ferry(
        "copy", "-r", src, container.at("aml"), "--block-size", "1MiB", "--posix-style", "amlfs"
    )
    m = metadata(container, "aml/f.bin")
    assert {k: m.get(k) for k in ("permissions", "modtime", "owner", "group", "mode", "uid")} == {
        "permissions": "4751",
        "modtime": "2023-11-14 22:13:20 +0000",
        "owner": "1234",
        "group": "5678",
        "mode": f"{mode:o}",
        "uid": "1234",
    }, m
    assert "posix_owner" not in m

    # And back: the owner is restored (the tests run as root), the mode with its set-uid bit.
    run_ferry("copy", "-r", container, tmp_path / "back")
    for name in ("f.bin", "aml/f.bin"):
        st = os.lstat(tmp_path / "back" / name)
        assert (stat.S_IMODE(st.st_mode), st.st_mtime_ns, st.st_uid, st.st_gid) == (
            0o4751,
            MTIME_NS,
            1234,
            5678,
        ), name


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
    assert (files["copied"], files["metadata_only"], files["skipped"], sent) == (0, 2, 3, 0), (
        out.json
    )

    a = metadata(container, "d/a.txt")
    assert (a["mode"], a["permissions"], a["project"]) == (
        "100600",
        str(stat.S_IFREG | 0o600),
        "apollo",
    ), a
    big = metadata(container, "big.bin")
    assert (big["uid"], big["gid"], big["posix_owner"], big["posix_group"]) == (
        "4321",
        "8765",
        "4321",
        "8765",
    ), big
    assert container.client.get_blob_client("d/b.txt").get_blob_properties().etag == etag_b, (
        "an unchanged blob was touched"
    )
    again = run_ferry("copy", "-r", src, container, "--json")
    assert (again.json["files"]["metadata_only"], again.json["files"]["skipped"]) == (0, 3), (
        again.json
    )


def every_kind(root) -> None:
    """A tree with one of everything: files of several modes and owners, nested and empty
    directories with their own modes, symlinks (relative, absolute, dangling, to a directory),
    two names of one file, a fifo; the mtimes set last, deepest first."""
    (root / "d/sub").mkdir(parents=True)
    (root / "empty").mkdir()
    (root / "d/a.txt").write_bytes(b"alpha\n")
    (root / "d/sub/b.bin").write_bytes(os.urandom(5000))
    (root / "top.txt").write_bytes(b"")
    os.symlink("a.txt", root / "d/rel-link")
    os.symlink("/etc/hostname", root / "abs-link")
    os.symlink("../nowhere/at all", root / "d/dangling")
    os.symlink("d/sub", root / "dir-link")
    os.link(root / "d/a.txt", root / "hard.txt")
    os.mkfifo(root / "pipe")
    for path, mode, owner in (
        ("d/a.txt", 0o640, (1234, 5678)),
        ("d/sub/b.bin", 0o4755, (0, 0)),
        ("top.txt", 0o600, (7, 7)),
        ("d", 0o750, (1234, 5678)),
        ("d/sub", 0o2775, (0, 42)),
        ("empty", 0o700, (99, 98)),
    ):
        os.chown(root / path, *owner)
        os.chmod(root / path, mode)
    for link in ("d/rel-link", "abs-link", "d/dangling", "dir-link"):
        os.lchown(root / link, 55, 66)
    for i, (dirpath, dirnames, filenames) in enumerate(
        sorted(os.walk(root), key=lambda w: -len(w[0]))
    ):
        for name in dirnames + filenames:
            os.utime(
                os.path.join(dirpath, name),
                ns=(MTIME_NS + i, MTIME_NS + 1000 * i),
                follow_symlinks=False,
            )


def comparable(root) -> dict:
    from support.trees import snapshot

    return {p: e for p, e in snapshot(root).items() if e.type != "?"}


def test_every_kind_of_entry_round_trips_through_blob(tmp_path, container, run_ferry):
    src, back = tmp_path / "src", tmp_path / "back"
    src.mkdir()
    every_kind(src)
    up = run_ferry("copy", "-r", src, container, "--json")
    assert up.json["failures"] == [], up.json
    assert up.json["ignored_by_reason"] == {"fifo (blob storage holds none)": 1}, up.json
    assert up.json["not_kept"] == {"hard link": 2}, up.json

    blobs = container.blobs()
    link = blobs["d/rel-link"]
    assert (link.metadata["is_symlink"], link.metadata["mode"]) == ("true", "120777"), link.metadata
    assert container.client.download_blob("d/rel-link").readall() == b"a.txt"
    empty = blobs["empty"]
    assert (empty.size, empty.metadata["hdi_isfolder"], empty.metadata["permissions"]) == (
        0,
        "true",
        str(stat.S_IFDIR | 0o700),
    )
    assert blobs["hard.txt"].size == blobs["d/a.txt"].size == 6, (
        "each name of a hard link is a blob"
    )
    listed = listing(run_ferry, container)
    assert {p: e["type"] for p, e in listed.items() if e["type"] != "f"} == {
        "d": "d",
        "d/sub": "d",
        "empty": "d",
        "d/rel-link": "l",
        "abs-link": "l",
        "d/dangling": "l",
        "dir-link": "l",
    }

    down = run_ferry("copy", "-r", container, back, "--json")
    assert down.json["failures"] == [], down.json
    want, got = comparable(src), comparable(back)
    assert got == want, "\n".join(
        f"{p!r}: {want.get(p)} != {got.get(p)}"
        for p in sorted(set(want) | set(got))
        if want.get(p) != got.get(p)
    )

    # Nothing moved since: both directions find everything in place.
    for a, b in ((src, container), (container, back)):
        again = run_ferry("copy", "-r", a, b, "--json")
        files = again.json["files"]
        assert (
            files["copied"],
            files["metadata_only"],
            files["replaced"],
            again.json["bytes"]["copied"],
        ) == (0, 0, 0, 0), again.json


def test_symlinks_and_folders_as_azcopy_writes_them_are_restored(tmp_path, container, run_ferry):
    link_meta = {
        "is_symlink": "true",
        "is_char_dev": "true",
        "permissions": str(stat.S_IFLNK | 0o777),
        "modtime": str(MTIME_NS),
        "posix_owner": "55",
        "posix_group": "66",
    }
    plant(container, "d/lnk", b"../target/of the link", **link_meta)
    plant(
        container,
        "d/folder",
        b"",
        hdi_isfolder="true",
        permissions=str(stat.S_IFDIR | 0o750),
        modtime=str(MTIME_NS),
        posix_owner="1234",
        posix_group="5678",
    )
    plant(container, "d/folder/inside.txt", b"x", permissions=str(stat.S_IFREG | 0o604))
    plant(
        container,
        "d/aml-folder",
        b"",
        hdi_isfolder="true",
        permissions="0711",
        modtime="2023-11-14 22:13:20 +0000",
    )
    run_ferry("copy", "-r", container, tmp_path / "dst")
    lnk = tmp_path / "dst/d/lnk"
    st = os.lstat(lnk)
    assert stat.S_ISLNK(st.st_mode) and os.readlink(lnk) == "../target/of the link"
    assert (st.st_mtime_ns, st.st_uid, st.st_gid) == (MTIME_NS, 55, 66)
    st = os.lstat(tmp_path / "dst/d/folder")
    assert stat.S_ISDIR(st.st_mode), "a folder stub is a directory, not an empty file"
    assert (stat.S_IMODE(st.st_mode), st.st_mtime_ns, st.st_uid, st.st_gid) == (
        0o750,
        MTIME_NS,
        1234,
        5678,
    )
    assert stat.S_IMODE(os.lstat(tmp_path / "dst/d/folder/inside.txt").st_mode) == 0o604
    st = os.lstat(tmp_path / "dst/d/aml-folder")
    assert (stat.S_ISDIR(st.st_mode), stat.S_IMODE(st.st_mode), st.st_mtime_ns) == (
        True,
        0o711,
        1_700_000_000 * NS,
    )


@pytest.mark.parametrize("direction", ["upload", "download"])
def test_a_type_change_between_passes_converges(tmp_path, container, run_ferry, direction):
    import shutil

    src = tmp_path / "src"
    src.mkdir()
    (src / "was-file").write_bytes(b"a file first")
    (src / "was-dir/deep").mkdir(parents=True)
    (src / "was-dir/deep/x.txt").write_bytes(b"x")
    (src / "was-link").symlink_to("somewhere")
    run_ferry("copy", "-r", src, container)
    if direction == "download":
        run_ferry("copy", "-r", container, tmp_path / "dst")

    (src / "was-file").unlink()
    (src / "was-file/inner").mkdir(parents=True)
    (src / "was-file/inner/y.txt").write_bytes(b"y")
    shutil.rmtree(src / "was-dir")
    (src / "was-dir").write_bytes(b"a file now")
    (src / "was-link").unlink()
    (src / "was-link").mkdir()
    # Small trees: 2 of 5 entries replaced is past the default 10%; said so, not the subject.
    out = run_ferry("copy", "-r", src, container, "--json", "--max-delete", "100%")
    assert out.json["failures"] == [] and out.json["files"]["replaced"] == 3, out.json
    assert sorted(container.blobs()) == [
        "was-dir",
        "was-file",
        "was-file/inner",
        "was-file/inner/y.txt",
        "was-link",
    ]
    assert container.client.download_blob("was-dir").readall() == b"a file now"
    if direction == "download":
        down = run_ferry(
            "copy", "-r", container, tmp_path / "dst", "--json", "--max-delete", "100%"
        )
        assert down.json["failures"] == [] and down.json["files"]["replaced"] == 3, down.json
        got = {p: e.type for p, e in comparable(tmp_path / "dst").items()}
        assert got == {
            b"was-dir": "f",
            b"was-file": "d",
            b"was-file/inner": "d",
            b"was-file/inner/y.txt": "f",
            b"was-link": "d",
        }


PROPS = dict(
    content_type="text/csv",
    content_encoding="gzip",
    content_language="fr-CA",
    content_disposition='attachment; filename="t.csv"',
    cache_control="max-age=60",
)


def props_of(container, name: str) -> tuple:
    p = container.client.get_blob_client(name).get_blob_properties()
    c = p.content_settings
    return (
        dict(p.metadata),
        c.content_type,
        c.content_encoding,
        c.content_language,
        c.content_disposition,
        c.cache_control,
    )


@pytest.mark.parametrize("how", ["server-side", "streamed"])
def test_blob_to_blob_keeps_user_metadata_and_content_properties(
    tmp_path, container, other_container, run_ferry, how
):
    import hashlib

    from azure.storage.blob import ContentSettings

    for name, size in (("small.csv.gz", 1000), ("big.csv.gz", 300_000)):
        data = os.urandom(size)
        settings = ContentSettings(content_md5=bytearray(hashlib.md5(data).digest()), **PROPS)
        container.client.upload_blob(
            name,
            data,
            content_settings=settings,
            metadata={"project": "apollo", "stage": "raw", **STYLES["amlfs"][0]},
        )
    flags = ["--no-server-copy"] if how == "streamed" else []
    out = run_ferry(
        "copy", "-r", container, other_container, "--block-size", "64KiB", "--json", *flags
    )
    assert out.json["files"]["copied"] == 2 and out.json["failures"] == [], out.json
    assert out.json["files"]["server_copied"] == (2 if how == "server-side" else 0), out.json
    for name in ("small.csv.gz", "big.csv.gz"):
        src, dst = props_of(container, name), props_of(other_container, name)
        assert dst[1:] == src[1:] == tuple(PROPS.values()), name
        written = container.client.get_blob_client(name).get_blob_properties()
        # Every key of the source, rclone's and azcopy's keys for what it says, and the
        # Content-MD5 the copy was given.
        assert dst[0] == {
            "ferry_md5": base64.b64encode(written.content_settings.content_md5).decode(),
            **src[0],
            "mtime": "2023-11-14T22:13:20.000000000Z",
            "mode": "100640",
            "uid": "1234",
            "gid": "5678",
            "modtime": str(1_700_000_000 * NS),
            "permissions": str(stat.S_IFREG | 0o640),
            "posix_owner": "1234",
            "posix_group": "5678",
        }, (name, dst[0])


def test_uploads_get_a_content_type_from_their_name(tmp_path, container, run_ferry):
    src = tmp_path / "src"
    src.mkdir()
    for name, size in (
        ("table.csv", 10),
        ("conf.json", 10),
        ("notes.txt", 3 << 20),
        ("blob.unknownext", 10),
        ("README", 10),
    ):
        (src / name).write_bytes(os.urandom(size))
    run_ferry("copy", "-r", src, container, "--block-size", "1MiB")
    types = {n: p.content_settings.content_type for n, p in container.blobs().items()}
    assert types == {
        "table.csv": "text/csv",
        "conf.json": "application/json",
        "notes.txt": "text/plain",
        "blob.unknownext": "application/octet-stream",
        "README": "application/octet-stream",
    }
    run_ferry(
        "copy", "-r", src, container.at("plain"), "--block-size", "1MiB", "--no-guess-mime-type"
    )
    assert {p.content_settings.content_type for p in container.blobs("plain/").values()} == {
        "application/octet-stream"
    }


@pytest.mark.parametrize("how", ["server-side", "streamed"])
def test_blob_to_blob_keeps_tier_and_tags_when_asked(
    tmp_path, container, other_container, run_ferry, how
):
    from azure.storage.blob import StandardBlobTier

    tags = {"team": "data eng", "path": "a/b:c+d=e"}  # what tags may hold: spaces, + - . / : = _
    for name, size in (("small.bin", 1000), ("big.bin", 300_000)):
        container.client.upload_blob(
            name, os.urandom(size), standard_blob_tier=StandardBlobTier.COOL, tags=tags
        )
    container.client.upload_blob("plain.bin", b"no tier set, no tags")
    flags = ["--no-server-copy"] if how == "streamed" else []
    run_ferry(
        "copy",
        "-r",
        container,
        other_container.at("kept"),
        "--block-size",
        "64KiB",
        "--keep-tier",
        "--keep-tags",
        *flags,
    )
    run_ferry("copy", "-r", container, other_container.at("not"), "--block-size", "64KiB", *flags)
    for name in ("small.bin", "big.bin"):
        kept = other_container.client.get_blob_client(f"kept/{name}")
        assert (kept.get_blob_properties().blob_tier, kept.get_blob_tags()) == ("Cool", tags), name
        other = other_container.client.get_blob_client(f"not/{name}").get_blob_properties()
        assert not other.tag_count, (name, other.tag_count)
        if how == "streamed":  # (Copy Blob's own choice of tier is the service's)
            assert other.blob_tier_inferred, (name, other.blob_tier)
    plain = other_container.client.get_blob_client("kept/plain.bin").get_blob_properties()
    assert plain.blob_tier_inferred and not plain.tag_count, (
        "an inferred tier is not set on the copy"
    )
