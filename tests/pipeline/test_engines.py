"""Snakemake and Nextflow, given one config file, do the same migration, and retry alike.

One source tree, two Azurite destinations (one per engine), one YAML config passed to Snakemake
as --configfile and to Nextflow as -params-file. After each phase the two destinations hold the
same blobs (checked with the Azure SDK), the plans and partitions are the same files, and the
reports are equal once timings are masked. And engines relay: an incremental pass by one engine
over the other's baseline plans nothing.
"""

from __future__ import annotations

import json
import re
import shlex
import uuid
from pathlib import Path

import pytest
import yaml
from support.nextflow import nextflow, params_for, statuses, trace
from support.pipeline import (
    base_config,
    blob_snapshot,
    md5s,
    migration_tree,
    modify_tree,
    pipeline,
    plan_files,
)

# What legitimately differs between two runs of the same phase: when and how long things took.
TIMING_KEYS = {
    "generated_at",
    "elapsed_seconds",
    "first_job_started_at",
    "job_seconds",
    "worker_copy_seconds",
    "worker_verify_seconds",
    "seconds",
    "max_seconds",
    "cpu_seconds",
    "max_rss_mb",
    "worker_seconds",
    "span_seconds",
    # Each job's times on the timeline (report.json's `jobs`).
    "start",
    "end",
    # The history's records: which run, which engine, when, and each step's span.
    "run_id",
    "engine",
    "started",
    "ended",
    "wall_seconds",
    "span",
    # The depth the copies settled on follows the rates they measured.
    "depth",
    # The projection is made of timings through and through.
    "projection",
}
# report.md's sections made of the same (compared in report.json, masked).
TIMED_SECTIONS = re.compile(r"(?ms)^## Projection of the final pass$.*?(?=^## Failures$)")


def masked(doc, dest: str):
    """The report without timings, its destination named DEST."""
    if isinstance(doc, dict):
        return {k: None if k in TIMING_KEYS else masked(v, dest) for k, v in doc.items()}
    if isinstance(doc, list):
        return [masked(v, dest) for v in doc]
    if isinstance(doc, str):
        return doc.replace(dest, "DEST")
    return doc


def masked_md(text: str, dest: str) -> str:
    text = text.replace(dest, "DEST")
    text = re.sub(r"(?m)^- generated: .*$", "- generated: -", text)
    text = TIMED_SECTIONS.sub("", text)
    # Seconds and sizes alike; the sizes are compared exactly in report.json.
    return re.sub(r"\b\d+\.\d+\b", "N", text)


class Engines:
    """The two engines on one config file, each with its own destination and records."""

    def __init__(self, root: Path, azurite, ferry_bin):
        self.root = root
        self.src = root / "src"
        self.names = {}
        self.config = root / "migration.yaml"
        self.config.write_text(
            yaml.safe_dump(
                {
                    "source": str(self.src),
                    "run_name": "eq",
                    "ferry_bin": str(ferry_bin),
                    "checksum": True,
                    "plan": {"mode": "parts", "parts": 3},
                    "copy": {"block_size": "1MiB", "concurrency": 4, "parallel_files": 4},
                }
            )
        )
        self.container = azurite.service_client().get_container_client(
            f"engines-{uuid.uuid4().hex[:12]}"
        )
        self.container.create_container()
        self.dest = {
            engine: azurite.url(self.container.container_name, engine)
            for engine in ("snakemake", "nextflow")
        }
        self.outdir = {engine: root / f"results-{engine}" for engine in self.dest}

    def run(self, engine: str, phase: str, dest: str | None = None, outdir: Path | None = None):
        dest = dest or self.dest[engine]
        outdir = outdir or self.outdir[engine]
        if engine == "snakemake":
            return pipeline(
                f"dest={dest}",
                f"phase={phase}",
                f"outdir={outdir}",
                extra_args=("--configfile", str(self.config)),
            )
        return nextflow(
            self.root / "launch",
            "-params-file",
            str(self.config),
            "--dest",
            dest,
            "--phase",
            phase,
            "--outdir",
            str(outdir),
        )

    def blobs(self, engine: str) -> dict[str, str]:
        class View:  # blob_snapshot wants .blobs() and .client
            client = self.container

            @staticmethod
            def blobs(prefix):
                return {
                    b.name: b
                    for b in self.container.list_blobs(
                        name_starts_with=prefix, include=["metadata"]
                    )
                }

        return blob_snapshot(View, f"{engine}/")

    def run_dir(self, engine: str, phase: str) -> Path:
        return self.outdir[engine] / "eq" / phase

    def assert_same(self, phase: str) -> dict:
        sm, nf = self.run_dir("snakemake", phase), self.run_dir("nextflow", phase)
        assert self.blobs("snakemake") == self.blobs("nextflow")
        assert plan_files(sm) == plan_files(nf), "the engines planned differently"
        reports = {
            e: json.loads((self.run_dir(e, phase) / "report.json").read_text()) for e in self.dest
        }
        assert reports["snakemake"]["status"] == "complete"
        assert masked(reports["snakemake"], self.dest["snakemake"]) == masked(
            reports["nextflow"], self.dest["nextflow"]
        )
        assert masked_md((sm / "report.md").read_text(), self.dest["snakemake"]) == masked_md(
            (nf / "report.md").read_text(), self.dest["nextflow"]
        )
        return reports["nextflow"]


