"""Local -> blob -> local round trips, Content-MD5, idempotent re-runs and SDK interop."""

from __future__ import annotations

import base64
import hashlib
import os
import uuid

from azure.storage.blob import ContentSettings
from support.blobs import blob_name, file_blobs, folder_stubs
from support.summary import section
from support.trees import (
    File,
    describe_differences,
    files_only,
    make_tree,
    many_files_spec,
    odd_names_spec,
    over_blocks,
    snapshot,
)

MiB = 1 << 20


def blob_inventory(container) -> dict[str, tuple[int, str | None]]:
    """{name: (size, Content-MD5 as hex or None)} as the Python SDK reads it from Azurite."""
    out = {}
    for name, props in file_blobs(container).items():
        md5 = props.content_settings.content_md5
        out[name] = (props.size, bytes(md5).hex() if md5 else None)
    return out


def test_tree_round_trips_byte_for_byte_with_content_md5(tmp_path, container, run_ferry):
    src, dst = tmp_path / "src", tmp_path / "dst"
    spec = {
        "empty-at-top": b"",
        "nested/deeper/empty": b"",
        "big.bin": over_blocks(MiB, 3),
        "exactly-two-blocks.bin": 2 * MiB,
        "one-byte": b"x",
        **odd_names_spec(),
        **many_files_spec(1000),
    }
    contents = make_tree(src, spec)
    n, total_bytes = len(contents), sum(map(len, contents.values()))

    up = run_ferry("copy", src, container, "--recursive", "--block-size", "1MiB", "--json")
    assert section(up.json, "files") == {"total": n, "copied": n, "skipped": 0, "failed": 0}, (
        up.json
    )
    assert up.json["bytes"]["copied"] == total_bytes

    want = {
        blob_name(p.decode()): (len(c), hashlib.md5(c).hexdigest()) for p, c in contents.items()
    }
    got = blob_inventory(container)
    assert got == want, describe_differences(want, got)
    dirs = {p.rsplit(b"/", 1)[0] for p in contents if b"/" in p}
    dirs |= {d.rsplit(b"/", 1)[0] for d in list(dirs) if b"/" in d}
    assert folder_stubs(container) == sorted(blob_name(d.decode()) for d in dirs), (
        "a folder stub per directory"
    )

    # --block-size 1MiB must really stage 1 MiB blocks: 3.5 MiB -> 4 blocks.
    committed, _ = container.client.get_blob_client("big.bin").get_block_list("committed")
    assert [b.size for b in committed] == [MiB, MiB, MiB, over_blocks(MiB, 3) - 3 * MiB]

    down = run_ferry("copy", container, dst, "--recursive", "--json")
    assert section(down.json, "files") == {"total": n, "copied": n, "skipped": 0, "failed": 0}, (
        down.json
    )
    want_files, got_files = files_only(snapshot(src)), files_only(snapshot(dst))
    assert got_files == want_files, describe_differences(want_files, got_files)
    extra = {p: e.type for p, e in snapshot(dst).items() if e.type not in ("f", "d")}
    assert extra == {}, f"download left entries that are not files: {extra}"

    again_up = run_ferry("copy", src, container, "--recursive", "--block-size", "1MiB", "--json")
    assert again_up.json["files"]["copied"] == 0, again_up.json["files"]
    assert again_up.json["files"]["skipped"] == n
    again_down = run_ferry("copy", container, dst, "--recursive", "--json")
    assert again_down.json["files"]["copied"] == 0, again_down.json["files"]
    assert again_down.json["files"]["skipped"] == n


def test_local_blob_local_keeps_mtime_and_mode(tmp_path, container, run_ferry):
    src, dst = tmp_path / "src", tmp_path / "dst"
    base = 1_500_000_000_000_000_000  # 2017: far from "now", so a fresh mtime cannot pass by chance
    spec = {
        "private.txt": File(data=b"private\n", mode=0o600, mtime_ns=base + 123_456_789),
        "script.sh": File(data=b"#!/bin/sh\necho hi\n", mode=0o755, mtime_ns=base + 1_000_000_001),
        "group-read.txt": File(data=b"group\n", mode=0o640, mtime_ns=base + 2_999_999_999),
        "read-only.txt": File(data=b"ro\n", mode=0o444, mtime_ns=base + 3_000_000_000),
        "sub/multi-block.bin": File(
            size=over_blocks(MiB, 3), mode=0o604, mtime_ns=base + 4_500_000_000
        ),
        "sub/empty": File(data=b"", mode=0o660, mtime_ns=base + 5_000_000_007),
    }
    make_tree(src, spec)
    run_ferry("copy", src, container, "--recursive", "--block-size", "1MiB")
    run_ferry("copy", container, dst, "--recursive")
    before, after = snapshot(src), snapshot(dst)
    for rel in (p.encode() for p in spec):
        assert after[rel].md5 == before[rel].md5, rel
        assert oct(after[rel].mode) == oct(before[rel].mode), f"{rel!r}: mode not kept"
        # Blob metadata may hold the time as a decimal string; the manifest promises 9 decimals,
        # a microsecond is the most a float conversion could cost.
        assert abs(after[rel].mtime_ns - before[rel].mtime_ns) < 1000, (
            f"{rel!r}: mtime {after[rel].mtime_ns} != {before[rel].mtime_ns}"
        )


