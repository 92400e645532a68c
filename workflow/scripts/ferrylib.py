"""Helpers shared by the pipeline's scripts and the Snakefile: sizes, locations, JSON documents,
and configuration checks. Planning (comparing and partitioning manifests) is the worker's alone
(`ferry plan`), as is reading a manifest's escaped paths (`ferry names`)."""

from __future__ import annotations

import hashlib
import json
import os
import re

# The same reading as the worker's (worker/src/units.rs): a bare K/M/G/T is binary, as most
# storage tools read it; KB/MB/GB/TB are decimal. Sizes are handed to ferry as plain bytes, so
# the two must agree.
_SIZE_UNITS = {
    "": 1,
    "B": 1,
    "K": 1024,
    "KI": 1024,
    "KIB": 1024,
    "M": 1024**2,
    "MI": 1024**2,
    "MIB": 1024**2,
    "G": 1024**3,
    "GI": 1024**3,
    "GIB": 1024**3,
    "T": 1024**4,
    "TI": 1024**4,
    "TIB": 1024**4,
    "KB": 1000,
    "MB": 1000**2,
    "GB": 1000**3,
    "TB": 1000**4,
}
# The first line of every manifest the worker writes (docs/manifest.md); it reads v1 lines (five
# fields) under it too.
MANIFEST_HEADER = "#ferry-manifest v2\tpath\ttype\tsize\tmtime\tmd5\tmode\towner\tlink\txattrs"


_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*$")


def parse_size(value) -> int:
    """Bytes from 123, "123", "8MiB", "8M", "1.5GB"."""
    if isinstance(value, bool):
        raise ValueError(f"not a size: {value!r}")
    if isinstance(value, int):
        return value
    match = _SIZE_RE.match(str(value))
    if not match or match.group(2).upper() not in _SIZE_UNITS:
        raise ValueError(f"not a size: {value!r}")
    return round(float(match.group(1)) * _SIZE_UNITS[match.group(2).upper()])


# Rates as the worker reads them (worker/src/units.rs): bits per second are decimal, byte units
# follow parse_size, the "/s" is optional and a bare number is bytes per second.
_RATE_UNITS = {
    "": 1,
    "B": 1,
    "bps": 1 / 8,
    "Kbps": 1e3 / 8,
    "kbps": 1e3 / 8,
    "Mbps": 1e6 / 8,
    "Gbps": 1e9 / 8,
    "Tbps": 1e12 / 8,
    "KB": 1e3,
    "kB": 1e3,
    "MB": 1e6,
    "GB": 1e9,
    "TB": 1e12,
    "KiB": 1024,
    "MiB": 1024**2,
    "GiB": 1024**3,
    "TiB": 1024**4,
}
_RATE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)(?:/s)?\s*$")


def parse_rate(value) -> int:
    """Bytes per second from "500Mbps", "100MB/s", "64MiB/s", "1000"."""
    match = _RATE_RE.match(str(value))
    if not match or match.group(2) not in _RATE_UNITS:
        raise ValueError(f"not a rate: {value!r} (e.g. 500Mbps, 100MB/s, 64MiB/s)")
    rate = int(float(match.group(1)) * _RATE_UNITS[match.group(2)])
    if rate < 1:
        raise ValueError(f"rate {value!r} is below one byte per second")
    return rate


def is_blob(location: str) -> bool:
    return location.startswith(("az://", "http://", "https://"))


def run_name_for(source: str, dest: str) -> str:
    """A stable, readable default name: the source's last component plus a hash of both ends."""
    digest = hashlib.sha1(f"{source}\n{dest}".encode()).hexdigest()[:8]
    tail = source.rstrip("/").rsplit("/", 1)[-1] or "root"
    tail = re.sub(r"[^A-Za-z0-9._-]+", "_", tail).strip("._") or "src"
    return f"{tail[:40]}-{digest}"


def redact(location: str) -> str:
    """A location fit for logs and reports: no query string, no user:password in the authority."""
    without_query = location.split("?", 1)[0]
    return re.sub(r"^([a-z]+://)[^/@]*@", r"\1", without_query)


def load_json(path: str) -> dict | None:
    """A worker JSON document, or None when the file is missing, empty or cut short."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        return None
    if not text.strip():
        return None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) else None


def write_json(path: str, doc) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(doc, handle, indent=2, sort_keys=False)
        handle.write("\n")
    os.replace(tmp, path)


class ConfigError(Exception):
    """A configuration problem the schema cannot express; the message names the field."""


def check_config(cfg: dict) -> None:
    """Cross-field checks of the migration run at parse time, after the schema, before any job."""
    if not (cfg["source"] and cfg["dest"]):
        raise ConfigError(
            "config fields 'source' and 'dest' are required for a migration "
            "(for `snakemake replicate`, set replicate.source and replicate.dest instead)"
        )
    for field, value in (
        ("plan.max_bytes", cfg["plan"]["max_bytes"]),
        ("copy.block_size", cfg["copy"]["block_size"]),
    ):
        try:
            parse_size(value)
        except ValueError as err:
            raise ConfigError(f"config field '{field}': {err}") from None
    if cfg["plan"]["tool"] == "fpart" and is_blob(cfg["source"]):
        raise ConfigError(
            "config field 'plan.tool': fpart partitions local sources only; "
            f"source {redact(cfg['source'])!r} is a blob location (use tool: ferry)"
        )
    if cfg["source"].rstrip("/") == cfg["dest"].rstrip("/"):
        raise ConfigError("config fields 'source' and 'dest' name the same location")
    outdir = os.path.realpath(cfg["outdir"])
    for field in ("source", "dest"):
        location = cfg[field]
        if is_blob(location):
            continue
        root = os.path.realpath(location)
        if outdir == root or outdir.startswith(root.rstrip("/") + "/"):
            raise ConfigError(
                f"config field 'outdir': {cfg['outdir']!r} lies inside {field} {location!r}; "
                "run records would be migrated (or pruned) with the data"
            )


def coerce_cli_strings(cfg: dict, schema: dict) -> None:
    """Snakemake parses nested --config values (plan={parts: 8}) with YAML's BaseLoader,
    which leaves every scalar a string. Turn strings back into the integers and booleans the
    schema asks for, in place, so nested overrides work; anything else is left for the schema
    to reject with the field's name."""
    props = schema.get("properties", {})
    defs = schema.get("$defs", {})
    for key, value in list(cfg.items()):
        spec = props.get(key, {})
        if "$ref" in spec:
            spec = defs.get(spec["$ref"].rsplit("/", 1)[-1], {})
        types = spec.get("type", [])
        types = [types] if isinstance(types, str) else types
        if isinstance(value, dict) and "object" in types:
            nested = spec if "properties" in spec else {"properties": {}}
            if spec.get("additionalProperties") not in (None, False):
                nested = {"properties": {k: spec["additionalProperties"] for k in value}}
            coerce_cli_strings(value, {**nested, "$defs": defs})
        elif isinstance(value, str):
            text = value.strip()
            if "integer" in types and re.fullmatch(r"-?[0-9]+", text):
                cfg[key] = int(text)
            elif "boolean" in types and text.lower() in ("true", "false"):
                cfg[key] = text.lower() == "true"


def fmt_bytes(n, decimals: int = 1) -> str:
    """A byte count for people, in binary units ("-" for unknown)."""
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.{decimals}f} {unit}"
        value /= 1024
    return f"{n} B"
