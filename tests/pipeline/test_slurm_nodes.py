"""The pipeline on the three-node cluster of scripts/slurm-up.sh: jobs spread over the nodes when
the config asks (resources.<step>.slurm_spread), and the report and `ferry status` say where each
job ran, as Slurm itself recorded it (the job-completion log's NodeList); a node lost while a copy
runs on it, the job retried elsewhere, resuming the copy."""

from __future__ import annotations

import json
import subprocess
import threading
import time

import pytest
from support.ferry import ferry_env
from support.nextflow import nextflow, params_for
from support.pipeline import (
    base_config,
    blob_of,
    blob_snapshot,
    local_snapshot,
    md5s,
    migration_tree,
    pipeline,
    report,
    run_dir,
)
from support.slurm import (
    NODES,
    jobcomp_records,
    lose_node,
    node_state,
    slurm_up,
    squeue_comments,
)


def slurm_jobs(before: set[str]) -> dict[str, set[str]]:
    """{rule: the nodes its jobs ran on} of the jobs Slurm finished since `before`."""
    jobs = {r["JobId"]: r["NodeList"] for r in jobcomp_records() if r["JobId"] not in before}
    comments = squeue_comments([int(j) for j in jobs])
    nodes: dict[str, set[str]] = {}
    for job, comment in comments.items():
        for rule in ("list_source", "copy"):
            if rule in comment:
                nodes.setdefault(rule, set()).add(jobs[str(job)])
    return nodes


