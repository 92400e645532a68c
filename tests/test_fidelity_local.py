"""local -> local fidelity: what `cp -a` (and `rsync -aHAXS`) keep beyond the bytes — holes,
extended attributes and ACLs, fifos and device nodes, hard links — checked against the source,
with `cp -a` as the reference, and `--preserve` honoured when it leaves something out."""

from __future__ import annotations

import os
import subprocess

import pytest

MiB = 1 << 20


def allocated(path) -> int:
    """Bytes the filesystem holds for a file (holes hold none)."""
    return os.stat(path).st_blocks * 512


def data_segments(path) -> list[tuple[int, int]]:
    """Where the filesystem says a file holds data: [(start, end)], by SEEK_DATA/SEEK_HOLE."""
    out = []
    fd = os.open(path, os.O_RDONLY)
    try:
        size, pos = os.fstat(fd).st_size, 0
        while pos < size:
            try:
                start = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError:
                break
            end = os.lseek(fd, start, os.SEEK_HOLE)
            out.append((start, end))
            pos = end
    finally:
        os.close(fd)
    return out


def write_at(path, offset: int, data: bytes, size: int):
    with open(path, "wb") as f:
        f.truncate(size)
        f.seek(offset)
        f.write(data)


def sparse_tree(src):
    src.mkdir(parents=True)
    # One byte in 64 MiB: a block of data between two holes, the second one trailing.
    write_at(src / "one-byte", 40 * MiB + 3, b"x", 64 * MiB)
    # Data at both ends and a hole between.
    write_at(src / "ends", 0, b"head", 32 * MiB)
    with open(src / "ends", "r+b") as f:
        f.seek(32 * MiB - 4)
        f.write(b"tail")
    (src / "dense").write_bytes(os.urandom(3 * MiB))


def test_holes_stay_holes(tmp_path, run_ferry):
    src, dst, ref = tmp_path / "src", tmp_path / "dst", tmp_path / "cp-a"
    sparse_tree(src)
    subprocess.run(["cp", "-a", f"{src}/.", str(ref)], check=True)
    run_ferry("copy", "-r", src, dst)
    for name in ("one-byte", "ends", "dense"):
        s, d = src / name, dst / name
        assert d.read_bytes() == s.read_bytes(), name
        assert os.stat(d).st_size == os.stat(s).st_size, name
        # The same data segments as the source: nothing written where it has a hole, and a
        # trailing hole is still a hole (sized, not filled).
        assert data_segments(d) == data_segments(s), name
        assert allocated(d) <= allocated(ref / name), f"{name}: more allocated than cp -a gives"
    assert allocated(dst / "one-byte") <= 64 * 1024
    assert allocated(dst / "dense") >= 3 * MiB


def test_without_sparse_files_are_written_whole(tmp_path, run_ferry):
    src, dst = tmp_path / "src", tmp_path / "dst"
    sparse_tree(src)
    run_ferry("copy", "-r", src, dst, "--preserve", "all,no-sparse")
    assert (dst / "one-byte").read_bytes() == (src / "one-byte").read_bytes()
    assert allocated(dst / "one-byte") >= 64 * MiB
    assert data_segments(dst / "ends") == [(0, 32 * MiB)]
