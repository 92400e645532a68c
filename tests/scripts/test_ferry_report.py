"""The run report (workflow/scripts/ferry_report.py) built from run directories made by hand
(support.rundir): totals, partitions and timings of a finished run, the failures and the
"incomplete" verdict of runs that stopped part-way, the Markdown, and prune's guard. No worker, no
engine, no Azurite."""

from __future__ import annotations

import datetime as dt
import json

import ferry_config
import ferry_docs
import ferry_history
import ferry_html
import ferry_markdown
import ferry_model
import ferry_report
import ferry_run
import ferry_run_dir
import ferry_task
import pytest
from support.rundir import RunDir

T0 = 1_700_000_000.0  # when the first job of a hand-made run started


def build(run: RunDir, phase: str = "baseline", complete: bool = True, **kw) -> dict:
    return ferry_report.build(str(run.path), "r1", phase, "/src", "az://acct/ctr", complete, **kw)


@pytest.fixture
def run(tmp_path) -> RunDir:
    return RunDir(tmp_path / "run")


@pytest.fixture
def finished(run) -> RunDir:
    """A baseline that went through: two copy partitions, one verify partition, every job timed."""
    run.plan(copy=[("00000", 3, 3000), ("00001", 2, 5000)], verify=[("00000", 5, 8000)])
    run.copied("00000", copied=3, bytes_copied=3000, retries={"503": 2}, seconds=1.25)
    run.copied(
        "00001",
        copied=1,
        skipped=1,
        bytes_copied=4000,
        bytes_skipped=1000,
        retries={"500": 1, "503": 1},
        seconds=2.5,
    )
    run.verified("00000", same=5, seconds=0.75)
    run.benchmark("list_source", 1.0, end=T0 + 1, cpu=0.5, rss=20)
    run.benchmark("list_dest", 2.0, end=T0 + 2.5, cpu=0.25, rss=30)
    run.benchmark("plan", 0.5, end=T0 + 3, cpu=0.5, rss=10)
    run.benchmark("copy", 2.0, end=T0 + 5, part="00000", cpu=1.5, rss=40)
    run.benchmark("copy", 3.0, end=T0 + 6, part="00001", cpu=2, rss=50)
    run.benchmark("verify", 1.0, end=T0 + 7, part="00000", cpu=0.5, rss=25)
    return run


# ---------------------------------------------------------------------------------------------
# a finished run


def test_a_finished_run_adds_up_the_partitions(finished):
    report = build(finished)
    assert report["status"] == "complete"
    assert report["failures"] == []
    t = report["totals"]
    assert t["files"] == {
        "source": 5,
        "planned": 5,
        "copied": 4,
        "skipped": 1,
        "metadata_only": 0,
        "replaced": 0,
        "removed": 0,
        "ignored": 0,
        "failed": 0,
    }
    assert t["bytes"] == {"source": 8000, "planned": 8000, "copied": 7000, "skipped": 1000}
    assert t["retries"] == {"total": 4, "by_status": {"500": 1, "503": 3}}
    assert t["partitions"] == {"copy": 2, "copy_done": 2, "verify": 1, "verify_done": 1}
    assert t["verify"] == {
        "same": 5,
        "differ": 0,
        "missing_on_dst": 0,
        "missing_on_src": 0,
        "error": 0,
    }
    assert t["prune"] is None and t["final_check"] is None, (
        "prune and the final check belong to the final phase"
    )
    assert [p["id"] for p in report["partitions"]] == ["00000", "00001"]
    first = report["partitions"][0]
    assert (first["state"], first["files"], first["bytes"], first["copied"], first["retries"]) == (
        "done",
        3,
        3000,
        3,
        2,
    )
    assert (first["worker_seconds"], first["job_seconds"]) == (1.25, 2.0)
    assert report["verify_partitions"][0] == {
        "id": "00000",
        "files": 5,
        "bytes": 8000,
        "state": "done",
        "same": 5,
        "differ": 0,
        "missing_on_dst": 0,
        "missing_on_src": 0,
        "error": 0,
        "worker_seconds": 0.75,
        "job_seconds": 1.0,
    }
    assert (report["run_name"], report["phase"], report["source"], report["dest"]) == (
        "r1",
        "baseline",
        "/src",
        "az://acct/ctr",
    )
    assert report["plan"]["to_copy"]["files"] == 5 and "copy_partitions" not in report["plan"]


def test_time_goes_per_step_in_the_pipeline_order(finished):
    tm = build(finished)["time"]
    copy, verify = RunDir.rule("copy"), RunDir.rule("verify")
    assert list(tm["per_step"]) == ["list_source", "list_dest", "plan", copy, verify]
    # The two partitions ran side by side: 5 s of jobs in a 3 s span.
    assert tm["per_step"][copy] == {
        "jobs": 2,
        "seconds": 5.0,
        "max_seconds": 3.0,
        "cpu_seconds": 3.5,
        "max_rss_mb": 50.0,
        "span_seconds": 3.0,
    }
    assert tm["job_seconds"] == 9.5
    assert (tm["worker_copy_seconds"], tm["worker_verify_seconds"]) == (3.75, 0.75)
    # A job's start is its timing file's mtime less its seconds; the earliest is list_source's.
    assert tm["first_job_started_at"] == dt.datetime.fromtimestamp(T0, dt.UTC).isoformat(
        timespec="seconds"
    )
    assert tm["elapsed_seconds"] > 0


