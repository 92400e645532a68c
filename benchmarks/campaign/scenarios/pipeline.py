"""Scenario `pipeline`: the pipelines' own cost. Snakemake (`--profile profiles/local`) and
Nextflow (`-profile local`) against the ferry commands they cannot do without: a baseline against
one `ferry copy` of the same tree, an unchanged incremental against the two `ferry ls` it needs,
and the fixed cost of a phase with nothing to do (an empty source), reported on its own."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from ..checks import diff_trees
from ..common import KiB, Settings, bench_env, log, q, rel, rmtree
from ..datasets import files_dataset
from ..timing import Group, Row

NEXTFLOW = shutil.which("nextflow") or "scripts/nextflow"
# Issue 9's targets, reported as met or missed.
BASELINE_TARGET, INCREMENTAL_TARGET, FIXED_TARGET_S = 1.3, 1.5, 3.0


def worker_args(phase: str) -> str:
    """The arguments the pipelines give every copy job of the phase, from config/config.yaml
    through the pipelines' own resolver: the lone ferry copy gets the same, so the difference is
    the engine's."""
    if "workflow/scripts" not in sys.path:
        sys.path.insert(0, "workflow/scripts")
    import ferry_config

    cfg = ferry_config.resolve({"source": "/source", "dest": "/dest", "phase": phase})["config"]
    return " ".join(ferry_config.copy_args(cfg))


def engines(s: Settings, src: Path, dst: Path, out: Path, phase: str) -> dict[str, tuple[str, str]]:
    """engine → (command, its outputs to clear before a run)."""
    snake = (
        f".venv/bin/snakemake --profile profiles/local --quiet all --config source={q(src)} dest={q(dst)} "
        f"outdir={q(out / 'snakemake')} run_name=bench phase={phase} ferry_bin={s.ferry}"
    )
    nextflow = (
        f"{NEXTFLOW} -q run main.nf -profile local -w {q(out / 'nf-work')} --source {q(src)} "
        f"--dest {q(dst)} --outdir {q(out / 'nextflow')} --run_name bench --phase {phase} "
        f"--ferry_bin {s.ferry}"
    )
    return {
        "snakemake": (snake, q(out / "snakemake")),
        "nextflow": (nextflow, f"{q(out / 'nextflow')} {q(out / 'nf-work')}"),
    }


def tasks(out: Path, engine: str, phase: str) -> int | None:
    """Tasks of the engine's last run, from its own report (jobs per step, and the report itself)."""
    try:
        report = json.loads((out / engine / "bench" / phase / "report.json").read_text())
        return sum(st["jobs"] for st in report["time"]["per_step"].values()) + 1
    except (OSError, ValueError, KeyError):
        return None


