"""Sparse files: making them, and what the filesystem says each holds (its allocated bytes, its
data segments by SEEK_DATA/SEEK_HOLE)."""

from __future__ import annotations

import os


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
    """A file of `size` bytes holding only `data` at `offset`: holes around it."""
    with open(path, "wb") as f:
        f.truncate(size)
        f.seek(offset)
        f.write(data)
