"""Faults of the things around a copy: Azurite killed and restarted mid-run, a source file changed
or removed while ferry copies it, a destination disk that fills up.

Each outcome is judged by the rule ferry promises: a file is either reported failed or holds
exactly one version of its source — never bytes that match no version — and a re-run completes.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from support import faults as fault_ledger
from support.azurite import start_azurite
from support.faults import (
    PARTIAL_PREFIX,
    random_files,
    small_disk,
    upload_with_sdk,
    write_files,
)
from support.ferry import REPO_ROOT

KiB = 1024
MiB = 1 << 20
REPO = REPO_ROOT


# ---------------------------------------------------------------------------------------------
# Azurite killed (SIGKILL) and started again on the same --location


@pytest.fixture
def own_azurite():
    az = start_azurite(REPO)
    try:
        yield az
    finally:
        az.stop()


def pytest_generate_tests(metafunc):
    if "restart_while" in metafunc.fixturenames:
        # Each variant costs two Azurite start-ups (seconds each on a busy machine): CI takes
        # the two that cross over, --deep all four.
        cases = [("upload", "ferry-gave-up"), ("download", "ferry-retries")]
        if fault_ledger.ledger().deep:
            cases += [("upload", "ferry-retries"), ("download", "ferry-gave-up")]
        metafunc.parametrize("direction,restart_while", cases, ids=[f"{d}-{r}" for d, r in cases])


def test_azurite_killed_mid_run_then_rerun_completes(
    direction, restart_while, tmp_path, own_azurite, run_ferry, faults
):
    """``ferry-gave-up``: Azurite stays down until ferry has exited, then the re-run must finish
    the job. ``ferry-retries``: Azurite comes back within ferry's retries, and the run itself
    (or at worst its re-run) completes."""
    rng = faults.test_rng
    az = own_azurite
    container = az.service_client().get_container_client("restarts")
    container.create_container()
    files = random_files(rng, small=20, big=3, big_size=1 * MiB)
    src, dst = tmp_path / "src", tmp_path / "dst"
    url = az.url("restarts")
    if direction == "upload":
        write_files(src, files)
        args = (
            "copy",
            src,
            url,
            "--recursive",
            "--block-size",
            "256KiB",
            "--max-bandwidth",
            "2MiB/s",
        )
    else:
        upload_with_sdk(_Container(container), files)
        args = ("copy", url, dst, "--recursive", "--max-bandwidth", "2MiB/s")
    # Azurite saves its metadata now and then: a SIGKILL right after set-up would lose the
    # container itself. What the run then writes is fair game.
    az.restart(graceful=True)
    retries = "2" if restart_while == "ferry-gave-up" else "8"
    proc = run_ferry.spawn(
        *args, "--max-retries", retries, "--json", env={"FERRY_IO_TIMEOUT": "3"}, log_dir=tmp_path
    )
    time.sleep(rng.uniform(0.4, 1.2))
    assert proc.poll() is None, (
        "ferry finished before Azurite could be killed; the test needs a slower copy"
    )
    az.kill()
    faults.fault("azurite kill")
    if restart_while == "ferry-gave-up":
        proc.wait(120)
        assert proc.returncode != 0, "ferry claimed success although Azurite died under it"
        az.restart()
    else:
        time.sleep(0.5)
        az.restart()
        proc.wait(120)
    faults.ran()
    source, dest = (src, _Container(container)) if direction == "upload" else (url, dst)
    assert not faults.check(dest, files, complete=False)
    run_ferry(*args, "--max-retries", "5")
    faults.ran()
    assert not faults.check(dest, files, complete=True)
    run_ferry("verify", "--checksum", source, url if direction == "upload" else dst)


class _Container:
    """The bits of conftest's ContainerURL that the ledger's checks use, for a container of a
    test's own Azurite."""

    def __init__(self, client):
        self.client = client
        self.name = client.container_name

    def blobs(self, prefix=None):
        return {
            b.name: b for b in self.client.list_blobs(name_starts_with=prefix, include=["metadata"])
        }


