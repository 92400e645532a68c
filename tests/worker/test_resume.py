"""kill -9 in the middle of a transfer, then run again: resume without re-sending, no torn files."""

from __future__ import annotations

import hashlib
import os
import time

import pytest
from azure.core.exceptions import ResourceNotFoundError
from support.faults import PARTIAL_PREFIX, small_disk
from support.interrupt import kill_once_blocks_staged, sdk_block_id, wait_alive
from support.proxy import ABSENT
from support.summary import section
from support.trees import File, make_tree, snapshot

MiB = 1 << 20
BLOCKS = 12
# How long before a pass began nothing may have written to ferry's leftover for the pass to
# remove it (docs/worker.md, "Resume"), and a little more.
LEFTOVER_QUIET_S = 5.2


def test_kill_during_multiblock_upload_resumes_without_resending_blocks(
    tmp_path, container, proxy, run_ferry
):
    src = tmp_path / "src"
    size = BLOCKS * MiB - 1000
    contents = make_tree(src, {"big.bin": File(size=size)})
    data = contents[b"big.bin"]
    staged_first = 3
    sent_before = kill_once_blocks_staged(
        proxy,
        lambda: run_ferry.spawn(
            "copy",
            src,
            container.via(proxy.port),
            "--recursive",
            "--block-size",
            "1MiB",
            log_dir=tmp_path,
        ),
        staged_first,
        BLOCKS * 4,
    )

    blob = container.client.get_blob_client("big.bin")
    with pytest.raises(ResourceNotFoundError):
        blob.get_blob_properties()  # nothing may be committed yet: the upload was cut short
    _, uncommitted = blob.get_block_list("uncommitted")
    staged = {b.id for b in uncommitted}
    assert len(staged) == staged_first and staged == sent_before, (
        "Azurite should hold exactly the blocks that got through"
    )

    proxy.clear_rules()
    proxy.clear_log()
    rerun = run_ferry(
        "copy", src, container.via(proxy.port), "--recursive", "--block-size", "1MiB", "--json"
    )
    put_blocks = proxy.requests("PUT", comp="block")
    resent = [r.block_id for r in put_blocks if sdk_block_id(r.block_id) in staged]
    assert resent == [], f"re-run sent already staged blocks again: {resent}"
    assert len(put_blocks) == BLOCKS - len(staged), (
        f"re-run sent {len(put_blocks)} Put Block, want {BLOCKS - len(staged)} (the blocks never staged)"
    )
    assert rerun.json["files"]["copied"] == 1
    assert section(rerun.json, "blocks") == {"sent": BLOCKS - len(staged), "reused": len(staged)}, (
        rerun.json["blocks"]
    )

    assert blob.download_blob().readall() == data
    props = blob.get_blob_properties()
    assert props.size == size
    assert bytes(props.content_settings.content_md5) == hashlib.md5(data).digest()
    committed, _ = blob.get_block_list("committed")
    assert len(committed) == BLOCKS


def test_kill_during_download_leaves_no_partial_file_and_rerun_completes(
    tmp_path, container, proxy, run_ferry
):
    data = os.urandom(8 * MiB + 333)
    container.client.upload_blob("big.bin", data)
    container.client.upload_blob("small.txt", b"small\n")
    dst = tmp_path / "dst"
    # Every GET of the big blob's bytes gets a little of its body, then hangs until ferry is dead.
    hold = proxy.add(
        "stall_body",
        method="GET",
        path=r"/big\.bin$",
        query={"comp": ABSENT},
        body_bytes=256 * 1024,
        count=200,
        stall_timeout=60,
    )
    proc = run_ferry.spawn(
        "copy",
        container.via(proxy.port),
        dst,
        "--recursive",
        "--block-size",
        "1MiB",
        log_dir=tmp_path,
    )
    try:
        wait_alive(
            proxy, proc, lambda: proxy.stalled >= 1, 60, "a GET of big.bin to stall mid-body"
        )
        time.sleep(0.5)  # let ferry write what it received, so a torn file would exist if it can
    finally:
        proc.kill()
        proc.wait(10)
    proxy.release(hold)
    proxy.wait_idle(30)

    assert not os.path.lexists(dst / "big.bin"), (
        f"a partial file exists under the final name: {os.path.getsize(dst / 'big.bin')} of {len(data)} bytes"
    )
    left_behind = sorted(p.decode(errors="replace") for p in snapshot(dst)) if dst.exists() else []

    proxy.clear_rules()
    run_ferry("copy", container.via(proxy.port), dst, "--recursive", "--block-size", "1MiB")
    assert (dst / "big.bin").read_bytes() == data
    assert (dst / "small.txt").read_bytes() == b"small\n"
    final = sorted(p.decode() for p in snapshot(dst))
    assert final == ["big.bin", "small.txt"], (
        f"temporary files left after a successful re-run: {final} (after the kill: {left_behind})"
    )


