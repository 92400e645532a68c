# Configuration checks, run-directory layout and input functions shared by all rules.
# Everything here runs when Snakemake parses the workflow, before any job, and must never touch
# the source or the destination: --dry-run relies on that.

import hashlib
import json
import os
import shlex
import signal
import sys

sys.path.insert(0, os.path.join(workflow.basedir, "workflow", "scripts"))
import ferrylib  # noqa: E402
import ferry_config  # noqa: E402
import ferry_docs  # noqa: E402
import ferry_history  # noqa: E402
import ferry_report  # noqa: E402
import ferry_run_dir  # noqa: E402

# The one resolution both engines run with (workflow/scripts/ferry_config.py): every rule reads
# RESOLVED, never `config` itself.
try:
    RESOLVED = ferry_config.resolve(config, workflow.basedir)
except ferrylib.ConfigError as _err:
    raise WorkflowError(f"ferry: invalid configuration: {_err}") from None
for _warning in RESOLVED["warnings"]:
    logger.warning(f"ferry: {_warning}")

RUN_INFO = RESOLVED["run"]
STEPS = RESOLVED["steps"]
REPLICATE_ONLY = RUN_INFO["replicate_only"]
PHASE = RUN_INFO["phase"]
FINAL = RUN_INFO["final"]
# The audit verifies the whole tree and copies nothing (docs/pipeline.md).
AUDIT = PHASE == "audit"
RUN = RUN_INFO["dir"]
TASK = os.path.join(workflow.basedir, "workflow", "scripts", "ferry_task.py")
REPORT = os.path.join(workflow.basedir, "workflow", "scripts", "ferry_report.py")
REPORT_PATHS = ferry_run_dir.report_paths(RUN, complete=True)
# The list jobs of each side, when list.jobs > 1 (their {shard} wildcard); [] for one job.
SHARDS = RUN_INFO["shards"]
SHARDED = bool(SHARDS)


def records(step, part="{part}", shard=None):
    """The step's outputs, log and timing file in the run directory (run_dir.json); with shard,
    a list step's records of one list job."""
    return ferry_run_dir.records(step, part, RUN, shard)


def list_records(step):
    """A list rule's records: of the {shard} wildcard's job when several jobs list each side."""
    return records(step, shard="{shard}" if SHARDED else None)


def listings(step):
    """Every listing file a list step leaves: one per list job."""
    if SHARDED:
        return [records(step, shard=shard).out for shard in SHARDS]
    return [records(step).out]


def list_benchmarks(step):
    if SHARDED:
        return [records(step, shard=shard).bench for shard in SHARDS]
    return [records(step).bench]


def records_in(root, step):
    return ferry_run_dir.records(step, None, root)


def literal(word):
    """A word for a rule's shell command, quoted for the shell and kept from Snakemake's formatting."""
    return shlex.quote(word).replace("{", "{{").replace("}", "}}")


# Each step's spec (its command, from the resolution) goes to a file named by its content, and the
# rule's command names the file: a job's command line stays short (Snakemake prints it when a job
# fails), and a changed spec still changes the command, so Snakemake reruns the step as before.
# Under .snakemake/, which every job of the run sees (on a cluster too: the working directory is
# shared), readable by its owner only (a destination may carry a SAS).
SPECS = os.path.abspath(os.path.join(".snakemake", "ferry-specs"))


