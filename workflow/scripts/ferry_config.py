"""The pipeline's one contract: a config resolved and checked once, and everything both engines
run with, derived from it in one place.

    resolve(params) -> {"config": ..., "run": ..., "steps": {step: spec}, "layout": ..., "warnings": [...]}

Snakemake calls resolve() once (workflow/rules/common.smk); Nextflow runs `ferry_config.py
resolve` once, while its configuration is read (nextflow.config), and everything after reads only
the result. A step's spec is all the step needs and nothing more (so Nextflow's -resume keeps a
step whose own settings did not change): the worker's command line with the task's inputs left as
`{placeholders}` (workflow/scripts/ferry_task.py fills them and runs it), the environment, what to
ask the scheduler for, and how often to retry. docs/design/layout.md names the steps.

    ferry_config.py resolve [PARAMS_JSON|-] [--basedir DIR] [--absolute]   # the resolution, as JSON
    ferry_config.py nextflow-schema                                          # nextflow_schema.json
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys

import ferry_run_dir
from ferrylib import (
    ConfigError,
    check_config,
    coerce_cli_strings,
    identity,
    is_blob,
    legacy_run_name,
    redact,
    reword,
    run_name_for,
)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SCHEMA = os.path.join(REPO, "workflow", "schemas", "config.schema.yaml")
DEFAULTS = os.path.join(REPO, "config", "config.yaml")

# Config keys renamed so that each block carries the name of the step it configures
# (docs/design/layout.md); a config written for the old names still runs, with a warning.
RENAMED = [
    (("worker", "auth"), ("auth",)),
    (("worker", "include"), ("list", "include")),
    (("worker", "exclude"), ("list", "exclude")),
    (("worker",), ("copy",)),
    (("partition",), ("plan",)),
    (("delete",), ("prune",)),
    (("resources", "transfer"), ("resources", "copy")),
    (("replicate", "mem_mb"), ("resources", "replicate", "mem_mb")),
    (("replicate", "runtime"), ("resources", "replicate", "runtime")),
]


def load_yaml(path: str) -> dict:
    import yaml  # only here: `resolve` runs in Nextflow's config parsing, wherever python3 is

    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle) or {}


def deep_merge(base: dict, override: dict) -> dict:
    """override wins; nested maps are merged, as Snakemake merges --configfile and --config."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _numbers_to_strings(cfg: dict, schema: dict) -> None:
    """Nextflow types command-line values itself (`--run_name 2024` arrives as a number); where the
    schema wants only a string, give the string back, in place."""
    props = schema.get("properties", {})
    for key, value in list(cfg.items()):
        spec = props.get(key, {})
        types = spec.get("type", [])
        types = [types] if isinstance(types, str) else types
        if isinstance(value, dict) and "properties" in spec:
            _numbers_to_strings(value, spec)
        elif (
            isinstance(value, (int, float)) and not isinstance(value, bool) and types == ["string"]
        ):
            cfg[key] = str(value)


def _field(path) -> str:
    return ".".join(str(p) for p in path) or "(top level)"


def validate(cfg: dict, schema: dict | None = None) -> None:
    """Schema check, then the cross-field checks; ConfigError names the first bad field."""
    import jsonschema

    schema = schema or load_yaml(SCHEMA)
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(
        validator.iter_errors(cfg),
        key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))),
    )
    if errors:
        err = errors[0]
        where = list(err.absolute_path)
        if err.validator == "additionalProperties":
            extra = sorted(set(err.instance) - set(err.schema.get("properties", {})))
            where = where + extra[:1]
        raise ConfigError(f"config field '{_field(where)}': {err.message}")
    if not replicate_only(cfg):
        check_config(cfg)
        check_same_migration(cfg)


