"""The pipeline's configuration, for both engines: defaults, schema check, and the ferry
arguments every step is run with.

Snakemake imports it (workflow/rules/common.smk); Nextflow runs it as a command before any task
(`ferry_config.py resolve`), so both engines read one config file, check it against one schema,
and hand the worker the same arguments.

    ferry_config.py resolve [PARAMS_JSON|-] [--basedir DIR]   # resolved config + derived values, as JSON
    ferry_config.py nextflow-schema                            # nextflow_schema.json, made from the YAML schema
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys

from ferrylib import ConfigError, check_config, coerce_cli_strings, is_blob, parse_size, redact, run_name_for

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SCHEMA = os.path.join(REPO, "workflow", "schemas", "config.schema.yaml")
DEFAULTS = os.path.join(REPO, "config", "config.yaml")


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
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and types == ["string"]:
            cfg[key] = str(value)


def _field(path) -> str:
    return ".".join(str(p) for p in path) or "(top level)"


def validate(cfg: dict, schema: dict | None = None) -> None:
    """Schema check, then the cross-field checks; ConfigError names the first bad field."""
    import jsonschema

    schema = schema or load_yaml(SCHEMA)
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(cfg), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if errors:
        err = errors[0]
        where = list(err.absolute_path)
        if err.validator == "additionalProperties":
            extra = sorted(set(err.instance) - set(err.schema.get("properties", {})))
            where = where + extra[:1]
        raise ConfigError(f"config field '{_field(where)}': {err.message}")
    if not replicate_only(cfg):
        check_config(cfg)


def resolve(params: dict, schema: dict | None = None) -> dict:
    """Defaults from config/config.yaml, overridden by params (nested maps merged), coerced and
    checked. Returns the config both engines run with."""
    schema = schema or load_yaml(SCHEMA)
    cfg = deep_merge(load_yaml(DEFAULTS), params)
    coerce_cli_strings(cfg, schema)
    _numbers_to_strings(cfg, schema)
    validate(cfg, schema)
    return cfg


def absolute_locations(cfg: dict) -> None:
    """Local source and destination paths made absolute, in place: Nextflow runs each task in its
    own work directory, where a path relative to the launch directory means nothing. (Snakemake
    runs jobs from the directory it was started in, so it keeps them as given.)"""
    for table, keys in ((cfg, ("source", "dest")), (cfg["replicate"], ("source", "dest"))):
        for key in keys:
            if table[key] and not is_blob(table[key]):
                table[key] = os.path.abspath(table[key])


# --- what each step runs -----------------------------------------------------------------------


def run_name(cfg: dict) -> str:
    return cfg["run_name"] or run_name_for(cfg["source"], cfg["dest"])


def run_dir(cfg: dict) -> str:
    """<outdir>/<run_name>/<phase>[-pass<N>]: the run's records, the same for both engines."""
    phase = cfg["phase"] if cfg["pass"] == 1 else f"{cfg['phase']}-pass{cfg['pass']}"
    return os.path.join(cfg["outdir"], run_name(cfg), phase)


def ferry_bin(cfg: dict, basedir: str) -> str:
    path = cfg["ferry_bin"]
    return path if os.path.isabs(path) else os.path.join(basedir, path)


def copy_compare(cfg: dict) -> str:
    """Baseline copies everything by definition; later phases let ferry re-check what the plan
    could not decide with the configured method."""
    return "none" if cfg["phase"] == "baseline" else cfg["compare"]


def list_args(cfg: dict) -> list[str]:
    args = []
    for glob_ in cfg["worker"]["include"]:
        args += ["--include", glob_]
    for glob_ in cfg["worker"]["exclude"]:
        args += ["--exclude", glob_]
    return args


def copy_args(cfg: dict) -> list[str]:
    w = cfg["worker"]
    args = [
        "--compare", copy_compare(cfg),
        "--block-size", str(parse_size(w["block_size"])),
        "--max-retries", str(w["max_retries"]),
    ]
    # Unset, ferry adapts its depth to the store and to what it measures.
    for key in ("concurrency", "parallel_files"):
        if w[key] is not None:
            args += [f"--{key.replace('_', '-')}", str(w[key])]
    if w["max_bandwidth"]:
        args += ["--max-bandwidth", w["max_bandwidth"]]
    if not w["put_md5"]:
        args.append("--no-put-md5")
    return args


def verify_args(cfg: dict) -> list[str]:
    final = cfg["phase"] == "final"
    return [
        *(["--checksum"] if final and cfg["checksum"] else []),
        *(["--download"] if final and cfg["checksum"] and cfg["verify_download"] else []),
        # The cut-over checks what a migration must carry besides bytes: mtime, mode, owner.
        *(["--metadata"] if final else []),
    ]


def prune_args(cfg: dict) -> list[str]:
    d = cfg["delete"]
    return [
        "--max-delete", str(d["max_delete"]),
        *(["--force"] if d["force"] else []),
        *(["--dry-run"] if d["dry_run"] else []),
    ]


def partition_args(cfg: dict) -> list[str]:
    p = cfg["partition"]
    args = ["--partitioner", p["tool"]]
    if p["mode"] == "parts":
        return args + ["--parts", str(p["parts"])]
    if p["mode"] == "auto":
        return args + ["--auto"]
    if p["mode"] in ("max-files", "max-files-bytes"):
        args += ["--max-files", str(p["max_files"])]
    if p["mode"] in ("max-bytes", "max-files-bytes"):
        args += ["--max-bytes", str(parse_size(p["max_bytes"]))]
    return args


