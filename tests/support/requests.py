"""The Blob requests a recording proxy saw, by the kinds the worker counts them under
(docs/worker.md, "Requests by kind"), to compare with the ``requests`` of a ``--json`` report."""

from __future__ import annotations

from collections import Counter

from support.proxy import FaultProxy

KINDS = (
    "list_pages",
    "puts",
    "blocks",
    "block_lists",
    "gets",
    "heads",
    "deletes",
    "batches",
    "copies",
    "others",
)


def kind_of(r) -> str:
    """The kind the worker counts a request under, from what the proxy logged of it: the Blob
    service's operation, told by method, comp and restype."""
    comp, container = r.query.get("comp"), r.query.get("restype") == "container"
    copy_source = any(name.lower() == "x-ms-copy-source" for name, _ in r.headers)
    if r.method == "HEAD":
        return "heads"
    if r.method == "GET":
        if comp == "list":
            return "list_pages"
        if comp is None:
            return "heads" if container else "gets"
    if r.method == "PUT":
        if comp == "block":
            return "blocks"
        if comp == "blocklist":
            return "block_lists"
        if comp is None and not container:
            return "copies" if copy_source else "puts"
    if r.method == "DELETE" and comp is None and not container:
        return "deletes"
    if r.method == "POST" and comp == "batch":
        return "batches"
    return "others"


def seen(proxy: FaultProxy) -> dict:
    """Every kind, zeros included, of the requests the proxy logged."""
    counts = Counter(kind_of(r) for r in proxy.requests())
    return {k: counts.get(k, 0) for k in KINDS}


def assert_counted(reported: dict, proxy: FaultProxy, what: str):
    assert set(reported) == set(KINDS), f"{what}: requests has keys {sorted(reported)}"
    want = seen(proxy)
    assert reported == want, (
        f"{what}: ferry counted {reported}, the proxy saw {want}\n"
        + "\n".join(
            f"  {r.method} {r.raw_path} -> {r.status} {r.action or ''}" for r in proxy.requests()
        )
    )