def test_blob_uploaded_by_ferry_reads_back_with_the_sdk(tmp_path, container, run_ferry):
    src = tmp_path / "src"
    contents = make_tree(src, {"multi/part.bin": over_blocks(MiB, 3), "single.txt": b"one shot\n"})
    run_ferry("copy", src, container, "--recursive", "--block-size", "1MiB")
    for rel, data in contents.items():
        blob = container.client.get_blob_client(rel.decode())
        assert blob.download_blob().readall() == data
        md5 = blob.get_blob_properties().content_settings.content_md5
        assert md5 is not None and bytes(md5) == hashlib.md5(data).digest(), rel


def test_blob_uploaded_by_the_sdk_downloads_with_ferry(tmp_path, container, run_ferry, azurite):
    data = os.urandom(5 * MiB + 777)
    # Small single-put and block limits force the SDK into Put Block + Put Block List.
    sdk = azurite.service_client(max_single_put_size=MiB, max_block_size=MiB)
    blob = sdk.get_blob_client(container.name, "from-sdk/big.bin")
    blob.upload_blob(data, max_concurrency=2)
    committed, _ = blob.get_block_list("committed")
    assert len(committed) == 6, "the SDK upload should have been multi-block"
    # And one the SDK gave an explicit Content-MD5, which ferry may check on the way down.
    small = os.urandom(70_000)
    container.client.upload_blob(
        "from-sdk/with-md5.bin",
        small,
        content_settings=ContentSettings(content_md5=hashlib.md5(small).digest()),
    )

    dst = tmp_path / "dst"
    run_ferry("copy", container.at("from-sdk"), dst, "--recursive")
    assert (dst / "big.bin").read_bytes() == data
    assert (dst / "with-md5.bin").read_bytes() == small
    assert sorted(os.listdir(dst)) == ["big.bin", "with-md5.bin"]


def test_download_never_writes_outside_the_destination(tmp_path, container, run_ferry):
    # Blob names may start with '/' (Azure and Azurite keep it); joined naively onto the
    # destination, such a name would write at the filesystem root.
    marker = f"ferry-escape-test-{uuid.uuid4().hex}.txt"
    container.client.upload_blob("/" + marker, b"must stay inside dst")
    container.client.upload_blob("x//double-slash.txt", b"double")
    container.client.upload_blob("ok.txt", b"fine")
    dst = tmp_path / "dst"
    outside = os.path.join("/", marker)
    try:
        result = run_ferry("copy", container, dst, "--recursive", "--json", check=False)
        assert not os.path.lexists(outside), f"ferry wrote {outside}, outside the destination"
        assert result.returncode in (0, 1), result.stderr
        assert (dst / "ok.txt").read_bytes() == b"fine"
        inside = [os.path.join(d, f) for d, _, fs in os.walk(dst) for f in fs]
        assert all(os.path.realpath(p).startswith(os.path.realpath(dst) + os.sep) for p in inside)
    finally:
        if os.path.lexists(outside):
            os.unlink(outside)


def test_a_put_blob_carries_the_files_md5_for_the_service_to_check(
    tmp_path, container, run_ferry, proxy
):
    # Azurite, like the service, keeps an MD5 of its own for a Put Blob without one, so the blob's
    # properties cannot tell; only the request shows the MD5 the service checks the bytes against.
    data = os.urandom(50_000)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "one.bin").write_bytes(data)
    run_ferry("copy", "-r", tmp_path / "src", container.via(proxy.port))
    [put] = [r for r in proxy.requests("PUT") if r.path.endswith("/one.bin")]
    headers = {k.lower(): v for k, v in put.headers}
    assert headers.get("content-md5") == base64.b64encode(hashlib.md5(data).digest()).decode(), (
        headers
    )