# ---------------------------------------------------------------------------------------------
# The source changes under ferry


def mutate(path: Path, how: str, rng) -> bytes:
    """Change the file in place as a writer would; returns its new content."""
    old = path.read_bytes()
    if how == "grow":
        new = old + rng.randbytes(300 * KiB)
    elif how == "shrink":
        new = old[: len(old) // 2]
    else:  # rewrite: same size, other bytes, written over the old ones
        new = rng.randbytes(len(old))
    with open(path, "r+b") as f:
        f.write(new)
        f.truncate(len(new))
    return new


@pytest.mark.parametrize("how", ["grow", "shrink", "rewrite"])
def test_source_changed_during_upload_is_failed_or_recopied(
    how, tmp_path, container, proxy, run_ferry, faults
):
    rng = faults.test_rng
    src = tmp_path / "src"
    files = {"big.bin": rng.randbytes(2 * MiB + 1234), "other.txt": rng.randbytes(5000)}
    write_files(src, files)
    old = files["big.bin"]
    proc = run_ferry.spawn(
        "copy",
        src,
        container.via(proxy.port),
        "--recursive",
        "--block-size",
        "256KiB",
        "--concurrency",
        "2",
        "--max-bandwidth",
        "1MiB/s",
        "--json",
        log_dir=tmp_path,
    )

    def staged_some():
        if proc.poll() is not None:
            raise AssertionError("ferry finished before the source could be changed")
        return any(r.status == 201 for r in proxy.requests("PUT", comp="block", path="big.bin"))

    proxy.wait_for(staged_some, 30, "the first block of big.bin to be staged")
    new = mutate(src / "big.bin", how, rng)
    committed_before = proxy.requests("PUT", comp="blocklist", path="big.bin")
    assert not committed_before, (
        "big.bin was committed before the change: the change did not land mid-copy"
    )
    faults.fault(f"source {how}")
    proc.wait(60)
    faults.ran()
    summary = json.loads((tmp_path / "ferry.stdout").read_text())
    failed = {f["path"] for f in summary["failures"]}
    blobs = container.blobs()
    if "big.bin" in failed:
        assert proc.returncode == 1
        assert "big.bin" not in blobs, "a failed file was committed anyway"
    else:
        got = container.client.download_blob("big.bin").readall()
        assert faults.check_version(f"upload, source {how} mid-copy", got, (old, new)), (
            f"{how}: committed bytes match neither the old nor the new version"
        )
        assert got == new, (
            f"{how}: the file changed mid-copy but the old bytes were committed and reported as copied"
        )
    # The next pass copies the new version.
    files["big.bin"] = new
    run_ferry("copy", src, container, "--recursive", "--block-size", "256KiB")
    faults.ran()
    assert not faults.check_blobs(container, files, complete=True)


def test_blob_rewritten_during_download_is_failed_or_refetched(
    tmp_path, container, proxy, run_ferry, faults
):
    """The blob changes between two GETs of one download (the first cut short, so ferry resumes
    mid-file): ferry must not stitch the old head to the new tail. The blob carries no
    Content-MD5 (as block-list uploads by other tools often do), so only the version check
    (If-Match) can tell."""
    rng = faults.test_rng
    old, new = rng.randbytes(2 * MiB), rng.randbytes(2 * MiB)
    blob = container.client.get_blob_client("big.bin")

    def put_without_md5(data: bytes):
        ids = []
        for i in range(0, len(data), 512 * KiB):
            ids.append(f"{i:012d}")
            blob.stage_block(ids[-1], data[i : i + 512 * KiB])
        blob.commit_block_list(ids)

    put_without_md5(old)
    assert not blob.get_blob_properties().content_settings.content_md5
    hold = proxy.add(
        "stall_body", method="GET", path="big.bin", body_bytes=768 * KiB, stall_timeout=30
    )
    dst = tmp_path / "dst"
    proc = run_ferry.spawn(
        "copy",
        container.via(proxy.port),
        dst,
        "--recursive",
        "--block-size",
        "1MiB",
        "--json",
        log_dir=tmp_path,
    )
    proxy.wait_for(
        lambda: proxy.stalled >= 1 or proc.poll() is not None, 30, "the first GET to stall"
    )
    assert proc.poll() is None
    put_without_md5(new)
    faults.fault("source rewrite")
    proxy.release(hold)
    proc.wait(60)
    faults.ran()
    final = dst / "big.bin"
    if final.exists():
        assert faults.check_version(
            "download, blob rewritten mid-copy", final.read_bytes(), (old, new)
        ), "the download stitched two versions of the blob together"
    else:
        assert proc.returncode == 1, "no file and no failure reported"
    run_ferry("copy", container, dst, "--recursive", "--compare", "md5")
    assert final.read_bytes() == new


@pytest.mark.parametrize("dest_kind", ["blob", "local"])
def test_source_vanished_between_listing_and_copy_is_reported(
    dest_kind, tmp_path, container, run_ferry, faults
):
    rng = faults.test_rng
    src = tmp_path / "src"
    files = random_files(rng, small=6, big=1, big_size=600 * KiB)
    write_files(src, files)
    listing = run_ferry("ls", "--recursive", src).stdout
    (tmp_path / "plan.tsv").write_text(listing)
    gone = sorted(files)[rng.randrange(len(files))]
    (src / gone).unlink()
    faults.fault("source vanished")
    dest = container if dest_kind == "blob" else tmp_path / "dst"
    run = run_ferry(
        "copy",
        src,
        dest,
        "--files-from",
        tmp_path / "plan.tsv",
        "--block-size",
        "256KiB",
        "--json",
        check=1,
    )
    faults.ran()
    assert [f["path"] for f in run.json["failures"]] == [gone], run.json["failures"]
    del files[gone]
    assert run.json["files"]["copied"] == len(files)
    if dest_kind == "blob":
        assert not faults.check_blobs(container, files, complete=True)
    else:
        assert not faults.check_local(tmp_path / "dst", files, complete=True)


# ---------------------------------------------------------------------------------------------
# Disk full at the destination


@pytest.mark.parametrize("source_kind", ["local", "blob"])
def test_disk_full_fails_clearly_leaves_nothing_half_written_and_rerun_completes(
    source_kind, tmp_path, container, run_ferry, faults
):
    rng = faults.test_rng
    files = {f"d/f{i}.bin": rng.randbytes(1536 * KiB + i) for i in range(5)}
    files["small.txt"] = b"small\n"
    with small_disk(tmp_path / "disk", 8) as disk:
        # Half the disk taken by something else; 7.5 MiB of files cannot fit in the rest.
        filler = disk / "filler"
        filler.write_bytes(b"\0" * (4 * MiB))
        dst = disk / "dst"
        if source_kind == "local":
            src = tmp_path / "src"
            write_files(src, files)
            args = ("copy", src, dst, "--recursive")
        else:
            upload_with_sdk(container, files)
            args = ("copy", container, dst, "--recursive", "--block-size", "1MiB")
        run = run_ferry(*args, "--json", check=False)
        faults.ran()
        faults.fault("disk full")
        assert run.returncode == 1, f"exit {run.returncode}: {run.stderr[-2000:]}"
        reasons = " ".join(f["error"] for f in run.json["failures"])
        assert "No space left on device" in reasons, run.json["failures"]
        # The full side is named: the destination, not only the source it was copied from.
        assert all(
            str(dst) in f["error"] for f in run.json["failures"] if "No space" in f["error"]
        ), run.json["failures"]
        assert not faults.check_local(dst, files, complete=False), (
            "a half-written file under its final name"
        )
        filler.unlink()
        run_ferry(*args)
        faults.ran()
        assert not faults.check_local(dst, files, complete=True)
        left = [n for _, _, names in os.walk(dst) for n in names if n.startswith(PARTIAL_PREFIX)]
        assert not left, f"temp files of the failed run still take space: {left}"
