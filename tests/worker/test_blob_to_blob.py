"""Blob -> blob: streamed between two accounts (two Azurite instances, each with its own account
name and key, each side given its own SAS), server-side (Copy Blob) within one account, resumed
after a kill, corrupted on the wire, and verified. Blobs are read back with the Python SDK."""

from __future__ import annotations

import base64
import hashlib
import os
import time
import urllib.parse

import pytest
from azure.core.exceptions import ResourceNotFoundError
from azure.storage.blob import BlobBlock, ContentSettings
from support.blobs import blob_name, file_blobs
from support.interrupt import fail_after_change, kill_once_blocks_staged, sdk_block_id
from support.proxy import ABSENT
from support.summary import section
from support.trees import File, make_tree, odd_names_spec

MiB = 1 << 20
KiB = 1 << 10
BASE_NS = 1_500_000_000_000_000_000  # 2017: a copied mtime cannot be "now" by chance
# Each side's credential is the SAS in its URL; nothing in the environment could serve either.
SAS_ONLY = {"AZURE_STORAGE_KEY": None, "AZURE_STORAGE_ACCOUNT": None, "FERRY_AUTH": None}
# Written without Content-MD5 (the Python SDK sets none on a block list): streamed, never server-copied.
NO_MD5 = "sdk/no-md5.bin"


