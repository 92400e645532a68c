"""What the worker reports for a pipeline's history, live status and projection: Blob requests by
kind (``requests`` in every ``--json``, ``ls``/``mk --summary``), equal to what the recording proxy
in front of Azurite saw, retries included; and ``--progress-file``, rewritten while a copy or a
verify runs and finished with the totals of the ``--json`` report."""

from __future__ import annotations

import json
import os
import time
import uuid

import ferry_docs
from support.requests import KINDS, assert_counted
from support.trees import make_tree

KiB, MiB = 1 << 10, 1 << 20


def test_upload_requests_by_kind_equal_what_the_proxy_saw_retries_included(
    tmp_path, container, proxy, run_ferry
):
    src = tmp_path / "src"
    # Small files go in one Put Blob each, the large one in blocks and a block list (after a
    # Get Block List for what an earlier attempt staged); the directory is a folder stub.
    make_tree(src, {"a.txt": b"a\n", "sub/b.bin": 100_000, "big.bin": 3 * MiB + 5})
    # Each kind of write fails once and is sent again: every attempt is a request.
    proxy.add(
        "status",
        method="PUT",
        query={"comp": "block"},
        status=503,
        headers={"Retry-After": "0"},
        count=2,
    )
    proxy.add("status", method="PUT", query={"comp": "blocklist"}, status=500, count=1)
    proxy.add(
        "status", method="PUT", path=r"/a\.txt$", status=503, headers={"Retry-After": "0"}, count=1
    )

    up = run_ferry(
        "copy", src, container.via(proxy.port), "--recursive", "--block-size", "1MiB", "--json"
    )
    assert up.json["files"]["copied"] == 3 and up.json["files"]["failed"] == 0, up.json
    assert up.json["retries"]["total"] == 4, up.json["retries"]
    requests = up.json["requests"]
    assert_counted(requests, proxy, "upload")
    assert requests["blocks"] == 4 + 2 and requests["block_lists"] == 2, requests
    assert requests["puts"] >= 3 + 1, requests  # two files, at least one folder stub, one retry

    # Nothing changed: one listing of the destination, one look at the top directory's
    # attributes (the container's metadata), and nothing written.
    proxy.clear_log()
    again = run_ferry("copy", src, container.via(proxy.port), "--recursive", "--json")
    assert again.json["files"]["skipped"] == 3, again.json
    assert_counted(again.json["requests"], proxy, "second pass")
    requests = again.json["requests"]
    assert requests["list_pages"] >= 1
    assert sum(requests.values()) == requests["list_pages"] + 1, requests


def test_download_blob_copy_verify_and_rm_count_their_requests(
    tmp_path, container, other_container, proxy, run_ferry
):
    src, dst = tmp_path / "src", tmp_path / "dst"
    make_tree(src, {"one.bin": 2 * MiB + 7, "two.txt": b"two\n", "d/three.txt": b"3\n"})
    run_ferry("copy", src, container, "--recursive")

    # A body cut short is asked for again from where it broke off: two GETs for one range.
    cut = proxy.add("truncate", method="GET", path=r"/one\.bin$", body_bytes=64 * KiB, count=1)
    down = run_ferry("copy", container.via(proxy.port), dst, "--recursive", "--json")
    assert cut.fired == 1 and down.json["files"]["failed"] == 0, down.json
    assert_counted(down.json["requests"], proxy, "download")
    assert down.json["requests"]["gets"] >= 3 + 1, down.json["requests"]

    # Within one account the service copies: Copy Blob, and looks at source and destination.
    proxy.clear_log()
    proxy.clear_rules()
    blob = run_ferry(
        "copy", container.via(proxy.port), other_container.via(proxy.port), "--recursive", "--json"
    )
    assert blob.json["files"]["server_copied"] == 3, blob.json
    assert_counted(blob.json["requests"], proxy, "blob to blob")
    assert blob.json["requests"]["copies"] == 3 and blob.json["requests"]["heads"] >= 3, blob.json[
        "requests"
    ]

    proxy.clear_log()
    check = run_ferry("verify", src, container.via(proxy.port), "--checksum", "--json")
    assert check.json["same"] == 3, check.json
    assert_counted(check.json["requests"], proxy, "verify")

    proxy.clear_log()
    gone = run_ferry("rm", "--recursive", other_container.via(proxy.port), "--json")
    assert_counted(gone.json["requests"], proxy, "rm")
    assert gone.json["requests"]["deletes"] == gone.json["deleted"] >= 3, gone.json


def test_the_pipeline_scripts_know_every_kind():
    # The report and the history sum reports key by key over the kinds the worker's schema
    # names (ferry_docs.py): a kind missing from it would vanish from both.
    assert ferry_docs.REQUEST_KINDS == KINDS


def test_local_copies_report_zero_requests(tmp_path, run_ferry):
    src = tmp_path / "src"
    make_tree(src, {"a.txt": b"a\n"})
    out = run_ferry("copy", src, tmp_path / "dst", "--recursive", "--json")
    assert out.json["requests"] == dict.fromkeys(KINDS, 0)