def test_killed_download_resumes_from_the_ranges_already_written(
    tmp_path, container, proxy, run_ferry
):
    # Three ranges of at least 8 MiB each (ferry's download range): 8 + 8 + 4 MiB and a bit.
    data = os.urandom(20 * MiB + 333)
    container.client.upload_blob("big.bin", data)
    dst = tmp_path / "dst"
    # The first two range GETs pass; the third hangs mid-body until ferry is dead.
    hold = proxy.add(
        "stall_body",
        method="GET",
        path=r"/big\.bin$",
        query={"comp": ABSENT},
        skip=2,
        count=1,
        body_bytes=64 * 1024,
        stall_timeout=60,
    )
    proc = run_ferry.spawn("copy", container.via(proxy.port), dst, "--recursive", log_dir=tmp_path)
    try:

        def two_done_one_stalled():
            gets = proxy.requests("GET", comp=ABSENT, path=r"/big\.bin$")
            return proxy.stalled >= 1 and sum(r.done for r in gets) >= 2

        wait_alive(
            proxy, proc, two_done_one_stalled, 60, "two ranges written and the third stalled"
        )
        time.sleep(0.5)  # the journal line follows the last write of a range
    finally:
        proc.kill()
        proc.wait(10)
    stalled = [
        r
        for r in proxy.requests("GET", comp=ABSENT, path=r"/big\.bin$")
        if r.action == "stall_body"
    ]
    assert len(stalled) == 1

    # The SDK names the range `x-ms-range` or, on a conditional GET, `range`.
    def range_of(r):
        return (lambda h: h.get("x-ms-range") or h.get("range"))(
            dict((k.lower(), v) for k, v in r.headers)
        )

    unfinished = range_of(stalled[0])
    proxy.release(hold)
    proxy.wait_idle(30)

    proxy.clear_rules()
    proxy.clear_log()
    out = run_ferry("copy", container.via(proxy.port), dst, "--recursive", "--json")
    assert (dst / "big.bin").read_bytes() == data
    again = [range_of(r) for r in proxy.requests("GET", comp=ABSENT, path=r"/big\.bin$")]
    assert again == [unfinished], f"the re-run fetched {again}; only {unfinished} was missing"
    assert section(out.json, "blocks") == {"sent": 1, "reused": 2}


def ferrys_own(root):
    """ferry's temp files under ``root`` (the exact names it generates), by path."""
    return sorted(
        os.path.relpath(os.path.join(d, n), root)
        for d, _, names in os.walk(root)
        for n in names
        if n.startswith(PARTIAL_PREFIX)
    )


def test_a_download_that_runs_out_of_space_leaves_neither_partial_file_nor_journal(
    tmp_path, container, run_ferry
):
    """A disk that filled up stays full no longer than the failed download: its partial file
    and journal go with the failure, which names the file and the full disk."""
    data = os.urandom(6 * MiB)
    container.client.upload_blob("dir/big.bin", data)
    with small_disk(tmp_path / "disk", 8) as disk:
        (disk / "filler").write_bytes(b"\0" * (4 * MiB))
        free_before = os.statvfs(disk).f_bavail
        dst = disk / "dst"
        run = run_ferry("copy", "-r", container, dst, "--block-size", "1MiB", "--json", check=1)
        [failure] = run.json["failures"]
        assert "No space left on device" in failure["error"], failure
        assert str(dst / "dir" / "big.bin") in failure["error"], failure
        assert ferrys_own(dst) == [], f"the failed download's temp files remain: {ferrys_own(dst)}"
        assert os.statvfs(disk).f_bavail >= free_before, "the disk is left fuller than it was"


