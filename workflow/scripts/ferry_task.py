"""Runs one step of a phase, for either engine, and leaves its records in the run directory's
layout (run_dir.json, docs/pipeline.md): the worker's stdout (its --json report or a listing), its stderr as the
log, and a timing file (columns s, cpu_time, max_rss, node) that the report reads.

    ferry_task.py STEP (--spec JSON | --spec-file PATH) --records DIR [--part ID] [--shard K]
                  [--set NAME=VALUE]... [--stub]

STEP's command line comes whole from its spec (ferry_config.py resolve), with the inputs that
differ per task as `{placeholders}`; this fills them, so Snakemake and Nextflow run the same
command. A failed step's report goes to failed/ (the report says why from it) and its exit
status is passed on, so the engine sees the failure and a resumed run redoes the task. --stub
(Nextflow's -stub-run) runs the same command on two small local trees instead of the configured
ends, so a stub's records are the worker's own.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import ferry_docs
from ferry_run_dir import (
    BENCH_HEADER,
    DELETED,
    DOCUMENTS,
    LISTING_SUMMARIES,
    LISTINGS,
    OBSERVED,
    PLAN,
    PLAN_DIR,
    PLAN_FILES,
    PROGRESS,
    RECORDS,
    REPLICATE_REPORT,
    SHARDED_SUMMARIES,
    SHARDS,
    STAGING,
    MissingValue,
    expand,
    fill,
    partitioned,
    records,
)
from ferrylib import reword

# A stub run's ends: the same two files on both sides where the step checks a finished copy, an
# empty destination where it copies (so the plan has something to cut in two), and one the
# source lacks where it lists (so a final plan has something to delete, and prune a part).
STUB_FILES = {"a.txt": b"a\n", "dir/b.txt": b"bb\n"}
STUB_DEST_FILLED = {"verify", "prune", "prune_dirs", "final_check"}
STUB_DEST_EXTRA = {"list_dest": {"gone.txt": b"gone\n"}}
STUB_CUT = ["--parts", "2"]


def stub_ferry(configured: str) -> str:
    """A stub run may happen away from the image the config names the worker in (Azure Batch's
    -stub-run on a laptop): then the worker on PATH, or the one built in this checkout."""
    here = os.path.dirname(os.path.abspath(__file__))
    for candidate in (
        configured,
        shutil.which("ferry"),
        os.path.join(here, "..", "..", "worker", "target", "release", "ferry"),
    ):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return configured


def stub_ends(step: str, where: str) -> dict:
    ends = {}
    for side in ("source", "dest"):
        root = os.path.join(where, side)
        os.makedirs(root, exist_ok=True)
        files = STUB_FILES if side == "source" or step in STUB_DEST_FILLED else {}
        if side == "dest":
            files = {**files, **STUB_DEST_EXTRA.get(step, {})}
        if files:
            for rel, data in files.items():
                path = os.path.join(root, rel)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "wb") as handle:
                    handle.write(data)
                # Both sides alike to the second, so a verify of the metadata finds them the same.
                os.utime(path, (1_700_000_000, 1_700_000_000))
            # Their directories too (a verify of the metadata compares a directory's mtime).
            for dirpath, _dirs, _files in os.walk(root, topdown=False):
                os.utime(dirpath, (1_700_000_000, 1_700_000_000))
        ends[side] = os.path.abspath(root)
    ends["state"] = os.path.abspath(os.path.join(where, "state"))
    return ends


def keep_lost(progress: str, run_dir: str, records_root: str) -> None:
    """An earlier attempt's progress file that it never marked finished (its node lost, or its
    job killed) is kept beside as `<name>.lost-<n>.json` before this attempt rewrites it: the
    report names where that attempt ran and counts the requests it made (ferry_run.lost). Where
    the engine publishes the records on its own (Nextflow's rec/), a copy goes among them too."""
    try:
        with open(progress, encoding="utf-8") as handle:
            if json.load(handle).get("finished", True):
                return
    except (OSError, ValueError):
        return
    stem, n = progress.removesuffix(".json"), 1
    while os.path.exists(f"{stem}.lost-{n}.json"):
        n += 1
    kept = f"{stem}.lost-{n}.json"
    os.replace(progress, kept)
    if os.path.realpath(records_root) != os.path.realpath(run_dir):
        among = os.path.join(records_root, os.path.relpath(kept, run_dir))
        os.makedirs(os.path.dirname(among), exist_ok=True)
        shutil.copyfile(kept, among)


def node() -> str:
    """Where the job runs: its Slurm node, or outside Slurm this machine."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def run_timed(argv: list[str], env: dict, stdout, stderr) -> tuple[int, float, float, float]:
    """(exit status, wall seconds, CPU seconds, peak RSS in MiB) of one command."""
    start = time.monotonic()
    try:
        proc = subprocess.Popen(argv, stdout=stdout, stderr=stderr, env=env)
    except OSError as err:
        stderr.write(f"ferry-task: cannot run {argv[0]}: {err}\n".encode())
        return 127, time.monotonic() - start, 0.0, 0.0
    with passed_on(proc.pid):
        _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    rc = os.waitstatus_to_exitcode(status)
    # A signal reads as the shell reports it (128 + signal), which the engines' retry rules know.
    rc = 128 - rc if rc < 0 else rc
    return rc, wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


# What stops a step: Ctrl-C, a scheduler's time limit, a closed terminal.
STOPPING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def passed_on(pid: int):
    """While the worker runs, a stopping signal stops it (an engine may signal this process only)
    and this process waits for it to end, so the step's records are still written. Passed on as
    SIGTERM, which every verb stops on whatever it inherited: a task Nextflow starts runs in the
    background of its wrapper, SIGINT ignored, and a Ctrl-C would otherwise leave it running
    after Nextflow has ended."""

    def pass_on(_signum, _frame):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)

    previous = {sig: signal.signal(sig, pass_on) for sig in STOPPING}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def prune_guard(root: str, step: str) -> list[str]:
    """Why a prune job must not run, or [] when every verify partition of the plan passed (and,
    for the directories' job, every part of the deletions was done): whatever the engine's graph
    says, an empty or failed fan-out never reaches `ferry prune`."""
    plan = ferry_docs.load("plan", os.path.join(root, PLAN))
    if plan is None:
        return ["no plan: the fan-out never happened"]
    problems = []
    for spec in plan["verify_partitions"]:
        doc = ferry_docs.load("verify", records("verify", spec["id"], root).out)
        if doc is None:
            problems.append(f"verify partition {spec['id']} has no result")
        elif not doc["passed"]:
            problems.append(f"verify partition {spec['id']} found differences")
    if step == "prune_dirs":
        for spec in plan["prune_partitions"]:
            # A part that failed or was refused left its document under failed/, not here.
            if ferry_docs.load("prune", records("prune", spec["id"], root).out) is None:
                problems.append(f"prune part {spec['id']} has no result")
    return problems


def carried_records(root: str, what: str) -> list[str]:
    """What every verify of the plan saw (`observed`), or what every prune job deleted
    (`deleted`), for `ferry carry`: each must be there, or the pass is not complete and leaves no
    carried state."""
    plan = ferry_docs.load("plan", os.path.join(root, PLAN))
    if plan is None:
        raise SystemExit(f"ferry-task: carry: no {PLAN} in the records")
    if what == "observed":
        paths = [expand(OBSERVED, {"part": spec["id"]}) for spec in plan["verify_partitions"]]
        said = "what verify saw"
    else:
        paths = [
            expand(DELETED["prune"], {"part": spec["id"]}) for spec in plan["prune_partitions"]
        ]
        paths.append(DELETED["prune_dirs"])
        said = "what prune deleted"
    paths = [os.path.join(root, p) for p in paths]
    missing = [p for p in paths if not os.path.exists(p)]
    if missing:
        raise SystemExit(f"ferry-task: carry: no record of {said}: {', '.join(missing)}")
    return paths


def in_config_terms(log: str, keys: list[list[str]]) -> None:
    """The worker's words in the log said in the config's terms (the engines show a failed job's
    log, and the report its last line): the key to change, not the flag it became."""
    with open(log, encoding="utf-8", errors="replace") as handle:
        lines = [line.rstrip("\n") for line in handle]
    said = [reword(line, keys) for line in lines]
    if said == lines:
        return
    last = max(i for i, (was, now) in enumerate(zip(lines, said)) if was != now)
    said[last] += " (in the pipeline's config)"
    with open(log, "w", encoding="utf-8") as handle:
        handle.writelines(f"{line}\n" for line in said)


def values_for(
    step: str, spec: dict, root: str, part: str | None, shard: str | None, out: str | None
) -> dict:
    """The values a step's `{placeholders}` are filled with, but for a stub's and the
    overrides: where the task reads and writes in the run directory."""
    values = dict(spec.get("values", {}))
    values.update(
        {
            "plan_dir": os.path.join(root, PLAN_DIR),
            "scratch": os.path.dirname(out) if out else root,
            "report": os.path.join(root, REPLICATE_REPORT),
            "python": sys.executable,
            "script": os.path.join(os.path.dirname(os.path.abspath(__file__)), "replicate.py"),
            **{
                name: os.path.join(root, rel)
                for name, rel in spec.get("listings", LISTINGS).items()
            },
            "shards": os.path.join(root, SHARDS),
        }
    )
    if shard is not None:
        values["shard"] = shard
    if part is not None:
        values["part"] = part
    if step == "verify":
        values["observed"] = os.path.join(root, expand(OBSERVED, {"part": part}))
    if step in DELETED:
        values["deleted"] = os.path.join(root, expand(DELETED[step], {"part": part}))
    for what in ("observed", "deleted"):
        if step == "carry" and f"{{{what}}}" in spec["argv"]:
            values[what] = carried_records(root, what)
    if step in LISTING_SUMMARIES:
        summary = LISTING_SUMMARIES[step] if shard is None else SHARDED_SUMMARIES[step]
        values["summary"] = os.path.join(root, expand(summary, {"shard": shard}))
    if "run_dir" in values and step in PROGRESS:
        values["progress"] = os.path.join(values["run_dir"], expand(PROGRESS[step], {"part": part}))
        keep_lost(values["progress"], values["run_dir"], root)
    for side_file in ("summary", "progress"):
        if side_file in values:
            os.makedirs(os.path.dirname(values[side_file]), exist_ok=True)
    return values


def run_step(
    step: str,
    spec: dict,
    root: str,
    part: str | None,
    overrides: dict,
    stub: bool,
    out: str | None = None,
    shard: str | None = None,
) -> int:
    rec = records(step, part, root, shard)
    among_records = rec.out
    if out:
        rec = rec._replace(out=out)
    for path in (rec.out, rec.log, rec.bench):
        if path:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    if rec.failed:
        try:
            os.remove(rec.failed)
        except FileNotFoundError:
            pass

    values = values_for(step, spec, root, part, shard, rec.out)
    if stub:
        values.update(stub_ends(step, os.path.join("stub", step)))
        values["cut"] = STUB_CUT
    tmp = expand(STAGING["out"], {"out": rec.out}) if rec.out else None
    # A verb that writes its document itself (`ferry shard --out`) writes it where stdout would
    # have gone; its stdout goes to the log.
    writes_out = "{out}" in spec["argv"]
    if writes_out:
        values["out"] = tmp
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
    values.update(overrides)
    argv = fill(spec["argv"], values)
    if stub and step != "replicate":
        argv[0] = stub_ferry(argv[0])
    if stub and (step in DELETED or "--max-delete" in argv):
        # A stub's destination holds a file or two: any deletion is past a share's limit (the
        # plan's judgement of the final pass's deletions included).
        argv.append("--force")
    env = {**os.environ, **spec.get("env", {})}

    with open(rec.log, "wb") as log:
        if step in DELETED:
            problems = prune_guard(root, step)
            if problems:
                log.write("".join(f"ferry: prune refused: {p}\n" for p in problems).encode())
                return 1
        with open(tmp, "wb") if tmp and not writes_out else contextlib.nullcontext(log) as stdout:
            rc, wall, cpu, rss = run_timed(argv, env, stdout, log)
    if step == "plan" and rc == 0 and values["plan_dir"] != os.path.join(root, PLAN_DIR):
        # The plan went elsewhere (Nextflow publishes it on its own): the report still finds
        # plan.json among the records.
        os.makedirs(os.path.join(root, PLAN_DIR), exist_ok=True)
        shutil.copyfile(
            os.path.join(values["plan_dir"], PLAN_FILES["plan"]),
            os.path.join(root, PLAN),
        )
    if rc != 0 and spec.get("config_keys"):
        in_config_terms(rec.log, spec["config_keys"])
    with open(rec.bench, "w", encoding="utf-8") as bench:
        bench.write(BENCH_HEADER + f"{wall:.4f}\t{cpu:.4f}\t{rss:.1f}\t{node()}\n")
    if tmp and os.path.exists(tmp):
        if rc == 0:
            os.replace(tmp, rec.out)
            if step in DOCUMENTS and rec.out != among_records:
                # A document the engine publishes on its own (Nextflow's SHARD): the report
                # still finds it among the records.
                os.makedirs(os.path.dirname(among_records), exist_ok=True)
                shutil.copyfile(rec.out, among_records)
        elif rec.failed:
            os.makedirs(os.path.dirname(rec.failed), exist_ok=True)
            os.replace(tmp, rec.failed)
        else:
            os.remove(tmp)
    return rc


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="ferry-task", description=__doc__.split("\n\n")[0])
    parser.add_argument("step", choices=sorted(RECORDS))
    spec = parser.add_mutually_exclusive_group(required=True)
    spec.add_argument("--spec", help="the step's spec (JSON), from ferry_config.py resolve")
    spec.add_argument("--spec-file", help="a file holding the step's spec (JSON)")
    parser.add_argument(
        "--records", required=True, help="root of the run directory's layout to write into"
    )
    parser.add_argument("--part", help="the plan partition this task works on")
    parser.add_argument(
        "--shard", help="the list job's range of the key space (1 to list.jobs) this task lists"
    )
    parser.add_argument(
        "--out", help="where the step's output goes instead of its place under --records"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a placeholder's value where the engine put the input elsewhere (e.g. manifest=PATH)",
    )
    parser.add_argument(
        "--stub", action="store_true", help="run on two small local trees (Nextflow's -stub-run)"
    )
    args = parser.parse_args(argv)
    if partitioned(args.step) and not args.part:
        parser.error(f"{args.step} needs --part")
    overrides = dict(item.split("=", 1) for item in args.set)
    if args.spec_file:
        with open(args.spec_file, encoding="utf-8") as handle:
            args.spec = handle.read()
    return run_step(
        args.step,
        json.loads(args.spec),
        args.records,
        args.part,
        overrides,
        args.stub,
        args.out,
        args.shard,
    )


if __name__ == "__main__":
    try:
        sys.exit(main())
    except MissingValue as err:
        sys.exit(f"ferry-task: {err}")
    except KeyboardInterrupt:
        # Ctrl-C before the worker started or after it ended: the step did not finish, and the
        # engine says how to resume; a traceback would say nothing more.
        print("ferry-task: interrupted", file=sys.stderr)
        sys.exit(128 + signal.SIGINT)
