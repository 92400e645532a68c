"""Holes through Blob storage, which has none: an upload records where a sparse file held data
(`ferry_sparse`, docs/worker.md), a download leaves the zero blocks that were holes unwritten, so
the file comes back with the source's layout (`rsync -S`'s result at least) and its bytes; a dense
file with zero runs stays dense. ext4 on both sides (the tests' tmp_path)."""

from __future__ import annotations

import os
import signal
import time

from support.faults import PARTIAL_PREFIX
from support.holes import allocated, data_segments, write_at

KiB, MiB = 1 << 10, 1 << 20


def sparse_tree(src) -> dict[str, str]:
    """Files of each layout, and what each is: 'sparse' or 'dense'."""
    src.mkdir()
    # More than a block (1 MiB here) and more than one download range (8 MiB): data between
    # holes, a trailing hole.
    write_at(src / "one-byte", 9 * MiB + 3, b"x", 12 * MiB)
    # Data at both ends, a hole between.
    write_at(src / "ends", 0, b"head", 6 * MiB)
    with open(src / "ends", "r+b") as f:
        f.seek(6 * MiB - 4)
        f.write(b"tail")
    # Within one block: read and sent whole in one request.
    write_at(src / "small", 200 * KiB, b"small and sparse", 512 * KiB)
    # No data at all.
    write_at(src / "empty", 0, b"", 3 * MiB)
    # Zeros the source holds as data (written), then a hole, then data: the written zeros stay
    # data, as at the source, where `rsync -S` would make them a hole.
    with open(src / "written-zeros", "wb") as f:
        f.write(bytes(64 * KiB))
        f.truncate(2 * MiB)
        f.seek(MiB)
        f.write(b"after the hole")
    # Dense files with runs of zeros: no hole at the source, none made.
    (src / "zeros-dense").write_bytes(bytes(2 * MiB) + os.urandom(10) + bytes(MiB))
    (src / "small-zeros").write_bytes(bytes(256 * KiB) + b"x")
    names = {
        "one-byte": "sparse",
        "ends": "sparse",
        "small": "sparse",
        "empty": "sparse",
        "written-zeros": "sparse",
        "zeros-dense": "dense",
        "small-zeros": "dense",
    }
    for name, kind in names.items():
        holey = allocated(src / name) < os.stat(src / name).st_size
        assert holey == (kind == "sparse"), f"the filesystem made {name} otherwise"
    return names


def test_a_sparse_file_keeps_its_holes_through_blob(
    tmp_path, container, other_container, run_ferry
):
    src, back = tmp_path / "src", tmp_path / "back"
    names = sparse_tree(src)
    up = run_ferry("copy", "-r", src, container, "--block-size", "1MiB", "--json")
    assert up.json["failures"] == [], up.json
    assert up.json["not_kept"] == {}, ("holes are kept, in the record", up.json)
    stored = {n: b.metadata for n, b in container.blobs().items()}
    assert stored["one-byte"]["ferry_sparse"] == f"data:{9 * MiB}+4096", stored["one-byte"]
    assert stored["empty"]["ferry_sparse"] == "data:", stored["empty"]
    assert stored["small"]["ferry_sparse"] == f"data:{200 * KiB}+4096", stored["small"]
    for name in ("zeros-dense", "small-zeros"):
        assert "ferry_sparse" not in stored[name], ("a dense file is recorded dense", name)

    down = run_ferry("copy", "-r", container, back, "--json")
    assert down.json["failures"] == [] and down.json["not_kept"] == {}, down.json
    for name in names:
        s, d = src / name, back / name
        assert d.read_bytes() == s.read_bytes(), name
        assert data_segments(d) == data_segments(s), name
        assert allocated(d) == allocated(s), name
    assert allocated(back / "zeros-dense") >= 3 * MiB, "zeros the source held stay data"

    # A copy between containers carries the record with the rest of the metadata.
    run_ferry("copy", "-r", container, other_container)
    copied = {n: b.metadata.get("ferry_sparse") for n, b in other_container.blobs().items()}
    assert copied == {n: m.get("ferry_sparse") for n, m in stored.items()}, copied

    # A restored sparse file is no different to verify, with its metadata and by checksum.
    for a, b in ((src, back), (container, back)):
        v = run_ferry("verify", a, b, "--metadata", "--checksum", "--json")
        assert v.json["passed"], v.json