@pytest.mark.parametrize("next_pass", ["copy", "prune", "prune-from-manifest"])
def test_the_leftovers_of_a_killed_download_whose_source_went_are_removed_by_the_next_pass(
    tmp_path, container, proxy, run_ferry, next_pass
):
    """Killed mid-download, then the blob is deleted: nothing will ever resume its partial file.
    The next pass (a copy, or prune) removes it and its journal and says so, and prune then
    removes the directory that held them instead of failing 'Directory not empty'."""
    data = os.urandom(9 * MiB)
    container.client.upload_blob("old/big.bin", data)
    container.client.upload_blob("keep.txt", b"keep\n")
    dst = tmp_path / "dst"
    hold = proxy.add(
        "stall_body",
        method="GET",
        path=r"/old/big\.bin$",
        query={"comp": ABSENT},
        body_bytes=256 * 1024,
        count=200,
        stall_timeout=60,
    )
    proc = run_ferry.spawn("copy", container.via(proxy.port), dst, "--recursive", log_dir=tmp_path)
    try:
        wait_alive(
            proxy,
            proc,
            lambda: len(ferrys_own(dst)) == 2 and proxy.stalled >= 1,
            60,
            "a GET of old/big.bin to stall with its partial file and journal made",
        )
    finally:
        proc.kill()
        proc.wait(10)
    proxy.release(hold)
    proxy.wait_idle(30)
    left = ferrys_own(dst)
    assert [os.path.dirname(p) for p in left] == ["old", "old"], left
    container.client.delete_blob("old/big.bin")
    # A pass leaves alone what was written to lately (another process may still be writing it):
    # these were last written by the killed run, which is the case to see through.
    last_write = max(os.stat(dst / p).st_ctime for p in left)
    while time.time() < last_write + LEFTOVER_QUIET_S:
        time.sleep(0.1)

    if next_pass == "copy":
        # A part of a pass leaves them: other parts, writing the same directories, may be about
        # to resume theirs.
        header, *lines = run_ferry("ls", "-r", container).stdout.splitlines()
        part = tmp_path / "part.tsv"
        part.write_text(
            "\n".join([header, *(x for x in lines if x.startswith("keep.txt\t"))]) + "\n"
        )
        one = run_ferry("copy", container, dst, "--files-from", part, "--json")
        assert one.json["files"]["copied"] == 1 and one.json["leftovers_removed"] == 0, one.json
        assert ferrys_own(dst) == left
        out = run_ferry("copy", "-r", container, dst, "--json")
        assert ferrys_own(dst) == [], f"the leftovers are still there: {ferrys_own(dst)}"
        assert out.json["leftovers_removed"] == 2 and sorted(out.json["leftovers"]) == left, (
            out.json
        )
        assert (dst / "keep.txt").read_bytes() == b"keep\n"
    dest_from = ()
    if next_pass == "prune-from-manifest":
        # As the pipeline's final pass prunes: from the plan's listing, listing nothing itself.
        (tmp_path / "dest.tsv").write_text(run_ferry("ls", "-r", dst).stdout)
        dest_from = ("--dest-from", tmp_path / "dest.tsv")
    pruned = run_ferry("prune", "--yes", container, dst, *dest_from, "--force", "--json")
    assert not (dst / "old").exists(), f"prune left old/: {pruned.json['failures']}"
    assert pruned.json["failed"] == 0 and pruned.json["dirs"] == 1, pruned.json
    if next_pass != "copy":
        assert pruned.json["leftovers_removed"] == 2, pruned.json
        assert sorted(pruned.json["leftovers"]) == left, pruned.json
    assert ferrys_own(dst) == []
