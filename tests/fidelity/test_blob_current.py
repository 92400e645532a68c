"""Blobs that stay current: a blob another tool rewrote behind ferry's back is seen as changed
on every pass, whichever side it is on, and folder stubs follow their source directories."""

from __future__ import annotations

import base64
import hashlib
import os
import stat

NS = 1_000_000_000
MTIME_NS = 1_700_000_000 * NS + 123_456_789


def props(container, name: str):
    return container.client.get_blob_client(name).get_blob_properties()


def rewrite(container, name: str, data: bytes, *, blocks: bool, keep_metadata: bool) -> None:
    """Writes `data` over blob `name` as blobfuse2 does after an edit in place: its file cache
    uploads the file whole (Put Blob, which the service gives a Content-MD5 of the new bytes);
    its block cache stages blocks and commits them with no Content-MD5, and drops the metadata."""
    from azure.storage.blob import BlobBlock

    blob = container.client.get_blob_client(name)
    metadata = dict(blob.get_blob_properties().metadata) if keep_metadata else None
    if blocks:
        block_id = base64.b64encode(b"blobfuse-0000").decode()
        blob.stage_block(block_id, data)
        blob.commit_block_list([BlobBlock(block_id)], metadata=metadata)
    else:
        blob.upload_blob(data, overwrite=True, metadata=metadata)


def files(out) -> tuple:
    f = out.json["files"]
    return f["copied"], f["skipped"], f["metadata_only"]


def test_a_blob_rewritten_by_another_tool_is_seen_as_changed(tmp_path, container, run_ferry):
    src, back = tmp_path / "src", tmp_path / "back"
    src.mkdir()
    names = ("put-kept.txt", "blocks-kept.txt", "blocks-dropped.txt", "untouched.txt")
    for name in names:
        (src / name).write_bytes(b"original contents, 32 bytes....\n")
        os.utime(src / name, ns=(MTIME_NS, MTIME_NS))
    run_ferry("copy", "-r", src, container)
    for name in names:
        p = props(container, name)
        written = base64.b64encode(hashlib.md5((src / name).read_bytes()).digest()).decode()
        assert p.metadata["ferry_md5"] == written, p.metadata
        assert bytes(p.content_settings.content_md5) == base64.b64decode(written)
    run_ferry("copy", "-r", container, back)

    edited = b"EDITED contents, still 32 bytes\n"
    assert len(edited) == len((src / names[0]).read_bytes())
    rewrite(container, "put-kept.txt", edited, blocks=False, keep_metadata=True)
    rewrite(container, "blocks-kept.txt", edited, blocks=True, keep_metadata=True)
    rewrite(container, "blocks-dropped.txt", edited, blocks=True, keep_metadata=False)
    assert props(container, "blocks-kept.txt").content_settings.content_md5 is None
    assert props(container, "blocks-kept.txt").metadata["mtime"].startswith("2023-11-14")
    assert props(container, "put-kept.txt").content_settings.content_md5 is not None

    down = run_ferry("copy", "-r", container, back, "--json")
    assert files(down) == (3, 1, 0), down.json
    for name in names[:3]:
        assert (back / name).read_bytes() == edited, name
    assert (back / "untouched.txt").stat().st_mtime_ns == MTIME_NS
    again = run_ferry("copy", "-r", container, back, "--json")
    assert files(again) == (0, 4, 0), ("a rewritten blob converges", again.json)

    # The other way, the source unchanged: the rewritten blobs are newer than the source's
    # files, and a copy refuses to put older bytes over them (issue 42) until told to; then
    # they are put back as the source has them.
    refused = run_ferry("copy", "-r", src, container, "--json", check=1)
    assert refused.json["files"]["newer_at_dest"] == 3, refused.json
    up = run_ferry("copy", "-r", src, container, "--overwrite-newer", "--json")
    assert files(up) == (3, 1, 0), up.json
    for name in names:
        assert container.client.download_blob(name).readall() == (src / name).read_bytes()
        assert props(container, name).metadata["mtime"] == "2023-11-14T22:13:20.123456789Z"
    assert files(run_ferry("copy", "-r", src, container, "--json")) == (0, 4, 0)
    assert stat.S_ISREG(os.lstat(back / "put-kept.txt").st_mode)


def stub(container, name: str) -> tuple:
    m = props(container, name).metadata
    return m["hdi_isfolder"], m["mode"], m["uid"], m["gid"], m["mtime"]


