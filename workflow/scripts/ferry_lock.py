"""One pass at a time per migration: the lock in the run root (`<outdir>/<run_name>/lock.json`).

The engines' start hook takes it (ferry_history.start, for Snakemake's onstart and Nextflow's
workflow start) before any job runs, and a small holder process keeps it for as long as the
engine process lives, however that ends: it refreshes the lock's heartbeat and gives it back once
the engine is gone. A second pass meanwhile is refused at once, its holder named. A lock whose
holder is gone (its engine process, on the host it ran on; from another host, a heartbeat older
than STALE_AFTER) is broken, with a message, so that a killed pass never blocks the next one.

Where the carried state is in Blob storage, passes started on other machines cannot see this
lock file: the pass also takes a lease on the state (`ferry lease`, renewed by the holder with
each heartbeat, given back with the lock). A pass killed with its machine loses the lease within
its 60 s, so nothing has to judge from afar whether it is gone.

    ferry_lock.py hold ROOT RUN_ID --pid PID [--lease JSON]    the holder (started by `take`)
    ferry_lock.py show ROOT                                    who holds the lock, if anyone
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import uuid

import ferry_docs
import ferry_preflight
from ferry_run_dir import LAYOUT, LOCK
from ferrylib import iso, write_json

VERSION = 1
# A holder on another host is judged by its heartbeat alone: ten missed beats.
STALE_AFTER = float(LAYOUT["run_root"]["lock_stale_after_seconds"])
# Three beats to a Blob lease's 60 s: one slow renewal does not lose it.
HEARTBEAT = STALE_AFTER / 10


class Held(Exception):
    """Another pass of the migration holds the lock."""


class StateLease:
    """The Blob lease on the carried state (`ferry lease`): `spec` is ferry_config.lease's
    {ferry, state, env}; its id follows from the run's, so the holder renews what `take` took."""

    def __init__(self, spec: dict, run_id: str):
        self.spec = spec
        self.id = str(uuid.uuid5(uuid.NAMESPACE_URL, run_id))

    def _call(self, action: str, holder: str = "") -> dict | None:
        """`ferry lease`'s document; None where it could not say (no worker here, a failed
        request), which the caller reports."""
        ferry = ferry_preflight.here(self.spec["ferry"])
        if ferry is None:
            self.error = f"no ferry on this machine ('ferry_bin' {self.spec['ferry']})"
            return None
        argv = [ferry, "lease", self.spec["state"], action, "--id", self.id]
        try:
            proc = subprocess.run(
                [*argv, "--holder", holder],
                capture_output=True,
                text=True,
                env={**os.environ, **self.spec.get("env", {})},
                timeout=120,
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            self.error = str(err)
            return None
        if proc.returncode in (0, 3):
            return ferry_docs.parse("lease", proc.stdout, "ferry lease")
        said = proc.stderr.strip().splitlines()
        self.error = said[-1] if said else f"ferry lease exited {proc.returncode}"
        return None

    def acquire(self, holder: dict) -> None:
        """Raises Held, naming the holder, where another pass has the lease."""
        got = self._call("acquire", json.dumps(holder))
        if got is None:
            print(
                f"ferry: no lease taken on the carried state {self.spec['state']} ({self.error}): "
                "a pass of this migration started on another machine would not be refused",
                file=sys.stderr,
            )
        elif not got["held"]:
            try:
                other = describe(json.loads(got["holder"] or "{}"))
            except ValueError:
                other = "a pass whose lease names no holder"
            raise Held(
                f"another pass of this migration is running: {other}; it holds the lease on "
                f"the carried state {self.spec['state']} (given back when its engine ends, or "
                f"60 s after its machine stops)"
            )

    def renew(self) -> None:
        self._call("renew")

    def release(self) -> None:
        self._call("release")


def process_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22): with the pid,
    one process for certain, so a pid the kernel reused later is not taken for the engine."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def alive(holder: dict) -> bool:
    """Is the engine of a marker or a lock still running? Known only on the host it runs on."""
    pid = holder.get("pid")
    if holder.get("host") != socket.gethostname() or not isinstance(pid, int):
        return False
    start = process_start(pid)
    return start is not None and start == holder.get("pid_start", start)


def describe(holder: dict) -> str:
    return (
        f"pass {holder.get('pass')} (run {holder.get('run_id')}) on {holder.get('host')}, "
        f"pid {holder.get('pid')}, since {holder.get('since')}"
    )


def read(root: str) -> dict | None:
    """The lock's holder, None when the lock is free. A lock that cannot be read as one is held
    by nobody we can name: it is broken like a stale one."""
    try:
        with open(os.path.join(root, LOCK), encoding="utf-8") as handle:
            doc = json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {"version": VERSION, "unreadable": True}
    return doc if isinstance(doc, dict) else {"version": VERSION, "unreadable": True}