def spec_file(step):
    text = json.dumps(STEPS[step], ensure_ascii=False, sort_keys=True)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    path = os.path.join(SPECS, f"{step}-{digest}.json")
    if not os.path.exists(path):
        os.makedirs(SPECS, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(
            os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w"
        ) as handle:
            handle.write(text)
        os.replace(tmp, path)
    return path


def task(step, root=RUN):
    """The shell command that runs a ferry step: ferry_task.py with the file of the step's spec."""
    part = " --part {wildcards.part}" if ferry_run_dir.partitioned(step) else ""
    if SHARDED and step in ferry_run_dir.SHARDED:
        part += " --shard {wildcards.shard}"
    return (
        f"{literal(sys.executable)} {literal(TASK)} {step} --records {literal(root)}{part}"
        f" --spec-file {literal(spec_file(step))}"
    )


# What a job's line says when it starts (the rule's `message`; the profiles print no commands):
# the step, its partition or list job, and what it does.
STEP_WORDS = {
    "shard": "cut the key space for the list jobs",
    "list_source": "list the source",
    "list_dest": "list the destination",
    "make_dest": "make the destination ready",
    "plan": "plan what to copy, verify and delete",
    "copy": "copy the partition's files",
    "verify": "compare the partition's files at both ends",
    "prune": "delete the part's files the source no longer has",
    "prune_dirs": "delete the directories the source no longer has",
    "final_check": "check the whole tree",
    "carry": "record the destination for the next pass",
    "report": "write the report",
    "replicate": "replicate to every rank",
}


def message(step):
    where = ""
    if step in ferry_run_dir.RECORDS and ferry_run_dir.partitioned(step):
        where = " part {wildcards.part}"
    elif SHARDED and step in ferry_run_dir.SHARDED:
        where = " (list job {wildcards.shard})"
    return f"ferry {step}{where}: {STEP_WORDS[step]}"


# Ctrl-C: the onerror hook says how to resume (run the same command again) when the run ended
# because the user interrupted it, not because a step failed.
INTERRUPTED = []


def _interrupted(signum, frame):
    INTERRUPTED.append(signum)
    raise KeyboardInterrupt


if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    try:
        signal.signal(signal.SIGINT, _interrupted)
    except ValueError:  # not the main thread: no Ctrl-C to see here
        pass


def requests(step, runtime=True):
    """The resources directive of a rule: its configured memory and time, both multiplied by the
    attempt, so a job Slurm killed for TIMEOUT or OUT_OF_MEMORY is retried (job_retries) with
    room to finish instead of failing the same way again; plus the Slurm partition and account
    when the config names them, and a node of each job's own (slurm_spread). runtime=False is
    for a step that runs inside another step's cluster job (see GROUPS below): Snakemake adds
    up the runtimes of a group's steps, so the follow-on step asks for none and the job's time
    limit is exactly the configured one.
    """
    res = STEPS[step]["resources"]
    minutes = res["runtime"] if runtime else 0
    out = {
        "mem_mb": lambda wildcards, attempt: res["mem_mb"] * attempt,
        "runtime": lambda wildcards, attempt: minutes * attempt,
    }
    for key in ("slurm_partition", "slurm_account"):
        if res[key]:
            out[key] = res[key]
    if res["slurm_spread"]:
        out["slurm_extra"] = "--exclusive"
    return out


def threads(step):
    return STEPS[step]["resources"]["threads"]


def retries(step):
    return STEPS[step]["retries"]


# Cluster jobs are grouped so that each phase needs as few scheduling round trips as possible
# (each costs two Snakemake start-ups inside the job plus status polling, 10-20 s): listing and
# planning run as one job, each partition's copy and verify as one job. The step that follows
# inside a group (plan after the listings, verify after its copy) is short next to the step it
# follows and asks for no runtime of its own (requests(..., runtime=False)), so the job's time
# limit is the configured runtime of list or copy, not a sum. Groups change nothing locally.
#
# Several list jobs (list.jobs > 1) are each a cluster job of their own, so that Slurm may spread
# them over nodes: then no step of the preparation is grouped, and plan asks for its own runtime.
PREPARE_GROUP = None if SHARDED else "prepare"


def partition_group():
    """Per-partition copy and verify share one cluster job, except in the audit, which copies
    nothing: its verify partitions cover the whole tree, each a job of its own."""
    return None if AUDIT else "partition"


def _plan_dir():
    return checkpoints.plan.get().output.plan


def _plan():
    _plan_dir()  # the checkpoint: the plan is made before it is read
    return ferry_docs.load("plan", os.path.join(RUN, ferry_run_dir.PLAN))


def copy_ids():
    return [p["id"] for p in _plan()["copy_partitions"]]


def verify_ids():
    return [p["id"] for p in _plan()["verify_partitions"]]


def prune_ids():
    return [p["id"] for p in _plan()["prune_partitions"]]


def verify_manifest(wildcards):
    _plan_dir()  # the checkpoint: the plan is made before its parts are read
    return ferry_run_dir.plan_part("verify" if AUDIT else "copy", wildcards.part, RUN)


def verify_after(wildcards):
    # A verify may only look at the destination once the data it checks has been written.
    if AUDIT:
        return []
    return [records("copy", wildcards.part).out]


def all_copy_json(wildcards):
    return [records("copy", part).out for part in copy_ids()]


def all_verify_json(wildcards):
    return [records("verify", part).out for part in verify_ids()]


def all_prune_json(wildcards):
    return [records("prune", part).out for part in prune_ids()]


def all_benchmarks(step, ids):
    return [records(step, part).bench for part in ids]


def carry_inputs(wildcards):
    """What the carried state is made of: what every verify saw, the listing the plan used, and
    in the final phase what prune deleted."""
    # The audit's listing is the destination as it is: nothing to patch, whatever verify found.
    files = {} if AUDIT else {"verified": all_verify_json(wildcards)}
    if PHASE != "baseline":
        files["listing"] = listings("list_dest")
        if SHARDED:
            files["shards"] = records("shard").out
    if FINAL:
        files["pruned"] = [*all_prune_json(wildcards), records("prune_dirs").out]
    return files


def step_benchmarks(step):
    """Every timing file of a step: one per list job, per partition, or the one."""
    if step in ferry_run_dir.SHARDED:
        return list_benchmarks(step)
    if ferry_run_dir.partitioned(step):
        ids = {"copy": copy_ids, "verify": verify_ids, "prune": prune_ids}[step]
        return all_benchmarks(step, ids())
    return [records(step).bench]


def report_inputs(wildcards):
    """Everything the report reads; requesting it is also what pulls the whole phase in: the
    timing file of every step the phase runs (the resolution's run.phase_steps) and the worker's
    documents of the partitions."""
    return {
        "plan": os.path.join(RUN, ferry_run_dir.PLAN),
        "copies": all_copy_json(wildcards),
        "verifies": all_verify_json(wildcards),
        "bench": [
            bench
            for step in RUN_INFO["phase_steps"]
            if step != "report"
            for bench in step_benchmarks(step)
        ],
    }


def migration_report(wildcards):
    if REPLICATE_ONLY:
        raise WorkflowError(
            "no migration configured (config fields 'source' and 'dest' are empty); "
            "for the replication, ask for its target: `snakemake replicate`"
        )
    return [REPORT_PATHS["json"], REPORT_PATHS["md"]]