def test_what_each_node_spent(finished):
    # The two copies on two nodes, one of them after an attempt lost on a third.
    finished.benchmark("copy", 2.0, end=T0 + 5, part="00000", cpu=1.5, rss=40, node="node1")
    finished.benchmark("copy", 3.0, end=T0 + 6, part="00001", cpu=2, rss=50, node="node2")
    finished.progress_lost("copy", "00001", node="node3", done=700)
    report = build(finished)
    nodes = report["time"]["per_node"]
    assert nodes["node1"] == {
        "jobs": 1,
        "seconds": 2.0,
        "cpu_seconds": 1.5,
        "max_rss_mb": 40.0,
        "bytes": 3000,
        "lost": 0,
    }
    assert (nodes["node2"]["bytes"], nodes["node2"]["lost"]) == (4000, 0)
    assert nodes["node3"] == dict.fromkeys(nodes["node3"], 0) | {"bytes": 700, "lost": 1}
    # The jobs whose timing names no node (the engine's own benchmark files) stand under "?".
    assert nodes["?"]["jobs"] == 4
    md = ferry_markdown.markdown(report)
    assert "| node2 | 1 | 3.00 | 2.00 | 50.00 | 3.91 KiB | 0 |" in md, md
    assert "| node3 | 0 | 0.00 | 0.00 | 0.00 | 700 B | 1 |" in md, md


def test_one_node_gets_no_table(finished):
    assert "### By node" not in ferry_markdown.markdown(build(finished))


def test_unreadable_and_unknown_timings(run):
    """NA columns count as nothing; an empty timing file is no job; a step the report does not
    know still gets its row, after the known ones."""
    run.plan()
    run.benchmark("plan", 1.5, end=T0)  # cpu_time and max_rss NA
    run.benchmark("list_source", 0, end=T0, text="")
    run.benchmark("make_dest", 0.5, end=T0)
    run.benchmark("list_dest", 0.25, end=T0)
    run.benchmark("mystery", 0.5, end=T0)
    per_step = build(run)["time"]["per_step"]
    assert list(per_step) == ["list_dest", "make_dest", "plan", "mystery"]
    assert per_step["plan"] == {
        "jobs": 1,
        "seconds": 1.5,
        "max_seconds": 1.5,
        "cpu_seconds": 0.0,
        "max_rss_mb": 0.0,
        "span_seconds": 1.5,
    }


def test_results_of_partitions_the_plan_does_not_name_are_ignored(finished):
    finished.copied("00007", copied=99, bytes_copied=99)
    finished.benchmark("copy", 50.0, end=T0 + 8, part="00007")
    report = build(finished)
    assert report["totals"]["files"]["copied"] == 4
    assert [p["id"] for p in report["partitions"]] == ["00000", "00001"]


def test_an_empty_plan_is_a_complete_run(run):
    run.plan()
    report = build(run)
    assert report["status"] == "complete"
    assert report["partitions"] == [] and report["verify_partitions"] == []
    assert (
        report["time"]["elapsed_seconds"] is None and report["time"]["first_job_started_at"] is None
    )


# ---------------------------------------------------------------------------------------------
# runs that stopped part-way


def test_a_copy_partition_the_worker_failed_names_its_files(finished):
    failures = [{"path": "a/b.txt", "error": "HTTP 403"}]
    finished.copy_failed(
        "00001", RunDir.copy_doc(copied=1, failed=1, bytes_copied=10, failures=failures)
    )
    finished.result("copy", "00001").unlink()
    report = build(finished)
    assert report["status"] == "incomplete"
    assert [p["state"] for p in report["partitions"]] == ["done", "failed"]
    assert report["failures"] == [
        {"stage": "copy", "partition": "00001", "path": "a/b.txt", "error": "HTTP 403"}
    ]
    assert report["totals"]["files"]["failed"] == 1 and report["totals"]["files"]["copied"] == 4
    assert report["totals"]["partitions"]["copy_done"] == 1


def test_a_job_that_died_without_json_is_told_by_its_log(run):
    run.plan(copy=[("00000", 1, 1), ("00001", 1, 1), ("00002", 1, 1)], verify=[("00000", 3, 3)])
    run.copy_failed("00000")  # empty: the job saved what the worker wrote, which was nothing
    run.log("copy", "starting\nferry: cannot reach the account\n\n", part="00000")
    run.log(
        "copy", "worker killed\n", part="00001"
    )  # no JSON anywhere, but the worker said something
    run.log("copy", "", part="00002")  # scheduled, never started
    report = build(run)
    assert [p["state"] for p in report["partitions"]] == ["failed", "failed", "pending"]
    assert [p["state"] for p in report["verify_partitions"]] == ["pending"]
    assert report["failures"] == [
        {"stage": "copy", "partition": "00000", "error": "ferry: cannot reach the account"},
        {"stage": "copy", "partition": "00001", "error": "worker killed"},
    ]
    assert report["status"] == "incomplete"


