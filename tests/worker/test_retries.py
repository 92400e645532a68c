"""Transient server faults (503 + Retry-After, 500, a cut-off body) are retried; --max-retries 0 is not."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time

from support.summary import section
from support.trees import files_only, make_tree, snapshot

MiB = 1 << 20


def test_upload_and_download_retry_injected_faults(tmp_path, container, proxy, run_ferry):
    src, dst = tmp_path / "src", tmp_path / "dst"
    contents = make_tree(src, {"a.bin": 300_000, "b.bin": 2 * MiB + 12_345, "c.txt": b"c\n"})
    # The first PUT of the run gets a 503 asking for an immediate retry; the third PUT a bare 500.
    busy = proxy.add("status", method="PUT", status=503, headers={"Retry-After": "0"}, count=1)
    broken = proxy.add("status", method="PUT", status=500, skip=2, count=1)

    up = run_ferry(
        "copy", src, container.via(proxy.port), "--recursive", "--block-size", "1MiB", "--json"
    )
    assert (busy.fired, broken.fired) == (1, 1), "the faults were not all injected"
    assert section(up.json, "files") == {"total": 3, "copied": 3, "skipped": 0, "failed": 0}, (
        up.json
    )
    assert up.json["failures"] == []
    retries = up.json["retries"]
    assert retries["total"] >= 2, retries
    assert retries["by_status"].get("503", 0) >= 1 and retries["by_status"].get("500", 0) >= 1, (
        retries
    )
    for rel, data in contents.items():
        props = container.client.get_blob_client(rel.decode()).get_blob_properties()
        assert bytes(props.content_settings.content_md5) == hashlib.md5(data).digest(), rel
        assert container.client.download_blob(rel.decode()).readall() == data

    proxy.clear_rules()
    # Cut the body of b.bin's first data GET short: the connection closes after 100 kB.
    cut = proxy.add("truncate", method="GET", path=r"/b\.bin$", body_bytes=100_000, count=1)
    down = run_ferry("copy", container.via(proxy.port), dst, "--recursive", "--json")
    assert cut.fired == 1, "ferry never fetched b.bin through the proxy"
    assert down.json["files"]["failed"] == 0 and down.json["files"]["copied"] == 3, down.json
    assert down.json["retries"]["total"] >= 1, down.json["retries"]
    assert files_only(snapshot(dst)) == files_only(snapshot(src))


def test_max_retries_zero_fails_that_file_and_copies_the_rest(
    tmp_path, container, proxy, run_ferry
):
    src = tmp_path / "src"
    make_tree(src, {"a.txt": b"a\n", "b.txt": b"b\n", "c.txt": b"c\n"})
    proxy.add(
        "status", method="PUT", path=r"/b\.txt$", status=503, headers={"Retry-After": "0"}, count=5
    )

    result = run_ferry(
        "copy",
        src,
        container.via(proxy.port),
        "--recursive",
        "--max-retries",
        "0",
        "--json",
        check=1,
    )
    assert section(result.json, "files") == {"total": 3, "copied": 2, "skipped": 0, "failed": 1}, (
        result.json
    )
    failures = result.json["failures"]
    assert len(failures) == 1 and failures[0]["path"].endswith("b.txt"), failures
    assert failures[0]["error"], "a failure must say what went wrong"
    assert sorted(container.blobs()) == ["a.txt", "c.txt"]
    assert len(proxy.requests("PUT", path=r"/b\.txt$")) == 1, "--max-retries 0 must not retry"


def test_waiting_on_the_bandwidth_cap_is_no_stalled_link(tmp_path, container, run_ferry):
    """--io-timeout gives up on a response that delivers nothing while ferry waits for it; the
    time ferry itself holds a response back under --max-bandwidth is not that. At 16 KiB/s a
    chunk of the body waits a second or more before ferry asks for the next (hyper's reads grow
    to 32 KiB and more), past an --io-timeout of 1 s: a clock that ran through that wait would
    cut the GET and send it again. So: one GET, no retry, both ways (an upload holds its block
    back before it sends it, and must stay so)."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    contents = make_tree(src, {"a.bin": 72 * 1024})
    container.client.upload_blob("a.bin", contents[b"a.bin"])
    capped = (
        "--block-size",
        "64KiB",
        "--max-bandwidth",
        "16KiB/s",
        "--io-timeout",
        "1",
        "--max-retries",
        "3",
        "--json",
    )

    down = run_ferry("copy", container, dst, "--recursive", *capped)
    assert down.json["retries"] == {"by_status": {}, "total": 0}, down.json["retries"]
    assert down.json["requests"]["gets"] == 1, down.json["requests"]
    assert files_only(snapshot(dst)) == files_only(snapshot(src))

    up = run_ferry("copy", src, container.at("again/"), "--recursive", *capped)
    assert up.json["retries"] == {"by_status": {}, "total": 0}, up.json["retries"]
    assert up.json["requests"]["blocks"] == 2, up.json["requests"]


def test_a_connection_left_idle_past_the_servers_keep_alive_is_not_reused(
    tmp_path, container, run_ferry
):
    """Under --max-bandwidth a copy's connections sit idle between blocks; a server closes one
    idle for its keep-alive (Azurite: 5 s, Node's). A busy machine may not run ferry for a
    while, so ferry has not yet noticed the close when its pool hands that connection out: the
    block goes to a closed socket and is sent again (the failure of
    test_progress_file_is_rewritten_while_an_upload_runs on a loaded machine: 26 blocks for 24).
    Here ferry is stopped outright for 6 s early on, past the keep-alive of every connection it
    opened; no block may be sent twice."""
    src = tmp_path / "src"
    make_tree(src, {f"f{i}.bin": 768 * 1024 for i in range(8)})
    proc = run_ferry.spawn(
        "copy",
        src,
        container,
        "--recursive",
        "--block-size",
        "256KiB",
        "--max-bandwidth",
        "1MiB/s",
        "--json",
        log_dir=tmp_path,
    )
    try:
        time.sleep(1)
        assert proc.poll() is None, (tmp_path / "ferry.stderr").read_text()
        os.kill(proc.pid, signal.SIGSTOP)
        time.sleep(6)
        os.kill(proc.pid, signal.SIGCONT)
        assert proc.wait(timeout=60) == 0, (tmp_path / "ferry.stderr").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    report = json.loads((tmp_path / "ferry.stdout").read_text())
    assert report["retries"] == {"by_status": {}, "total": 0}, report["retries"]
    assert report["requests"]["blocks"] == 8 * 3, report["requests"]
