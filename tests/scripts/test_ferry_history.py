"""The migration's history and the projection of its final pass (workflow/scripts/ferry_history.py)
on histories written by hand: the projection's arithmetic, step by step, on passes measured at
known rates; a converging history, two diverging ones (deltas that grow, and a change rate no
pass can copy); the backtest of every pass that had a predecessor; the start markers that turn a
run that never reported into a `killed` record; the requests summed over sides. No engine."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import ferry_docs
import ferry_history
import ferry_markdown
import ferry_projection
import ferry_report
import ferry_run_dir
import pytest

T0 = 1_700_000_000.0
HOUR = 3600.0
MIB = 1024 * 1024
KIND_ZERO = dict.fromkeys(ferry_projection.KINDS, 0)

# The rates every hand-made pass runs at, so the projection's arithmetic can be redone by hand.
SOURCE = 10_000  # files at the source (1 MiB each), and as many at the destination
LIST_SOURCE_FPS = 100.0  # files listed per second at the source
LIST_DEST_FPS = 200.0  # ... at the destination
PLAN_EPS = 1000.0  # entries (source + destination) planned per second
COPY_FPS = 10.0  # files copied per second (and so 10 MiB/s)
VERIFY_FPS = 100.0  # files verified (by size) per second
OVERHEAD = 5.0  # engine start-up, scheduling, report: the wall time beyond the steps


def iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).isoformat(timespec="seconds")


def measured(
    phase: str,
    started: float,
    delta: int,
    pass_: int = 1,
    status: str = "complete",
    copy_fps: float = COPY_FPS,
) -> dict:
    """A record of a pass that copied `delta` files of 1 MiB at the rates above: every step's span
    is its work divided by its rate; the wall time is the steps' plus OVERHEAD."""
    dest = 0 if phase == "baseline" else SOURCE
    verified = SOURCE if phase == "final" else delta
    steps = {
        "list_source": SOURCE / LIST_SOURCE_FPS,
        **({"list_dest": dest / LIST_DEST_FPS} if dest else {}),
        "plan": (SOURCE + dest) / PLAN_EPS,
        **({"copy": delta / copy_fps} if delta else {}),
        **({"verify": verified / VERIFY_FPS} if verified else {}),
    }
    wall = (
        max(steps["list_source"], steps.get("list_dest", 0))
        + sum(v for k, v in steps.items() if k not in ("list_source", "list_dest"))
        + OVERHEAD
    )
    return {
        "version": ferry_history.VERSION,
        "run_id": f"{phase}-{pass_}-{started}",
        "run_name": "m",
        "phase": phase,
        "pass": pass_,
        "run_dir": phase if pass_ == 1 else f"{phase}-pass{pass_}",
        "status": status,
        "engine": "snakemake",
        "started": iso(started),
        "ended": iso(started + wall),
        "wall_seconds": wall,
        "source": {"files": SOURCE, "bytes": SOURCE * MIB},
        "dest": {"files": dest or None, "bytes": dest * MIB or None},
        "planned": {
            "files": delta,
            "bytes": delta * MIB,
            "new": delta,
            "changed": 0,
            "metadata_only": 0,
            "type_changed": 0,
            "undecided": 0,
            "deleted": 0,
            "deleted_bytes": 0,
            "prune_dirs": 0,
            "dest_dirs": 0,
            "newer": {"count": 0, "examples": []},
        },
        "deleted": {"files": 0, "dirs": 0},
        "prune_refused": None,
        "copied": {"files": delta, "bytes": delta * MIB},
        "verified": {
            "files": verified,
            "same": verified,
            "differ": 0,
            "missing_on_dst": 0,
            "missing_on_src": 0,
            "error": 0,
        },
        "checksum": False,
        "failed": 0,
        "retries": 0,
        # One listing page per 5,000 entries, one put per file copied, one HEAD per file verified.
        "requests": {
            "total": {**KIND_ZERO, "list_pages": dest // 5000, "puts": delta, "heads": verified},
            "by_step": {
                **({"list_dest": {**KIND_ZERO, "list_pages": dest // 5000}} if dest else {}),
                **({"copy": {**KIND_ZERO, "puts": delta}} if delta else {}),
                **({"verify": {**KIND_ZERO, "heads": verified}} if verified else {}),
            },
        },
        "steps": {k: {"seconds": v, "span": v} for k, v in steps.items()},
        "partitions": 1,
        "depth": {"mode": "adaptive", "final": 16, "peak": 32},
        "carried": False,
        "dest_listed": None,
        "dest_listed_why": None,
    }


@pytest.fixture
def converging() -> list[dict]:
    """A baseline, then incremental passes 2 h, 1 h and 30 min apart finding 400, 150, 60 files
    changed: 200, 150 and 120 files an hour."""
    return [
        measured("baseline", T0, SOURCE),
        measured("incremental", T0 + 2 * HOUR, 400, 1),
        measured("incremental", T0 + 3 * HOUR, 150, 2),
        measured("incremental", T0 + 3.5 * HOUR, 60, 3),
    ]


def test_the_final_pass_projected_step_by_step(converging):
    p = ferry_projection.project(converging, now=T0 + 4 * HOUR)
    assert p["ok"] and p["phase"] == "final"
    # The change rate: the mean of the last three passes' (200 + 150 + 120) / 3 files an hour, for
    # the half hour since the last pass started.
    rate = (200 + 150 + 120) / 3
    assert p["delta"]["files"] == round(rate * 0.5)
    assert p["delta"]["bytes"] == round(rate * 0.5 * MIB)
    expected = {
        "listing": max(SOURCE / LIST_SOURCE_FPS, SOURCE / LIST_DEST_FPS),  # both sides side by side
        "plan": 2 * SOURCE / PLAN_EPS,
        "copy": rate * 0.5 / COPY_FPS,
        # The final pass verifies what it copies; the whole tree is the audit's, after it.
        "verify": rate * 0.5 / VERIFY_FPS,
        "prune": 0.0,  # nothing was deleted at the source
        "final_check": 0.0,  # none of the passes ran one inside the downtime
        # The engine's time per job run in turn, as the incremental passes paid it (6 each:
        # listing, plan, copy, verify, carry, report), for the final's 8 (prune's two more).
        "overhead": OVERHEAD / 6 * 8,
    }
    assert p["steps"] == pytest.approx(expected, abs=1e-3)
    assert p["seconds"] == pytest.approx(sum(expected.values()), abs=1e-2)
    audit = {
        "listing": expected["listing"],
        "plan": expected["plan"],
        "verify": SOURCE / VERIFY_FPS,  # every source file
    }
    assert p["audit"]["steps"] == pytest.approx(audit, abs=1e-3)
    assert p["audit"]["seconds"] == pytest.approx(sum(audit.values()) + OVERHEAD, abs=1e-2)
    # Requests: 2 listing pages of the destination, a put per file copied, a HEAD per file verified.
    assert p["requests_by_kind"]["list_pages"] == 2
    assert p["requests_by_kind"]["puts"] == round(rate * 0.5)
    assert p["requests_by_kind"]["heads"] == round(rate * 0.5)
    assert p["requests"] == round(2 + 2 * rate * 0.5)
    assert p["converging"] == "converging", p["why"]
    assert "400, 150, 60" in p["why"]
    assert p["line"].startswith(
        "a final pass started now would take ≈ 2 min (listing 2 min + plan 20 s + copy 8 s"
    )
    assert "Blob requests; the audit after it ≈ 4 min" in p["line"]
    assert any("verifies what it copies (by size)" in a for a in p["assumptions"])


def test_a_final_pass_verifying_by_md5_reads_every_byte(converging):
    # No MD5 verify was ever measured: it reads the copied bytes at the copy's 10 MiB/s.
    p = ferry_projection.project(converging, now=T0 + 4 * HOUR, checksum=True)
    assert p["steps"]["verify"] == pytest.approx(p["delta"]["bytes"] / (COPY_FPS * MIB), abs=1e-3)
    assert any("MD5" in a and "copy's measured" in a for a in p["assumptions"])


def test_the_backtest_projects_each_pass_from_the_ones_before(converging):
    p = ferry_projection.project(converging, now=T0 + 4 * HOUR)
    assert [b["pass"] for b in p["backtest"]] == [1, 2, 3]
    # Pass 2 from the baseline and pass 1: 200 files an hour for the hour since pass 1 started,
    # where it found 150. An incremental pass verifies only what it copied.
    second = p["backtest"][1]
    projected = (
        max(SOURCE / LIST_SOURCE_FPS, SOURCE / LIST_DEST_FPS)
        + 2 * SOURCE / PLAN_EPS
        + 200 / COPY_FPS
        + 200 / VERIFY_FPS
        + OVERHEAD
    )
    actual = converging[2]["wall_seconds"]
    assert second["projected_seconds"] == pytest.approx(projected, abs=1e-3)
    assert second["actual_seconds"] == pytest.approx(actual, abs=1e-3)
    assert second["error_seconds"] == pytest.approx(projected - actual, abs=1e-2)
    assert second["error_pct"] == round(100 * (projected - actual) / actual, 1)
    assert (second["projected_requests"], second["actual_requests"]) == (
        2 + 200 + 200,
        2 + 150 + 150,
    )
    # Pass 1 had only the baseline before it: no change rate known yet, so no copy foreseen.
    first = p["backtest"][0]
    assert first["projected_seconds"] < first["actual_seconds"]


def test_deltas_that_grow_are_diverging():
    history = [
        measured("baseline", T0, SOURCE),
        measured("incremental", T0 + 1 * HOUR, 100, 1),
        measured("incremental", T0 + 2 * HOUR, 300, 2),
        measured("incremental", T0 + 3 * HOUR, 900, 3),
    ]
    p = ferry_projection.project(history, now=T0 + 4 * HOUR)
    assert p["converging"] == "diverging"
    assert "not decreasing" in p["why"] and "100, 300, 900" in p["why"]
    assert "passes diverging" in p["line"]


def test_a_change_rate_above_what_a_pass_copies_is_diverging():
    """2,000 files change per hour; a pass copies 0.5 files a second, 1,800 an hour."""
    history = [measured("baseline", T0, SOURCE, copy_fps=0.5)]
    for n in range(1, 4):
        history.append(measured("incremental", T0 + n * HOUR, 2000, n, copy_fps=0.5))
    p = ferry_projection.project(history, now=T0 + 4 * HOUR)
    assert p["converging"] == "diverging"
    assert p["why"].startswith("the delta grows faster than a pass can copy it")
    assert "2,000 files change per hour" in p["why"] and "1,800 files per hour" in p["why"]
    # An hour of change takes longer than an hour to copy.
    assert p["steps"]["copy"] == pytest.approx(2000 / 0.5)


def test_equal_deltas_are_steady():
    history = [measured("baseline", T0, SOURCE)] + [
        measured("incremental", T0 + n * HOUR, 500, n) for n in range(1, 4)
    ]
    p = ferry_projection.project(history, now=T0 + 4 * HOUR)
    assert p["converging"] == "steady" and "no longer shrink" in p["why"]


def test_only_complete_passes_are_measures(converging):
    converging.append(measured("incremental", T0 + 3.75 * HOUR, 5000, 4, status="stopped"))
    converging.append(measured("incremental", T0 + 3.8 * HOUR, 5000, 5, status="failed"))
    p = ferry_projection.project(converging, now=T0 + 4 * HOUR)
    assert p["passes"] == 4 and p["records"] == 6
    assert p["delta"]["files"] == round((200 + 150 + 120) / 3 * 0.5)


def test_no_projection_without_a_complete_pass():
    p = ferry_projection.project(
        [measured("baseline", T0, SOURCE, status="stopped")], now=T0 + HOUR
    )
    assert not p["ok"] and "no complete pass" in p["why_not"]
    p = ferry_projection.project([measured("baseline", T0, SOURCE)], now=T0 + HOUR)
    assert p["ok"] and p["converging"] == "unknown"
    assert any("no incremental pass yet" in a for a in p["assumptions"])


def test_the_report_markdown_has_the_projection_and_the_history(converging):
    p = ferry_projection.project(converging, now=T0 + 4 * HOUR)
    text = "\n".join(
        ferry_markdown.projection_markdown(p) + ferry_markdown.history_markdown(converging)
    )
    assert "**A final pass started now would take ≈ 2 min" in text
    assert "| 2 | incremental | 2 | 2 min | 2 min |" in text
    assert text.count("| complete | snakemake |") == 4


# --- records on disk, markers, killed runs -------------------------------------------------------

REPORT_ARGS = [
    "--run-name",
    "m",
    "--phase",
    "incremental",
    "--pass",
    "2",
    "--source",
    "/s",
    "--dest",
    "/d",
]


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_history_lines_are_read_back_once_each_and_cut_lines_skipped(tmp_path):
    root = tmp_path / "m"
    rec = measured("baseline", T0, SOURCE)
    assert ferry_history.append(str(root), rec)
    assert not ferry_history.append(str(root), rec), "a run is recorded once"
    with open(root / ferry_run_dir.HISTORY, "a", encoding="utf-8") as handle:
        handle.write('{"version": 1, "run_id": "cut sh')
    assert ferry_history.append(str(root), measured("incremental", T0 + HOUR, 10))
    assert [r["phase"] for r in ferry_history.load(str(root))] == ["baseline", "incremental"]


# history.jsonl as today's main wrote it before records had version 2 (commit 871a037, with
# tests/support/rundir and ferry_report.py build --history): a baseline, an incremental whose
# copy job died, one killed (recorded by the next as stopped), one complete.
MAIN_HISTORY = Path(__file__).parent / "fixtures" / "history-v1.jsonl"


def history_of(tmp_path, lines: list[str]) -> Path:
    root = tmp_path / "m"
    root.mkdir()
    (root / ferry_run_dir.HISTORY).write_text("".join(f"{line}\n" for line in lines))
    return root


def test_a_history_written_by_main_before_version_2_still_reads(tmp_path):
    root = history_of(tmp_path, MAIN_HISTORY.read_text().splitlines())
    records = ferry_history.load(str(root))
    assert [r["version"] for r in records] == [ferry_history.VERSION] * 4
    assert [(r["run_dir"], r["status"]) for r in records] == [
        ("baseline", "complete"),
        ("incremental-1", "failed"),
        ("incremental-2", "stopped"),
        ("incremental-3", "complete"),
    ]
    # Its statuses are the worker's phase states: one vocabulary.
    assert {r["status"] for r in records} <= set(ferry_docs.STATES["phase"])
    assert records[0]["copied"] == {"files": 3, "bytes": 3_000_000}
    assert records[1]["failed"] == 1
    p = ferry_projection.project(records, now=T0)
    assert p["ok"] and p["passes"] == 2
    table = ferry_markdown.history_markdown(records)
    assert len(table) == 2 + 4 and "| incremental-1 | 1 | failed |" in table[3]


def test_an_older_history_s_killed_reads_as_stopped(tmp_path):
    """Records written before the job states were one vocabulary said "killed"."""
    old = json.loads(MAIN_HISTORY.read_text().splitlines()[0]) | {"status": "killed"}
    del old["version"]  # older still: before records had a version at all
    root = history_of(tmp_path, [json.dumps(old)])
    assert [r["status"] for r in ferry_history.load(str(root))] == ["stopped"]


def test_a_record_missing_a_field_is_an_error_naming_the_file_and_the_field(tmp_path):
    rec = measured("baseline", T0, SOURCE)
    del rec["copied"]
    root = history_of(
        tmp_path, [json.dumps(measured("baseline", T0 - HOUR, SOURCE)), json.dumps(rec)]
    )
    with pytest.raises(ferry_history.HistoryError) as err:
        ferry_history.load(str(root))
    said = str(err.value)
    assert str(root / ferry_run_dir.HISTORY) in said and "line 2" in said
    assert "'copied' is a required property" in said
    # A count that is missing below the top is named by its path, never read as 0.
    rec = measured("baseline", T0, SOURCE)
    del rec["planned"]["deleted"]
    with pytest.raises(ferry_history.HistoryError, match="planned: 'deleted' is a required"):
        ferry_history.append(str(tmp_path / "other"), rec)
    assert not (tmp_path / "other" / ferry_run_dir.HISTORY).exists(), "nothing was written"


def test_a_record_of_a_later_version_is_refused_by_name(tmp_path):
    rec = measured("baseline", T0, SOURCE) | {"version": ferry_history.VERSION + 1}
    root = history_of(tmp_path, [json.dumps(rec)])
    with pytest.raises(ferry_history.HistoryError, match=r"line 1: a history record of version 3"):
        ferry_history.load(str(root))


def test_a_run_killed_before_its_report_is_recorded_by_the_next(tmp_path):
    root = tmp_path / "m"
    killed_dir = root / "incremental-pass2"
    # The killed run: its engine wrote the marker, a listing finished, then SIGKILL.
    marker = ferry_history.start(str(killed_dir), "snakemake", REPORT_ARGS, pid=dead_pid(), now=T0)
    bench = killed_dir / "benchmarks" / "list_source.tsv"
    bench.parent.mkdir(parents=True)
    bench.write_text(ferry_run_dir.BENCH_HEADER + "12.0\t1.0\t10.0\n")
    os.utime(bench, (T0 + 20, T0 + 20))
    # A reader sees it as killed at once (its engine is gone), without writing anything.
    loaded = ferry_history.load(str(root))
    assert [(r["status"], r["run_id"]) for r in loaded] == [("stopped", marker["run_id"])]
    assert not (root / ferry_run_dir.HISTORY).read_text()
    killed = loaded[0]
    assert (killed["phase"], killed["pass"], killed["engine"]) == ("incremental", 2, "snakemake")
    assert (
        killed["started"] == iso(T0)
        and killed["ended"] == iso(T0 + 20)
        and killed["wall_seconds"] == 20
    )
    assert killed["steps"]["list_source"]["seconds"] == 12.0

    # The next run of the phase starts: the killed one gets its record first.
    ferry_history.start(str(killed_dir), "snakemake", REPORT_ARGS, now=T0 + 100)
    on_disk = ferry_history.read(str(root))
    assert [(r["status"], r["run_id"]) for r in on_disk] == [("stopped", marker["run_id"])]
    # ... and its report appends its own.
    report = ferry_report.build(str(killed_dir), "m", "incremental", "/s", "/d", complete=True)
    rec = ferry_history.record_run(str(killed_dir), report, pass_=2, now=T0 + 130)
    assert rec["status"] == "failed"  # no plan: the report names the listing that never finished
    assert [r["status"] for r in ferry_history.load(str(root))] == ["stopped", rec["status"]]
    assert ferry_history.load(str(root))[1]["wall_seconds"] == 30


def test_a_running_engine_is_not_taken_for_killed(tmp_path):
    run_dir = tmp_path / "m" / "baseline"
    ferry_history.start(str(run_dir), "nextflow", REPORT_ARGS, pid=os.getpid())
    assert [r["status"] for r in ferry_history.load(str(tmp_path / "m"))] == ["running"]
    assert ferry_history.settle(str(tmp_path / "m")) == []


def test_a_run_on_another_host_is_running_until_a_later_run_starts(tmp_path):
    root = tmp_path / "m"
    marker = ferry_history.start(str(root / "baseline"), "snakemake", REPORT_ARGS, now=T0)
    marker["host"] = "elsewhere"  # its process cannot be seen from here
    (root / "baseline" / ferry_run_dir.RUN_STARTED).write_text(json.dumps(marker))
    lock = json.loads((root / ferry_run_dir.LOCK).read_text())
    (root / ferry_run_dir.LOCK).write_text(json.dumps({**lock, "host": "elsewhere"}))
    assert [r["status"] for r in ferry_history.load(str(root))] == ["running"]
    assert ferry_history.settle(str(root)) == []
    ferry_history.start(
        str(root / "incremental"), "snakemake", REPORT_ARGS, pid=dead_pid(), now=T0 + HOUR
    )
    assert [(r["run_dir"], r["status"]) for r in ferry_history.read(str(root))] == [
        ("baseline", "stopped")
    ]


def test_onerror_without_a_started_run_records_nothing(tmp_path):
    run_dir = tmp_path / "m" / "baseline"
    run_dir.mkdir(parents=True)
    report = ferry_report.build(str(run_dir), "m", "baseline", "/s", "/d", complete=False)
    assert ferry_history.record_run(str(run_dir), report, ended_in_error=True) == {}
    assert ferry_history.read(str(tmp_path / "m")) == []


def test_the_cli_projects_from_a_run_root(tmp_path, converging, capsys):
    for rec in converging:
        ferry_history.append(str(tmp_path), rec)
    assert ferry_history.main(["project", str(tmp_path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] and len(doc["backtest"]) == 3
    assert ferry_history.main(["project", str(tmp_path)]) == 0
    assert capsys.readouterr().out.startswith("a final pass started now would take ≈")
