#!/usr/bin/env python3
"""The worker's floors, checked: its module graph (one node per file of worker/src, one edge per
`crate::`/`super::`/`self::` path a file names) has no circle of more than one file, and no file
imports a module on a floor above its own. The floors are declared once, in worker/floors.toml
(docs/design/layout.md draws them).

    tools/import_floors.py [--src worker/src] [--floors worker/floors.toml] [--graph]

Prints every circle (its files) and every upward import (file:line, the path, both floors) and
exits 1 when there is one. `--graph` prints the edges instead. Paths inside `#[cfg(test)]`
modules count too: a test that reaches up a floor ties the floors together just the same."""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# `crate::a::b`, `super::super::c`, `self::d` as written in code or at the head of a `use`.
PATH = re.compile(r"\b((?:crate|super|self)(?:\s*::\s*(?:\w+|\{[^;]*?\}|\*))+)")
USE = re.compile(r"\b(?:pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", re.S)
# What is not code, blanked (kept at its length, its newlines kept) before anything is read.
NOT_CODE = re.compile(
    r"""//[^\n]*|/\*.*?\*/|b?r(#*)".*?"\1|b?"(?:\\.|[^"\\])*"|b?'(?:\\.|[^\\'\n])'""", re.S
)
INLINE_MOD = re.compile(r"\bmod\s+\w+\s*\{")


def blank(text: str) -> str:
    """The text with comments, strings and character literals turned to spaces."""
    return NOT_CODE.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), text)


def closing(text: str, open_at: int) -> int:
    """The index of the brace that closes the one at `open_at` (in blanked text)."""
    depth = 0
    for i in range(open_at, len(text)):
        depth += text[i] == "{"
        depth -= text[i] == "}"
        if depth == 0:
            return i
    return len(text)


@dataclass(frozen=True)
class Import:
    src: str  # the importing file, relative to the source root
    line: int
    path: str  # the path as written, braces expanded
    dst: str  # the file the path leads to


def module_of(rel: str) -> list[str]:
    """The module path of a file: `storage/local/mod.rs` → [storage, local]."""
    parts = rel[:-3].split("/")
    if parts[-1] in ("mod", "main", "lib"):
        parts = parts[:-1]
    return parts


def file_of(src: Path, module: list[str]) -> str | None:
    """The file that holds a module, or None when the path names no module (an item)."""
    if not module:
        return "main.rs" if (src / "main.rs").exists() else "lib.rs"
    base = "/".join(module)
    for cand in (f"{base}.rs", f"{base}/mod.rs"):
        if (src / cand).exists():
            return cand
    return None


def expand(tree: str) -> list[str]:
    """`a::{b, c::{d, e as f}}` → [a::b, a::c::d, a::c::e]."""
    tree = re.sub(r"\s*(::|[{},])\s*", r"\1", tree.strip())
    i = tree.find("{")
    if i < 0:
        return [re.sub(r"\s+as\s+\w+$", "", tree)]
    head, body = tree[:i], tree[i + 1 : tree.rindex("}")]
    items, depth, cur = [], 0, ""
    for ch in body:
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    items.append(cur)
    out = []
    for item in filter(None, items):
        out += expand(head + item)
    return out


def resolve(src: Path, here: list[str], path: str, inline: int = 0) -> str | None:
    """The file a path leads to: the longest prefix of it that is a module. `inline` is how many
    `mod x { … }` blocks of the file enclose the path: its first `super`s stay in the file."""
    segs = [s for s in re.sub(r"\s+", "", path).split("::") if s]
    if segs[0] == "crate":
        base, rest = [], segs[1:]
    else:
        base = list(here)
        rest = segs
        while rest and rest[0] in ("super", "self"):
            if rest[0] == "super" and inline:
                inline -= 1
            elif rest[0] == "super":
                base = base[:-1]
            rest = rest[1:]
        if inline:
            return None  # a path into an inline module of the same file
    rest = [s for s in rest if s not in ("*", "self")]
    for n in range(len(rest), -1, -1):
        found = file_of(src, base + rest[:n])
        if found:
            return found
    return None