def rename_old_keys(params: dict) -> list[str]:
    """Moves keys of the old names to the new ones, in place; one warning per key moved. Both
    engines merge config/config.yaml in before this, so the new name always holds at least the
    default: the old name's value, which the user wrote, wins."""
    warnings = []
    for old, new in RENAMED:
        parent = params
        for key in old[:-1]:
            parent = parent.get(key) if isinstance(parent.get(key), dict) else None
            if parent is None:
                break
        if parent is None or old[-1] not in parent:
            continue
        value = parent.pop(old[-1])
        target = params
        for key in new[:-1]:
            target = target.setdefault(key, {})
        if isinstance(value, dict) and isinstance(target.get(new[-1]), dict):
            target[new[-1]] = deep_merge(target[new[-1]], value)
        else:
            target[new[-1]] = value
        warnings.append(
            f"config field '{_field(old)}' is now '{_field(new)}'; the old name will stop working in a later release"
        )
    return warnings


# --- what each step runs -----------------------------------------------------------------------

# The steps of a phase and of the replication, in the order they run; one name each in every
# layer (docs/design/layout.md). `resources` names the resources.<key> a step asks for.
STEPS = {
    "shard": "list",
    "list_source": "list",
    "list_dest": "list",
    "make_dest": "list",
    "plan": "plan",
    "copy": "copy",
    "verify": "verify",
    "prune": "prune",
    "prune_dirs": "prune",
    "final_check": "verify",
    "carry": "list",
    "report": "report",
    "replicate": "replicate",
}


def run_name(cfg: dict) -> str:
    """The migration's name: given, or derived from what its ends are. A migration begun before
    names were derived so keeps the name of its spelling (its run root is there, none under the
    new name), so that upgrading in the middle of a migration does not start another."""
    if cfg["run_name"]:
        return cfg["run_name"]
    name = run_name_for(cfg["source"], cfg["dest"])
    spelt = legacy_run_name(cfg["source"], cfg["dest"])
    if not os.path.isdir(os.path.join(cfg["outdir"], name)) and os.path.isdir(
        os.path.join(cfg["outdir"], spelt)
    ):
        return spelt
    return name


def migration(cfg: dict) -> dict:
    """What the run root records of the migration it holds (ferry_run_dir.MIGRATION)."""
    return {
        "version": 1,
        "source": identity(cfg["source"]),
        "dest": identity(cfg["dest"]),
    }


def check_same_migration(cfg: dict) -> None:
    """A run root holds one migration: a pass whose ends are not those its earlier passes
    recorded (a `run_name` given twice, a path changed) is refused before anything runs."""
    root = os.path.join(cfg["outdir"], run_name(cfg))
    try:
        recorded = ferry_run_dir.read_migration(root)
    except ValueError as err:
        raise ConfigError(
            f"{err}: move it away if that run root is not a ferry migration's"
        ) from err
    if recorded is None:
        return
    ours = migration(cfg)
    for end in ("source", "dest"):
        if recorded[end] != ours[end]:
            raise ConfigError(
                f"config field '{end}': {redact(cfg[end])!r} is {ours[end]!r}, but the "
                f"migration in {root} was run with {end} {recorded[end]!r}; give that "
                f"{end}, or another 'run_name' (or 'outdir') for another migration"
            )


def run_dir(cfg: dict) -> str:
    """<outdir>/<run_name>/<phase>[-pass<N>]: the run's records, the same for both engines."""
    phase = cfg["phase"] if cfg["pass"] == 1 else f"{cfg['phase']}-pass{cfg['pass']}"
    return os.path.join(cfg["outdir"], run_name(cfg), phase)


def pass_name(cfg: dict) -> str:
    """The pass, as the carried state records who took and left it: its run directory's name."""
    return os.path.basename(run_dir(cfg))


def state_location(cfg: dict) -> str:
    """Where the destination's carried state is kept (docs/scale.md)."""
    if cfg["state"]:
        return cfg["state"] if is_blob(cfg["state"]) else os.path.abspath(cfg["state"])
    return os.path.abspath(os.path.join(cfg["outdir"], run_name(cfg), "state"))


def lease(cfg: dict, ferry: str) -> dict | None:
    """Where the carried state is in Blob, passes on other machines cannot see this one's run
    directory lock: the lock holder also takes a lease on the state (`ferry lease`, ferry_lock.py)."""
    state = state_location(cfg)
    if not is_blob(state):
        return None
    return {"ferry": ferry, "state": state, "env": worker_env(cfg)}


def carried_args(cfg: dict) -> list[str]:
    return ["--carried", "{state}", "--pass", pass_name(cfg)]


