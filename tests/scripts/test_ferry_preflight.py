"""The engines' start hook runs the pre-flight (ferry_preflight.py, the worker's `ferry check`)
before it takes the migration's lock: a refused pass leaves neither lock nor run directory, and
says which config key to change (issue 42, item 5)."""

from __future__ import annotations

import ferry_config
import ferry_history
import ferry_preflight
import pytest
from support.trees import make_tree


def spec(ferry, tmp_path, source, **params) -> dict:
    cfg = {"source": str(source), "dest": str(tmp_path / "dst"), "outdir": str(tmp_path / "out")}
    return ferry_config.resolve({**cfg, "ferry_bin": str(ferry), **params})["run"]["check"]


def test_a_refused_pre_flight_ends_the_start_hook_before_the_lock(tmp_path, ferry_bin, capsys):
    check = spec(ferry_bin, tmp_path, tmp_path / "missing")
    root = tmp_path / "out" / "m"
    with pytest.raises(SystemExit) as stopped:
        ferry_history.start(str(root / "baseline"), "snakemake", [], check=check)
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert f"config field 'source': {tmp_path / 'missing'} does not exist" in err, err
    assert not root.exists(), "the refused pass left a lock or a run directory"
    assert not (tmp_path / "dst").exists()


def test_a_passing_pre_flight_lets_the_pass_begin(tmp_path, ferry_bin):
    make_tree(tmp_path / "src", {"a": b"a"})
    ferry_preflight.check(spec(ferry_bin, tmp_path, tmp_path / "src"))


def test_the_key_named_is_the_one_that_sets_the_location(tmp_path, ferry_bin):
    keys = spec(ferry_bin, tmp_path, "/data")["keys"]
    assert keys == {"source": "source", "dest": "dest", "state": "outdir"}
    assert spec(ferry_bin, tmp_path, "/data", state=str(tmp_path / "s"))["keys"]["state"] == "state"
    doc = {
        "checks": [
            {"subject": "dest", "location": "x", "problem": "credentials", "message": "403"},
            {"subject": "state", "location": "y", "problem": "not_writable", "message": "no"},
            {"subject": "source", "location": "z", "problem": None, "message": "ok"},
        ]
    }
    lines = ferry_preflight.failures(doc, keys)
    assert lines[0].startswith("config field 'dest' (or 'auth'") and lines[0].endswith(": 403")
    assert lines[1] == "config field 'outdir': no" and len(lines) == 2


def test_a_head_without_the_tasks_worker_uses_its_own_or_says_it_skipped(
    tmp_path, ferry_bin, capsys, monkeypatch
):
    """Azure Batch tasks run the image's /usr/local/bin/ferry, which the head may lack."""
    check = spec(ferry_bin, tmp_path, tmp_path / "missing", ferry_bin="/usr/local/bin/no-ferry")
    monkeypatch.setattr(ferry_preflight, "REPO_BUILD", str(ferry_bin))
    with pytest.raises(SystemExit):
        ferry_preflight.check(check)
    assert "config field 'source'" in capsys.readouterr().err
    monkeypatch.setattr(ferry_preflight, "REPO_BUILD", str(tmp_path / "none"))
    monkeypatch.setenv("PATH", str(tmp_path))
    ferry_preflight.check(check)
    assert "pre-flight skipped: no ferry on this machine" in capsys.readouterr().err