@pytest.mark.timeout(900)
def test_spread_jobs_land_on_several_nodes_and_the_report_says_which(slurm, tmp_path, ferry_bin):
    slurm_up(accounting=False)
    src, dest, outdir = tmp_path / "src", tmp_path / "dest", tmp_path / "results"
    migration_tree(src, files=12, big=0)
    before = {r["JobId"] for r in jobcomp_records()}
    pipeline(
        *base_config(ferry_bin, outdir, src, dest, "baseline"),
        "plan={mode: parts, parts: 3}",
        "list={jobs: 3}",
        "resources={default: {slurm_spread: true}}",
        profile="profiles/slurm",
        timeout=700,
    )
    rep = report(outdir, "baseline")
    assert rep["status"] == "complete", rep["failures"]
    assert local_snapshot(dest) == local_snapshot(src)

    # Slurm's record: the three list jobs and the three partitions' jobs each over 2+ nodes.
    seen = slurm_jobs(before)
    assert len(seen.get("list_source", ())) >= 2, seen
    assert len(seen.get("copy", ())) >= 2, seen
    # The report's timeline names the node of every job, the same nodes Slurm names.
    spans = rep["jobs"]
    assert all(s["node"] in NODES for s in spans), spans
    assert {s["node"] for s in spans if s["step"] == "copy"} == seen["copy"]
    assert {s["node"] for s in spans if s["step"] == "list_source"} == seen["list_source"]
    # What each node spent: the copies' bytes add up over the nodes they ran on.
    nodes = rep["time"]["per_node"]
    assert seen["copy"] <= set(nodes), nodes
    assert sum(n["bytes"] for n in nodes.values()) == rep["totals"]["bytes"]["copied"], nodes
    assert "### By node" in (run_dir(outdir, "baseline") / "report.md").read_text()
    # `ferry status` says which partitions' jobs ran where.
    status = subprocess.run(
        [str(ferry_bin), "status", str(run_dir(outdir, "baseline"))],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for node in seen["copy"]:
        assert f"  on {node}: copy " in status, status


def running_copy(outdir, since: float, deadline: float) -> tuple[str, dict]:
    """(node, progress) of the copy job once it runs on a node and has staged two blocks: what
    the test waits on before it pulls the plug."""
    progress = run_dir(outdir, "baseline") / "progress" / "copy-part-00000.json"
    while time.monotonic() < deadline:
        try:
            doc = json.loads(progress.read_text())
        except (OSError, ValueError):
            doc = None
        if doc and doc["updated"] > since and doc["requests"]["blocks"] >= 2 and doc["node"]:
            state = node_state(doc["node"])
            if state.startswith(("allocated", "mixed")):
                return doc["node"], doc
        time.sleep(0.2)
    raise AssertionError(f"the copy job never got under way on a node ({progress})")


def run_engine(engine: str, tmp_path, ferry_bin, outdir, src, dest) -> subprocess.CompletedProcess:
    """A baseline with one partition, copied one block at a time, slowly (so the copy is
    reliably mid-file when its node goes), and one retry for a failed job, on Slurm."""
    copy = {
        "block_size": "1MiB",
        "concurrency": 1,
        "parallel_files": 1,
        "max_bandwidth": "512KiB/s",
    }
    if engine == "snakemake":
        return pipeline(
            *base_config(ferry_bin, outdir, src, dest, "baseline"),
            "copy={" + ", ".join(f"{k}: {v}" for k, v in copy.items()) + "}",
            "plan={mode: parts, parts: 1}",
            "job_retries=1",
            profile="profiles/slurm",
            timeout=1000,
            expect=None,
        )
    # Nextflow waits exitReadTimeout (270 s by default) for the exit file of a job that is gone
    # before it calls it failed; a lost node never writes one.
    quick = tmp_path / "quick-exit.config"
    quick.write_text("executor { exitReadTimeout = '20 sec' }\n")
    params = params_for(
        ferry_bin, outdir, src, dest, "baseline", plan={"mode": "parts", "parts": 1}
    )
    params |= {"copy": copy, "job_retries": 1}
    return nextflow(
        tmp_path / "launch",
        "-c",
        str(quick),
        params=params,
        profile="slurm",
        timeout=1000,
        expect=None,
    )


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("engine_name", ["snakemake", "nextflow"])
def test_a_node_lost_mid_copy_the_job_is_retried_elsewhere_and_resumes(
    engine_name, slurm, tmp_path, ferry_bin, container
):
    slurm_up(accounting=False)
    src, outdir = tmp_path / "src", tmp_path / "results"
    content = {"big.bin": blob_of("big.bin", 12 << 20), "small.txt": b"small\n"}
    src.mkdir()
    for rel, data in content.items():
        (src / rel).write_bytes(data)
    dest = container.at("lost")
    started = time.time()
    result: dict = {}
    runner = threading.Thread(
        target=lambda: result.update(
            proc=run_engine(engine_name, tmp_path, ferry_bin, outdir, src, dest)
        )
    )
    runner.start()
    try:
        lost, before = running_copy(outdir, started, time.monotonic() + 600)
        lose_node(lost)
    finally:
        runner.join()
        slurm_up(accounting=False)  # the node back (slurmd restarted, resumed) for later tests
    proc = result["proc"]
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert node_state(lost) in ("idle", "mixed", "allocated")

    rep = report(outdir, "baseline")
    assert rep["status"] == "complete", rep["failures"]
    assert blob_snapshot(container, "lost/") == md5s(content)
    fresh = subprocess.run(
        [str(ferry_bin), "verify", str(src), dest],
        env=ferry_env(),
        capture_output=True,
        text=True,
    )
    assert fresh.returncode == 0, fresh.stderr
    # The report names the lost attempt's node and where the job ran again.
    (gone,) = rep["lost_jobs"]
    assert gone["step"] == "copy" and gone["part"] == "00000" and gone["node"] == lost, gone
    assert gone["rerun_on"] in NODES and gone["rerun_on"] != lost, gone
    assert rep["time"]["per_node"][lost]["lost"] == 1, rep["time"]["per_node"]
    md = (run_dir(outdir, "baseline") / "report.md").read_text()
    assert f"- copy partition 00000 on {lost}: lost after " in md, md
    # The retry resumed: it staged no more blocks than were left when the lost attempt last
    # wrote its progress, plus the one it had in flight.
    kept = json.loads(
        (run_dir(outdir, "baseline") / "progress" / "copy-part-00000.lost-1.json").read_text()
    )
    assert kept["requests"]["blocks"] >= before["requests"]["blocks"]
    rerun = json.loads((run_dir(outdir, "baseline") / "copy" / "part-00000.json").read_text())
    assert rerun["requests"]["blocks"] <= 12 - kept["requests"]["blocks"] + 1, rerun["requests"]
    # The requests of both attempts are counted, in the report and in the history.
    copy_blocks = rep["totals"]["requests"]["by_step"]["copy"]["blocks"]
    assert copy_blocks == rerun["requests"]["blocks"] + kept["requests"]["blocks"]
    history = (outdir / "t" / "history.jsonl").read_text().splitlines()
    assert json.loads(history[-1])["requests"]["by_step"]["copy"]["blocks"] == copy_blocks
