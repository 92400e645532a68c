"""The run directory's layout, read from its one definition (run_dir.json beside this file, which
the worker compiles in and the Nextflow pipeline gets through ferry_config.py's resolution), and
the one clean-up of a previous attempt's leftovers that both engines run after a complete run.

    ferry_run_dir.py discard-incomplete RUN_DIR
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
from typing import NamedTuple

from ferrylib import write_json

DEFINITION = os.path.join(os.path.dirname(os.path.abspath(__file__)), "run_dir.json")
with open(DEFINITION, encoding="utf-8") as _handle:
    LAYOUT = json.load(_handle)


# run_dir.json's `placeholders`: {name}, name a letter or _, then letters, digits or _.
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


class MissingValue(ValueError):
    """A placeholder without a value: the pattern or command, and the name."""


def expand(pattern: str, values: dict) -> str:
    """The pattern with each {name} replaced by values[name] as it is (never expanded again);
    any other brace stays as written; a name without a value (or None) is MissingValue."""

    def value(match: re.Match) -> str:
        if values.get(match.group(1)) is None:
            raise MissingValue(f"no value for {match.group(0)} in {pattern!r}")
        return str(values[match.group(1)])

    return PLACEHOLDER.sub(value, pattern)


def fill(argv: list[str], values: dict) -> list[str]:
    """A step's command with each argument that is exactly {name} replaced by values[name] (a
    list: that many arguments); any other argument stays as written, braces included; a name
    without a value is MissingValue."""
    out = []
    for arg in argv:
        match = PLACEHOLDER.fullmatch(arg)
        if match is None:
            out.append(arg)
            continue
        if match.group(1) not in values:
            raise MissingValue(f"no value for {arg} in {argv[:2]}")
        value = values[match.group(1)]
        out.extend(value if isinstance(value, list) else [value])
    return out


class Records(NamedTuple):
    out: str | None  # the worker's stdout; None: it goes to the log
    log: str
    bench: str
    failed: str | None = None  # where `out` goes when the step fails


# Every step ferry runs, in the pipeline's order, and where its records go ({part}: a plan
# partition's id). Snakemake declares these paths as the rules' outputs; Nextflow publishes them.
RECORDS = {
    step: Records(spec.get("out"), spec["log"], spec["bench"], spec.get("failed"))
    for step, spec in LAYOUT["steps"].items()
}
# A list step's records when its listing is taken by list.jobs > 1 jobs, each over one range
# of the key space ({shard}: 1 to list.jobs, as `ferry shard` cut it): the plan, prune and carry
# read the N listings as one.
SHARDED = {
    step: Records(spec["sharded"]["out"], spec["sharded"]["log"], spec["sharded"]["bench"])
    for step, spec in LAYOUT["steps"].items()
    if "sharded" in spec
}
# Which of the worker's documents (ferry_docs.py) a step's output is.
DOCUMENTS = {step: spec["document"] for step, spec in LAYOUT["steps"].items() if "document" in spec}
PLAN_DIR = LAYOUT["plan_dir"]
# A set of parts (`ferry partition --out DIR`, and each of the plan's): its files, relative to DIR.
PARTS = LAYOUT["parts"]
# The plan directory's inside, relative to it (`ferry plan --out`).
PLAN_FILES = LAYOUT["plan_files"]
# What is made under another name until it is whole (a step's output: `out`).
STAGING = LAYOUT["staging"]
# What a verify saw on the destination at the paths it checked (`ferry verify --observed`): the
# carry step patches the carried destination listing with it.
OBSERVED = LAYOUT["steps"]["verify"]["observed"]
PLAN = os.path.join(PLAN_DIR, PLAN_FILES["plan"])
# Every file the final pass would delete, for review.
DELETIONS = os.path.join(PLAN_DIR, PLAN_FILES["delete"])
# Where the cuts of the key space that the list jobs share go (`ferry shard`).
SHARDS = RECORDS["shard"].out
LISTINGS = {"source_listing": RECORDS["list_source"].out, "dest_listing": RECORDS["list_dest"].out}
# The same, taken by several list jobs: patterns whose {shard} the worker expands (--shards).
SHARDED_LISTINGS = {
    "source_listing": SHARDED["list_source"].out,
    "dest_listing": SHARDED["list_dest"].out,
}
# What each prune job deleted (its --log): one per part of the plan's prune_partitions, and the
# prune_dirs job's; the carry step patches the carried destination listing with them.
DELETED = {step: spec["deleted"] for step, spec in LAYOUT["steps"].items() if "deleted" in spec}
# Where a listing's `ferry ls --summary` goes (its counts, Blob requests among them).
LISTING_SUMMARIES = {
    step: spec["summary"] for step, spec in LAYOUT["steps"].items() if "summary" in spec
}
SHARDED_SUMMARIES = {step: LAYOUT["steps"][step]["sharded"]["summary"] for step in SHARDED}
# What a copy or verify job rewrites every few seconds while it runs (the worker's
# --progress-file): `ferry status` reads it, and report.html's timeline shows a running job from it.
PROGRESS = {step: spec["progress"] for step, spec in LAYOUT["steps"].items() if "progress" in spec}
PROGRESS_DIR = LAYOUT["progress_dir"]
BENCHMARKS_DIR = LAYOUT["benchmarks_dir"]
BENCH_HEADER = "\t".join(LAYOUT["bench_columns"]) + "\n"
# A run of the phase, from its start to its record: the engine's start hook leaves RUN_STARTED
# in the run directory (ferry_history.start); the report appends the run's record to HISTORY,
# in the run root above the phase directories (<outdir>/<run_name>/), one JSON line per run.
RUN_STARTED = LAYOUT["run_started"]
HISTORY = LAYOUT["run_root"]["history"]
# Which migration the run root holds (its source and destination as they are, whatever their
# spelling): written by its first pass's start, compared by every later pass's resolution.
MIGRATION = LAYOUT["run_root"]["migration"]
# One pass at a time: who runs a pass of the migration now (ferry_lock.py).
LOCK = LAYOUT["run_root"]["lock"]
REPORT = LAYOUT["report"]
INCOMPLETE_REPORT = LAYOUT["incomplete_report"]
REPLICATE_REPORT = LAYOUT["replicate_report"]


def read_migration(root: str) -> dict | None:
    """The run root's migration record, None before its first pass; ValueError, naming the
    file, for one that is not a record of this version."""
    path = os.path.join(root, MIGRATION)
    try:
        with open(path, encoding="utf-8") as handle:
            doc = json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        raise ValueError(f"{path}: cannot be read as a migration record: {err}") from err
    fields = ("source", "dest")
    if not (isinstance(doc, dict) and doc.get("version") == 1) or not all(
        isinstance(doc.get(k), str) for k in fields
    ):
        raise ValueError(f"{path}: not a migration record of version 1 (version, source, dest)")
    return doc


def record_migration(root: str, doc: dict) -> None:
    """Leaves the run root's migration record, once: the first pass's ends are the migration's."""
    path = os.path.join(root, MIGRATION)
    if os.path.exists(path):
        return
    os.makedirs(root, exist_ok=True)
    write_json(path, doc)


