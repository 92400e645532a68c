"""The worker's JSON documents (`ferry copy --json`, verify, prune, plan.json, the listings'
summaries, progress files, `ferry status --json`), read as their schema says: the schema is
generated from the worker's own types (`ferry schema`, worker/src/documents.rs) and checked in
beside this file, so a key the worker renamed or dropped, or a count of another type, is a
DocumentError here, never a default of 0 in a report.

    load(kind, path)          the document, or None when there is no file
    load_failed(kind, path)   a failed job's document, or None when the job died before it
                              printed one whole (an empty or cut-short file)
    check(kind, doc)          doc, validated
    STATES[name]              the worker's words for a job's, a phase's, an engine's state

The pipeline's own documents (report.json, history.jsonl's records) have checked-in schemas in
workflow/schemas/, read through pipeline_validator() and validate() the same way.
"""

from __future__ import annotations

import json
import os

import jsonschema

SCHEMA_FILE = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "worker-documents.schema.json"
)
with open(SCHEMA_FILE, encoding="utf-8") as _handle:
    _ALL = json.load(_handle)
SCHEMAS: dict[str, dict] = _ALL["documents"]
VERSION: int = _ALL["version"]
# The one vocabulary of states, the worker's (documents.rs: JobState, PhaseState, EngineState).
STATES: dict[str, tuple[str, ...]] = {name: tuple(words) for name, words in _ALL["states"].items()}
# Blob requests by kind, every kind in every document's `requests`.
REQUEST_KINDS: tuple[str, ...] = tuple(SCHEMAS["copy"]["$defs"]["Requests"]["properties"])


def _strict(schema: dict):
    """A validator for schema in which a count is an int: JSON Schema takes 316.0 for an
    integer, and a count printed as a float is what the worker must never write."""
    base = jsonschema.validators.validator_for(schema)
    checker = base.TYPE_CHECKER.redefine(
        "integer", lambda _checker, value: isinstance(value, int) and not isinstance(value, bool)
    )
    return jsonschema.validators.extend(base, type_checker=checker)(schema)


_VALIDATORS = {kind: _strict(schema) for kind, schema in SCHEMAS.items()}


class DocumentError(ValueError):
    """A document that is not what the worker's schema says it is."""


def _deepest(error):
    """Of an error in a field that may be null (anyOf: the object or null), the one inside the
    object: the key that is wrong, not that the whole is neither."""
    while error.context:
        inside = [e for e in error.context if e.validator != "type" or e.absolute_path]
        error = max(inside or error.context, key=lambda e: len(e.absolute_path))
    return error


def validate(validator, doc, where: str, what: str) -> dict:
    """doc, or a DocumentError naming `where` and each key that is missing or wrong."""
    errors = sorted(
        (_deepest(e) for e in validator.iter_errors(doc)),
        key=lambda e: list(e.absolute_path),
    )
    if errors:
        said = "; ".join(
            f"{'/'.join(str(p) for p in e.absolute_path) or 'the document'}: {e.message}"
            for e in errors[:5]
        )
        raise DocumentError(f"{where or 'a document'}: not {what}: {said}")
    return doc


def check(kind: str, doc, where: str = "") -> dict:
    return validate(_VALIDATORS[kind], doc, where, f"a ferry {kind} document (version {VERSION})")


PIPELINE_SCHEMAS = os.path.join(os.path.dirname(os.path.dirname(SCHEMA_FILE)), "schemas")


def pipeline_schema(name: str) -> dict:
    """workflow/schemas/<name>.schema.json, one of the pipeline's own documents."""
    with open(os.path.join(PIPELINE_SCHEMAS, f"{name}.schema.json"), encoding="utf-8") as handle:
        return json.load(handle)


def validator(schema: dict):
    """A validator of schema as the worker's documents are validated (a count is an int)."""
    return _strict(schema)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def parse(kind: str, text: str, where: str = "") -> dict:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise DocumentError(f"{where or 'a document'}: not JSON: {err}") from None
    return check(kind, doc, where)


def load(kind: str, path: str) -> dict | None:
    text = _read(path)
    return None if text is None else parse(kind, text, path)


def load_failed(kind: str, path: str) -> dict | None:
    """A failed job's output may be nothing or half a document (killed while it printed): that
    is no document. A whole one is checked like any other."""
    text = _read(path)
    if text is None or not text.strip():
        return None
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return None
    return parse(kind, text, path)
