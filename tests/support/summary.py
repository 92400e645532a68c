"""Reading ferry's `copy --json` summary by the contract (docs/worker.md)."""

from __future__ import annotations

COPY_SECTIONS = {
    "files": ("total", "copied", "skipped", "failed"),
    "bytes": ("total", "copied", "skipped"),
    "blocks": ("sent", "reused"),
    "retries": ("total", "by_status"),
}


def section(summary: dict, name: str) -> dict:
    """The contract's fields of one section; fields ferry adds beyond the contract are left out
    (consumers must tolerate additions), fields the contract names must all be there."""
    got = summary.get(name)
    assert isinstance(got, dict), f"--json summary has no {name!r} object: {summary}"
    missing = [k for k in COPY_SECTIONS[name] if k not in got]
    assert not missing, f"--json {name!r} lacks {missing}: {got}"
    return {k: got[k] for k in COPY_SECTIONS[name]}