def test_a_failed_job_with_no_log_still_gets_a_reason(run):
    run.plan(copy=[], verify=[("00000", 1, 1)])
    run.verify_failed("00000")
    (failure,) = build(run)["failures"]
    assert failure["stage"] == "verify" and failure["partition"] == "00000"
    assert "failed without a report from the worker" in failure["error"]


def test_differences_found_by_verify_are_failures(run):
    run.plan(copy=[("00000", 3, 30)], verify=[("00000", 3, 30)])
    run.copied("00000", copied=3, bytes_copied=30)
    entries = [
        {"path": "x", "reason": "", "status": "same"},
        {"path": "y", "reason": "size 1 != 2", "status": "differ"},
        {"path": "w", "reason": "", "status": "missing_on_dst"},
    ]
    run.verified("00000", same=2, differ=1, missing_on_dst=1, entries=entries)
    report = build(run)
    assert report["totals"]["verify"] == {
        "same": 2,
        "differ": 1,
        "missing_on_dst": 1,
        "missing_on_src": 0,
        "error": 0,
    }
    assert [(f["stage"], f["path"], f["status"]) for f in report["failures"]] == [
        ("verify", "y", "differ"),
        ("verify", "w", "missing_on_dst"),
    ]
    assert report["status"] == "incomplete"


@pytest.mark.parametrize("log", ["list_source", "list_dest", "plan"])
def test_no_plan_names_the_step_that_failed(run, log):
    run.log("make_dest", "")
    run.log(log, "listing...\nferry: permission denied: /src/secret\n")
    report = build(run)
    assert report["failures"] == [{"stage": log, "error": "ferry: permission denied: /src/secret"}]
    assert report["status"] == "incomplete" and report["plan"] is None
    assert report["totals"]["files"]["source"] is None


def test_no_plan_and_no_log_says_so(run):
    (failure,) = build(run)["failures"]
    assert failure["stage"] == "plan" and "no plan was made" in failure["error"]


def test_a_partial_report_is_never_complete(finished):
    """The onerror hook builds with complete=False: even a run with every result is incomplete."""
    assert build(finished, complete=False)["status"] == "incomplete"


def test_a_run_with_every_result_but_a_truncated_one_is_incomplete(finished):
    finished.result("verify", "00000").write_text('{"same": 5, "diff')
    report = build(finished)
    assert report["verify_partitions"][0]["state"] == "failed"
    assert report["status"] == "incomplete"
    (failure,) = report["failures"]
    assert failure["stage"] == "verify" and "not JSON" in failure["error"], failure


def test_a_document_with_a_renamed_key_is_an_error_not_a_zero(finished):
    """What the worker's schema does not allow (a key renamed, a count that is no integer) is
    named in the report, never read as a default."""
    doc = json.loads(finished.result("copy", "00001").read_text())
    doc["files"]["copies"] = doc["files"].pop("copied")
    finished.result("copy", "00001").write_text(json.dumps(doc))
    report = build(finished)
    assert [p["state"] for p in report["partitions"]] == ["done", "failed"]
    assert report["totals"]["files"]["copied"] == 3  # the other partition's alone
    (failure,) = report["failures"]
    assert "('copies' was unexpected)" in failure["error"], failure
    doc["files"]["copied"] = 1.0
    finished.result("copy", "00001").write_text(json.dumps(doc))
    assert "failed" in [p["state"] for p in build(finished)["partitions"]]


# ---------------------------------------------------------------------------------------------
# the final phase: prune and the final check


@pytest.fixture
def final(finished) -> RunDir:
    finished.pruned(
        {
            "deleted": 2,
            "would_delete": 0,
            "dry_run": False,
            "log": "/scratch/elsewhere/prune-deleted.log",
            "failures": [],
        }
    )
    finished.final_check(
        {
            "same": 5,
            "differ": 0,
            "missing_on_dst": 0,
            "missing_on_src": 0,
            "error": 0,
            "seconds": 0.5,
            "entries": [],
        }
    )
    return finished


def test_a_final_run_reports_prune_and_the_final_check(final):
    report = build(final, phase="final", final_check_expected=True)
    assert report["status"] == "complete", report["failures"]
    assert report["totals"]["prune"]["deleted"] == 2
    assert report["totals"]["prune"]["log"] == "prune/", (
        "the lists are named inside the run directory"
    )
    assert report["totals"]["final_check"] == {
        "same": 5,
        "differ": 0,
        "missing_on_dst": 0,
        "missing_on_src": 0,
        "error": 0,
        "seconds": 0.5,
        "compared": ["size"],
    }


