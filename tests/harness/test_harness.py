"""Checks of the test harness itself (Azurite, the fault proxy, tree builders), without ferry.

When these fail, the verdicts of the worker tests that use the same pieces cannot be trusted.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import threading
import time

import pytest
from azure.storage.blob import BlobServiceClient, ContentSettings, LinearRetry
from support.azurite import ACCOUNT, KEY
from support.manifest import escape_path, parse_manifest, unescape_path
from support.proxy import ABSENT
from support.trees import (
    LOCAL_ONLY_NAMES,
    ODD_NAMES,
    Dir,
    File,
    Link,
    files_only,
    make_tree,
    many_files_spec,
    odd_names_spec,
    over_blocks,
    snapshot,
)


def sdk_via(port: int, **kwargs) -> BlobServiceClient:
    # The SDK's default retry waits 15 s before retrying; faults here are injected on purpose.
    return BlobServiceClient(
        f"http://127.0.0.1:{port}/{ACCOUNT}",
        credential={"account_name": ACCOUNT, "account_key": KEY},
        retry_policy=LinearRetry(backoff=0.05, random_jitter_range=0, retry_total=5),
        **kwargs,
    )


def test_azurite_serves_the_sdk(container):
    blob = container.client.get_blob_client("hello/world.txt")
    blob.upload_blob(b"hello")
    assert container.client.download_blob("hello/world.txt").readall() == b"hello"
    props = container.blobs()
    assert list(props) == ["hello/world.txt"]
    assert (
        bytes(props["hello/world.txt"].content_settings.content_md5)
        == hashlib.md5(b"hello").digest()
    )


def test_azurite_keeps_odd_blob_names(container):
    # The worker tests upload these names; the emulator itself must store and list them intact.
    names = [n for n in ODD_NAMES] + ["deep/ünï/名前.txt"]
    for n in names:
        container.client.upload_blob(n, n.encode())
    listed = container.blobs()
    assert sorted(listed) == sorted(names)
    for n in names:
        assert container.client.download_blob(n).readall() == n.encode()


def test_proxy_forwards_signed_multiblock_upload(container, proxy):
    data = os.urandom(over_blocks(64 * 1024))
    sdk = sdk_via(proxy.port, max_single_put_size=64 * 1024, max_block_size=64 * 1024)
    blob = sdk.get_blob_client(container.name, "via proxy/blob ü.bin")
    blob.upload_blob(
        data,
        max_concurrency=2,
        content_settings=ContentSettings(content_md5=hashlib.md5(data).digest()),
    )
    blocks = proxy.requests("PUT", comp="block")
    assert len(blocks) == 4
    assert len({r.block_id for r in blocks}) == 4
    assert all(r.status == 201 for r in blocks)
    assert [r.status for r in proxy.requests("PUT", comp="blocklist")] == [201]
    assert blocks[0].path == f"/{ACCOUNT}/{container.name}/via proxy/blob ü.bin"
    assert blob.download_blob().readall() == data
    # Azurite saw what the proxy saw: the block ids it holds are the ones the proxy logged.
    committed, _ = container.client.get_blob_client("via proxy/blob ü.bin").get_block_list(
        "committed"
    )
    assert len(committed) == 4


def test_proxy_injects_status_then_lets_retries_through(container, proxy):
    rule = proxy.add("status", method="PUT", status=503, headers={"Retry-After": "0"}, count=2)
    sdk = sdk_via(proxy.port)
    sdk.get_blob_client(container.name, "x").upload_blob(b"payload")
    statuses = [r.status for r in proxy.requests("PUT")]
    assert statuses == [503, 503, 201]
    assert rule.fired == 2 and rule.matched == 3
    assert container.client.download_blob("x").readall() == b"payload"


def test_proxy_skip_and_query_matching(container, proxy):
    proxy.add("status", method="PUT", query={"comp": "block"}, skip=1, count=1, status=500)
    proxy.add("status", method="PUT", query={"comp": ABSENT}, status=500, count=1)
    sdk = sdk_via(proxy.port, max_single_put_size=1024, max_block_size=1024)
    sdk.get_blob_client(container.name, "blocks").upload_blob(b"z" * 3000, max_concurrency=1)
    sdk.get_blob_client(container.name, "single").upload_blob(b"one shot")
    block_statuses = [r.status for r in proxy.requests("PUT", comp="block")]
    assert block_statuses.count(500) == 1 and block_statuses[0] == 201
    assert [r.status for r in proxy.requests("PUT", comp=ABSENT)] == [500, 201]


@pytest.fixture
def public_blob(container):
    """A blob readable without credentials, so raw http.client requests can fetch it."""
    container.client.set_container_access_policy(signed_identifiers={}, public_access="blob")
    data = os.urandom(200_000)
    container.client.upload_blob("pub.bin", data)
    return f"/{ACCOUNT}/{container.name}/pub.bin", data


def raw_get(port: int, path: str, timeout: float = 10) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_proxy_answers_429_with_retry_after(public_blob, proxy):
    path, data = public_blob
    proxy.add("status", method="GET", path=r"/pub\.bin$", status=429, headers={"Retry-After": "3"})
    conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
    conn.request("GET", path)
    resp = conn.getresponse()
    assert resp.status == 429 and resp.getheader("Retry-After") == "3"
    assert b"TooManyRequests" in resp.read()
    # The same kept-alive connection carries on to a forwarded answer.
    conn.request("GET", path)
    resp = conn.getresponse()
    assert (resp.status, resp.read()) == (200, data)
    conn.close()


def test_proxy_truncates_body(public_blob, proxy):
    path, data = public_blob
    proxy.add("truncate", method="GET", body_bytes=1000)
    with pytest.raises(http.client.IncompleteRead) as err:
        raw_get(proxy.port, path)
    assert len(err.value.partial) == 1000
    # count=1: the next request is whole again.
    assert raw_get(proxy.port, path) == (200, data)


def test_proxy_stall_then_drop_on_release(public_blob, proxy):
    path, data = public_blob
    rule = proxy.add("stall", method="GET", after_stall="drop", stall_timeout=20)
    outcome = {}

    def client():
        try:
            outcome["result"] = raw_get(proxy.port, path, timeout=20)
        except (OSError, http.client.HTTPException) as e:
            outcome["error"] = e

    t = threading.Thread(target=client)
    t.start()
    proxy.wait_for(lambda: proxy.stalled == 1, timeout=10, what="the GET to stall")
    time.sleep(0.2)
    assert t.is_alive(), "a stalled request must not complete before release"
    proxy.release(rule)
    t.join(10)
    assert "error" in outcome, f"a dropped request must fail, got {outcome}"
    proxy.wait_idle(5)
    assert raw_get(proxy.port, path) == (200, data)


def test_proxy_stall_is_bounded_and_then_forwards(public_blob, proxy):
    path, data = public_blob
    proxy.add("stall", method="GET", stall_timeout=0.5)
    started = time.monotonic()
    assert raw_get(proxy.port, path) == (200, data)
    assert 0.45 <= time.monotonic() - started < 10


def test_proxy_stall_body_sends_head_and_part(public_blob, proxy):
    path, data = public_blob
    proxy.add("stall_body", method="GET", body_bytes=5000, stall_timeout=0.5)
    conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
    conn.request("GET", path)
    resp = conn.getresponse()
    assert resp.status == 200 and int(resp.getheader("Content-Length")) == len(data)
    assert resp.read(5000) == data[:5000]
    with pytest.raises(http.client.IncompleteRead):
        resp.read()
    conn.close()


def test_tree_builder_and_snapshot(tmp_path):
    spec = {
        "empty": b"",
        "big.bin": over_blocks(1 << 20),
        "sub/mode600": File(data=b"secret", mode=0o600, mtime_ns=1_500_000_000_123_456_789),
        "emptydir": Dir(mode=0o750),
        "link": Link("sub/mode600"),
        "dangling": Link("nowhere"),
        **odd_names_spec(local_only=True),
        **many_files_spec(50, per_dir=20),
    }
    contents = make_tree(tmp_path, spec)
    snap = snapshot(tmp_path)
    assert snap[b"big.bin"].size == 3 * (1 << 20) + (1 << 19) + 4093
    assert snap[b"sub/mode600"].mode == 0o600
    assert snap[b"sub/mode600"].mtime_ns == 1_500_000_000_123_456_789
    assert snap[b"emptydir"].type == "d" and snap[b"emptydir"].mode == 0o750
    assert snap[b"link"].type == "l" and snap[b"link"].target == b"sub/mode600"
    assert snap[b"dangling"].type == "l"
    for name in LOCAL_ONLY_NAMES:
        assert snap[b"odd/" + name].type == "f"
    files = files_only(snap)
    assert files == {p: hashlib.md5(c).hexdigest() for p, c in contents.items()}
    assert sum(1 for p in files if p.startswith(b"many/")) == 50


@pytest.mark.parametrize(
    "raw, escaped",
    [
        (b"plain/name.txt", "plain/name.txt"),
        (b"tab\there", "tab\\there"),
        (b"new\nline", "new\\nline"),
        (b"cr\rx", "cr\\rx"),
        (b"back\\slash", "back\\\\slash"),
        (b"#first", "\\x23first"),
        (b"not#first", "not#first"),
        (b"bad-\xff.bin", "bad-\\xff.bin"),
        ("ünï/名前".encode(), "ünï/名前"),
    ],
)
def test_manifest_escaping_reference(raw, escaped):
    assert escape_path(raw) == escaped
    assert unescape_path(escaped) == raw


def test_manifest_parser_rejects_bad_lines():
    comments, entries = parse_manifest(
        "#ferry-manifest v1\na\\tb\tf\t3\t1700000000.123456789\t" + "0" * 32 + "\n"
    )
    assert comments == ["#ferry-manifest v1"]
    assert entries[0].path == b"a\tb" and entries[0].mtime_ns == 1_700_000_000_123_456_789
    with pytest.raises(AssertionError):
        parse_manifest("a\tf\t3\n")
    with pytest.raises(AssertionError):
        parse_manifest("a\tf\t3\t1700000000.1\t-\n")