def replicate_only(cfg: dict) -> bool:
    """Only the MPI replication is configured (`snakemake replicate`, Nextflow -entry REPLICATE):
    it needs no migration source and destination."""
    return not (cfg["source"] or cfg["dest"]) and bool(cfg["replicate"]["source"])


def replicate_run_dir(cfg: dict) -> str:
    r = cfg["replicate"]
    return os.path.join(cfg["outdir"], "replicate", run_name_for(r["source"], r["dest"]))


def final_check(cfg: dict) -> bool:
    """The whole-tree check after prune cannot honour include/exclude (ferry verify has no
    filters) and would only re-find what a dry-run prune left, so it runs when neither applies."""
    return (
        cfg["phase"] == "final"
        and cfg["final_check"]
        and not cfg["prune"]["dry_run"]
        and not (cfg["list"]["include"] or cfg["list"]["exclude"])
    )


def list_jobs(cfg: dict) -> int:
    """How many list jobs take each side's listing, each over one range of the key space."""
    return cfg["list"]["jobs"]


def sharded(cfg: dict) -> bool:
    """The listings are taken by several jobs: a `shard` step cuts the key space first, and every
    step that reads a listing reads the jobs' listings as one (--shards)."""
    return list_jobs(cfg) > 1


def phase_steps(cfg: dict) -> list[str]:
    """The steps the configured phase runs, in STEPS order: a step runs in every phase unless
    named here. The Snakemake report asks for each one's records, which is what runs them."""
    phase = cfg["phase"]
    runs = {
        "shard": sharded(cfg),
        "list_dest": phase != "baseline",
        "make_dest": phase == "baseline",
        "prune": phase == "final",
        "prune_dirs": phase == "final",
        "final_check": final_check(cfg),
        # Not a step of a phase: its own target (`snakemake replicate`, Nextflow's replicate).
        "replicate": False,
    }
    return [step for step in STEPS if runs.get(step, True)]


def shards_args(cfg: dict) -> list[str]:
    return ["--shards", "{shards}"] if sharded(cfg) else []


def dest_decision_args(cfg: dict) -> list[str]:
    """How a pass decides whether the destination's carried state stands for a listing of it:
    take the state, probe a sample of it, or list afresh regardless."""
    # An audit looks at the destination as it is, never as it was carried.
    fresh = cfg["dest_listing"] == "fresh" or cfg["phase"] == "audit"
    return [*carried_args(cfg), "--probe", str(cfg["dest_probe"]), *(["--fresh"] if fresh else [])]


def list_args(cfg: dict) -> list[str]:
    args = []
    for glob_ in cfg["list"]["include"]:
        args += ["--include", glob_]
    for glob_ in cfg["list"]["exclude"]:
        args += ["--exclude", glob_]
    return args


def copy_args(cfg: dict) -> list[str]:
    c = cfg["copy"]
    # Baseline copies everything by definition; later phases let ferry re-check what the plan
    # could not decide with the configured method.
    args = [
        "--compare",
        "none" if cfg["phase"] == "baseline" else cfg["compare"],
        "--block-size",
        # Sizes and rates as written: the worker reads them by its rules (worker/src/units.rs).
        str(c["block_size"]),
        "--max-retries",
        str(c["max_retries"]),
    ]
    # Unset, ferry adapts its depth to the store and to what it measures.
    for key in ("concurrency", "parallel_files"):
        if c[key] is not None:
            args += [f"--{key.replace('_', '-')}", str(c[key])]
    if c["max_bandwidth"]:
        args += ["--max-bandwidth", c["max_bandwidth"]]
    if not c["put_md5"]:
        args.append("--no-put-md5")
    return [*args, *overwrite_newer_args(cfg)]


def overwrite_newer_args(cfg: dict) -> list[str]:
    """Copies (and the plan that decides them) replace destination files newer than their
    source's only when the config says so: a restore of older versions at the source."""
    return ["--overwrite-newer"] if cfg["copy"].get("overwrite_newer") else []