@pytest.mark.timeout(900)
def test_engines_migrate_alike_and_relay(tmp_path, azurite, ferry_bin):
    eng = Engines(tmp_path, azurite, ferry_bin)
    content = migration_tree(eng.src, files=60, big=2)

    # --- baseline ----------------------------------------------------------------------------
    for engine in eng.dest:
        eng.run(engine, "baseline")
    assert eng.blobs("nextflow") == md5s(content)
    rep = eng.assert_same("baseline")
    assert (
        rep["totals"]["files"]["copied"] == len(content) + 1 and len(rep["partitions"]) == 3
    )  # and the symlink

    # --- relays: each engine's incremental over the other's baseline finds nothing to do ------
    nextflow_over_snakemake = tmp_path / "relay-nextflow"
    eng.run("nextflow", "incremental", dest=eng.dest["snakemake"], outdir=nextflow_over_snakemake)
    relay = json.loads((nextflow_over_snakemake / "eq" / "incremental" / "report.json").read_text())
    assert relay["status"] == "complete"
    assert relay["totals"]["files"]["planned"] == 0 and relay["partitions"] == []
    assert relay["plan"]["unchanged"] == len(content) + 1  # and the symlink
    assert statuses(trace(nextflow_over_snakemake, "incremental", "eq"), "COPY") == []
    snakemake_over_nextflow = tmp_path / "relay-snakemake"
    eng.run("snakemake", "incremental", dest=eng.dest["nextflow"], outdir=snakemake_over_nextflow)
    relay = json.loads((snakemake_over_nextflow / "eq" / "incremental" / "report.json").read_text())
    assert relay["totals"]["files"]["planned"] == 0 and relay["partitions"] == []
    assert relay["plan"]["unchanged"] == len(content) + 1  # and the symlink

    # --- incremental after changes at the source ------------------------------------------------
    before = md5s(content)
    _added, _changed, deleted = modify_tree(eng.src, content)
    for engine in eng.dest:
        eng.run(engine, "incremental")
    assert eng.blobs("nextflow") == {
        **{k: v for k, v in before.items() if k in deleted},
        **md5s(content),
    }
    rep = eng.assert_same("incremental")
    assert rep["plan"]["extra_on_dest"]["files"] == len(deleted)

    # --- final: checksums and prune, against the carried destination ---------------------------
    for engine in eng.dest:
        eng.run(engine, "final")
    assert eng.blobs("nextflow") == md5s(content)
    rep = eng.assert_same("final")
    assert rep["totals"]["prune"]["deleted"] == len(deleted)
    assert rep["totals"]["final_check"] is None  # the whole tree is the audit's
    assert rep["totals"]["dest_listing"]["listed"]["written_by"] == "incremental"
    assert rep["checksum_verified"] is True
    assert {r: s["jobs"] for r, s in rep["time"]["per_step"].items()}.keys() >= {
        "prune",
        "carry",
        "list_dest",
    }

    # --- audit: both sides afresh, every file checked, nothing copied ---------------------------
    for engine in eng.dest:
        eng.run(engine, "audit")
    rep = eng.assert_same("audit")
    assert rep["totals"]["verify"]["same"] == len(content) + 1  # and the symlink
    assert rep["partitions"] == [] and rep["failures"] == []
    assert rep["totals"]["dest_listing"]["listed"]["used"] is False


def killed_copy(tmp_path: Path, ferry_bin) -> tuple[Path, Path]:
    """A worker whose every `copy` is killed (SIGKILL: what an out-of-memory kill or a time
    limit looks like), each attempt counted as a line of the calls file; every other verb runs."""
    calls, wrapper = tmp_path / "copy-calls", tmp_path / "bin" / "ferry"
    wrapper.parent.mkdir()
    wrapper.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = copy ]; then echo attempt >> {shlex.quote(str(calls))}; kill -KILL $$; fi\n'
        f'exec {shlex.quote(str(ferry_bin))} "$@"\n'
    )
    wrapper.chmod(0o755)
    return wrapper, calls


@pytest.mark.parametrize("engine", ["snakemake", "nextflow"])
def test_engines_retry_a_killed_job_alike(tmp_path, ferry_bin, engine):
    """job_retries means the same in both engines: a job killed every time it runs is run
    job_retries + 1 times, then the run fails (docs/pipeline.md; Nextflow once retried an
    interrupted task three times in all, whatever job_retries said)."""
    src, dest, outdir = tmp_path / "src", tmp_path / "dst", tmp_path / "results"
    migration_tree(src, files=5, big=0)
    wrapper, calls = killed_copy(tmp_path, ferry_bin)
    if engine == "snakemake":
        config = base_config(wrapper, outdir, src, dest, "baseline")
        proc = pipeline(*config, "job_retries=1", "plan={mode: parts, parts: 1}", expect=None)
    else:
        params = params_for(
            wrapper,
            outdir,
            src,
            dest,
            "baseline",
            job_retries=1,
            plan={"mode": "parts", "parts": 1},
        )
        proc = nextflow(tmp_path / "launch", params=params, expect=None)
    assert proc.returncode != 0
    assert calls.read_text().splitlines() == ["attempt"] * 2
