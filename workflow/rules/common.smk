# Configuration checks, run-directory layout and input functions shared by all rules.
# Everything here runs when Snakemake parses the workflow, before any job, and must never touch
# the source or the destination: --dry-run relies on that.

import os
import shlex
import sys

import yaml

from snakemake.utils import validate

sys.path.insert(0, os.path.join(workflow.basedir, "workflow", "scripts"))
import ferrylib  # noqa: E402
import ferry_config  # noqa: E402
import ferry_report  # noqa: E402

SCHEMA = os.path.join(workflow.basedir, "workflow", "schemas", "config.schema.yaml")
with open(SCHEMA, encoding="utf-8") as _schema:
    ferrylib.coerce_cli_strings(config, yaml.safe_load(_schema))
validate(config, schema=SCHEMA)


# `snakemake replicate` alone needs no migration source and destination.
REPLICATE_ONLY = ferry_config.replicate_only(config)
if not REPLICATE_ONLY:
    ferrylib.check_config(config)

PHASE = config["phase"]
FINAL = PHASE == "final"
SOURCE = config["source"]
DEST = config["dest"]
# Run directory, worker arguments and the final-check switch come from ferry_config, which the
# Nextflow pipeline runs too: both engines hand ferry the same arguments.
RUN_NAME = ferry_config.run_name(config)
RUN = ferry_config.run_dir(config)
FERRY = ferry_config.ferry_bin(config, workflow.basedir)
AUTH_ENV = ferry_config.auth_env(config)
COPY_ARGS = shlex.join(ferry_config.copy_args(config))
LIST_ARGS = shlex.join(ferry_config.list_args(config))
VERIFY_ARGS = shlex.join(ferry_config.verify_args(config))
PLAN_ARGS = shlex.join(ferry_config.plan_args(config))
PRUNE_ARGS = shlex.join(ferry_config.prune_args(config))
FINAL_CHECK = ferry_config.final_check(config)


def res(rule_name, key):
    """A resource request for rule_name from config, falling back to resources.default."""
    table = config["resources"]
    return table.get(rule_name, {}).get(key, table["default"].get(key))


def requests(rule_name, runtime=True):
    """The resources directive of a rule: its configured memory and time, both multiplied by the
    attempt, so a job Slurm killed for TIMEOUT or OUT_OF_MEMORY is retried (job_retries) with
    room to finish instead of failing the same way again; plus the Slurm partition and account
    when the config names them. runtime=False is for a step that runs inside another step's
    cluster job (see GROUPS below): Snakemake adds up the runtimes of a group's steps, so the
    follow-on step asks for none and the job's time limit is exactly the configured one.
    """
    mem_mb = res(rule_name, "mem_mb")
    minutes = res(rule_name, "runtime") if runtime else 0
    out = {
        "mem_mb": lambda wildcards, attempt: mem_mb * attempt,
        "runtime": lambda wildcards, attempt: minutes * attempt,
    }
    for key in ("slurm_partition", "slurm_account"):
        if res(rule_name, key):
            out[key] = res(rule_name, key)
    return out


# Cluster jobs are grouped so that each phase needs as few scheduling round trips as possible
# (each costs two Snakemake start-ups inside the job plus status polling, 10-20 s): listing and
# planning run as one job, each partition's transfer and verify as one job. The step that follows
# inside a group (plan after the listings, verify after its transfer) is short next to the step it
# follows and asks for no runtime of its own (requests(..., runtime=False)), so the job's time
# limit is the configured runtime of list or transfer, not a sum. Groups change nothing locally.
PREPARE_GROUP = "prepare"


def partition_group():
    """Per-partition transfer and verify share one cluster job, except in the final phase, where
    every verify waits for all transfers and the group would fuse all partitions into one job.
    """
    return None if FINAL else "partition"


def _plan_dir():
    return checkpoints.plan.get().output.plan


def _plan():
    return ferrylib.load_json(os.path.join(_plan_dir(), "plan.json"))


def copy_ids():
    return [p["id"] for p in _plan()["copy_partitions"]]


def verify_ids():
    return [p["id"] for p in _plan()["verify_partitions"]]


def verify_manifest(wildcards):
    sub = "verify" if FINAL else "copy"
    return os.path.join(_plan_dir(), sub, f"part-{wildcards.part}.tsv")


def verify_after(wildcards):
    # A verify may only look at the destination once the data it checks has been written.
    if FINAL:
        return expand(f"{RUN}/copy/part-{{part}}.json", part=copy_ids())
    return [f"{RUN}/copy/part-{wildcards.part}.json"]


def all_copy_json(wildcards):
    return expand(f"{RUN}/copy/part-{{part}}.json", part=copy_ids())


def all_verify_json(wildcards):
    return expand(f"{RUN}/verify/part-{{part}}.json", part=verify_ids())


def report_inputs(wildcards):
    """Everything the report reads; requesting it is also what pulls the whole phase in."""
    files = {
        "plan": os.path.join(_plan_dir(), "plan.json"),
        "copies": all_copy_json(wildcards),
        "verifies": all_verify_json(wildcards),
        "bench": [f"{RUN}/benchmarks/list_source.tsv", f"{RUN}/benchmarks/plan.tsv"]
        + expand(f"{RUN}/benchmarks/transfer/part-{{part}}.tsv", part=copy_ids())
        + expand(f"{RUN}/benchmarks/verify/part-{{part}}.tsv", part=verify_ids()),
    }
    if PHASE != "baseline":
        files["bench"].append(f"{RUN}/benchmarks/list_dest.tsv")
    if FINAL:
        files["prune"] = f"{RUN}/prune/prune.json"
        files["bench"].append(f"{RUN}/benchmarks/prune.tsv")
        if FINAL_CHECK:
            files["final_check"] = f"{RUN}/verify/final-check.json"
            files["bench"].append(f"{RUN}/benchmarks/final_check.tsv")
    return files


def migration_report(wildcards):
    if REPLICATE_ONLY:
        raise WorkflowError(
            "no migration configured (config fields 'source' and 'dest' are empty); "
            "for the replication, ask for its target: `snakemake replicate`"
        )
    return [f"{RUN}/report.json", f"{RUN}/report.md"]