def test_a_final_run_without_prune_is_incomplete(finished):
    assert build(finished, phase="final")["status"] == "incomplete"


def test_a_final_run_whose_final_check_is_missing_is_incomplete(final):
    final.final_check_json().unlink()
    assert build(final, phase="final")["status"] == "complete", (
        "a final check that was not asked for"
    )
    assert build(final, phase="final", final_check_expected=True)["status"] == "incomplete"


def test_prune_refused_failed_or_partly_failed(finished):
    finished.pruned(
        {
            "deleted": 0,
            "would_delete": 900,
            "refused": "would delete 900 files, over max_delete 10",
        },
        failed=True,
    )
    report = build(finished, phase="final")
    assert report["failures"] == [
        {"stage": "prune", "error": "prune refused: would delete 900 files, over max_delete 10"}
    ]
    assert report["status"] == "incomplete"

    finished.prune_json(failed=True).unlink()
    finished.log("prune_dirs", "ferry: prune refused: verify partition 00000 has no result\n")
    assert build(finished, phase="final")["failures"] == [
        {"stage": "prune", "error": "ferry: prune refused: verify partition 00000 has no result"}
    ]

    finished.pruned(
        {
            "deleted": 1,
            "would_delete": 0,
            "failures": [{"path": "d/e", "error": "Directory not empty"}],
        }
    )
    report = build(finished, phase="final")
    assert report["failures"] == [{"stage": "prune", "path": "d/e", "error": "Directory not empty"}]


def test_prune_parts_and_the_directories_job_are_reported_as_one(finished):
    """One job per part of the plan's files to delete and one for the directories: the report
    sums them, names a failure by its part, and is complete only when every one reported."""
    finished.plan(
        copy=[("00000", 3, 3000), ("00001", 2, 5000)],
        verify=[("00000", 5, 8000)],
        prune_partitions=[
            {"id": "00000", "files": 2, "bytes": 2},
            {"id": "00001", "files": 2, "bytes": 2},
        ],
    )
    finished.pruned({"deleted": 2, "would_delete": 2}, part="00000")
    finished.pruned({"deleted": 0, "would_delete": 0, "dirs": 3})
    report = build(finished, phase="final")
    assert report["status"] == "incomplete", "a part left no report"
    finished.pruned(
        {
            "deleted": 1,
            "would_delete": 2,
            "failed": 1,
            "failures": [{"path": "x/y", "error": "Permission denied"}],
        },
        part="00001",
    )
    report = build(finished, phase="final")
    prune = report["totals"]["prune"]
    assert (prune["deleted"], prune["would_delete"], prune["dirs"], prune["failed"]) == (3, 4, 3, 1)
    assert prune["jobs"] == 3
    assert report["failures"] == [
        {"stage": "prune", "partition": "00001", "path": "x/y", "error": "Permission denied"}
    ]


def test_a_final_check_that_differs_is_a_failure(final):
    final.final_check(
        {"same": 4, "differ": 0, "missing_on_dst": 0, "missing_on_src": 1, "error": 0, "seconds": 1}
    )
    (failure,) = build(final, phase="final", final_check_expected=True)["failures"]
    assert failure["stage"] == "final_check" and failure["missing_on_src"] == 1


# ---------------------------------------------------------------------------------------------
# report.md


def test_markdown_of_a_finished_run(finished):
    md = ferry_markdown.markdown(build(finished))
    assert md.startswith("# ferry baseline run `r1`: complete\n")
    assert "- source: `/src`\n- destination: `az://acct/ctr`\n" in md
    assert "| copied | 4 | 6.84 KiB |" in md
    assert "| at source | 5 | 7.81 KiB |" in md
    assert "Retries: 4 (500: 1, 503: 3)." in md
    assert (
        "Verify (copied files, by sizes): 5 same, 0 differ, 0 missing on destination, 0 missing on source, 0 errors."
        in md
    )
    assert "| 00001 | done | 2 | 4.88 KiB | 1 | 1 | 0 | 2 | 2.50 | 3.00 |" in md
    assert f"| {RunDir.rule('copy')} | 2 | 5.00 | 3.00 | 3.50 | 50.00 |" in md
    assert md.endswith("## Failures\n\nNone.\n")
    assert "Prune:" not in md and "Final check" not in md and "## Not migrated" not in md


def test_markdown_of_failures_and_what_was_not_migrated(run):
    run.plan(copy=[("00000", 300, 300)])
    failures = [{"path": f"f{i:03d}", "error": "HTTP 500"} for i in range(250)]
    ignored = [{"path": f"dev/n{i}", "reason": "a device node cannot be a blob"} for i in range(60)]
    run.copied("00000", copied=50, failed=250, failures=failures, ignored=ignored)
    md = ferry_markdown.markdown(build(run))
    assert md.startswith("# ferry baseline run `r1`: incomplete\n")
    assert "- copy (partition 00000) `f000`: HTTP 500\n" in md
    assert "- copy (partition 00000) `f199`: HTTP 500\n- ... and 50 more in report.json\n" in md
    assert "`f200`" not in md
    assert "## Not migrated\n\n- `dev/n0`: a device node cannot be a blob\n" in md
    assert "- ... and 10 more in report.json\n" in md
    assert "| (nothing to verify) |" in md