def verify_args(cfg: dict) -> list[str]:
    final = cfg["phase"] in ("final", "audit")
    return [
        *(["--checksum"] if final and cfg["checksum"] else []),
        *(["--download"] if final and cfg["checksum"] and cfg["verify_download"] else []),
        # The cut-over checks what a migration must carry besides bytes: mtime, mode, owner;
        # the audit, once nothing writes into them, directories' mtimes too.
        *(["--metadata"] if final else []),
        *(["--dir-mtimes"] if cfg["phase"] == "audit" else []),
    ]


def prune_args(cfg: dict) -> list[str]:
    d = cfg["prune"]
    return [
        "--max-delete",
        str(d["max_delete"]),
        *(["--force"] if d["force"] else []),
        *(["--dry-run"] if d["dry_run"] else []),
        # A pipeline has no terminal to ask on: its config is the operator's answer.
        "--yes",
    ]


# The worker's words for prune's settings, and the config's: a refusal read in a pipeline's
# log or report names the key to change, not the flag the key became (ferry_task.py).
PRUNE_KEYS = [
    ["pass --overwrite-newer", "set copy.overwrite_newer: true"],
    ["pass --force", "set prune.force: true"],
    ["raise --max-delete", "raise prune.max_delete"],
    ["review with --dry-run", "review with prune.dry_run: true"],
    ["--max-delete", "prune.max_delete"],
    ["--force", "prune.force"],
]


def in_config_terms(said: str) -> str:
    """A prune refusal (the worker's, or the plan's of the final pass's prune) in the config's
    terms: the key to change, not the flag it became."""
    return reword(said, PRUNE_KEYS)


def plan_guard_args(cfg: dict) -> list[str]:
    """The final pass's deletions judged by its plan, as its prune will judge them, so that a
    pass whose prune would be refused stops before its first copy, not after the last."""
    if cfg["phase"] != "final" or cfg["prune"]["dry_run"]:
        return []
    return [a for a in prune_args(cfg) if a not in ("--dry-run", "--yes")]


def cut_args(cfg: dict) -> list[str]:
    """How `ferry plan` cuts its lists into partitions (docs/plan.md)."""
    p = cfg["plan"]
    args = ["--partitioner", p["tool"]]
    if p["mode"] == "parts":
        return args + ["--parts", str(p["parts"])]
    if p["mode"] == "auto":
        return args + ["--auto"]
    if p["mode"] in ("max-files", "max-files-bytes"):
        args += ["--max-files", str(p["max_files"])]
    if p["mode"] in ("max-bytes", "max-files-bytes"):
        args += ["--max-bytes", str(p["max_bytes"])]
    return args


def replicate_args(cfg: dict) -> list[str]:
    """workflow/scripts/replicate.py options after SRC DEST --ferry (docs/replicate.md)."""
    r = cfg["replicate"]
    args = ["--chunk-size", str(r["chunk_size"]), "--depth", str(r["depth"])]
    if r["download_ranks"]:
        args += ["--download-ranks", str(r["download_ranks"])]
    if r["max_bandwidth"]:
        args += ["--max-bandwidth", r["max_bandwidth"]]
    if r["manifest"]:
        args += ["--manifest", os.path.abspath(r["manifest"])]
    if r["verify"]:
        args.append("--verify")
    return args


# The configured ends, replaced by small local trees in a stub run.
ENDS = ["{source}", "{dest}"]


def _shard_argv(cfg: dict, step: str, ferry: str) -> list[str]:
    # Once, before the list jobs: where each job's range of the key space begins, and (past
    # the baseline) the one carried-or-fresh decision for the destination, which every list
    # job of the destination then follows. The baseline lists no destination: make_dest
    # takes the state.
    dest = [] if cfg["phase"] == "baseline" else ["{dest}"]
    decision = [] if cfg["phase"] == "baseline" else dest_decision_args(cfg)
    return [
        ferry,
        "shard",
        "{source}",
        *dest,
        "--jobs",
        str(list_jobs(cfg)),
        "--out",
        "{out}",
        *decision,
    ]


