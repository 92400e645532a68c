"""No Python function over LIMIT lines (`make lint`): a function a reader can hold on one screen
or two. Counts each def from its `def` line to its last line, nested ones on their own too.

    tools/function_length.py [PATH...] [--limit N] [--top K]

PATHs are files or directories (default workflow/scripts); exit 1, naming each, when a function
is longer than the limit. --top K prints the K longest (the note's before/after figures).
"""

from __future__ import annotations

import argparse
import ast
import os
import sys

LIMIT = 100
DEFAULT_PATHS = ("workflow/scripts",)


def python_files(paths: list[str]) -> list[str]:
    found = []
    for path in paths:
        if os.path.isfile(path):
            found.append(path)
            continue
        for dirpath, _dirs, files in os.walk(path):
            found += [os.path.join(dirpath, f) for f in files if f.endswith(".py")]
    return sorted(found)


def lengths(path: str) -> list[tuple[int, str, str]]:
    """(lines, path:line, qualified name) of every function in the file."""
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read(), path)
    out = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                out.append((child.end_lineno - child.lineno + 1, f"{path}:{child.lineno}", name))
                visit(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", default=list(DEFAULT_PATHS))
    parser.add_argument("--limit", type=int, default=LIMIT)
    parser.add_argument("--top", type=int, default=0, help="print the K longest functions")
    args = parser.parse_args(argv)
    found = sorted(
        (f for path in python_files(args.paths) for f in lengths(path)),
        key=lambda f: (-f[0], f[1]),
    )
    for n, where, name in found[: args.top]:
        print(f"{n:5} {name} ({where})")
    long = [f for f in found if f[0] > args.limit]
    for n, where, name in long:
        print(f"{where}: {name} is {n} lines, over {args.limit}", file=sys.stderr)
    return 1 if long else 0


if __name__ == "__main__":
    sys.exit(main())