def test_markdown_without_a_plan_or_partitions(run):
    run.log("list_source", "ferry: no such directory\n")
    md = ferry_markdown.markdown(build(run))
    assert "| at source | - | - |" in md
    assert "| (nothing to copy) |" in md and "| (nothing to verify) |" in md
    assert "- list_source (list_source): ferry: no such directory\n" in md


def test_markdown_of_the_final_phase(final):
    final.pruned(
        {"deleted": 0, "would_delete": 3, "dry_run": True, "log": "prune/prune-deleted.log"}
    )
    md = ferry_markdown.markdown(build(final, phase="final"))
    assert (
        "Prune: 0 files and symlinks and 0 directories deleted, 3 would delete (dry run) (the "
        "plan's deletions: 0 files, 0 B, 0 directories); the deleted paths in `prune/`." in md
    ), md
    assert (
        "Final check of the whole trees, by sizes: 5 same, 0 differ, 0 missing on destination, 0 extra on destination."
        in md
    )


@pytest.mark.parametrize(
    "n,text",
    [
        (None, "-"),
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.00 KiB"),
        (5 * 1024**3, "5.00 GiB"),
        (3 * 1024**5, "3072.00 TiB"),
    ],
)
def test_fmt_bytes(n, text):
    assert ferry_markdown.fmt_bytes(n) == text


# ---------------------------------------------------------------------------------------------
# the command: report files, and prune's guard


def test_build_command_writes_report_or_report_incomplete(finished, capsys):
    args = [
        "build",
        str(finished.path),
        "--run-name",
        "r1",
        "--phase",
        "baseline",
        "--source",
        "/src",
        "--dest",
        "az://acct/ctr",
        "--by-status",
    ]
    assert ferry_report.main(args) == 0
    report = json.loads((finished.path / "report.json").read_text())
    assert report["status"] == "complete" and report["checksum_verified"] is False
    assert (finished.path / "report.md").read_text() == ferry_markdown.markdown(report)
    assert "ferry: report complete, 0 failures" in capsys.readouterr().err

    (finished.path / "report.json").unlink()
    finished.copy_failed("00000")
    finished.result("copy", "00000").unlink()
    assert ferry_report.main(args + ["--checksum"]) == 0
    assert not (finished.path / "report.json").exists()
    partial = json.loads((finished.path / "report-incomplete.json").read_text())
    assert partial["status"] == "incomplete" and partial["checksum_verified"] is True
    assert (finished.path / "report-incomplete.md").exists()


def test_onerror_and_onsuccess_hooks(finished, tmp_path):
    args = [
        "--run-name",
        "r1",
        "--phase",
        "baseline",
        "--source",
        "/src",
        "--dest",
        "az://acct/ctr",
    ]
    ferry_report.write_incomplete(str(finished.path), args)
    assert (
        json.loads((finished.path / "report-incomplete.json").read_text())["status"] == "incomplete"
    )
    assert (
        (finished.path / "report-incomplete.md")
        .read_text()
        .startswith("# ferry baseline run `r1`: incomplete")
    )
    ferry_run_dir.discard_incomplete(str(finished.path))
    assert not any(p.name.startswith("report-incomplete") for p in finished.path.iterdir())
    ferry_run_dir.discard_incomplete(str(finished.path))  # nothing left to remove: no error
    ferry_report.write_incomplete(str(tmp_path / "never-made"), args)
    assert not (tmp_path / "never-made").exists()


def test_prune_guard_lets_prune_run_only_after_every_planned_verify_passed(run):
    assert ferry_task.prune_guard(str(run.path), "prune") == ["no plan: the fan-out never happened"]
    run.plan(copy=[("00000", 1, 1)], verify=[("00000", 1, 1), ("00001", 1, 1), ("00002", 1, 1)])
    run.verified("00000", same=1)
    run.verified("00001", same=0, missing_on_dst=1)
    assert ferry_task.prune_guard(str(run.path), "prune") == [
        "verify partition 00001 found differences",
        "verify partition 00002 has no result",
    ]
    # A listed file gone from the source since the plan: the verify did not pass (its own
    # exit status says so too), and prune waits for a new plan.
    run.verified("00001", same=1, missing_on_src=4)
    run.verified("00002", same=1)
    assert ferry_task.prune_guard(str(run.path), "prune") == [
        "verify partition 00001 found differences"
    ]
    run.verified("00001", same=1)
    assert ferry_task.prune_guard(str(run.path), "prune") == []