def _listing_argv(cfg: dict, step: str, ferry: str) -> list[str]:
    # The destination: the state the last complete pass carried, where it still holds. Taken
    # by several jobs, the shard step decided that once and each job follows its record.
    carried = []
    if step == "list_dest":
        carried = carried_args(cfg) if sharded(cfg) else dest_decision_args(cfg)
    shard = ["--shards", "{shards}", "--shard", "{shard}"] if sharded(cfg) else []
    return [
        ferry,
        "ls",
        ENDS[step == "list_dest"],
        "--recursive",
        "--format",
        "tsv",
        *list_args(cfg),
        *carried,
        *shard,
        "--summary",
        "{summary}",
    ]


def _make_dest_argv(cfg: dict, step: str, ferry: str) -> list[str]:
    # ferry copy refuses to create a missing container (a typo would otherwise create a new
    # one silently); the baseline is where a migration legitimately starts from nothing. It
    # also marks any carried state out of date: the baseline writes the destination.
    return [ferry, "mk", "{dest}", "--source", "{source}", *carried_args(cfg)]


def _plan_argv(cfg: dict, step: str, ferry: str) -> list[str]:
    dest_listing = [] if cfg["phase"] == "baseline" else ["{dest_listing}"]
    return [
        ferry,
        "plan",
        "{source_listing}",
        *dest_listing,
        "--out",
        "{plan_dir}",
        "--phase",
        cfg["phase"],
        "--compare",
        cfg["compare"],
        # Blob storage keeps a directory's mtime in its folder stub, which nothing written
        # into the folder moves: a directory touched alone at the source is carried.
        *(["--dir-mtimes"] if is_blob(cfg["dest"]) else []),
        *shards_args(cfg),
        *plan_guard_args(cfg),
        *overwrite_newer_args(cfg),
        "{cut}",
    ]


def _copy_argv(cfg: dict, step: str, ferry: str) -> list[str]:
    return [
        ferry,
        "copy",
        *ENDS,
        "--files-from",
        "{manifest}",
        *copy_args(cfg),
        # Before its first write, the job marks the carried state out of date (a pass that
        # fails before any job wrote leaves it to the next).
        *carried_args(cfg),
        "--no-progress",
        "--progress-file",
        "{progress}",
        "--json",
    ]


def _verify_argv(cfg: dict, step: str, ferry: str) -> list[str]:
    return [
        ferry,
        "verify",
        *ENDS,
        "--files-from",
        "{manifest}",
        *verify_args(cfg),
        # What it saw: the destination's entries the pass wrote, for `ferry carry`.
        "--observed",
        "{observed}",
        "--progress-file",
        "{progress}",
        "--json",
    ]


def _prune_argv(cfg: dict, step: str, ferry: str) -> list[str]:
    # What the plan's join of the two listings found to delete: the source is frozen, and
    # the destination was written since only by this pass (a deletion of what it already
    # replaced finds nothing). Nothing is listed or sorted again. One job per part of the
    # plan's files to delete, then one for the directories they leave.
    return [
        ferry,
        "prune",
        *ENDS,
        "--plan",
        "{plan_dir}",
        *(["--part", "{part}"] if step == "prune" else ["--dirs"]),
        *prune_args(cfg),
        *carried_args(cfg),
        "--log",
        "{deleted}",
        "--json",
    ]


def _final_check_argv(cfg: dict, step: str, ferry: str) -> list[str]:
    # Metadata too (mode, owner, mtime, attributes and ACLs, of directories as well as
    # files): what the partitions' verify cannot see, a directory, is seen here.
    return [ferry, "verify", *ENDS, "--metadata", "--scratch", "{scratch}", "--json"]


def _carry_argv(cfg: dict, step: str, ferry: str) -> list[str]:
    planned = (
        [] if cfg["phase"] == "baseline" else ["--listing", "{dest_listing}", *shards_args(cfg)]
    )
    # The audit's fresh listing is the state as it is: no verify's record to patch it with.
    observed = [] if cfg["phase"] == "audit" else ["--observed", "{observed}"]
    pruned = (
        ["--deleted", "{deleted}"]
        if cfg["phase"] == "final" and not cfg["prune"]["dry_run"]
        else []
    )
    return [
        ferry,
        "carry",
        "{dest}",
        "--state",
        "{state}",
        "--pass",
        pass_name(cfg),
        *planned,
        *observed,
        *pruned,
        "--scratch",
        "{scratch}",
        "--json",
    ]