def test_ls_and_mk_write_a_summary_with_their_requests(
    tmp_path, azurite, container, proxy, run_ferry
):
    src = tmp_path / "src"
    make_tree(src, {"a.txt": b"a\n", "b/c.txt": b"c\n", "b/d.txt": b"d\n"})
    run_ferry("copy", src, container, "--recursive")

    summary = tmp_path / "ls.json"
    listed = run_ferry("ls", "--recursive", container.via(proxy.port), "--summary", summary)
    doc = json.loads(summary.read_text())
    lines = listed.stdout.splitlines()
    assert doc["command"] == "ls" and doc["entries"] == len(lines) - 2 == 4, (
        doc,
        lines,
    )  # a header line and the end record
    assert lines[-1] == "#ferry-end\tentries=4\tbytes=6", lines
    assert doc["seconds"] >= 0
    assert_counted(doc["requests"], proxy, "ls")
    assert doc["requests"]["list_pages"] >= 1
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".ls.json")] == [], (
        "a temporary file was left"
    )

    local = tmp_path / "local.json"
    run_ferry("ls", "--recursive", src, "--summary", local)
    assert json.loads(local.read_text())["requests"] == dict.fromkeys(KINDS, 0)

    proxy.clear_log()
    made = tmp_path / "mk.json"
    name = f"mk-{uuid.uuid4().hex[:12]}"
    run_ferry("mk", azurite.url(name, port=proxy.port), "--summary", made)
    doc = json.loads(made.read_text())
    assert doc["command"] == "mk" and doc["created"] is True, doc
    assert_counted(doc["requests"], proxy, "mk")
    assert doc["requests"]["others"] == 1, doc
    proxy.clear_log()
    run_ferry("mk", azurite.url(name, port=proxy.port), "--summary", made)
    doc = json.loads(made.read_text())
    assert doc["created"] is False, doc
    assert_counted(doc["requests"], proxy, "mk of an existing container")
    azurite.service_client().delete_container(name)


def read_progress(path):
    """The progress file, or None while it does not exist yet. It is replaced by a rename, so a
    read never sees half a document."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


def test_progress_file_is_rewritten_while_an_upload_runs(tmp_path, container, run_ferry):
    src = tmp_path / "src"
    # 6 MiB at 1 MiB/s: about six seconds, three rewrites or so.
    make_tree(src, {f"f{i}.bin": 768 * KiB for i in range(8)})
    progress = tmp_path / "run" / "progress.json"
    progress.parent.mkdir()
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
        "--progress-file",
        progress,
        log_dir=tmp_path,
    )
    try:
        snapshots = []
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            doc = read_progress(progress)
            if doc is not None and (not snapshots or doc["updated"] != snapshots[-1]["updated"]):
                snapshots.append(doc)
            time.sleep(0.2)
        assert proc.wait(timeout=60) == 0, (tmp_path / "ferry.stderr").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    report = json.loads((tmp_path / "ferry.stdout").read_text())
    final = read_progress(progress)

    running = [s for s in snapshots if not s["finished"]]
    assert len(running) >= 2, f"the file was not rewritten while the copy ran: {snapshots}"
    first, later = running[0], running[-1]
    assert first["command"] == "copy" and first["pid"] == proc.pid, first
    assert (
        later["updated"] > first["updated"] and later["bytes"]["done"] > first["bytes"]["done"]
    ), (first, later)
    assert later["started"] == first["started"] <= first["updated"]
    assert 0 < later["bytes_per_second"] < 3 * MiB, later
    assert later["files"]["total"] == 8 and later["bytes"]["total"] == 6 * MiB, later

    assert final["finished"] is True, final
    files, bytes_ = report["files"], report["bytes"]
    assert final["files"] == {
        "done": files["copied"] + files["skipped"] + files["failed"] + files["ignored"],
        "failed": files["failed"],
        "total": files["total"],
    }, (final, report)
    assert final["bytes"] == {
        "done": bytes_["copied"] + bytes_["skipped"],
        "total": bytes_["total"],
    }, (final, report)
    assert final["requests"] == report["requests"], (final, report)
    # Any block sent twice is a retry: its cause (by_status) is what to look into.
    assert final["requests"]["blocks"] == 8 * 3, report["retries"]
    assert sorted(p.name for p in progress.parent.iterdir()) == ["progress.json"], (
        "a temporary file was left"
    )


def test_verify_progress_file_totals_from_a_manifest_and_unknown_for_whole_trees(
    tmp_path, container, run_ferry
):
    src = tmp_path / "src"
    make_tree(src, {"a.txt": b"a\n", "b/c.bin": 5000, "b/d.txt": b"d\n"})
    run_ferry("copy", src, container, "--recursive")
    (src / "b" / "d.txt").write_bytes(b"changed\n")
    manifest = tmp_path / "part.tsv"
    manifest.write_bytes(run_ferry("ls", "--recursive", src).stdout_bytes)

    progress = tmp_path / "verify.json"
    out = run_ferry(
        "verify",
        src,
        container,
        "--files-from",
        manifest,
        "--json",
        "--progress-file",
        progress,
        check=1,
    )
    doc = read_progress(progress)
    assert doc["command"] == "verify" and doc["finished"] is True, doc
    assert doc["files"] == {"done": 3, "failed": 1, "total": 3}, doc
    assert doc["bytes"]["total"] == 2 + 5000 + 8 == doc["bytes"]["done"], doc
    assert doc["requests"] == out.json["requests"]

    run_ferry("verify", src, container, "--json", "--progress-file", progress, check=1)
    doc = read_progress(progress)
    assert (
        doc["finished"] is True and doc["files"]["total"] is None and doc["bytes"]["total"] is None
    ), doc
    assert doc["files"]["done"] == 3 and doc["files"]["failed"] == 1, doc


def test_a_progress_file_that_cannot_be_written_is_a_warning(tmp_path, run_ferry):
    src = tmp_path / "src"
    make_tree(src, {"a.txt": b"a\n"})
    out = run_ferry(
        "copy",
        src,
        tmp_path / "dst",
        "--recursive",
        "--progress-file",
        tmp_path / "no" / "such" / "p.json",
    )
    assert "warning: cannot write the progress file" in out.stderr, out.stderr
    assert out.stderr.count("cannot write the progress file") == 1, out.stderr
    assert (tmp_path / "dst" / "a.txt").read_bytes() == b"a\n"
    assert not os.path.exists(tmp_path / "no")