def test_the_directories_job_waits_for_every_part_of_the_deletions(run):
    parts = [{"id": i, "files": 1, "bytes": 1} for i in ("00000", "00001")]
    run.plan(copy=[("00000", 1, 1)], verify=[("00000", 1, 1)], prune_partitions=parts)
    run.verified("00000", same=1)
    run.pruned({"deleted": 1, "would_delete": 1}, part="00000")
    # The other part was refused: its document lies under failed/.
    run.pruned({"refused": "too many"}, part="00001", failed=True)
    assert ferry_task.prune_guard(str(run.path), "prune") == []
    assert ferry_task.prune_guard(str(run.path), "prune_dirs") == ["prune part 00001 has no result"]
    run.pruned({"deleted": 1, "would_delete": 1}, part="00001")
    assert ferry_task.prune_guard(str(run.path), "prune_dirs") == []


def test_requests_are_summed_by_step_over_every_document(run):
    """Each worker document's requests (every kind, as its schema says) summed by step, a failed
    job's too: its requests were made and billed."""
    run.plan(copy=[("00000", 1, 1), ("00001", 1, 1)], verify=[("00000", 2, 2)])
    run.copied("00000", copied=1, requests={"puts": 3, "blocks": 4})
    run.copy_failed("00001", RunDir.copy_doc(failed=1, requests={"gets": 2, "puts": 1}))
    run.verified("00000", same=2, requests=RunDir.requests(heads=7))
    requests = build(run)["totals"]["requests"]
    zero = RunDir.requests()
    assert requests["by_step"] == {
        "copy": zero | {"puts": 4, "blocks": 4, "gets": 2},
        "verify": zero | {"heads": 7},
    }
    assert requests["total"] == zero | {"puts": 4, "blocks": 4, "gets": 2, "heads": 7}


def test_how_the_destination_was_known_and_what_the_audit_found(finished):
    """The carried state a pass planned against (ls --summary's `carried`), and an audit's
    files only on the destination, which are its failures."""
    finished.plan(
        copy=[("00000", 3, 3000), ("00001", 2, 5000)],
        verify=[("00000", 5, 8000)],
        extra_on_dest={"files": 2, "bytes": 20},
    )
    carried = {"used": True, "written_by": "incremental", "probed": 3, "reason": None}
    finished.listed("dest", RunDir.ls_summary(7, 0.1, carried=carried, list_pages=1))
    report = build(finished, phase="audit")
    assert report["totals"]["dest_listing"] == {"listed": carried, "left": None, "next": "fresh"}
    # One list job per side: no shard step, the summary as the job left it.
    assert report["totals"]["listings"] == {
        "source": None,
        "dest": {"entries": 7, "seconds": 0.1, "jobs": 1},
        "shards": None,
    }
    assert report["totals"]["requests"]["by_step"]["list_dest"]["list_pages"] == 1
    assert report["failures"] == [
        {"stage": "audit", "error": "2 files only on the destination (listed in plan/delete.tsv)"}
    ]
    md = ferry_markdown.markdown(report)
    assert "Destination: not listed; planned against the state incremental left" in md
    assert "Carried to the next pass: nothing" in md


def test_a_pass_that_wrote_nothing_leaves_the_next_the_state_it_found(run):
    """Issue 42 (3): the state is taken by a pass's first write; one that stopped before it (no
    copy or prune job started) leaves the next pass the state to carry, and says so; its record
    in the history tells the projection the next pass carries."""
    run.plan(copy=[("00000", 1, 1), ("00001", 1, 1)], verify=[("00000", 2, 2)])
    carried = {"used": True, "written_by": "baseline", "probed": 3, "reason": None}
    run.listed("dest", RunDir.ls_summary(7, 0.1, carried=carried, list_pages=0))
    report = build(run, phase="incremental")
    assert report["status"] == "incomplete"
    assert report["totals"]["dest_listing"]["next"] == "carried"
    assert ferry_history.record(report, None, "incremental", "failed", 0.0)["carried"] is True
    md = ferry_markdown.markdown(report)
    assert "Carried to the next pass: the state baseline left, untouched" in md
    run.log("copy", "ferry: HTTP 403\n", part="00001")
    report = build(run, phase="incremental")
    assert report["totals"]["dest_listing"]["next"] == "fresh"
    assert "the next pass lists the destination fresh" in ferry_markdown.markdown(report)


def test_a_pass_stopped_while_listing_leaves_the_state_as_it_found_it(run):
    """No decision on the state, no write: the next pass finds the state as this one did (the
    history then skips this pass when it asks how the next will know the destination)."""
    report = build(run, phase="incremental")
    assert report["totals"]["dest_listing"] == {"listed": None, "left": None, "next": "unchanged"}
    assert ferry_history.record(report, None, "incremental", "failed", 0.0)["carried"] is False
    assert "the state as this pass found it" in ferry_markdown.markdown(report)
    # A baseline's make_dest took it as it started.
    assert build(run, phase="baseline")["totals"]["dest_listing"]["next"] == "fresh"


