"""Running the Nextflow pipeline (main.nf) as users do, from its own launch directory with a
params file, and reading its trace. The run directory and report.json are the same as
Snakemake's (support.pipeline.run_dir, report)."""

from __future__ import annotations

import csv
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from support.ferry import ferry_env
from support.pipeline import REPO, run_dir

NEXTFLOW = shutil.which("nextflow") or str(REPO / "scripts" / "nextflow")


def command(launch: Path, *args: str, params: dict | None = None, profile: str = "test") -> list:
    """The `nextflow run main.nf` command line `nextflow` runs, its params file written."""
    launch.mkdir(parents=True, exist_ok=True)
    cmd = [NEXTFLOW, "run", str(REPO / "main.nf"), "-profile", profile]
    cmd += ["-w", str(launch / "work"), "-ansi-log", "false"]
    if params is not None:
        params_file = launch / "params.yaml"
        params_file.write_text(yaml.safe_dump(params, allow_unicode=True))
        cmd += ["-params-file", str(params_file)]
    return cmd + list(args)


def nextflow(
    launch: Path,
    *args: str,
    params: dict | None = None,
    profile: str = "test",
    expect: int | None = 0,
    env: dict | None = None,
    timeout: float = 280,
) -> subprocess.CompletedProcess:
    """`nextflow run main.nf` from its own launch directory (which keeps .nextflow/ for -resume),
    with params written to a -params-file, as users pass a migration's config."""
    cmd = command(launch, *args, params=params, profile=profile)
    proc = subprocess.run(
        cmd,
        cwd=launch,
        env=ferry_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    if expect is not None and proc.returncode != expect:
        log = launch / ".nextflow.log"
        pytest.fail(
            f"nextflow exited {proc.returncode}, expected {expect}\n  {' '.join(cmd)}\n--- stdout ---\n"
            f"{proc.stdout[-5000:]}\n--- stderr ---\n{proc.stderr[-3000:]}\n--- .nextflow.log ---\n"
            f"{log.read_text()[-5000:] if log.exists() else '(none)'}",
            pytrace=False,
        )
    return proc


def params_for(
    ferry_bin, outdir: Path, source, dest, phase: str, run_name: str = "t", **extra
) -> dict:
    """The config keys the Snakemake tests set (support.pipeline.base_config), as a params file."""
    return {
        "source": str(source),
        "dest": str(dest),
        "phase": phase,
        "outdir": str(outdir),
        "run_name": run_name,
        "ferry_bin": str(ferry_bin),
        "copy": {"block_size": "1MiB", "concurrency": 4, "parallel_files": 4},
        **extra,
    }


def trace(outdir: Path, phase: str, run_name: str = "t") -> list[dict]:
    path = run_dir(outdir, phase, run_name) / "pipeline_info" / "trace.txt"
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def statuses(rows: list[dict], process: str) -> list[str]:
    return sorted(r["status"] for r in rows if r["process"].split(":")[-1] == process)
