"""docs/worker.md's summary at its top names every verb of `ferry --help` and every flag each
takes (`ferry VERB --help`, long or short form); the flags every verb that reaches storage shares
are named once, below the summary."""

from __future__ import annotations

import re
import subprocess

from support.ferry import REPO_ROOT

# The flags of every verb that reaches storage: named once, below docs/worker.md's summary.
SHARED = {
    "--auth",
    "--max-retries",
    "--no-block-md5",
    "--no-put-md5",
    "--io-timeout",
    "--no-fsync",
    "--list-concurrency",
}


def verbs(ferry_bin) -> list[str]:
    text = subprocess.run([ferry_bin, "--help"], capture_output=True, text=True).stdout
    commands = text.split("Commands:")[1].split("Options:")[0]
    return [m for m in re.findall(r"^  ([a-z]+)\s", commands, re.M) if m != "help"]


def flags(ferry_bin, verb: str) -> dict[str, str]:
    """{--long: its short form or ''} of `ferry VERB --help`."""
    text = subprocess.run([ferry_bin, verb, "--help"], capture_output=True, text=True).stdout
    found = re.findall(r"^\s+(?:(-\w), )?(--[a-z0-9-]+)", text, re.M)
    return {long: short for short, long in found if long != "--help"}


def summary() -> tuple[dict[str, str], str]:
    """docs/worker.md's summary: {verb: its lines}, and the text below it up to the first section."""
    text = (REPO_ROOT / "docs" / "worker.md").read_text(encoding="utf-8")
    block = text.split("```\n", 2)[1]
    after = text.split("```\n", 2)[2].split("\n## ", 1)[0]
    entries: dict[str, str] = {}
    verb = None
    for line in block.splitlines():
        m = re.match(r"ferry ([a-z]+)", line)
        if m:
            verb = m.group(1)
        if verb:
            entries[verb] = entries.get(verb, "") + line + "\n"
    return entries, after


def test_worker_md_summary_names_every_verb_and_its_flags(ferry_bin):
    entries, after = summary()
    missing = {}
    for verb in verbs(ferry_bin):
        if verb not in entries:
            missing[verb] = "not in the summary"
            continue
        named = set(re.findall(r"(?<![\w-])--?[a-z0-9][a-z0-9-]*", entries[verb]))
        left = sorted(
            long
            for long, short in flags(ferry_bin, verb).items()
            if long not in named | SHARED and short not in named
        )
        if left:
            missing[verb] = left
    assert missing == {}, missing
    assert [f for f in sorted(SHARED) if f not in after] == []