def test_a_listing_taken_by_several_list_jobs_is_read_as_one(run):
    """With list.jobs > 1: each side's summaries summed (entries, requests by kind), its seconds
    the longest job's, the destination's carried decision the shard step's; every list job and
    the shard job timed and shown."""
    run.plan(copy=[("00000", 1, 10)], verify=[("00000", 1, 10)])
    run.copied("00000", copied=1, bytes_copied=10)
    run.verified("00000", same=1)
    carried = {"used": True, "written_by": "baseline", "probed": 4, "reason": None}
    run.sharded(3, basis="carried", carried=carried)
    run.benchmark("shard", 0.2, end=T0)
    for k, (entries, seconds, pages) in enumerate([(4, 0.5, 1), (0, 0.1, 1), (7, 1.5, 2)], 1):
        source = RunDir.ls_summary(entries, seconds, shard=(k, 3), list_pages=pages)
        run.listed("source", source, shard=k)
        dest = RunDir.ls_summary(entries + 1, seconds, carried=carried, shard=(k, 3), heads=1)
        run.listed("dest", dest, shard=k)
        run.benchmark("list_source", seconds, end=T0 + 2, shard=k)
        run.benchmark("list_dest", seconds, end=T0 + 2, shard=k)
    report = build(run, phase="incremental")
    listings = report["totals"]["listings"]
    assert listings["source"] == {"entries": 11, "seconds": 1.5, "jobs": 3}
    assert listings["dest"] == {"entries": 14, "seconds": 1.5, "jobs": 3}
    assert listings["shards"] == {"jobs": 3, "basis": "carried"}
    assert report["totals"]["dest_listing"]["listed"] == carried
    by_step, zero = report["totals"]["requests"]["by_step"], RunDir.requests()
    assert by_step["list_source"] == zero | {"list_pages": 4}
    assert by_step["list_dest"] == zero | {"heads": 3}
    per_step = report["time"]["per_step"]
    assert (per_step["shard"]["jobs"], per_step["list_source"]["jobs"]) == (1, 3)
    assert per_step["list_source"]["max_seconds"] == 1.5
    lanes = [
        (j["step"], j["shard"]) for j in report["jobs"] if j["step"].startswith(("list", "sh"))
    ]
    assert lanes == [("shard", None)] + [
        (s, k) for s in ("list_source", "list_dest") for k in "123"
    ]
    md = ferry_markdown.markdown(report)
    assert "Listings: source 11 entries by 3 list jobs" in md
    assert "the key space cut in 3 ranges by the carried listing" in md
    html = ferry_html.page(report, [], None)
    assert ">list_source 3<" in html


def test_list_jobs_summaries_merge_by_kind_and_the_decision_is_any_jobs(run):
    """Without the shard step's decision (a source side, or a shard document without one), a
    job's own `carried` stands; a job that left no summary adds nothing."""
    carried = {
        "used": False,
        "written_by": None,
        "probed": 0,
        "reason": "a fresh listing was asked for",
    }
    merged = ferry_run.merged_listing(
        [None, RunDir.ls_summary(2, 0.3, carried=carried, gets=1), RunDir.ls_summary(3, 0.2)]
    )
    assert merged == {
        "entries": 5,
        "seconds": 0.3,
        "requests": RunDir.requests(gets=1),
        "carried": carried,
        "jobs": 2,
    }
    assert ferry_run.merged_listing([None, None]) is None


# ---------------------------------------------------------------------------------------------
# what a person reads (issue 42): what verify compared, the deletions, a refused prune


OVER_LIMIT = (
    "18 of 100 destination entries would be deleted, more than --max-delete 10 % allows; "
    "review with --dry-run, raise --max-delete or pass --force"
)
IN_CONFIG_TERMS = (
    "18 of 100 destination entries would be deleted, more than prune.max_delete 10 % allows; "
    "review with prune.dry_run: true, raise prune.max_delete or set prune.force: true"
)


def test_every_verify_line_says_what_was_compared(final):
    assert build(final)["totals"]["verify_compared"] == ["size"]
    md = ferry_markdown.markdown(build(final))
    assert "Verify (copied files, by sizes): 5 same," in md, md
    final.final_check(
        {"same": 5, "compared": ["size", "md5", "metadata"], "seconds": 0.5}, failed=False
    )
    report = build(final, phase="final")
    assert report["totals"]["final_check"]["compared"] == ["size", "md5", "metadata"]
    md = ferry_markdown.markdown(report)
    assert (
        "Final check of the whole trees, by sizes, MD5s and metadata (mtime, mode, owner…): 5 same"
        in md
    ), md


