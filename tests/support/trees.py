"""Build test trees from a compact spec, and take comparable snapshots of trees on disk.

Paths are handled as bytes throughout so that names which are not valid UTF-8 survive.
"""

from __future__ import annotations

import hashlib
import os
import random
import stat
from dataclasses import dataclass


@dataclass
class File:
    """A regular file: literal ``data``, or ``size`` deterministic pseudo-random bytes."""

    data: bytes | None = None
    size: int = 0
    mode: int | None = None
    mtime_ns: int | None = None
    owner: tuple[int, int] | None = None
    seed: int | None = None

    def content(self, rel: bytes) -> bytes:
        if self.data is not None:
            return self.data
        # Seeded by the path (unless told) so that equal-sized files still differ.
        rng = random.Random(self.seed if self.seed is not None else rel)
        return rng.randbytes(self.size)


@dataclass
class Dir:
    mode: int | None = None


@dataclass
class Link:
    target: str | bytes


def _b(p: str | bytes) -> bytes:
    return p if isinstance(p, bytes) else os.fsencode(p)


# Names chosen to break naive quoting: shell, URL, XML, manifest (tab/newline/#) and CLI (leading dash).
ODD_NAMES = [
    "with space.txt",
    "  leading and trailing spaces  ",
    "tab\there.txt",
    "new\nline.txt",
    "-leading-dash.txt",
    "--double-dash",
    "#hash-first.txt",
    "mid#hash.txt",
    "ünïcödé-名前-😀.txt",
    "100%.txt",
    "%41%2F.txt",
    "q?a=b&c=d.txt",
    "plus+sign.txt",
    "semi;colon,comma'quote\"dq.txt",
    "brackets[1]{2}(3)<4>.txt",
    "star*.txt",
    "dots...txt",
]

# Names for local trees: ferry refuses to put names that are not UTF-8 into Blob storage, and the
# others go there only mapped (docs/worker.md, "Names in Blob storage").
NON_UTF8_NAMES = [b"latin1-\xe9t\xe9.txt", b"bare-\xff\xfe-bytes.bin"]
LOCAL_ONLY_NAMES = [b"back\\slash.txt", b"cr\rreturn.txt", *NON_UTF8_NAMES]


def odd_names_spec(prefix: str = "odd/", local_only: bool = False) -> dict:
    spec: dict = {}
    for i, name in enumerate(ODD_NAMES):
        spec[prefix + name] = File(data=f"odd file {i}: {name!r}\n".encode())
    # A directory with an odd name too, so escaping is exercised in the middle of a path.
    spec[prefix + "dir with spaces & ünï/#inner\tfile"] = File(data=b"inner\n")
    if local_only:
        for i, name in enumerate(LOCAL_ONLY_NAMES):
            spec[_b(prefix) + name] = File(data=b"local-only name %d\n" % i)
        spec[_b(prefix) + b"dir-\xfe/child.txt"] = File(data=b"child of a non-utf8 dir\n")
    return spec


def many_files_spec(n: int = 1000, prefix: str = "many/", per_dir: int = 100) -> dict:
    """``n`` small files spread over directories of ``per_dir``; a few are empty."""
    spec = {}
    for i in range(n):
        data = b"" if i % 250 == 0 else b"small file %d\n" % i * (1 + i % 7)
        spec[f"{prefix}d{i // per_dir:03d}/f{i:05d}.txt"] = File(data=data)
    return spec


def make_tree(root: str | os.PathLike, spec: dict) -> dict[bytes, bytes]:
    """Create ``spec`` (relative path -> File | Dir | Link | bytes | int size) under ``root``.

    Returns {relative path (bytes): file content} for every regular file created.
    Parent directories are created as needed; modes and mtimes are applied after all content
    exists, deepest first, so that creating children does not disturb a directory's settings.
    """
    root_b = _b(os.fspath(root))
    os.makedirs(root_b, exist_ok=True)
    contents: dict[bytes, bytes] = {}
    late: list[tuple[bytes, object]] = []
    for rel, item in spec.items():
        rel_b = _b(rel)
        path = os.path.join(root_b, rel_b)
        if isinstance(item, bytes):
            item = File(data=item)
        elif isinstance(item, int):
            item = File(size=item)
        if isinstance(item, Dir):
            os.makedirs(path, exist_ok=True)
        elif isinstance(item, Link):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            os.symlink(_b(item.target), path)
        elif isinstance(item, File):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            data = item.content(rel_b)
            with open(path, "wb") as f:
                f.write(data)
            contents[rel_b] = data
        else:
            raise TypeError(f"unknown tree item {item!r}")
        late.append((path, item))
    for path, item in sorted(late, key=lambda p: p[0].count(b"/"), reverse=True):
        if isinstance(item, File) and item.owner is not None:
            os.chown(path, *item.owner)
        if isinstance(item, (File, Dir)) and item.mode is not None:
            os.chmod(path, item.mode)
        if isinstance(item, File) and item.mtime_ns is not None:
            os.utime(path, ns=(item.mtime_ns, item.mtime_ns))
    return contents


@dataclass(frozen=True)
class Entry:
    type: str  # "f", "d" or "l", as in ferry's manifest
    size: int
    md5: str | None
    mode: int
    mtime_ns: int
    uid: int
    gid: int
    target: bytes | None


def file_md5(path: str | bytes | os.PathLike) -> str:
    h = hashlib.md5()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def snapshot(root: str | os.PathLike) -> dict[bytes, Entry]:
    """Every entry below ``root`` (not root itself), keyed by '/'-joined relative bytes path."""
    root_b = _b(os.fspath(root))
    out: dict[bytes, Entry] = {}
    for dirpath, dirnames, filenames in os.walk(root_b):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root_b)
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                kind, md5, target = "l", None, os.readlink(full)
            elif stat.S_ISDIR(st.st_mode):
                kind, md5, target = "d", None, None
            elif stat.S_ISREG(st.st_mode):
                kind, md5, target = "f", file_md5(full), None
            else:
                kind, md5, target = "?", None, None
            out[rel] = Entry(
                kind,
                st.st_size if kind == "f" else 0,
                md5,
                stat.S_IMODE(st.st_mode),
                st.st_mtime_ns,
                st.st_uid,
                st.st_gid,
                target,
            )
    return out


def files_only(snap: dict[bytes, Entry]) -> dict[bytes, str]:
    """{path: md5} of regular files: what any store (blob included) must reproduce."""
    return {p: e.md5 for p, e in snap.items() if e.type == "f"}


def describe_differences(want: dict, got: dict, limit: int = 20) -> str:
    """A readable list of what differs between two path-keyed dicts (for assertion messages)."""
    lines = []
    for p in sorted(set(want) - set(got))[:limit]:
        lines.append(f"missing: {p!r}")
    for p in sorted(set(got) - set(want))[:limit]:
        lines.append(f"unexpected: {p!r}")
    for p in sorted(set(want) & set(got)):
        if want[p] != got[p] and len(lines) < 3 * limit:
            lines.append(f"differs: {p!r}: want {want[p]!r}, got {got[p]!r}")
    return "\n".join(lines) or "(no differences)"


def over_blocks(block_size: int, blocks: int = 3) -> int:
    """A size just past ``blocks`` whole blocks and not a multiple of anything round."""
    return blocks * block_size + block_size // 2 + 4093