def gone_because(holder: dict, now: float) -> str | None:
    """Why the holder is gone, or None while it may still be running."""
    if holder.get("unreadable"):
        return "the lock file cannot be read"
    if holder.get("host") == socket.gethostname():
        return None if alive(holder) else "its engine process has ended"
    beat = holder.get("heartbeat")
    if isinstance(beat, int | float) and now - beat < STALE_AFTER:
        return None
    return f"no heartbeat from {holder.get('host')} for over {STALE_AFTER:.0f} s"


def _write_new(path: str, doc: dict) -> bool:
    """Creates path holding doc, whole or not at all; False when it exists already."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(doc, handle)
    try:
        os.link(tmp, path)  # fails if the lock exists: taking it is one atomic step
        return True
    except FileExistsError:
        return False
    finally:
        os.unlink(tmp)


def take(
    root: str, holder: dict, now: float | None = None, lease: dict | None = None
) -> str | None:
    """Takes the lock for `holder` (run_id, pass, host, pid, pid_start), and the lease on a
    carried state in Blob where `lease` names one; raises Held naming the pass that holds
    either. Returns a message when it broke a lock left by a pass that is gone."""
    now = time.time() if now is None else now
    broke = _take_file(root, holder, now)
    if lease is not None:
        try:
            named = {k: holder.get(k) for k in ("pass", "run_id", "host", "pid")}
            StateLease(lease, holder["run_id"]).acquire(named | {"since": iso(now)})
        except Held:
            release(root, holder["run_id"])
            raise
    return broke


def _take_file(root: str, holder: dict, now: float) -> str | None:
    os.makedirs(root, exist_ok=True)
    path = os.path.join(root, LOCK)
    doc = {"version": VERSION, **holder, "since": iso(now), "heartbeat": now}
    broke = None
    for _ in range(3):
        if _write_new(path, doc):
            return broke
        held = read(root)
        if held is None:
            continue
        why = gone_because(held, now)
        if why is None:
            raise Held(
                f"another pass of this migration is running: {describe(held)}; wait for it to "
                f"end, or stop it (its lock, {path}, is given back when its engine ends)"
            )
        broke = f"ferry: broke the lock of {describe(held)}: {why}"
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    raise Held(f"the lock {path} is being taken by another pass at the same moment")


def release(root: str, run_id: str) -> bool:
    """Gives the lock back if `run_id` still holds it."""
    held = read(root)
    if held is None or held.get("run_id") != run_id:
        return False
    try:
        os.unlink(os.path.join(root, LOCK))
    except FileNotFoundError:
        return False
    return True


def beat(root: str, run_id: str, now: float | None = None) -> bool:
    """Refreshes the heartbeat of the lock `run_id` holds; False when it holds it no more."""
    held = read(root)
    if held is None or held.get("run_id") != run_id:
        return False
    held["heartbeat"] = time.time() if now is None else now
    write_json(os.path.join(root, LOCK), held)
    return True


def hold(
    root: str, run_id: str, engine: dict, interval: float = HEARTBEAT, lease: dict | None = None
) -> None:
    """The holder's loop: beats (and renews the state's lease) every `interval` while the engine
    (`pid`, `pid_start`, `host`) runs, then gives the lock and the lease back within a second of
    its end. Watching the engine, not waiting for its last step, is what gives a lock back after
    a Ctrl-C, a failed step or a kill of the engine alike."""
    state = StateLease(lease, run_id) if lease else None
    last = 0.0
    while alive(engine):
        if time.monotonic() - last >= interval:
            if not beat(root, run_id):
                return
            if state:
                state.renew()
            last = time.monotonic()
        time.sleep(min(1.0, interval))
    release(root, run_id)
    if state:
        state.release()


def spawn_holder(root: str, run_id: str, pid: int, lease: dict | None = None) -> None:
    """Starts the holder apart from the engine's session, so that a Ctrl-C reaches only the
    engine, whose end the holder then sees."""
    leased = ["--lease", json.dumps(lease)] if lease else []
    subprocess.Popen(
        [
            sys.executable,
            os.path.abspath(__file__),
            "hold",
            root,
            run_id,
            "--pid",
            str(pid),
            *leased,
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="ferry_lock.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    h = sub.add_parser("hold", help="keep RUN_ID's lock while the engine PID runs")
    h.add_argument("root")
    h.add_argument("run_id")
    h.add_argument("--pid", type=int, required=True)
    h.add_argument("--interval", type=float, default=HEARTBEAT)
    h.add_argument("--lease", type=json.loads, help="the state's lease (ferry_config.lease)")
    s = sub.add_parser("show", help="who holds the lock of the run root ROOT")
    s.add_argument("root")
    args = parser.parse_args(argv)
    if args.command == "hold":
        engine = {"host": socket.gethostname(), "pid": args.pid}
        engine["pid_start"] = process_start(args.pid)
        hold(args.root, args.run_id, engine, args.interval, args.lease)
        return 0
    held = read(args.root)
    print(describe(held) if held else "free")
    return 0


if __name__ == "__main__":
    sys.exit(main())
