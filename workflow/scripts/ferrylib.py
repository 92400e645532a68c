"""Helpers shared by the pipeline's scripts and the Snakefile: locations, JSON documents, and
configuration checks. Planning (comparing and partitioning manifests) is the worker's alone
(`ferry plan`), as are reading a manifest's escaped paths (`ferry names`) and sizes and rates
(`ferry units`, or the option that takes them: the pipeline passes them as written)."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import urllib.parse


def is_blob(location: str) -> bool:
    return location.startswith(("az://", "http://", "https://"))


def identity(location: str, environ=None) -> str:
    """What one end of a migration is, however it was spelt: the key of its run name and of its
    record, so that `/data/share/`, `./share` and a symlink to it continue one migration. A local
    path is made absolute with symlinks, `.`, `..` and trailing slashes resolved. A blob location
    becomes one URL: `az://` expanded as the worker expands it (AZURE_STORAGE_BLOB_ENDPOINT,
    else the account's own endpoint), scheme and host in lower case, a default port dropped,
    escapes decoded, empty segments gone; its query (a SAS, which rotates) is never part of it."""
    if not location:
        return ""
    if not is_blob(location):
        return os.path.realpath(os.path.expanduser(location))
    environ = os.environ if environ is None else environ
    url = location.split("?", 1)[0]
    if url.startswith("az://"):
        account = environ.get("AZURE_STORAGE_ACCOUNT", "")
        endpoint = environ.get("AZURE_STORAGE_BLOB_ENDPOINT") or (
            f"https://{account}.blob.core.windows.net"
        )
        url = endpoint.rstrip("/") + "/" + url[len("az://") :]
    parts = urllib.parse.urlsplit(url)
    scheme, host = parts.scheme.lower(), (parts.hostname or "").lower()
    port = parts.port if parts.port not in (None, DEFAULT_PORTS.get(scheme)) else None
    path = re.sub("/+", "/", urllib.parse.unquote(parts.path)).rstrip("/")
    return f"{scheme}://{host}{f':{port}' if port else ''}{path}"


DEFAULT_PORTS = {"http": 80, "https": 443}


def run_name_for(source: str, dest: str, environ=None) -> str:
    """A stable, readable default name: the source's last component plus a hash of both ends, as
    they are (`identity`), not as they were spelt."""
    source, dest = identity(source, environ), identity(dest, environ)
    return legacy_run_name(source, dest)


def legacy_run_name(source: str, dest: str) -> str:
    """The name of the spelling itself, as runs before `identity` were named: such a run's
    directory is continued where no run has the new name yet (ferry_config.run_name)."""
    digest = hashlib.sha1(f"{source}\n{dest}".encode()).hexdigest()[:8]
    tail = source.rstrip("/").rsplit("/", 1)[-1] or "root"
    tail = re.sub(r"[^A-Za-z0-9._-]+", "_", tail).strip("._") or "src"
    return f"{tail[:40]}-{digest}"


def redact(location: str) -> str:
    """A location fit for logs and reports: no query string, no user:password in the authority."""
    without_query = location.split("?", 1)[0]
    return re.sub(r"^([a-z]+://)[^/@]*@", r"\1", without_query)


def reword(said: str, pairs) -> str:
    """`said` with each (worker's words, config's words) pair's first replaced by its second,
    in order (the longer phrases come first in such lists)."""
    for flag, key in pairs:
        said = said.replace(flag, key)
    return said


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


def iso(epoch: float | None) -> str | None:
    """A time as the run's documents write it: UTC, to the second."""
    if epoch is None:
        return None
    return dt.datetime.fromtimestamp(epoch, dt.UTC).isoformat(timespec="seconds")


def epoch(text: str | None) -> float | None:
    """A time the run's documents wrote (iso()), in seconds since the epoch; None for none."""
    if not text:
        return None
    try:
        return dt.datetime.fromisoformat(text).timestamp()
    except (TypeError, ValueError):
        return None


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
    if cfg["plan"]["tool"] == "fpart" and is_blob(cfg["source"]):
        raise ConfigError(
            "config field 'plan.tool': fpart partitions local sources only; "
            f"source {redact(cfg['source'])!r} is a blob location (use tool: ferry)"
        )
    if identity(cfg["source"]) == identity(cfg["dest"]):
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
