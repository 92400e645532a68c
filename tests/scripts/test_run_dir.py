"""The run directory is defined once (workflow/scripts/run_dir.json): no name of it is written
anywhere else in the code, and its three readers (the worker's run_dir.rs, ferry_run_dir.py,
lib/Ferry.groovy) expand its patterns and fill the steps' commands by the same rule."""

from __future__ import annotations

import ast
import json
import re
import subprocess
from pathlib import Path

import ferry_run_dir

REPO = Path(__file__).resolve().parents[2]
DEFINITION = REPO / "workflow" / "scripts" / "run_dir.json"
# The definition and its readers: the only places a name of the run directory may be written.
READERS = {
    "workflow/scripts/run_dir.json",
    "worker/src/run_dir.rs",
    "workflow/scripts/ferry_run_dir.py",
    "lib/Ferry.groovy",
}
# Names that are the run directory's by coincidence only: file, name, why.
ELSEWHERE = {
    ("worker/src/carried.rs", "dest.tsv"): "the carried state's listing, in the state location",
}
# The code: the worker, the pipelines and their scripts (docs and tests are not code).
SCANNED = [
    "worker/src/**/*.rs",
    "workflow/**/*.py",
    "workflow/**/*.smk",
    "workflow/**/*.nf",
    "Snakefile",
    "main.nf",
    "nextflow.config",
    "conf/*.config",
    "lib/*.groovy",
    "bin/*",
    "scripts/*.sh",
]


PROSE = ("about", "placeholders")


def _strings(node) -> list[str]:
    """Every path the definition holds (its prose aside)."""
    if isinstance(node, dict):
        return [s for key, value in node.items() if key not in PROSE for s in _strings(value)]
    if isinstance(node, list):
        return [s for value in node for s in _strings(value)]
    return [node] if isinstance(node, str) else []


def run_dir_names() -> set[str]:
    """What gives a path of the run directory away when written by hand: each file name of the
    definition, the fixed words of a name around its placeholders (`part-`, `.partial-`), and
    each directory followed by what is inside it (`plan/`, `listing/`)."""
    layout = json.loads(DEFINITION.read_text())
    names = {f"{value}/" for key, value in layout.items() if key.endswith("_dir")}
    for path in _strings(layout):
        segments = path.split("/")
        for segment in segments:
            if "{" in segment:
                pieces = re.split(r"\{[A-Za-z_][A-Za-z0-9_]*\}", segment)
                names.update(p for p in pieces if len(p) > 3 and p.endswith("-"))
            elif "." in segment:
                names.add(segment)
        names.update(f"{d}/" for d in segments[:-1] if "{" not in d)
    return names


def _python_code(text: str) -> list[tuple[int, str]]:
    """The string constants of a Python file (line, text), but its docstrings (its prose)."""
    tree = ast.parse(text)
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.add(id(body[0].value))
    return sorted(
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        if id(node) not in docstrings
    )


def _blank(match: re.Match) -> str:
    """What is cut stays as many lines, so the lines keep their numbers."""
    return "\n" * match.group(0).count("\n")


def _without_comments(text: str, line_comment: str) -> list[tuple[int, str]]:
    """The code's lines without their comments (and, for a Snakefile, its docstrings); a Rust
    file's without its tests."""
    text = text.split("#[cfg(test)]\nmod tests")[0]
    text = re.sub(r"/\*.*?\*/", _blank, text, flags=re.S)
    if line_comment == "#":
        text = re.sub(r'"""(.*?)"""', _blank, text, flags=re.S)
    text = re.sub(rf"(^|\s){re.escape(line_comment)}.*", r"\1", text, flags=re.M)
    return list(enumerate(text.splitlines(), 1))


def code_of(path: Path) -> list[tuple[int, str]]:
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix == ".py":
        return _python_code(text)
    if path.suffix in (".smk", ".sh") or path.name in ("Snakefile", "ferry-task"):
        return _without_comments(text, "#")
    return _without_comments(text, "//")


def hand_written(names: set[str]) -> list[str]:
    """Each place (file:line: name) the code writes a name of the run directory itself."""
    found = []
    pattern = re.compile(
        r"(?<![\w.\-])(" + "|".join(re.escape(n) for n in sorted(names, key=len)[::-1]) + ")"
    )
    for glob in SCANNED:
        for path in sorted(REPO.glob(glob)):
            rel = path.relative_to(REPO).as_posix()
            if rel in READERS or not path.is_file():
                continue
            for number, line in code_of(path):
                for match in pattern.finditer(line):
                    if (rel, match.group(1)) in ELSEWHERE:
                        continue
                    found.append(f"{rel}:{number}: {match.group(1)!r} in {line.strip()[:90]!r}")
    return found


def test_no_name_of_the_run_directory_is_written_outside_its_definition():
    names = run_dir_names()
    assert {"plan.json", "part-", "shards.json", "report.html", "plan/", ".partial-"} <= names
    found = hand_written(names)
    assert not found, (
        "names of the run directory written by hand, not read from run_dir.json:\n  "
        + "\n  ".join(found)
    )


CASES = Path(__file__).with_name("run_dir_cases.json")


def _attempt(work, *args):
    try:
        return work(*args)
    except ferry_run_dir.MissingValue:
        return {"error": True}


def _expected(case: dict):
    return {"error": True} if case.get("error") else case["out"]


def _groovy(cases: Path) -> dict:
    """run_dir_cases.groovy's results: lib/Ferry.groovy run by the Groovy of Nextflow's runtime."""
    jars = sorted((REPO / ".nextflow-runtime" / "lib").glob("groovy-*.jar"))
    classpath = ":".join([*map(str, jars), str(REPO / "lib")])
    script = Path(__file__).with_name("run_dir_cases.groovy")
    proc = subprocess.run(
        ["java", "-cp", classpath, "groovy.ui.GroovyMain", str(script), str(cases)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _worker(ferry_bin: Path, case: dict):
    """`ferry expand`'s result: the worker's run_dir::expand."""
    pairs = [f"{name}={value}" for name, value in case["values"].items()]
    proc = subprocess.run(
        [str(ferry_bin), "expand", case["pattern"], *pairs],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode == 2 and "no value for" in proc.stderr:
        return {"error": True}
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.removesuffix("\n")


def test_the_three_readers_expand_and_fill_by_one_rule(ferry_bin):
    cases = json.loads(CASES.read_text(encoding="utf-8"))
    groovy = _groovy(CASES)
    for i, case in enumerate(cases["expand"]):
        want = _expected(case)
        python = _attempt(ferry_run_dir.expand, case["pattern"], case["values"])
        worker = _worker(ferry_bin, case)
        assert (python, worker, groovy["expand"][i]) == (want, want, want), case
    for i, case in enumerate(cases["fill"]):
        want = _expected(case)
        python = _attempt(ferry_run_dir.fill, case["argv"], case["values"])
        assert (python, groovy["fill"][i]) == (want, want), case