def spec() -> dict:
    return {
        "big.bin": File(size=3 * MiB + MiB // 2 + 777, mode=0o640, mtime_ns=BASE_NS + 123_456_789),
        "exactly-one-block.bin": File(size=MiB, mode=0o600, mtime_ns=BASE_NS + 1),
        "a.txt": File(data=b"alpha\n", mode=0o644, mtime_ns=BASE_NS + 2_000_000_002),
        "empty": File(data=b"", mode=0o444, mtime_ns=BASE_NS + 3),
        "nested/deeper/c.txt": File(data=b"charlie\n" * 1000, mode=0o755, mtime_ns=BASE_NS + 4),
        **odd_names_spec(prefix="odd/"),
    }


def seed(tmp_path, run_ferry, container, with_no_md5: bool = True) -> dict[str, bytes]:
    """Fills a container as a migration would have: uploaded by ferry (Content-MD5, mtime and
    mode metadata), plus one blob written by another tool without a Content-MD5."""
    src = tmp_path / "seed"
    contents = {p.decode(): c for p, c in make_tree(src, spec()).items()}
    run_ferry("copy", "-r", src, container.signed(write=True), "--block-size", "1MiB", env=SAS_ONLY)
    if with_no_md5:
        data = os.urandom(2 * MiB + 5)
        blob = container.client.get_blob_client(NO_MD5)
        ids = []
        for i in range(0, len(data), MiB):
            ids.append(f"{i:08d}")
            blob.stage_block(ids[-1], data[i : i + MiB])
        blob.commit_block_list([BlobBlock(block_id=b) for b in ids])
        assert blob.get_blob_properties().content_settings.content_md5 is None
        contents[NO_MD5] = data
    return contents


def md5_blob(container, name: str, data: bytes, **kwargs):
    """Writes a blob with the Python SDK, with its Content-MD5 as ferry would set it."""
    container.client.upload_blob(
        name,
        data,
        overwrite=True,
        **kwargs,
        content_settings=ContentSettings(content_md5=bytearray(hashlib.md5(data).digest())),
    )


def blob_state(container) -> dict[str, tuple]:
    """{name: (size, MD5 of the bytes read back, Content-MD5, ferry's mtime and mode metadata)}."""
    out = {}
    for name, props in container.blobs().items():
        data = container.client.download_blob(name).readall()
        md5 = props.content_settings.content_md5
        meta = {k: v for k, v in props.metadata.items() if k in ("mtime", "mode")}
        out[name] = (
            len(data),
            hashlib.md5(data).hexdigest(),
            bytes(md5).hex() if md5 else None,
            meta,
        )
    return out


def expected_copy(container) -> dict:
    """What a copy of this container must hold: its bytes, Content-MD5 and ferry's metadata; a
    blob without Content-MD5 gets the MD5 of its bytes, one without an mtime its Last-Modified."""
    props = container.blobs()
    want = {}
    for name, (size, md5, stored, meta) in blob_state(container).items():
        mtime = meta.get("mtime") or props[name].last_modified.strftime(
            "%Y-%m-%dT%H:%M:%S.000000000Z"
        )
        want[name] = (size, md5, stored or md5, {**meta, "mtime": mtime})
    return want


def copy_source_puts(proxy) -> list:
    """Copy Blob requests seen at the proxy: PUTs that carry x-ms-copy-source."""
    return [
        r
        for r in proxy.requests("PUT")
        if any(k.lower() == "x-ms-copy-source" for k, _ in r.headers)
    ]


def body_gets(proxy, container) -> list:
    """GETs of blob bytes (no comp parameter) in one container."""
    return [r for r in proxy.requests("GET", comp=ABSENT, path=rf"/{container.name}/.")]


# -- between two accounts: streamed ------------------------------------------------------------


def test_two_accounts_streamed_byte_identical_with_md5_and_metadata(
    tmp_path, run_ferry, container, container2
):
    # The second account refuses the first one's key: a credential used on the wrong side fails.
    refused = run_ferry("ls", container2, check=2)
    assert "403" in refused.stderr, refused.stderr

    seed(tmp_path, run_ferry, container)
    n = len(file_blobs(container))
    src, dst = container.signed(), container2.signed(write=True)

    dry = run_ferry("copy", "-r", src, dst, "--dry-run", "--json", env=SAS_ONLY)
    assert section(dry.json, "files") == {"total": n, "copied": n, "skipped": 0, "failed": 0}, (
        dry.json
    )
    assert dry.json["files"]["server_copied"] == 0, "two accounts: nothing can go server-side"
    listed = run_ferry("copy", "-r", src, dst, "--dry-run", env=SAS_ONLY).stdout.splitlines()
    copies = [line for line in listed if not line.startswith("would make directory\t")]
    assert len(copies) == n and all(line.startswith("would copy\t") for line in copies), listed
    assert container2.blobs() == {}, "a dry run wrote something"

    out = run_ferry("copy", "-r", src, dst, "--block-size", "1MiB", "--json", env=SAS_ONLY)
    assert section(out.json, "files") == {"total": n, "copied": n, "skipped": 0, "failed": 0}, (
        out.json
    )
    assert out.json["files"]["server_copied"] == 0 and out.json["bytes"]["server_copied"] == 0, (
        out.json
    )
    want = expected_copy(container)
    assert blob_state(container2) == want
    committed, _ = container2.client.get_blob_client("big.bin").get_block_list("committed")
    assert len(committed) == 4, "3.5 MiB in 1 MiB blocks"

    again = run_ferry("copy", "-r", src, dst, "--block-size", "1MiB", "--json", env=SAS_ONLY)
    assert section(again.json, "files") == {"total": n, "copied": 0, "skipped": n, "failed": 0}, (
        again.json
    )
    assert section(again.json, "bytes")["copied"] == 0

    # One blob, by name, into a prefix.
    one = run_ferry(
        "copy",
        container.signed("nested/deeper/c.txt"),
        container2.signed("single/", write=True),
        "--json",
        env=SAS_ONLY,
    )
    assert one.json["files"]["copied"] == 1
    assert blob_state(container2)["single/c.txt"] == want["nested/deeper/c.txt"]
    # --compare md5: equal Content-MD5s are skipped; the source without one is copied again.
    md5 = run_ferry("copy", "-r", src, dst, "--compare", "md5", "--json", env=SAS_ONLY)
    assert (md5.json["files"]["skipped"], md5.json["files"]["copied"]) == (n - 1, 1), md5.json


def test_killed_blob_to_blob_copy_resumes_from_the_staged_blocks(
    tmp_path, run_ferry, container, container2, proxy2
):
    block, blocks, staged_first = 64 * KiB, 50, 10
    data = os.urandom(blocks * block - 999)
    mtime = "2017-07-14T02:40:00.123456789Z"
    md5_blob(container, "big.bin", data, metadata={"mtime": mtime, "mode": "100640"})
    dst = container2.signed(write=True, port=proxy2.port)
    through = kill_once_blocks_staged(
        proxy2,
        lambda: run_ferry.spawn(
            "copy",
            "-r",
            container.signed(),
            dst,
            "--block-size",
            "64KiB",
            env=SAS_ONLY,
            log_dir=tmp_path,
        ),
        staged_first,
        blocks * 4,
    )

    blob = container2.client.get_blob_client("big.bin")
    with pytest.raises(ResourceNotFoundError):
        blob.get_blob_properties()  # cut short: nothing committed
    staged = {b.id for b in blob.get_block_list("uncommitted")[1]}
    assert staged == through and len(staged) == staged_first

    proxy2.clear_rules()
    proxy2.clear_log()
    out = run_ferry(
        "copy", "-r", container.signed(), dst, "--block-size", "64KiB", "--json", env=SAS_ONLY
    )
    sent = proxy2.requests("PUT", comp="block")
    assert [r.block_id for r in sent if sdk_block_id(r.block_id) in staged] == [], (
        "staged blocks were sent again"
    )
    assert len(sent) == blocks - staged_first, (
        f"{len(sent)} Put Block on the re-run, want {blocks - staged_first}"
    )
    assert section(out.json, "blocks") == {"sent": blocks - staged_first, "reused": staged_first}, (
        out.json
    )
    assert blob.download_blob().readall() == data
    props = blob.get_blob_properties()
    assert bytes(props.content_settings.content_md5) == hashlib.md5(data).digest()
    # rclone's keys, and azcopy's standard ones (docs/worker.md, "POSIX attributes in Blob"),
    # and the Content-MD5 ferry wrote, which tells a rewrite by another tool.
    assert props.metadata == {
        "mtime": mtime,
        "mode": "100640",
        "modtime": "1500000000123456789",
        "permissions": "33184",
        "ferry_md5": base64.b64encode(hashlib.md5(data).digest()).decode(),
    }
    assert len(blob.get_block_list("committed")[0]) == blocks


# -- within one account: server-side -----------------------------------------------------------


def test_same_account_copies_server_side_and_no_server_copy_streams(
    tmp_path, run_ferry, container, other_container, proxy
):
    contents = seed(tmp_path, run_ferry, container)
    n = len(contents)
    src, dst = container.via(proxy.port), other_container.via(proxy.port)
    want = expected_copy(container)

    dry = run_ferry("copy", "-r", src, dst, "--dry-run", "--json")
    assert (dry.json["files"]["copied"], dry.json["files"]["server_copied"]) == (n, n - 1), dry.json
    assert other_container.blobs() == {} and copy_source_puts(proxy) == []

    proxy.clear_log()
    out = run_ferry("copy", "-r", src, dst, "--json")
    files = out.json["files"]
    assert (files["copied"], files["server_copied"], files["failed"]) == (n, n - 1, 0), out.json
    md5_bytes = sum(len(c) for name, c in contents.items() if name != NO_MD5)
    assert out.json["bytes"]["server_copied"] == md5_bytes, out.json["bytes"]
    # One Copy Blob per blob with a Content-MD5, each into the destination, naming its source blob.
    assert len(copy_source_puts(proxy)) == n - 1
    copies = {
        r.path: dict((k.lower(), v) for k, v in r.headers)["x-ms-copy-source"]
        for r in copy_source_puts(proxy)
    }
    account = container.azurite.account
    assert {urllib.parse.unquote(urllib.parse.urlsplit(v).path) for v in copies.values()} == {
        f"/{account}/{container.name}/{blob_name(name)}" for name in contents if name != NO_MD5
    }
    assert set(copies) == {
        f"/{account}/{other_container.name}/{blob_name(name)}"
        for name in contents
        if name != NO_MD5
    }
    # Only the blob without a Content-MD5 went through ferry: its bytes were read, no other's.
    assert {r.path.split("/", 3)[3] for r in body_gets(proxy, container)} == {NO_MD5}
    assert blob_state(other_container) == want

    proxy.clear_log()
    again = run_ferry("copy", "-r", src, dst, "--json")
    assert (again.json["files"]["copied"], again.json["files"]["skipped"]) == (0, n), again.json
    assert copy_source_puts(proxy) == []

    proxy.clear_log()
    streamed = run_ferry(
        "copy",
        "-r",
        src,
        dst,
        "--compare",
        "none",
        "--no-server-copy",
        "--block-size",
        "1MiB",
        "--json",
    )
    assert (streamed.json["files"]["copied"], streamed.json["files"]["server_copied"]) == (n, 0), (
        streamed.json
    )
    assert copy_source_puts(proxy) == [], "--no-server-copy sent a Copy Blob"
    assert len({r.path for r in body_gets(proxy, container)}) == n, (
        "every source blob is read through ferry"
    )
    assert blob_state(other_container) == want


def test_server_side_copy_with_a_sas_on_each_side(tmp_path, run_ferry, container, other_container):
    contents = seed(tmp_path, run_ferry, container, with_no_md5=False)
    out = run_ferry(
        "copy", "-r", container.signed(), other_container.signed(write=True), "--json", env=SAS_ONLY
    )
    assert (out.json["files"]["copied"], out.json["files"]["server_copied"]) == (
        len(contents),
    ) * 2, out.json
    assert blob_state(other_container) == blob_state(container)


def test_a_source_the_service_cannot_read_is_explained(
    tmp_path, run_ferry, container, other_container, proxy
):
    """Azurite checks a SAS-signed copy source by reading it at the host the URL names; behind
    the proxy that is not its own, so it answers CannotVerifyCopySource, as Azure does when the
    source's credential cannot read it. ferry says what to do; the flag then works."""
    seed(tmp_path, run_ferry, container, with_no_md5=False)
    src, dst = (
        container.signed(port=proxy.port),
        other_container.signed(write=True, port=proxy.port),
    )
    out = run_ferry("copy", "-r", src, dst, "--json", env=SAS_ONLY, check=1)
    assert out.json["files"]["failed"] == out.json["files"]["total"] > 0, out.json
    assert all(
        "cannot read the source" in f["error"] and "--no-server-copy" in f["error"]
        for f in out.json["failures"]
    ), out.json["failures"]
    assert "sig=" not in out.stdout.replace("sig=REDACTED", ""), (
        "a SAS signature reached the summary"
    )
    assert file_blobs(other_container) == {}, (
        "only the folder stubs, which need no copy source, were written"
    )
    streamed = run_ferry("copy", "-r", src, dst, "--no-server-copy", "--json", env=SAS_ONLY)
    assert streamed.json["files"]["server_copied"] == 0
    assert blob_state(other_container) == blob_state(container)


def test_a_source_rewritten_before_the_server_side_copy_fails_the_file(
    tmp_path, run_ferry, container, other_container, proxy
):
    old, new = os.urandom(MiB + 1), os.urandom(MiB + 1)
    for name, data in (("big.bin", old), ("small.txt", b"small\n")):
        md5_blob(container, name, data)
    # The Copy Blob of big.bin waits at the proxy while the source is replaced behind it.
    hold = proxy.add(
        "stall", method="PUT", path=rf"/{other_container.name}/big\.bin$", count=1, stall_timeout=60
    )
    proc = run_ferry.spawn(
        "copy",
        "-r",
        container.via(proxy.port),
        other_container.via(proxy.port),
        "--json",
        log_dir=tmp_path,
    )
    summary = fail_after_change(
        proc,
        proxy,
        hold,
        tmp_path,
        "the Copy Blob to stall",
        lambda: md5_blob(container, "big.bin", new),
    )
    assert [f["path"] for f in summary["failures"]] == ["big.bin"], summary
    assert "changed" in summary["failures"][0]["error"], summary
    assert set(other_container.blobs()) == {"small.txt"}, (
        "a copy of a version the source no longer is was kept"
    )
    proxy.clear_rules()
    run_ferry("copy", "-r", container.via(proxy.port), other_container.via(proxy.port))
    assert other_container.client.download_blob("big.bin").readall() == new


@pytest.mark.parametrize("status", ["failed", "aborted"])
def test_a_failed_copy_status_fails_the_file_and_leaves_no_blob(
    tmp_path, run_ferry, container, other_container, proxy, status
):
    data = os.urandom(100_000)
    md5_blob(container, "x.bin", data)
    at_dst = rf"/{other_container.name}/x\.bin$"
    # Azurite finishes every copy at once; the proxy makes it look pending, then ended badly.
    proxy.add("set_headers", method="PUT", path=at_dst, headers={"x-ms-copy-status": "pending"})
    proxy.add(
        "set_headers", method="HEAD", path=at_dst, count=1, headers={"x-ms-copy-status": "pending"}
    )
    proxy.add(
        "set_headers",
        method="HEAD",
        path=at_dst,
        skip=1,
        headers={
            "x-ms-copy-status": status,
            "x-ms-copy-status-description": "500 InternalError injected by the test proxy",
        },
    )
    out = run_ferry(
        "copy", "-r", container.via(proxy.port), other_container.via(proxy.port), "--json", check=1
    )
    [failure] = out.json["failures"]
    assert failure["path"] == "x.bin" and f"server-side copy {status}" in failure["error"], failure
    assert "the destination blob was removed" in failure["error"], failure
    if status == "failed":
        assert "injected by the test proxy" in failure["error"], failure
    assert len(proxy.requests("HEAD", path=at_dst)) == 2, (
        "one look while pending, one that saw the end"
    )
    assert other_container.blobs() == {}, "the destination of a failed copy was left behind"
    assert out.json["files"]["server_copied"] == 0


def test_a_copy_pending_past_the_timeout_is_aborted_and_removed(
    tmp_path, run_ferry, container, other_container, proxy
):
    md5_blob(container, "x.bin", os.urandom(100_000))
    at_dst = rf"/{other_container.name}/x\.bin$"
    proxy.add(
        "set_headers",
        method="PUT",
        path=at_dst,
        query={"comp": ABSENT},
        headers={"x-ms-copy-status": "pending"},
    )
    proxy.add(
        "set_headers",
        method="HEAD",
        path=at_dst,
        count=100,
        headers={"x-ms-copy-status": "pending"},
    )
    started = time.monotonic()
    out = run_ferry(
        "copy",
        "-r",
        container.via(proxy.port),
        other_container.via(proxy.port),
        "--server-copy-timeout",
        "1",
        "--json",
        check=1,
    )
    assert time.monotonic() - started < 20
    [failure] = out.json["failures"]
    assert (
        "still pending after 1 s; aborted; the destination blob was removed" in failure["error"]
    ), failure
    [abort] = proxy.requests("PUT", comp="copy", path=at_dst)
    assert abort.query.get("copyid") and ("x-ms-copy-action", "abort") in [
        (k.lower(), v) for k, v in abort.headers
    ]
    # Looks 0.1, 0.2, 0.4, 0.8 s apart until a second has gone, then one after the abort.
    assert 3 <= len(proxy.requests("HEAD", path=at_dst)) <= 8
    assert other_container.blobs() == {}


def test_a_pending_copy_is_polled_until_it_succeeds(
    tmp_path, run_ferry, container, other_container, proxy
):
    data = os.urandom(100_000)
    md5_blob(
        container,
        "x.bin",
        data,
        metadata={"mtime": "2017-07-14T02:40:00.000000001Z", "mode": "100600"},
    )
    at_dst = rf"/{other_container.name}/x\.bin$"
    proxy.add("set_headers", method="PUT", path=at_dst, headers={"x-ms-copy-status": "pending"})
    proxy.add(
        "set_headers", method="HEAD", path=at_dst, count=3, headers={"x-ms-copy-status": "pending"}
    )
    out = run_ferry(
        "copy", "-r", container.via(proxy.port), other_container.via(proxy.port), "--json"
    )
    assert out.json["files"]["server_copied"] == 1, out.json
    assert len(proxy.requests("HEAD", path=at_dst)) == 4, (
        "three pending looks, then the one that saw success"
    )
    assert blob_state(other_container) == blob_state(container)


# -- corruption on the wire --------------------------------------------------------------------


@pytest.mark.parametrize("size", [100_000, 17 * MiB + 5], ids=["one-read", "ranges"])
def test_a_corrupted_download_fails_and_leaves_no_file(tmp_path, run_ferry, container, proxy, size):
    md5_blob(container, "x.bin", os.urandom(size))
    # A byte near the start, so whichever range is read first has it.
    flip = proxy.add(
        "corrupt", method="GET", path=r"/x\.bin$", query={"comp": ABSENT}, body_bytes=3
    )
    dst = tmp_path / "dst"
    out = run_ferry(
        "copy", "-r", container.via(proxy.port), dst, "--block-size", "1MiB", "--json", check=1
    )
    assert flip.fired == 1 and any(r.cut for r in proxy.requests("GET")), "no byte was flipped"
    [failure] = out.json["failures"]
    assert failure["path"] == "x.bin" and "MD5 mismatch" in failure["error"], failure
    assert not dst.exists() or os.listdir(dst) == [], f"left behind: {os.listdir(dst)}"


@pytest.mark.parametrize("size", [100_000, 3 * MiB + 5], ids=["one-put", "blocks"])
def test_a_corrupted_blob_to_blob_stream_fails_and_commits_nothing(
    tmp_path, run_ferry, container, container2, proxy, size
):
    md5_blob(container, "x.bin", os.urandom(size))
    flip = proxy.add(
        "corrupt", method="GET", path=r"/x\.bin$", query={"comp": ABSENT}, body_bytes=3
    )
    src = container.signed(port=proxy.port)
    out = run_ferry(
        "copy",
        "-r",
        src,
        container2.signed(write=True),
        "--block-size",
        "1MiB",
        "--json",
        env=SAS_ONLY,
        check=1,
    )
    assert flip.fired == 1 and any(r.cut for r in proxy.requests("GET")), "no byte was flipped"
    [failure] = out.json["failures"]
    assert failure["path"] == "x.bin" and "MD5 mismatch" in failure["error"], failure
    assert container2.blobs() == {}, (
        "a blob whose bytes do not match the source's MD5 was committed"
    )


# -- verify ------------------------------------------------------------------------------------


def verify_counts(j: dict) -> tuple:
    return j["same"], j["differ"], j["missing_on_dst"], j["missing_on_src"], j["error"]


def test_verify_between_two_accounts(tmp_path, run_ferry, container, container2, proxy, proxy2):
    contents = seed(tmp_path, run_ferry, container)
    n = len(contents)
    src, dst = container.signed(port=proxy.port), container2.signed(write=True, port=proxy2.port)
    run_ferry("copy", "-r", src, dst, env=SAS_ONLY)
    # The MD5-less blob has none on the source side: --checksum cannot compare it without --download.
    proxy.clear_log()
    proxy2.clear_log()
    plain = run_ferry("verify", src, dst, "--json", env=SAS_ONLY)
    assert verify_counts(plain.json) == (n, 0, 0, 0, 0), plain.json
    checked = run_ferry("verify", src, dst, "--checksum", "--json", env=SAS_ONLY, check=1)
    assert verify_counts(checked.json) == (n - 1, 0, 0, 0, 1), checked.json
    [error] = checked.json["entries"]
    assert error["path"] == NO_MD5 and "no Content-MD5" in error["reason"], error
    assert body_gets(proxy, container) == [] and body_gets(proxy2, container2) == [], (
        "--checksum read blob bytes instead of Content-MD5"
    )
    downloaded = run_ferry("verify", src, dst, "--checksum", "--download", "--json", env=SAS_ONLY)
    assert verify_counts(downloaded.json) == (n, 0, 0, 0, 0), downloaded.json
    assert {r.path.split("/", 3)[3] for r in body_gets(proxy, container)} == {NO_MD5}, (
        "only the MD5-less blob is read"
    )
    single = run_ferry(
        "verify",
        container.signed("a.txt"),
        container2.signed("a.txt"),
        "--checksum",
        "--json",
        env=SAS_ONLY,
    )
    assert verify_counts(single.json) == (1, 0, 0, 0, 0), single.json

    # Behind ferry's back: one blob rewritten (same size, new bytes), one gone on each side.
    a = contents["a.txt"]
    md5_blob(container2, "a.txt", a.upper())
    container2.client.delete_blob("nested/deeper/c.txt")
    container.client.delete_blob("empty")
    same_size = run_ferry("verify", src, dst, "--json", env=SAS_ONLY, check=1)
    assert verify_counts(same_size.json) == (n - 2, 0, 1, 1, 0), same_size.json
    assert {e["path"]: e["status"] for e in same_size.json["entries"]} == {
        "nested/deeper/c.txt": "missing_on_dst",
        "empty": "missing_on_src",
    }
    r = run_ferry("verify", src, dst, "--checksum", "--download", "--json", env=SAS_ONLY, check=1)
    assert verify_counts(r.json) == (n - 3, 1, 1, 1, 0), r.json
    differ = [e for e in r.json["entries"] if e["status"] == "differ"]
    assert [e["path"] for e in differ] == ["a.txt"] and "md5" in differ[0]["reason"], differ
    text = run_ferry("verify", src, dst, "--checksum", "--download", env=SAS_ONLY, check=1)
    assert sorted(text.stdout.splitlines()) == sorted(
        [
            "* a.txt\tmd5 "
            + hashlib.md5(a).hexdigest()
            + " != "
            + hashlib.md5(a.upper()).hexdigest(),
            "+ nested/deeper/c.txt",
            "- empty",
        ]
    ), text.stdout
