"""Interrupting a running copy at the fault proxy (tests/support/proxy.py): kill it once some
blocks are staged, or hold it while its data changes; block ids as the Python SDK names them; and
the ferry processes of a pipeline's process group, to kill one."""

from __future__ import annotations

import base64
import binascii
import json
import os


def sdk_block_id(wire_id: str) -> str:
    """The form in which the Python SDK reports a block id that went over the wire as ``wire_id``.

    The SDK base64-decodes ids and returns the text if it is UTF-8, else the id as sent; applying
    the same rule to the ids the proxy saw makes the two comparable whatever ids ferry chooses.
    """
    try:
        return base64.b64decode(wire_id, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return wire_id


def wait_alive(proxy, proc, predicate, timeout, what):
    """proxy.wait_for, but give up at once (with ferry's stderr) if ferry exits meanwhile."""

    def check():
        if proc.poll() is not None:
            raise AssertionError(f"ferry exited ({proc.returncode}) before {what}")
        return predicate()

    proxy.wait_for(check, timeout, what)


def kill_once_blocks_staged(proxy, spawn, staged, most):
    """Starts a copy (spawn()), lets `staged` Put Block requests through, holds every later one
    until the copy is killed, then drops them. Returns the block IDs (as the SDK names them) that
    got through."""
    hold = proxy.add(
        "stall",
        method="PUT",
        query={"comp": "block"},
        skip=staged,
        count=most,
        after_stall="drop",
        stall_timeout=60,
    )

    def good():
        return [r for r in proxy.requests("PUT", comp="block") if r.done and r.status == 201]

    proc = spawn()
    try:
        wait_alive(
            proxy,
            proc,
            lambda: len(good()) == staged and proxy.stalled >= 1,
            60,
            f"{staged} Put Block to succeed and the next to stall",
        )
    finally:
        proc.kill()
        proc.wait(10)
    proxy.release(hold)
    proxy.wait_idle(30)
    return {sdk_block_id(r.block_id) for r in good()}


def fail_after_change(proc, proxy, hold, tmp_path, stalled_what, change) -> dict:
    """Wait until the spawned copy stalls at the proxy, change the data under it, let it go on;
    the copy must exit 1. Returns its --json summary."""
    try:
        wait_alive(proxy, proc, lambda: proxy.stalled >= 1, 60, stalled_what)
        change()
        proxy.release(hold)
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, (tmp_path / "ferry.stderr").read_text()
    return json.loads((tmp_path / "ferry.stdout").read_text())


def ferry_processes(pgid: int, verb: str | None = None) -> list[int]:
    """The ferry processes of a process group (a pipeline's jobs), those running `ferry VERB` only
    when a verb is given."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = open(f"/proc/{entry}/cmdline", "rb").read().split(b"\0")
            if (
                os.getpgid(int(entry)) != pgid
                or os.path.basename(os.readlink(f"/proc/{entry}/exe")) != "ferry"
            ):
                continue
            if verb is None or argv[1:2] == [verb.encode()]:
                found.append(int(entry))
        except (OSError, IndexError):
            continue
    return found
