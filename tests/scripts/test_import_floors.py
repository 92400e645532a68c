"""The worker's floors (issue 43): tools/import_floors.py finds no circle and no import up a
floor in worker/src, and does find one planted in a copy of it; tools/long_functions.py measures
a function from its `fn` line to its closing brace."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import import_floors  # noqa: E402
import long_functions  # noqa: E402


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "tools/import_floors.py"), *args],
        capture_output=True,
        text=True,
    )


def test_the_worker_has_its_floors():
    done = run()
    assert done.returncode == 0, done.stdout
    assert "0 circle(s)" in done.stderr and "0 upward import(s)" in done.stderr


def planted(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    shutil.copytree(ROOT / "worker/src", src)
    return src


def test_a_planted_circle_is_found_with_its_files(tmp_path):
    src = planted(tmp_path)
    # units.rs is imported by progress.rs; units importing progress closes a circle of two.
    units = src / "units.rs"
    units.write_text("use crate::progress::ProgressFile;\n" + units.read_text())
    done = run("--src", str(src))
    assert done.returncode == 1
    assert "circle of 2 files: progress.rs units.rs" in done.stdout


def test_an_import_up_a_floor_is_named_with_its_line(tmp_path):
    src = planted(tmp_path)
    docs = src / "documents.rs"
    text = docs.read_text()
    docs.write_text(text.replace("\nuse ", "\nuse crate::plan::Phase;\nuse ", 1))
    line = text[: text.index("\nuse ")].count("\n") + 2
    done = run("--src", str(src))
    assert done.returncode == 1
    assert (
        f"worker/src/documents.rs:{line}: crate::plan::Phase — floor 'documents' imports "
        "'plan' (plan/mod.rs) above it" in done.stdout
    )


def test_paths_resolve_through_braces_super_and_inline_modules(tmp_path):
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    (src / "main.rs").write_text("mod a;\nmod b;\n")
    (src / "a/mod.rs").write_text("pub mod c;\nmod tests {\n    use super::*;\n}\n")
    (src / "a/c.rs").write_text(
        "use crate::{b::{self, X as Y}, a::c};\nfn f() { super::super::b::g(); }\n"
    )
    (src / "b.rs").write_text('// crate::a::c in a comment\nconst S: &str = "crate::a";\n')
    got = {(i.src, i.dst) for i in import_floors.imports(src)}
    assert got == {("a/c.rs", "b.rs")}


def test_a_function_is_counted_from_fn_to_its_closing_brace(tmp_path):
    f = tmp_path / "x.rs"
    f.write_text(
        'struct S;\nimpl S {\n    fn two(&self) {\n        let s = "}";\n    }\n}\n'
        "fn one() {}\ntrait T {\n    fn declared(&self);\n}\n"
        "#[cfg(test)]\nmod tests {\n    fn long() {\n\n\n\n    }\n}\n"
    )
    found = {(fn.name, fn.lines) for fn in long_functions.functions([f], "rust")}
    assert found == {("S::two", 3), ("one", 1)}
    assert long_functions.main(["--max", "2", str(f)]) == 1
    assert long_functions.main(["--max", "3", str(f)]) == 0


def test_layout_md_draws_the_declared_floors_in_their_order():
    floors = import_floors.load_floors(ROOT / "worker/floors.toml")
    text = (ROOT / "docs/design/layout.md").read_text()
    drawing = text[text.index("## The worker's floors") :].split("```")[1]
    # Each floor's line starts with its name after one space; its continuation lines, with more.
    drawn = [m.group(1) for m in re.finditer(r"^ (\w+) ", drawing, re.M)]
    assert drawn == [name for name, _ in reversed(floors)]