def _replicate_argv(cfg: dict, step: str, ferry: str) -> list[str]:
    r = cfg["replicate"]
    return [
        *shlex.split(r["launcher"]),
        "-n",
        str(r["ranks"]),
        "{python}",
        "-m",
        "mpi4py",
        "{script}",
        *ENDS,
        "--ferry",
        ferry,
        *replicate_args(cfg),
        "--json",
        "{report}",
    ]


# Each step's command, by step.
ARGV = {
    "shard": _shard_argv,
    "list_source": _listing_argv,
    "list_dest": _listing_argv,
    "make_dest": _make_dest_argv,
    "plan": _plan_argv,
    "copy": _copy_argv,
    "verify": _verify_argv,
    "prune": _prune_argv,
    "prune_dirs": _prune_argv,
    "final_check": _final_check_argv,
    "carry": _carry_argv,
    "replicate": _replicate_argv,
}


def argv(cfg: dict, step: str, ferry: str) -> list[str]:
    """The command a step runs. Inputs that differ per task are `{placeholders}` standing alone
    as one argument (ferry_task.py fills them): {source} and {dest} are the configured ends,
    replaced by small local trees in a stub run."""
    if step not in ARGV:
        raise ValueError(f"no ferry command for step {step!r}")
    return ARGV[step](cfg, step, ferry)


def requests(cfg: dict, step: str) -> dict:
    """What a step asks the scheduler for: resources.<its key>, gaps filled from resources.default."""
    table = cfg["resources"]
    own = table.get(STEPS[step], {})
    keys = ("threads", "mem_mb", "runtime", "slurm_partition", "slurm_account", "slurm_spread")
    out = {key: own.get(key, table["default"].get(key)) for key in keys}
    out["slurm_partition"] = out["slurm_partition"] or ""
    out["slurm_account"] = out["slurm_account"] or ""
    out["slurm_spread"] = bool(out["slurm_spread"])
    return out


def worker_env(cfg: dict) -> dict:
    """Every ferry command honours FERRY_AUTH (only `ferry copy` takes --auth), and every one
    that lists a container FERRY_LIST_CONCURRENCY."""
    return {
        **({"FERRY_AUTH": cfg["auth"]} if cfg["auth"] else {}),
        **(
            {"FERRY_LIST_CONCURRENCY": str(cfg["list"]["concurrency"])}
            if cfg["list"]["concurrency"]
            else {}
        ),
    }


def check_spec(cfg: dict, ferry: str) -> dict:
    """The pre-flight the engines' start hook runs before the pass lists anything
    (ferry_preflight.py): `ferry check` of the pass's ends and state, and the config key that
    sets each (the state's is 'outdir' where 'state' is left to its default)."""
    return {
        "argv": [ferry, "check", cfg["source"], cfg["dest"], "--state", state_location(cfg)]
        + ["--json"],
        "env": worker_env(cfg),
        "keys": {
            "source": "source",
            "dest": "dest",
            "state": "state" if cfg["state"] else "outdir",
        },
    }


def step_spec(cfg: dict, step: str, ferry: str) -> dict:
    spec = {
        "resources": requests(cfg, step),
        "retries": cfg["job_retries"],
        "env": worker_env(cfg),
    }
    if step == "report":
        return spec
    spec["argv"] = argv(cfg, step, ferry)
    ends = cfg["replicate"] if step == "replicate" else cfg
    spec["values"] = {"source": ends["source"], "dest": ends["dest"]}
    if step in ("list_dest", "make_dest", "carry", "shard", "copy", "prune", "prune_dirs"):
        spec["values"]["state"] = state_location(cfg)
    if step in ("plan", "carry"):
        # The listings it reads, relative to the run directory (Nextflow stages them so too).
        spec["listings"] = ferry_run_dir.listings(list_jobs(cfg))
    if step == "plan":
        spec["values"]["cut"] = cut_args(cfg)
    if step in ("plan", "prune", "prune_dirs", "copy"):
        spec["config_keys"] = PRUNE_KEYS
    if step in ("copy", "verify"):
        # Written by the job as it goes, straight into the run directory, where `ferry status`
        # reads it (a Nextflow task's own records reach the run directory only at the end).
        spec["values"]["run_dir"] = os.path.abspath(run_dir(cfg))
    return spec