def plan_args(cfg: dict) -> list[str]:
    """`ferry plan` arguments after the listings and --out (docs/plan.md). Symlinks are planned
    for every destination: Blob storage keeps them as blobs marked `is_symlink`."""
    return [
        "--phase", cfg["phase"],
        "--compare", cfg["compare"],
        *partition_args(cfg),
    ]


def replicate_only(cfg: dict) -> bool:
    """Only the MPI replication is configured (`snakemake replicate`, Nextflow -entry REPLICATE):
    it needs no migration source and destination."""
    return not (cfg["source"] or cfg["dest"]) and bool(cfg["replicate"]["source"])


def replicate_run_dir(cfg: dict) -> str:
    r = cfg["replicate"]
    return os.path.join(cfg["outdir"], "replicate", run_name_for(r["source"], r["dest"]))


def replicate_args(cfg: dict) -> list[str]:
    """workflow/scripts/replicate.py options after SRC DEST --ferry (docs/replicate.md)."""
    r = cfg["replicate"]
    args = ["--chunk-size", str(parse_size(r["chunk_size"])), "--depth", str(r["depth"])]
    if r["download_ranks"]:
        args += ["--download-ranks", str(r["download_ranks"])]
    if r["max_bandwidth"]:
        args += ["--max-bandwidth", r["max_bandwidth"]]
    if r["manifest"]:
        args += ["--manifest", os.path.abspath(r["manifest"])]
    if r["verify"]:
        args.append("--verify")
    return args


def final_check(cfg: dict) -> bool:
    """The whole-tree check after prune cannot honour include/exclude (ferry verify has no
    filters) and would only re-find what a dry-run prune left, so it runs when neither applies."""
    return (
        cfg["phase"] == "final"
        and cfg["final_check"]
        and not cfg["delete"]["dry_run"]
        and not (cfg["worker"]["include"] or cfg["worker"]["exclude"])
    )


def auth_env(cfg: dict) -> str:
    """The credential source is forced through the environment: every ferry command honours
    FERRY_AUTH, while only `ferry copy` takes --auth."""
    return f"FERRY_AUTH={shlex.quote(cfg['worker']['auth'])}" if cfg["worker"]["auth"] else ""


def derived(cfg: dict, basedir: str = REPO) -> dict:
    """Everything a step needs besides its inputs. Argument lists come pre-quoted for a shell
    (`*_sh`), so names with spaces, quotes, tabs or newlines reach ferry intact."""
    join = shlex.join
    only = replicate_only(cfg)
    return {
        "run_name": run_name(cfg),
        "run_dir": run_dir(cfg),
        "replicate_only": only,
        # Where the engine's own records (Nextflow's trace, timeline, report) go.
        "records_dir": replicate_run_dir(cfg) if only else run_dir(cfg),
        "ferry": ferry_bin(cfg, basedir),
        "source_redacted": redact(cfg["source"]),
        "dest_redacted": redact(cfg["dest"]),
        "final": cfg["phase"] == "final",
        "final_check": final_check(cfg),
        "checksum": cfg["phase"] == "final" and cfg["checksum"],
        "auth_env": auth_env(cfg),
        "list_args_sh": join(list_args(cfg)),
        "copy_args_sh": join(copy_args(cfg)),
        "verify_args_sh": join(verify_args(cfg)),
        "prune_args_sh": join(prune_args(cfg)),
        "plan_args_sh": join(plan_args(cfg)),
        "replicate_run_dir": replicate_run_dir(cfg),
        "replicate_args_sh": join(replicate_args(cfg)),
    }


# --- nextflow_schema.json ------------------------------------------------------------------------

# Groups of the Nextflow parameter schema (nf-core layout); every top-level key is in one.
NF_GROUPS = [
    ("migration", "What to migrate, and which phase", ["source", "dest", "phase", "run_name", "pass", "outdir"]),
    ("planning", "Change detection, verification and partitioning",
     ["compare", "checksum", "verify_download", "final_check", "partition"]),
    ("worker", "The ferry worker", ["ferry_bin", "worker"]),
    ("safety", "Deleting in the final phase", ["delete"]),
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
    res = sub.add_parser("resolve", help="check a config and print it resolved, with the derived values (JSON)")
    res.add_argument("params", nargs="?", default="-", help="JSON of the parameters to apply over the defaults (- for stdin)")
    res.add_argument("--basedir", default=REPO, help="what a relative ferry_bin is relative to")
    res.add_argument("--absolute", action="store_true",
                     help="make local source/dest paths absolute (tasks that run elsewhere than here)")
    sub.add_parser("nextflow-schema", help="print nextflow_schema.json")
    args = parser.parse_args(argv)

    if args.command == "nextflow-schema":
        json.dump(nextflow_schema(load_yaml(SCHEMA), load_yaml(DEFAULTS)), sys.stdout, indent=2, ensure_ascii=False)
        sys.stdout.write("\n")
        return 0
    text = sys.stdin.read() if args.params == "-" else open(args.params, encoding="utf-8").read()
    try:
        cfg = resolve(json.loads(text or "{}"))
        if args.absolute:
            absolute_locations(cfg)
    except ConfigError as err:
        print(f"ferry: invalid configuration: {err}", file=sys.stderr)
        return 2
    json.dump({"config": cfg, "derived": derived(cfg, args.basedir)}, sys.stdout, ensure_ascii=False)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
