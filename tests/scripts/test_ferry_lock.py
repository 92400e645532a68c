"""One pass at a time per migration (issue 42): the run root's lock, taken by the engines' start
hook, refused to a second pass with its holder named, broken when its holder is gone, and given
back by the holder process once the engine ends."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from types import SimpleNamespace

import ferry_history
import ferry_lock
import ferry_run_dir
import pytest
from support.ferry import ferry_env

T0 = 1_700_000_000.0


def engine() -> subprocess.Popen:
    """A stand-in for an engine process: it runs until the test ends it."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])


def holder(proc: subprocess.Popen, run_id: str = "r1", pass_: str = "incremental") -> dict:
    return {
        "run_id": run_id,
        "pass": pass_,
        "host": socket.gethostname(),
        "pid": proc.pid,
        "pid_start": ferry_lock.process_start(proc.pid),
    }


def test_a_second_pass_is_refused_naming_the_holder(tmp_path):
    first = engine()
    try:
        assert ferry_lock.take(str(tmp_path), holder(first), now=T0) is None
        second = engine()
        try:
            with pytest.raises(ferry_lock.Held) as held:
                ferry_lock.take(str(tmp_path), holder(second, "r2", "final"), now=T0 + 5)
        finally:
            second.kill()
        message = str(held.value)
        assert "pass incremental (run r1)" in message and f"pid {first.pid}" in message
        assert socket.gethostname() in message and "since 2023-11-14T22:13:20" in message
        assert json.loads((tmp_path / ferry_run_dir.LOCK).read_text())["run_id"] == "r1"
    finally:
        first.kill()
        first.wait()


def test_a_lock_whose_engine_is_gone_is_broken_with_a_message(tmp_path):
    dead = engine()
    ferry_lock.take(str(tmp_path), holder(dead), now=T0)
    dead.kill()
    dead.wait()
    alive = engine()
    try:
        broke = ferry_lock.take(str(tmp_path), holder(alive, "r2", "final"), now=T0 + 5)
        assert (
            broke and "pass incremental (run r1)" in broke and "engine process has ended" in broke
        )
        assert json.loads((tmp_path / ferry_run_dir.LOCK).read_text())["run_id"] == "r2"
    finally:
        alive.kill()


def test_a_holder_on_another_host_counts_while_its_heartbeat_is_fresh(tmp_path):
    lock = tmp_path / ferry_run_dir.LOCK
    lock.write_text(
        json.dumps(
            {"version": 1, "run_id": "r1", "pass": "baseline", "host": "elsewhere", "pid": 1}
            | {"since": "2023-11-14T22:13:20+00:00", "heartbeat": T0}
        )
    )
    me = engine()
    try:
        fresh = T0 + ferry_lock.STALE_AFTER - 1
        with pytest.raises(ferry_lock.Held, match="on elsewhere"):
            ferry_lock.take(str(tmp_path), holder(me, "r2"), now=fresh)
        broke = ferry_lock.take(str(tmp_path), holder(me, "r2"), now=T0 + ferry_lock.STALE_AFTER)
        assert "no heartbeat from elsewhere" in broke
    finally:
        me.kill()


def test_the_holder_gives_the_lock_back_when_the_engine_ends(tmp_path):
    proc = engine()
    ferry_lock.take(str(tmp_path), holder(proc), now=T0)
    keeper = subprocess.Popen(
        [sys.executable, ferry_lock.__file__, "hold", str(tmp_path), "r1", "--pid", str(proc.pid)]
        + ["--interval", "0.2"]
    )
    lock = tmp_path / ferry_run_dir.LOCK
    try:
        deadline = time.monotonic() + 30
        while json.loads(lock.read_text())["heartbeat"] == T0:
            assert time.monotonic() < deadline, "no heartbeat while the engine runs"
            time.sleep(0.1)
        proc.kill()
        proc.wait()
        assert keeper.wait(30) == 0
        assert not lock.exists(), "the lock outlived its engine"
    finally:
        proc.kill()
        keeper.kill()


def test_the_start_hook_refuses_a_second_pass_with_exit_status_3(tmp_path, capsys):
    root = tmp_path / "m"
    running = engine()
    try:
        ferry_history.start(str(root / "incremental"), "snakemake", [], pid=running.pid, now=T0)
        with pytest.raises(SystemExit) as stopped:
            ferry_history.start(str(root / "final"), "nextflow", [], pid=os.getpid(), now=T0 + 9)
        assert stopped.value.code == 3
        err = capsys.readouterr().err
        assert "another pass of this migration is running: pass incremental" in err
        assert not (root / "final").exists(), "the refused pass left a run directory"
    finally:
        running.kill()


def test_a_state_in_blob_is_leased_so_a_pass_on_another_machine_is_refused(
    tmp_path, ferry_bin, container, monkeypatch
):
    """Where the carried state is in Blob storage, two passes started from different machines
    (here: two run roots) share no lock file; the lease on the state refuses the second, naming
    the first; the holder renews it while the engine runs and gives it back after."""
    for k, v in ferry_env().items():
        monkeypatch.setenv(k, v)
    lease = {"ferry": str(ferry_bin), "state": container.at("ferry/state"), "env": {}}
    first, second = tmp_path / "head-a", tmp_path / "head-b"
    running = engine()
    keeper = None
    try:
        ferry_history.start(str(first / "final"), "nextflow", [], pid=running.pid, lease=lease)
        run_id = json.loads((first / "final" / ferry_run_dir.RUN_STARTED).read_text())["run_id"]
        with pytest.raises(ferry_lock.Held) as refused:
            ferry_lock.take(
                str(second), holder(SimpleNamespace(pid=os.getpid()), "r2", "final"), lease=lease
            )
        assert "pass final" in str(refused.value) and "lease on the carried state" in str(
            refused.value
        )
        assert not (second / ferry_run_dir.LOCK).exists(), "the refused pass kept its lock file"
        keeper = subprocess.Popen(
            [sys.executable, ferry_lock.__file__, "hold", str(first), run_id]
            + ["--pid", str(running.pid), "--interval", "0.2", "--lease", json.dumps(lease)]
        )
        running.kill()
        running.wait()
        assert keeper.wait(60) == 0
        # Given back: the other machine's pass now takes it.
        ferry_lock.take(
            str(second), holder(SimpleNamespace(pid=os.getpid()), "r2", "final"), lease=lease
        )
        ferry_lock.StateLease(lease, "r2").release()
    finally:
        running.kill()
        if keeper:
            keeper.kill()