def report_args(cfg: dict, history: str | None = None) -> list[str]:
    """ferry_report.py build options after RUN_DIR: what the report cannot find in the run
    directory. `history`: the run directory whose run root holds the history (default: the run
    directory on disk)."""
    final = cfg["phase"] in ("final", "audit")
    return [
        "--run-name",
        run_name(cfg),
        "--phase",
        cfg["phase"],
        "--pass",
        str(cfg["pass"]),
        "--source",
        redact(cfg["source"]),
        "--dest",
        redact(cfg["dest"]),
        *(["--checksum"] if final and cfg["checksum"] else []),
        *(["--final-check"] if final_check(cfg) else []),
        # Every phase's report projects the final pass, which verifies as configured.
        *(["--final-checksum"] if cfg["checksum"] else []),
        # ... and against the config's prune limit, carrying the destination or not.
        "--max-delete",
        str(cfg["prune"]["max_delete"]),
        *(["--prune-force"] if cfg["prune"]["force"] else []),
        "--dest-listing",
        cfg["dest_listing"],
        "--state",
        redact(state_location(cfg)),
        "--history",
        history or os.path.abspath(run_dir(cfg)),
    ]


def report_argv(cfg: dict) -> list[str]:
    """The report's command after `ferry_report.py`, the same for both engines; {run_dir} is the
    records it reads (the run directory, or Nextflow's gathered copy of them), {history} the run
    directory beside the history (the one on disk, or Nextflow's copy of the history and of the
    run's start marker, staged into the task: an Azure Batch task sees nothing of the head's
    disk). The pages are named by the run's status: report.* when complete,
    report-incomplete.* otherwise."""
    return ["build", "{run_dir}", *report_args(cfg, "{history}"), "--by-status"]


def resolve(
    params: dict, basedir: str = REPO, absolute: bool = False, schema: dict | None = None
) -> dict:
    """Defaults from config/config.yaml, overridden by params (nested maps merged, old key names
    moved to the new ones), coerced and checked; then every value a step runs with.

    absolute: local source and destination paths made absolute, for tasks that run in a
    directory of their own (Nextflow's work directories), where a relative path means nothing."""
    schema = schema or load_yaml(SCHEMA)
    params = json.loads(json.dumps(params))  # the caller's map stays as it was
    warnings = rename_old_keys(params)
    cfg = deep_merge(load_yaml(DEFAULTS), params)
    coerce_cli_strings(cfg, schema)
    _numbers_to_strings(cfg, schema)
    validate(cfg, schema)
    if absolute:
        for table, keys in ((cfg, ("source", "dest")), (cfg["replicate"], ("source", "dest"))):
            for key in keys:
                if table[key] and not is_blob(table[key]):
                    table[key] = os.path.abspath(table[key])
    ferry = (
        cfg["ferry_bin"]
        if os.path.isabs(cfg["ferry_bin"])
        else os.path.join(basedir, cfg["ferry_bin"])
    )
    only = replicate_only(cfg)
    run = {
        "name": run_name(cfg),
        "dir": run_dir(cfg),
        "phase": cfg["phase"],
        "final": cfg["phase"] == "final",
        "audit": cfg["phase"] == "audit",
        "final_check": final_check(cfg),
        # The list jobs of each side ({shard} of run_dir.json's sharded records); [] when one
        # job lists each side, and there is no shard step.
        "shards": ferry_run_dir.shard_ids(list_jobs(cfg)) if sharded(cfg) else [],
        "phase_steps": phase_steps(cfg),
        "replicate_only": only,
        # Where the engine's own records (Nextflow's trace, timeline, report) go.
        "records_dir": replicate_run_dir(cfg) if only else run_dir(cfg),
        "replicate_dir": replicate_run_dir(cfg),
        "ferry": ferry,
        "report_args": report_args(cfg),
        "report_argv": report_argv(cfg),
        "migration": None if only else migration(cfg),
        "lease": None if only else lease(cfg, ferry),
        "check": None if only else check_spec(cfg, ferry),
    }
    steps = {step: step_spec(cfg, step, ferry) for step in STEPS}
    # The run directory's layout, for the Nextflow side (its processes' outputs, FerryConfig).
    layout = ferry_run_dir.LAYOUT
    return {"config": cfg, "run": run, "steps": steps, "layout": layout, "warnings": warnings}


