"""The docs' examples run as written. Every config example of README.md, config/README.md and
docs/ (a fenced ```yaml block, or the `k=v` arguments after `--config` in a command) goes
through the config's one resolution (ferry_config.resolve, what both engines run) and passes
without a warning: a key renamed since (`partition` for `plan`) is a stale example. The `--config`
arguments are read as Snakemake reads them (snakemake.cli.parse_config). An example that is meant
to fail, or that is no config (a synopsis with placeholders), says so in an HTML comment on the
line before it (a fenced block's fence, or the line itself):

    <!-- config-example: invalid -->    the resolution must refuse it
    <!-- config-example: skip (why) --> not a config example

(docs/worker.md's summary of the worker's verbs: tests/worker/test_usage_summary.py.)"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import ferry_config
import pytest
import yaml
from ferrylib import ConfigError
from snakemake.cli import parse_config
from support.ferry import REPO_ROOT

DOCS = [
    REPO_ROOT / "README.md",
    REPO_ROOT / "config" / "README.md",
    *sorted((REPO_ROOT / "docs").rglob("*.md")),
]
MARK = re.compile(r"<!--\s*config-example:\s*(skip|invalid)\b")
FENCE = re.compile(r"^\s*```\s*(\S*)")
# A --config's arguments: to the end of the inline code span or of the line.
CONFIG_ARGS = re.compile(r"--config\s+([^`]*)")
MIGRATION = {"source": "/data/share", "dest": "az://archive/share"}


def where(path: Path) -> str:
    return path.relative_to(REPO_ROOT).as_posix()


def examples(path: Path) -> list[tuple[str, str, dict]]:
    """(where, mark, params) of every config example in a Markdown file; mark: '', 'skip' or
    'invalid', from the comment on the line before the example (or before its block)."""
    found = []
    lines = path.read_text(encoding="utf-8").splitlines()
    block, block_lang, block_mark, block_start = None, "", "", 0
    for n, line in enumerate(lines, 1):
        before = MARK.search(lines[n - 2]) if n > 1 else None
        fence = FENCE.match(line)
        if fence and block is None:
            block, block_lang, block_start = [], fence.group(1).lower(), n
            block_mark = before.group(1) if before else ""
            continue
        if fence:
            if block_lang in ("yaml", "yml"):
                found.append(
                    (f"{where(path)}:{block_start}", block_mark, yaml.safe_load("\n".join(block)))
                )
            block = None
            continue
        if block is not None:
            block.append(line)
        mark = block_mark if block is not None else (before.group(1) if before else "")
        for args in CONFIG_ARGS.findall(line):
            entries = []
            for word in shlex.split(args, comments=False):
                if word.startswith("-") or "=" not in word:
                    break
                entries.append(word)
            if entries:
                found.append((f"{where(path)}:{n}", mark, parse_config(entries)))
    return found


ALL = [example for path in DOCS for example in examples(path)]


def resolved(params: dict, tmp_path: Path) -> dict:
    return ferry_config.resolve({**MIGRATION, "outdir": str(tmp_path), **params})


def test_the_marks_are_read(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "REPO_ROOT", tmp_path)
    doc = tmp_path / "x.md"
    doc.write_text(
        "<!-- config-example: invalid -->\n```yaml\nplan: {parts: none}\n```\n"
        "run `snakemake --config phase=final 'plan={parts: 8}' --dry-run`\n"
        "<!-- config-example: skip (a synopsis) -->\nsnakemake --config pass=N\n"
    )
    assert examples(doc) == [
        ("x.md:2", "invalid", {"plan": {"parts": "none"}}),
        ("x.md:5", "", {"phase": "final", "plan": {"parts": "8"}}),
        ("x.md:7", "skip", {"pass": "N"}),
    ]
    with pytest.raises(ConfigError):
        resolved({"plan": {"parts": "none"}}, tmp_path)


def test_the_docs_have_config_examples():
    checked = [e for e in ALL if e[1] != "skip"]
    assert len(checked) >= 10, [e[0] for e in ALL]
    assert any(e[0].startswith("config") or "README" in e[0] for e in checked)


@pytest.mark.parametrize("where, mark, params", ALL, ids=[e[0] for e in ALL])
def test_every_config_example_in_the_docs_resolves_as_written(where, mark, params, tmp_path):
    if mark == "skip":
        return
    if mark == "invalid":
        with pytest.raises(ConfigError):
            resolved(params, tmp_path)
        return
    res = resolved(params, tmp_path)
    assert res["warnings"] == [], f"{where}: {res['warnings']}"
