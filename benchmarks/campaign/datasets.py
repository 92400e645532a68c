"""Deterministic datasets, materialised once and reused while their stamp matches."""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .common import GENERATOR_VERSION, GiB, MiB, Settings, human_bytes, log, rel, rmtree


class Pool:
    """64 MiB of seeded pseudo-random bytes that every file is cut from.

    Generating gigabytes with `random` runs at ~120 MiB/s here; slicing a fixed pool at seeded
    offsets writes at disk speed and is still incompressible and identical on every machine.
    No tool under test deduplicates, so repeats across files don't flatter anyone.
    """

    SIZE = 64 * MiB

    def __init__(self, seed: int = 0xFE22):
        rng = random.Random(seed)
        self.data = memoryview(b"".join(rng.randbytes(MiB) for _ in range(self.SIZE // MiB)))

    def write(self, f, size: int, rng: random.Random) -> None:
        left = size
        while left:
            n = min(left, MiB)
            off = rng.randrange(self.SIZE - n + 1)
            f.write(self.data[off : off + n])
            left -= n


_pool: Pool | None = None


def pool() -> Pool:
    global _pool
    if _pool is None:
        _pool = Pool()
    return _pool


@dataclass
class Dataset:
    """A tree of files described by (relative path, size); materialised once and reused while its
    stamp matches."""

    name: str
    desc: str
    entries: list[tuple[str, int]]
    seed: int = 1

    @property
    def bytes(self) -> int:
        return sum(sz for _, sz in self.entries)

    @property
    def files(self) -> int:
        return len(self.entries)

    def stamp_text(self) -> str:
        h = hashlib.sha256(
            json.dumps([GENERATOR_VERSION, self.seed, self.entries]).encode()
        ).hexdigest()
        return f"{self.name} {h}\n"

    def materialize(self, root: Path) -> Path:
        path = root / self.name
        # The stamp sits beside the tree, never inside it, so no tool copies or uploads it.
        stamp = root / f"{self.name}.stamp"
        if stamp.exists() and stamp.read_text() == self.stamp_text() and path.is_dir():
            return path
        log(f"generating dataset {self.name}: {self.files:,} files, {human_bytes(self.bytes)}")
        rmtree(path)
        stamp.unlink(missing_ok=True)
        rng = random.Random(self.seed)
        made = set()
        for relpath, size in self.entries:
            p = path / relpath
            if p.parent not in made:
                p.parent.mkdir(parents=True, exist_ok=True)
                made.add(p.parent)
            with open(p, "wb") as f:
                pool().write(f, size, rng)
        stamp.write_text(self.stamp_text())
        return path


def files_dataset(
    name: str,
    desc: str,
    count: int,
    size_of: Callable[[random.Random], int],
    per_dir: int = 200,
    seed: int = 1,
) -> Dataset:
    rng = random.Random(seed * 7919 + count)
    entries = [(f"d{i // per_dir:03d}/f{i:06d}.bin", size_of(rng)) for i in range(count)]
    return Dataset(name, desc, entries, seed)


def one_file_dataset(name: str, size: int) -> Dataset:
    return Dataset(name, f"1 file of {human_bytes(size)}", [(f"{name}.bin", size)])


def md5_tree(root: Path) -> dict[str, str]:
    """Relative path → MD5 hex of every file under root, cached beside the tree's stamp."""
    cache = root.parent / f"{root.name}.md5.json"
    stamp = root.parent / f"{root.name}.stamp"
    if cache.exists() and stamp.exists() and cache.stat().st_mtime >= stamp.stat().st_mtime:
        return json.loads(cache.read_text())
    out = {}
    for dirpath, _, names in os.walk(root):
        for n in names:
            p = Path(dirpath) / n
            h = hashlib.md5()
            with open(p, "rb") as f:
                while chunk := f.read(4 * MiB):
                    h.update(chunk)
            out[str(p.relative_to(root))] = h.hexdigest()
    cache.write_text(json.dumps(out))
    return out


def warm(paths: list[Path]) -> None:
    """Read every file once so that no row pays for the first trip to disk."""
    for root in paths:
        for dirpath, _, names in os.walk(root):
            for n in names:
                with open(os.path.join(dirpath, n), "rb") as f:
                    while f.read(4 * MiB):
                        pass


def make_manifest(s: Settings, lines: int) -> tuple[Path, Path, int]:
    """A ferry manifest of `lines` files and the same entries as fpart -a input ("size path")."""
    root = s.data / "partition"
    root.mkdir(parents=True, exist_ok=True)
    man, sizes = root / f"manifest-{lines}.tsv", root / f"sizes-{lines}.txt"
    stamp = root / f"manifest-{lines}.stamp"
    want = [str(GENERATOR_VERSION), str(lines)]
    if stamp.exists() and stamp.read_text().split()[:2] == want and man.exists() and sizes.exists():
        return man, sizes, int(stamp.read_text().split()[-1])
    log(f"generating a {lines:,}-line manifest")
    rng = random.Random(31)
    total = 0
    with open(man, "w") as fm, open(sizes, "w") as fs:
        fm.write("#ferry-manifest v1\tpath\ttype\tsize\tmtime\tmd5\n")
        for i in range(lines):
            # Log-normal sizes (median ~60 KiB, a tail into GiBs) like a research share.
            size = min(int(rng.lognormvariate(11, 2.5)), 50 * GiB)
            total += size
            path = f"proj{i % 37:02d}/d{(i // 1000):04d}/file-{i:07d}.dat"
            fm.write(
                f"{path}\tf\t{size}\t{1_700_000_000 + rng.randrange(10**8)}.{rng.randrange(10**9):09d}\t-\n"
            )
            fs.write(f"{size} {path}\n")
    stamp.write_text(f"{' '.join(want)} {total}\n")
    return man, sizes, total


def make_tree(s: Settings, dirs: int, per_dir: int) -> Path:
    root = s.data / f"tree-{dirs}x{per_dir}"
    stamp = s.data / f"tree-{dirs}x{per_dir}.stamp"
    if stamp.exists() and root.is_dir():
        return root
    log(
        f"creating {dirs * per_dir:,} empty files in {dirs} directories: {dirs * per_dir:,} inodes "
        "(see `df -i`); kept for later campaigns, `campaign.py clean` removes it"
    )
    rmtree(root)
    for d in range(dirs):
        dp = root / f"d{d:04d}"
        dp.mkdir(parents=True)
        dfd = os.open(dp, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for f in range(per_dir):
                os.close(
                    os.open(f"f{f:05d}", os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644, dir_fd=dfd)
                )
        finally:
            os.close(dfd)
    stamp.write_text(f"{dirs} {per_dir}\n")
    return root


def stale_seed(src: Path, seed: Path, every: int) -> None:
    """A copy of src where every `every`-th file (in sorted order) has an mtime a day older, so a
    size+mtime re-run finds 1/every of the files changed."""
    subprocess.run(["cp", "-a", rel(src), rel(seed)], check=True)
    files = sorted(p for p in seed.rglob("*") if p.is_file())
    for p in files[::every]:
        st = p.stat()
        os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns - 86_400 * 10**9))