# --- nextflow_schema.json ------------------------------------------------------------------------

# Groups of the Nextflow parameter schema (nf-core layout); every top-level key is in one.
NF_GROUPS = [
    (
        "migration",
        "What to migrate, and which phase",
        ["source", "dest", "phase", "run_name", "pass", "outdir"],
    ),
    (
        "steps",
        "What each step does: listing, planning (change detection, partitions), copying, verifying",
        [
            "ferry_bin",
            "auth",
            "list",
            "dest_listing",
            "dest_probe",
            "state",
            "plan",
            "compare",
            "copy",
            "checksum",
            "verify_download",
            "final_check",
        ],
    ),
    ("safety", "Deleting in the final phase", ["prune"]),
    ("resources", "Retries and what each step asks the executor for", ["job_retries", "resources"]),
    ("replicate", "MPI replication (-entry REPLICATE, docs/replicate.md)", ["replicate"]),
]


def _inline_refs(node, defs):
    if isinstance(node, dict):
        if "$ref" in node:
            return _inline_refs(defs[node["$ref"].rsplit("/", 1)[-1]], defs)
        return {k: _inline_refs(v, defs) for k, v in node.items()}
    if isinstance(node, list):
        return [_inline_refs(v, defs) for v in node]
    return node


def nextflow_schema(schema: dict, defaults: dict) -> dict:
    """nf-core's parameter-schema layout, generated from the YAML schema so the two never drift:
    the same properties and constraints, grouped, with the defaults of config/config.yaml."""
    defs = schema.get("$defs", {})
    props = _inline_refs(schema["properties"], defs)
    grouped = [key for _, _, keys in NF_GROUPS for key in keys]
    missing = sorted(set(props) - set(grouped))
    if missing:
        raise SystemExit(f"ferry_config: schema keys in no Nextflow parameter group: {missing}")
    definitions = {}
    for name, title, keys in NF_GROUPS:
        group_props = {}
        for key in keys:
            prop = dict(props[key])
            if key in defaults and defaults[key] != "":
                prop["default"] = defaults[key]
            group_props[key] = prop
        definitions[name] = {
            "title": title,
            "type": "object",
            "properties": group_props,
            "required": [k for k in keys if k in schema.get("required", [])],
        }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://github.com/ferry/ferry/main/nextflow_schema.json",
        "title": "ferry migration pipeline parameters",
        "description": "Generated by `workflow/scripts/ferry_config.py nextflow-schema` from "
        "workflow/schemas/config.schema.yaml; do not edit.",
        "type": "object",
        "$defs": definitions,
        "allOf": [{"$ref": f"#/$defs/{name}"} for name, _, _ in NF_GROUPS],
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="ferry_config.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    res = sub.add_parser("resolve", help="check a config and print its resolution (JSON)")
    res.add_argument(
        "params",
        nargs="?",
        default="-",
        help="JSON of the parameters to apply over the defaults (- for stdin)",
    )
    res.add_argument("--basedir", default=REPO, help="what a relative ferry_bin is relative to")
    res.add_argument(
        "--absolute",
        action="store_true",
        help="make local source/dest paths absolute (tasks that run elsewhere than here)",
    )
    sub.add_parser("nextflow-schema", help="print nextflow_schema.json")
    args = parser.parse_args(argv)

    if args.command == "nextflow-schema":
        json.dump(
            nextflow_schema(load_yaml(SCHEMA), load_yaml(DEFAULTS)),
            sys.stdout,
            indent=2,
            ensure_ascii=False,
        )
        sys.stdout.write("\n")
        return 0
    text = sys.stdin.read() if args.params == "-" else open(args.params, encoding="utf-8").read()
    try:
        resolved = resolve(json.loads(text or "{}"), args.basedir, args.absolute)
    except ConfigError as err:
        print(f"ferry: invalid configuration: {err}", file=sys.stderr)
        return 2
    json.dump(resolved, sys.stdout, ensure_ascii=False)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
