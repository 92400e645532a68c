"""ferry's manifest format (docs/worker.md), implemented independently for checking it."""

from __future__ import annotations

from dataclasses import dataclass

_ESCAPES = {0x5C: b"\\\\", 0x09: b"\\t", 0x0A: b"\\n", 0x0D: b"\\r"}


def escape_path(raw: bytes) -> str:
    """The escaped manifest form of a relative path given as bytes."""
    out = bytearray()
    i = 0
    while i < len(raw):
        b = raw[i]
        if b in _ESCAPES:
            out += _ESCAPES[b]
            i += 1
            continue
        if i == 0 and b == 0x23:
            out += b"\\x23"
            i += 1
            continue
        if b < 0x80:
            out.append(b)
            i += 1
            continue
        # A well-formed UTF-8 sequence stays as it is; any other byte becomes \xHH.
        width = (
            2 if 0xC2 <= b <= 0xDF else 3 if 0xE0 <= b <= 0xEF else 4 if 0xF0 <= b <= 0xF4 else 0
        )
        try:
            raw[i : i + width].decode("utf-8") if width else None
        except UnicodeDecodeError:
            width = 0
        if width and len(raw[i : i + width]) == width:
            out += raw[i : i + width]
            i += width
        else:
            out += b"\\x%02x" % b
            i += 1
    return out.decode("utf-8")


def unescape_path(text: str) -> bytes:
    """Inverse of escape_path; raises ValueError on an escape the contract does not define."""
    data = text.encode("utf-8")
    out = bytearray()
    i = 0
    while i < len(data):
        b = data[i]
        if b != 0x5C:
            out.append(b)
            i += 1
            continue
        nxt = data[i + 1 : i + 2]
        if nxt == b"\\":
            out.append(0x5C)
        elif nxt == b"t":
            out.append(0x09)
        elif nxt == b"n":
            out.append(0x0A)
        elif nxt == b"r":
            out.append(0x0D)
        elif nxt == b"x":
            hexdigits = data[i + 2 : i + 4]
            if len(hexdigits) != 2:
                raise ValueError(f"truncated \\x escape in {text!r}")
            out.append(int(hexdigits, 16))
            i += 4
            continue
        else:
            raise ValueError(f"undefined escape \\{nxt!r} in {text!r}")
        i += 2
    return bytes(out)


@dataclass
class ManifestEntry:
    path: bytes
    type: str
    size: int
    mtime: str | None  # the field's text: exact to the nanosecond, unlike a float
    md5: str | None
    mode: int | None = None  # permission bits (v2)
    owner: tuple[int, int] | None = None  # (uid, gid) (v2)
    link: str | None = None  # "device:inode" of a file with several names (v2)
    xattrs: str | None = None  # digest of the extended attributes and ACLs (v2)

    @property
    def mtime_ns(self) -> int | None:
        if self.mtime is None:
            return None
        whole, _, frac = self.mtime.partition(".")
        return int(whole) * 1_000_000_000 + int(frac.ljust(9, "0"))


def parse_manifest(text: str) -> tuple[list[str], list[ManifestEntry]]:
    """(comment lines, entries) of a TSV manifest; asserts the line shape the contract fixes."""
    comments, entries = [], []
    assert text == "" or text.endswith("\n"), "manifest must be newline-terminated"
    for line in text.split("\n")[:-1] if text else []:
        if line.startswith("#"):
            comments.append(line)
            continue
        if not line:
            continue
        fields = line.split("\t")
        # v1 lines have five fields, v2 lines nine.
        assert len(fields) in (5, 9), (
            f"manifest line has {len(fields)} fields, want 5 (v1) or 9 (v2): {line!r}"
        )
        path, kind, size, mtime, md5 = fields[:5]
        mode, owner, link, xattrs = fields[5:] or ["-"] * 4
        assert kind in ("f", "l", "d", "p", "s", "c", "b"), f"bad type {kind!r} in {line!r}"
        assert mode == "-" or (len(mode) == 4 and int(mode, 8) <= 0o7777), (
            f"bad mode {mode!r} in {line!r}"
        )
        assert (
            owner == "-" or all(p.isdigit() for p in owner.split(":", 1)) and owner.count(":") == 1
        ), f"bad owner {owner!r} in {line!r}"
        assert mtime == "-" or _is_nine_decimals(mtime), f"bad mtime {mtime!r} in {line!r}"
        assert md5 == "-" or (len(md5) == 32 and md5 == md5.lower() and int(md5, 16) >= 0), (
            f"bad md5 {md5!r} in {line!r}"
        )
        entries.append(
            ManifestEntry(
                unescape_path(path),
                kind,
                int(size),
                None if mtime == "-" else mtime,
                None if md5 == "-" else md5,
                None if mode == "-" else int(mode, 8),
                None if owner == "-" else tuple(int(p) for p in owner.split(":")),
                None if link == "-" else link,
                None if xattrs == "-" else xattrs,
            )
        )
    return comments, entries


def _is_nine_decimals(s: str) -> bool:
    whole, dot, frac = s.partition(".")
    return whole.isdigit() and dot == "." and len(frac) == 9 and frac.isdigit()


END = "#ferry-end"


def end_record(entry_lines: list[str]) -> str:
    """The end record (docs/manifest.md) that counts `entry_lines` (a manifest's entry lines):
    what a hand-written listing needs to stand for a whole one."""
    sizes = [line.split("\t")[2] for line in entry_lines if line and not line.startswith("#")]
    total = sum(int(s) for s in sizes if s.isdigit())
    return f"{END}\tentries={len(sizes)}\tbytes={total}"


def whole(text: str) -> str:
    """A hand-written manifest's text (header and entry lines) with its end record added."""
    lines = [line for line in text.split("\n") if line]
    return "\n".join([*lines, end_record(lines)]) + "\n"