def test_folder_stubs_and_the_top_directory_follow_the_source(
    tmp_path, container, other_container, run_ferry
):
    src = tmp_path / "src"
    (src / "d/sub").mkdir(parents=True)
    (src / "d/sub/f.txt").write_bytes(b"f")
    (src / "e").mkdir()
    for path, mode in (("d/sub", 0o750), ("d", 0o755), ("e", 0o755), ("", 0o700)):
        os.chmod(src / path, mode)
        os.utime(src / path, ns=(MTIME_NS, MTIME_NS))
    below, at_root = container.at("p"), other_container
    for dst in (below, at_root):
        run_ferry("copy", "-r", src, dst)
    assert stub(container, "p") == ("true", "40700", "0", "0", "2023-11-14T22:13:20.123456789Z")
    root = at_root.client.get_container_properties().metadata
    assert (root["mode"], root["mtime"]) == ("40700", "2023-11-14T22:13:20.123456789Z"), root

    # Between passes: a directory's mode, owner and mtime change, another's mtime alone (an
    # entry made and removed), and the top directory's.
    os.chmod(src / "d/sub", 0o2770)
    os.chown(src / "d", 1234, 5678)
    os.chmod(src, 0o711)
    later = MTIME_NS + 86_400 * NS
    for path in ("d/sub", "d", "e", ""):
        os.utime(src / path, ns=(later, later))
    when = "2023-11-15T22:13:20.123456789Z"
    for dst in (below, at_root):
        out = run_ferry("copy", "-r", src, dst, "--json")
        assert out.json["bytes"]["copied"] == 0, out.json
        assert out.json["files"]["metadata_only"] == 3, out.json
        again = run_ferry("copy", "-r", src, dst, "--json")
        assert again.json["files"]["metadata_only"] == 0, again.json
    assert stub(container, "p/d/sub") == ("true", "42770", "0", "0", when)
    assert stub(container, "p/d") == ("true", "40755", "1234", "5678", when)
    assert stub(container, "p/e") == ("true", "40755", "0", "0", when)
    assert stub(container, "p") == ("true", "40711", "0", "0", when)
    root = at_root.client.get_container_properties().metadata
    assert (root["mode"], root["mtime"]) == ("40711", when), root

    # And back: every directory, the top one included, as the source has it.
    for dst, back in ((below, tmp_path / "back1"), (at_root, tmp_path / "back2")):
        run_ferry("copy", "-r", dst, back)
        for path in ("d/sub", "d", "e", ""):
            a, b = os.lstat(src / path), os.lstat(back / path)
            assert (stat.S_IMODE(b.st_mode), b.st_uid, b.st_gid, b.st_mtime_ns) == (
                stat.S_IMODE(a.st_mode),
                a.st_uid,
                a.st_gid,
                later,
            ), (dst, path)


def test_a_prefix_without_its_stub_is_a_directory_still_to_make(
    tmp_path, container, other_container, run_ferry
):
    """Parts run in any order: a part's directory jobs may find the blobs another part wrote
    beneath them, with no stub yet. That prefix is not the directory: it is made, counted and
    asked for exactly as where nothing stood."""
    src = tmp_path / "src"
    dirs = ("a", "b", "c", "d", "e")  # more than a look each: the level is listed
    for d in dirs:
        (src / d).mkdir(parents=True)
        (src / d / "f.txt").write_bytes(b"f")
        os.chmod(src / d, 0o750)
        os.utime(src / d, ns=(MTIME_NS, MTIME_NS))
    listing = run_ferry("ls", "-r", src).stdout.splitlines(keepends=True)
    part = tmp_path / "dirs.tsv"
    part.write_text(
        "".join(line for line in listing if "\td\t" in line or line.startswith("#ferry-manifest"))
    )
    for d in dirs:
        container.client.upload_blob(f"{d}/f.txt", b"f")

    outs = [
        run_ferry("copy", src, dst, "--files-from", part, "--json").json
        for dst in (container, other_container)
    ]
    for out in outs:
        assert (out["files"]["metadata_only"], out["files"]["failed"]) == (0, 0), out
    assert outs[0]["requests"] == outs[1]["requests"]
    for d in dirs:
        assert stub(container, d) == ("true", "40750", "0", "0", "2023-11-14T22:13:20.123456789Z")