def imports(src: Path) -> list[Import]:
    found = []
    for f in sorted(src.rglob("*.rs")):
        rel = f.relative_to(src).as_posix()
        here = module_of(rel)
        text = blank(f.read_text())
        blocks = [(m.end() - 1, closing(text, m.end() - 1)) for m in INLINE_MOD.finditer(text)]
        spans = []
        for m in USE.finditer(text):
            for path in expand(m.group(1)):
                if re.match(r"(crate|super|self)::", path):
                    spans.append((m.start(), path))
        used = {m.span() for m in USE.finditer(text)}
        for m in PATH.finditer(text):
            if any(a <= m.start() < b for a, b in used):
                continue
            spans += [(m.start(), p) for p in expand(m.group(1))]
        for at, path in spans:
            line = text.count("\n", 0, at) + 1
            inline = sum(a < at < b for a, b in blocks)
            dst = resolve(src, here, path, inline)
            if dst and dst != rel:
                found.append(Import(rel, line, path, dst))
    return found


def circles(nodes: set[str], edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components, those of more than one file."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return sorted(out, key=lambda c: (-len(c), c))


def load_floors(path: Path) -> list[tuple[str, list[str]]]:
    """[(floor name, [module prefixes])], bottom first."""
    doc = tomllib.loads(path.read_text())
    return [(f["name"], f["modules"]) for f in doc["floor"]]


def floor_of(rel: str, floors: list[tuple[str, list[str]]]) -> int | None:
    """The floor of a file: the floor naming its module or the nearest module above it."""
    mod = "::".join(module_of(rel)) or "main"
    best, best_len = None, -1
    for i, (_, mods) in enumerate(floors):
        for m in mods:
            if (mod == m or mod.startswith(m + "::")) and len(m) > best_len:
                best, best_len = i, len(m)
    return best


def check(src: Path, floors_file: Path | None) -> tuple[list[list[str]], list[str], list[str]]:
    """(circles, upward imports, files on no floor)."""
    found = imports(src)
    nodes = {f.relative_to(src).as_posix() for f in src.rglob("*.rs")}
    edges: dict[str, set[str]] = {}
    for i in found:
        edges.setdefault(i.src, set()).add(i.dst)
    up, unplaced = [], []
    if floors_file is not None:
        floors = load_floors(floors_file)
        level = {n: floor_of(n, floors) for n in nodes}
        unplaced = sorted(n for n, lv in level.items() if lv is None)
        seen = set()
        for i in found:
            a, b = level[i.src], level[i.dst]
            if a is not None and b is not None and b > a and (i.src, i.line, i.dst) not in seen:
                seen.add((i.src, i.line, i.dst))
                up.append(
                    f"worker/src/{i.src}:{i.line}: {i.path} — floor '{floors[a][0]}' "
                    f"imports '{floors[b][0]}' ({i.dst}) above it"
                )
    return circles(nodes, edges), up, unplaced


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", type=Path, default=ROOT / "worker/src")
    ap.add_argument("--floors", type=Path, default=ROOT / "worker/floors.toml")
    ap.add_argument("--graph", action="store_true", help="print the edges and stop")
    ap.add_argument("--no-floors", action="store_true", help="check circles only")
    args = ap.parse_args(argv)
    if args.graph:
        for i in imports(args.src):
            print(f"{i.src}:{i.line}\t{i.dst}\t{i.path}")
        return 0
    cycles, up, unplaced = check(args.src, None if args.no_floors else args.floors)
    for c in cycles:
        print(f"circle of {len(c)} files: {' '.join(c)}")
    for u in up:
        print(u)
    for n in unplaced:
        print(f"worker/src/{n}: on no floor ({args.floors.name} names no module of it)")
    largest = max((len(c) for c in cycles), default=1)
    print(
        f"import floors: {len(cycles)} circle(s), largest {largest} file(s); "
        f"{len(up)} upward import(s); {len(unplaced)} file(s) on no floor",
        file=sys.stderr,
    )
    return 1 if cycles or up or unplaced else 0


if __name__ == "__main__":
    sys.exit(main())