def scenario_pipeline(s: Settings, _host: None = None) -> list[Group]:
    n = s.count(1_000_000, 5_000)
    ds = files_dataset(
        "tiny-files",
        f"{n:,} files of 0–4 KiB in {n // 1000:,} directories",
        n,
        lambda r: r.randint(0, 4 * KiB),
        per_dir=1000,
        seed=61,
    )
    work = s.work / "pipeline"
    env = bench_env()
    # Deleting a million files right before a run slows the next run's file creation on this
    # journal-less ext4 (see set_aside in common.py) for a minute: at full scale, wait it out.
    settle = " && sync && sleep 61" if n >= 100_000 else ""
    groups = []
    if s.selected("baseline"):
        src, dst, out = ds.materialize(s.data / "pipeline"), work / "dst", work / "baseline"
        rows = [
            Row(
                f"{e} baseline",
                cmd,
                "ferry",
                f"rm -rf {q(dst)} {clear}{settle}",
                durable=True,
                src=src,
                dst=dst,
            )
            for e, (cmd, clear) in engines(s, src, dst, out, "baseline").items()
        ]
        rows.append(
            Row(
                "ferry copy",
                f"{s.ferry} copy -r {worker_args('baseline')} {q(src)}/ {q(dst)}",
                "peer",
                f"rm -rf {q(dst)}{settle}",
                durable=True,
                src=src,
                dst=dst,
                json=True,
                note="One ferry copy of the whole tree with the arguments the pipelines give each copy job.",
            )
        )

        def verify(src=src, dst=dst, out=out):
            res = {
                "tasks": {e: tasks(out, e, "baseline") for e in ("snakemake", "nextflow")},
                "last_run_destination": diff_trees(src, dst),
            }
            return {"ok": res["last_run_destination"]["ok"], **res}

        groups.append(
            Group(
                "baseline",
                f"baseline of {ds.desc}, local → local: the pipelines against one ferry copy",
                ds.desc,
                ds.bytes,
                ds.files,
                rows,
                env,
                warm=[src],
                verify=verify,
                targets={
                    r.name: [
                        (
                            "wall/ferry copy",
                            "<=",
                            BASELINE_TARGET,
                            f"≤ {BASELINE_TARGET}× one ferry copy",
                        )
                    ]
                    for r in rows[:2]
                },
                notes=[
                    "Destination and the engine's run directory removed before every run"
                    + (
                        ", then a minute's wait for the freed inodes (see Method)."
                        if settle
                        else "."
                    )
                ],
            )
        )
    if s.selected("incremental-unchanged"):
        src, dst, out = ds.materialize(s.data / "pipeline"), work / "in-sync", work / "incremental"
        listings = work / "listings"
        rows = [
            Row(f"{e} incremental", cmd, "ferry", f"rm -rf {clear}", src=src, dst=dst)
            for e, (cmd, clear) in engines(s, src, dst, out, "incremental").items()
        ]
        rows.append(
            Row(
                "two ferry ls",
                f"{s.ferry} ls -r --format tsv {q(src)} > {q(listings)}/source.tsv && "
                f"{s.ferry} ls -r --format tsv {q(dst)} > {q(listings)}/dest.tsv",
                "peer",
                f"rm -rf {q(listings)} && mkdir -p {q(listings)}",
                src=src,
                dst=dst,
                note="The two listings an incremental phase starts from, one after the other.",
            )
        )

        def setup(src=src, dst=dst):
            log(f"  bringing {rel(dst)} in sync (untimed)")
            subprocess.run(
                [s.ferry, "copy", "-r", rel(src) + "/", rel(dst)],
                check=True,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )

        def verify(src=src, dst=dst, out=out):
            res = {
                "tasks": {e: tasks(out, e, "incremental") for e in ("snakemake", "nextflow")},
                "destination_unchanged": diff_trees(src, dst),
            }
            if not s.keep:
                rmtree(dst)
            return {"ok": res["destination_unchanged"]["ok"], **res}

        groups.append(
            Group(
                "incremental-unchanged",
                f"incremental with nothing changed, {ds.desc}: the pipelines against the "
                "two listings",
                ds.desc,
                0,
                ds.files,
                rows,
                env,
                warm=[src],
                setup=setup,
                verify=verify,
                targets={
                    r.name: [
                        (
                            "wall/two ferry ls",
                            "<=",
                            INCREMENTAL_TARGET,
                            f"≤ {INCREMENTAL_TARGET}× the two ferry ls",
                        )
                    ]
                    for r in rows[:2]
                },
                notes=[
                    "The destination is brought in sync once, untimed; each run starts from a removed run "
                    "directory, so it lists, plans, copies nothing and reports."
                ],
            )
        )
    if s.selected("empty"):
        src, dst, out = s.data / "pipeline" / "empty", work / "empty-dst", work / "empty"
        src.mkdir(parents=True, exist_ok=True)
        rows = [
            Row(
                f"{e} baseline, empty source",
                cmd,
                "ferry",
                f"rm -rf {q(dst)} {clear}",
                durable=True,
                src=src,
                dst=dst,
            )
            for e, (cmd, clear) in engines(s, src, dst, out, "baseline").items()
        ]
        rows.append(
            Row(
                "ferry copy, empty source",
                f"{s.ferry} copy -r {worker_args('baseline')} {q(src)}/ {q(dst)}",
                "peer",
                f"rm -rf {q(dst)}",
                durable=True,
                src=src,
                dst=dst,
                json=True,
            )
        )
        groups.append(
            Group(
                "empty",
                "a phase with nothing to do (empty source): the fixed cost of a run",
                "an empty directory",
                0,
                0,
                rows,
                env,
                verify=lambda out=out: {
                    "ok": True,
                    "tasks": {e: tasks(out, e, "baseline") for e in ("snakemake", "nextflow")},
                },
                targets={
                    r.name: [("wall_median", "<=", FIXED_TARGET_S, f"≤ {FIXED_TARGET_S:g} s")]
                    for r in rows[:2]
                },
                notes=[
                    "Start-up, configuration check, listings of two empty trees, plan and report: what every "
                    "phase costs whatever its size."
                ],
            )
        )
    return groups