def test_the_deletions_name_the_plans_bytes_and_their_lists(run):
    run.plan(
        copy=[("00000", 1, 10)],
        verify=[("00000", 1, 10)],
        extra_on_dest={"files": 3, "bytes": 3000},
        prune_partitions=[{"id": "00000", "files": 3, "bytes": 3000}],
        prune_dirs=1,
    )
    run.copied("00000", copied=1)
    run.verified("00000", same=1)
    run.pruned({"deleted": 3, "would_delete": 3}, part="00000")
    run.pruned({"dirs": 1, "dirs_deleted": 1})
    lists = [run.deletion_list("00000", ["a", "b", "c"]), run.deletion_list(None, ["d/"])]
    prune = build(run, phase="final")["totals"]["prune"]
    assert (prune["deleted"], prune["dirs_deleted"]) == (3, 1), prune
    assert prune["planned"] == {"files": 3, "bytes": 3000, "dirs": 1}
    assert prune["lists"] == lists
    md = ferry_markdown.markdown(build(run, phase="final"))
    assert (
        "Prune: 3 files and symlinks and 1 directories deleted, 3 would delete (the plan's "
        "deletions: 3 files, 2.93 KiB, 1 directories); the deleted paths in "
        "`prune/part-00000.deleted.tsv`, `prune/dirs.deleted.tsv`." in md
    ), md


def test_a_refused_prune_is_said_in_the_configs_terms(finished):
    finished.pruned({"would_delete": 18, "refused": OVER_LIMIT}, failed=True)
    report = build(finished, phase="final")
    prune = report["totals"]["prune"]
    assert (prune["refused"], prune["refused_by"]) == (IN_CONFIG_TERMS, "prune"), prune
    assert report["failures"][0] == {"stage": "prune", "error": f"prune refused: {IN_CONFIG_TERMS}"}
    md = ferry_markdown.markdown(report)
    assert f"Prune refused (nothing deleted): {IN_CONFIG_TERMS}" in md, md


def test_a_prune_the_plan_refused_before_any_copy_is_reported(run):
    # As the pipeline leaves it: the plan's refusal, then ferry_task's line in config terms.
    log = run.path / "logs" / "plan.log"
    run.log("plan", f"ferry: plan refused: the final pass's prune would be refused: {OVER_LIMIT}\n")
    ferry_task.in_config_terms(str(log), ferry_config.PRUNE_KEYS)
    report = build(run, phase="final")
    prune = report["totals"]["prune"]
    said = f"{IN_CONFIG_TERMS} (in the pipeline's config)"
    assert (prune["refused"], prune["refused_by"], prune["deleted"]) == (said, "plan", 0), prune
    assert report["status"] == "incomplete"
    md = ferry_markdown.markdown(report)
    assert f"Prune refused (by the plan, before any copy): {said}" in md, md


def test_a_prune_the_pipelines_guard_held_back_is_reported(finished):
    finished.log("prune_dirs", "ferry: prune refused: verify partition 00000 found differences\n")
    report = build(finished, phase="final")
    prune = report["totals"]["prune"]
    said = "verify partition 00000 found differences"
    assert (prune["refused"], prune["refused_by"], prune["deleted"]) == (said, "pipeline", 0)
    md = ferry_markdown.markdown(report)
    assert f"Prune refused (by the pipeline's guard before any deletion): {said}" in md, md
    page = ferry_html.page(report, [], None)
    assert "prune refused (by the pipeline&#x27;s guard before any deletion)" in page, page


def test_a_plan_refused_for_its_copy_is_no_prune_refusal(run):
    run.log("plan", "ferry: plan refused: the pass's copy would be refused: 2 files newer\n")
    report = build(run, phase="final")
    assert report["totals"]["prune"] is None
    assert report["failures"][0]["stage"] == "plan", report["failures"]


def test_a_report_missing_a_key_is_an_error_naming_the_file_and_the_key(finished):
    """report.json has a schema (workflow/schemas/report.schema.json): checked when it is
    written and when it is read, so a key gone is named, never read as 0."""
    report = build(finished)
    del report["totals"]["files"]["copied"]
    with pytest.raises(ferry_docs.DocumentError, match="totals/files: 'copied' is a required"):
        ferry_report.write(report, ferry_run_dir.report_paths(str(finished.path), complete=True))
    assert not (finished.path / "report.json").exists()
    # Read back by the engines' last step: a report without its status is named as such.
    good = build(finished)
    del good["status"]
    path = finished.path / "report.json"
    path.write_text(json.dumps(good))
    with pytest.raises(ferry_docs.DocumentError) as err:
        ferry_report.ended(str(finished.path))
    assert str(path) in str(err.value) and "'status' is a required property" in str(err.value)


def test_a_reports_states_are_the_workers_words(finished):
    """One vocabulary: the report's status is a phase state and each partition's a job state,
    the words generated from the worker's documents.rs; another word is refused."""
    report = build(finished)
    assert report["status"] in ferry_docs.STATES["phase"]
    assert {p["state"] for p in report["partitions"]} <= set(ferry_docs.STATES["job"])
    report["partitions"][0]["state"] = "killed"
    with pytest.raises(ferry_docs.DocumentError, match="partitions/0/state: 'killed' is not one"):
        ferry_model.check(report, "a report")
