#!/usr/bin/env python3
"""Functions a reader can hold: none over --max lines (100), tests excepted.

    tools/long_functions.py [--lang rust|python] [--max 100] [--top N] DIR...

A function's length runs from its `fn`/`def` line to its last line (Rust: its closing brace),
both counted. Rust's `#[cfg(test)]` modules and Python's test_*.py files are left out. Prints the
functions over the limit (file:line, name, lines) and exits 1 when there is one; `--top N` prints
the N longest first, whatever their length."""

from __future__ import annotations

import argparse
import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from import_floors import blank, closing  # noqa: E402

FN = re.compile(r"\bfn\s+(\w+)")
IMPL = re.compile(r"\bimpl\b([^{;]*)\{")
TRAIT = re.compile(r"\btrait\s+(\w+)[^{;]*\{")
TEST_MOD = re.compile(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*\{")


@dataclass(frozen=True)
class Function:
    file: str
    line: int
    name: str
    lines: int


def impl_name(header: str) -> str:
    """The type an `impl … {` header is for: `impl<T> Store for Azure<T>` → Azure."""
    header = re.sub(r"<[^<>]*(<[^<>]*>[^<>]*)*>", "", header)
    header = header.split(" where ")[0]
    target = header.split(" for ")[-1].strip()
    words = re.findall(r"\w+", target)
    return words[-1] if words else "?"


def rust_functions(path: Path, shown: str) -> list[Function]:
    text = blank(path.read_text())
    tests = [(m.end() - 1, closing(text, m.end() - 1)) for m in TEST_MOD.finditer(text)]
    owners = [
        (m.end() - 1, closing(text, m.end() - 1), impl_name(m.group(1)))
        for m in IMPL.finditer(text)
    ] + [(m.end() - 1, closing(text, m.end() - 1), m.group(1)) for m in TRAIT.finditer(text)]
    out = []
    for m in FN.finditer(text):
        if any(a < m.start() < b for a, b in tests):
            continue
        depth, at = 0, m.end()
        while at < len(text):
            ch = text[at]
            depth += ch in "(["
            depth -= ch in ")]"
            if depth == 0 and ch in "{;":
                break
            at += 1
        if at >= len(text) or text[at] == ";":
            continue  # a declaration without a body
        end = closing(text, at)
        first = text.count("\n", 0, m.start()) + 1
        last = text.count("\n", 0, end) + 1
        owner = [o for a, b, o in owners if a < m.start() < b]
        name = f"{owner[-1]}::{m.group(1)}" if owner else m.group(1)
        out.append(Function(shown, first, name, last - first + 1))
    return out


def python_functions(path: Path, shown: str) -> list[Function]:
    out = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = prefix + child.name
                out.append(Function(shown, child.lineno, name, child.end_lineno - child.lineno + 1))
                walk(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                walk(child, prefix + child.name + ".")
            else:
                walk(child, prefix)

    walk(ast.parse(path.read_text(), str(path)), "")
    return out


def functions(dirs: list[Path], lang: str) -> list[Function]:
    found = []
    for d in dirs:
        files = [d] if d.is_file() else sorted(d.rglob("*.rs" if lang == "rust" else "*.py"))
        for f in files:
            if lang == "python" and f.name.startswith("test_"):
                continue
            shown = f.as_posix()
            found += rust_functions(f, shown) if lang == "rust" else python_functions(f, shown)
    return sorted(found, key=lambda f: (-f.lines, f.file, f.line))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="+", type=Path)
    ap.add_argument("--lang", choices=["rust", "python"], default="rust")
    ap.add_argument("--max", type=int, default=100)
    ap.add_argument("--top", type=int, default=0, help="print the N longest first")
    args = ap.parse_args(argv)
    found = functions(args.dirs, args.lang)
    for f in found[: args.top]:
        print(f"{f.lines:5}  {f.file}:{f.line}  {f.name}")
    over = [f for f in found if f.lines > args.max]
    for f in over:
        print(f"{f.file}:{f.line}: {f.name} is {f.lines} lines (at most {args.max})")
    print(f"long functions: {len(over)} over {args.max} lines of {len(found)}", file=sys.stderr)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