def test_without_sparse_a_download_writes_every_byte(tmp_path, container, run_ferry):
    src, back = tmp_path / "src", tmp_path / "back"
    sparse_tree(src)
    run_ferry("copy", "-r", src, container, "--block-size", "1MiB")
    run_ferry("copy", "-r", container, back, "--preserve", "all,no-sparse")
    assert data_segments(back / "ends") == [(0, 6 * MiB)]
    assert data_segments(back / "small") == [(0, 512 * KiB)]
    # Nor is anything recorded by an upload that does not keep holes.
    run_ferry("copy", "-r", src, container.at("p"), "--preserve", "all,no-sparse")
    assert not any("ferry_sparse" in b.metadata for b in container.blobs("p/").values())


def test_extents_that_do_not_fit_record_only_that_the_file_was_sparse(
    tmp_path, container, run_ferry
):
    src, back = tmp_path / "src", tmp_path / "back"
    src.mkdir()
    # 700 data blocks with a hole after each: their extents need ~9 KiB, more than a blob's
    # metadata leaves them.
    with open(src / "striped", "wb") as f:
        for i in range(700):
            f.seek(i * 8 * KiB)
            f.write(b"%d" % i)
        f.truncate(700 * 8 * KiB + MiB)
    up = run_ferry("copy", "-r", src, container, "--json")
    assert up.json["failures"] == [] and up.json["not_kept"] == {}, up.json
    assert container.blobs()["striped"].metadata["ferry_sparse"] == "zeros"
    run_ferry("copy", "-r", container, back)
    # Every whole zero block a hole: here the source's very layout.
    assert (back / "striped").read_bytes() == (src / "striped").read_bytes()
    assert data_segments(back / "striped") == data_segments(src / "striped")


def test_a_sparse_download_killed_and_run_again_keeps_bytes_and_holes(
    tmp_path, container, run_ferry
):
    """A download killed mid-file resumes from its journal: the ranges written before the kill
    are kept, the holes among the rest are left unwritten, and the file ends with the source's
    bytes and layout."""
    src, back = tmp_path / "src", tmp_path / "back"
    src.mkdir()
    size = 16 * MiB
    # Data, hole, data, hole...: each range of the download holds some of both.
    for k in range(4):
        write_at(src / "big", k * 4 * MiB, os.urandom(MiB), size)
    run_ferry("copy", "-r", src, container, "--block-size", "1MiB")

    proc = run_ferry.spawn(
        "copy",
        "-r",
        container,
        back,
        "--block-size",
        "1MiB",
        "--max-bandwidth",
        "2MiB/s",
        # One range at a time: the first is journaled seconds before the second ends.
        "--concurrency",
        "1",
        log_dir=tmp_path,
    )
    deadline = time.monotonic() + 60
    journal = None
    while journal is None and time.monotonic() < deadline and proc.poll() is None:
        # A header line, then a line a finished range (8 MiB): one in, the kill lands.
        journal = next(
            (
                p
                for p in back.glob(f"{PARTIAL_PREFIX}*journal*")
                if len(p.read_text().splitlines()) >= 2
            ),
            None,
        )
        time.sleep(0.05)
    assert journal is not None, "no range of the download was finished and journaled"
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    assert not (back / "big").exists(), "a partial download never has its final name"

    again = run_ferry("copy", "-r", container, back, "--block-size", "1MiB", "--json")
    assert again.json["failures"] == [], again.json
    # The range journaled before the kill is not fetched again; the other is.
    assert again.json["blocks"] == {"sent": 1, "reused": 1}, again.json["blocks"]
    assert again.json["bytes"]["copied"] < size, again.json["bytes"]
    s, d = src / "big", back / "big"
    assert d.read_bytes() == s.read_bytes()
    assert data_segments(d) == data_segments(s)
    assert allocated(d) == allocated(s)
    assert list(back.glob(f"{PARTIAL_PREFIX}*")) == []