def records(step: str, part: str | None = None, root: str = "", shard=None) -> Records:
    """The step's record paths under root, for one partition where the step has them; with
    shard, a list step's records of that list job (shard="{shard}": the pattern)."""
    table = RECORDS if shard is None else SHARDED
    values = {"part": part, "shard": shard}
    return Records(*(os.path.join(root, expand(p, values)) if p else None for p in table[step]))


def part_file(parts_dir: str, part) -> str:
    """Part `part` of a set of parts in parts_dir: an index (as `ferry partition` numbers them),
    or an id as the plan gives it ("{part}": the pattern)."""
    if isinstance(part, int):
        part = f"{part:0{PARTS['part_digits']}d}"
    return os.path.join(parts_dir, expand(PARTS["part"], {"part": part}))


def plan_part(step: str, part, root: str = "") -> str:
    """The manifest of a copy, verify or prune part in the plan under the run directory root."""
    return part_file(os.path.join(root, PLAN_DIR, PLAN_FILES["parts"][step]), part)


def listings(jobs: int) -> dict[str, str]:
    """{source_listing, dest_listing}: the listings a plan, prune or carry reads, relative to the
    run directory; with several list jobs, the patterns the worker expands."""
    return dict(SHARDED_LISTINGS if jobs > 1 else LISTINGS)


def shard_ids(jobs: int) -> list[str]:
    """The list jobs' ids, as the worker expands {shard}: 1 to jobs."""
    return [str(k) for k in range(1, jobs + 1)]


def partitioned(step: str) -> bool:
    """Whether the step runs once per plan partition (its records carry {part})."""
    return "{part}" in RECORDS[step].log


def report_paths(run_dir: str, complete: bool) -> dict[str, str]:
    """{json, md, html} of the phase's report: report.* or, for an incomplete run,
    report-incomplete.*."""
    names = REPORT if complete else INCOMPLETE_REPORT
    return {kind: os.path.join(run_dir, names[kind]) for kind in ("json", "md", "html")}


def discard_incomplete(run_dir: str) -> list[str]:
    """After a complete run: what an earlier failed attempt left (its partial report, every page
    of it, and the failed jobs' records) is now misleading. The one clean-up both engines run
    (Snakemake's onsuccess, Nextflow's FerryConfig.finish). Returns what it removed."""
    removed = []
    for name in INCOMPLETE_REPORT.values():
        path = os.path.join(run_dir, name)
        try:
            os.remove(path)
            removed.append(path)
        except FileNotFoundError:
            pass
    failed = os.path.join(run_dir, LAYOUT["failed_dir"])
    if os.path.isdir(failed):
        shutil.rmtree(failed)
        removed.append(failed)
    return removed


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="ferry_run_dir.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser(
        "discard-incomplete", help="after a complete run: remove what failed ones left"
    )
    d.add_argument("run_dir")
    args = p.parse_args(argv)
    for path in discard_incomplete(args.run_dir):
        print(f"ferry: removed {path}, left by an earlier attempt", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
