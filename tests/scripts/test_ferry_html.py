"""The run report's HTML page (workflow/scripts/ferry_html.py), built from run directories made
by hand (support.rundir) and a stand-in for the migration history (ferry_history's shapes): every
section and plot present, nothing the page would fetch, text escaped, a single run without
history, a projection that cannot be made yet, a job still running, and the page written by
ferry_report.py beside report.md. No browser here: tests/pipeline/test_report_html.py opens the
page in one."""

from __future__ import annotations

import html
import json
import re
import sys
import types

import ferry_html
import ferry_report
import ferry_run_dir
import pytest
from ferrylib import write_json
from support.rundir import RunDir

T0 = 1_700_000_000.0
PLOTS = ("delta", "steps", "timeline", "throughput", "projection", "backtest")


def record(pass_, phase, started, wall, planned, steps, status="complete", requests=None):
    """A history record as ferry_history.load returns it (the fields the page reads)."""
    return {
        "version": 1,
        "run_name": "r1",
        "phase": phase,
        "pass": pass_,
        "status": status,
        "started": started,
        "ended": None,
        "wall_seconds": wall,
        "source": {"files": 1000, "bytes": 10**9},
        "planned": {"files": planned, "bytes": planned * 1000},
        "copied": {"files": planned, "bytes": planned * 1000},
        "failed": 0,
        "requests": {"total": requests or {"puts": planned, "list_pages": 2}, "by_step": {}},
        "steps": {step: {"seconds": s, "span": s} for step, s in steps.items()},
    }


HISTORY = [
    record(
        1,
        "baseline",
        "2026-11-27T06:00:00+00:00",
        1000,
        1000,
        {"list_source": 20, "plan": 3, "copy": 900},
    ),
    record(
        2,
        "incremental",
        "2026-11-27T07:00:00+00:00",
        200,
        80,
        {"list_source": 20, "list_dest": 15, "copy": 100},
    ),
    record(
        3,
        "incremental",
        "2026-11-27T08:00:00+00:00",
        90,
        30,
        {"list_source": 20, "list_dest": 15, "copy": 40},
        status="failed",
    ),
]
PROJECTION = {
    "phase": "final",
    "ok": True,
    "why_not": None,
    "seconds": 95.0,
    "steps": {
        "listing": 35.0,
        "plan": 3.0,
        "copy": 30.0,
        "verify": 22.0,
        "prune": 5.0,
        "final_check": 0.0,
    },
    "requests": 26,
    "converging": "converging",
    "why": "the delta shrinks by 60 % a pass",
    "assumptions": [
        "the last pass's rates",
        "the delta grows linearly with the time since the last pass",
    ],
    "backtest": [
        {
            "pass": 2,
            "phase": "incremental",
            "projected_seconds": 180,
            "actual_seconds": 200,
            "error_seconds": -20,
            "error_pct": -10.0,
            "projected_requests": 90,
            "actual_requests": 86,
        }
    ],
    "line": "A final pass started now would take ≈ 1.6 min (listing 35 s + plan 3 s + copy 30 s + verify 22 s "
    "+ prune 5 s), with 26 Blob requests.",
}


@pytest.fixture
def history(monkeypatch):
    """The history and projection the report carries (ferry_report.py --history puts them there);
    set .records / .projection per test. For a report without them the page reads the history
    itself, through stand-in ferry_history and ferry_projection modules here (.error makes it
    fail)."""
    module = types.SimpleNamespace(
        records=HISTORY, projection=PROJECTION, error=None, roots=[], in_report=True
    )

    def load(root):
        module.roots.append(root)
        if module.error:
            raise module.error
        return module.records

    module.load = load
    module.project = lambda records, **kw: module.projection
    monkeypatch.setitem(sys.modules, "ferry_history", module)
    monkeypatch.setitem(sys.modules, "ferry_projection", module)
    return module


@pytest.fixture
def finished(tmp_path) -> RunDir:
    """A final pass that went through but for one file: two copy partitions, one verify, timed."""
    run = RunDir(tmp_path / "r1" / "final")
    run.plan(
        copy=[("00000", 3, 3_000_000), ("00001", 2, 5_000_000)], verify=[("00000", 5, 8_000_000)]
    )
    run.copied("00000", copied=3, bytes_copied=3_000_000, seconds=1.25)
    run.copied(
        "00001",
        copied=1,
        failed=1,
        bytes_copied=4_000_000,
        seconds=2.5,
        failures=[{"path": "a/<b>&c.txt", "error": "403 <forbidden>"}],
    )
    run.verified("00000", same=5, seconds=0.75)
    run.benchmark("list_source", 1.0, end=T0 + 1)
    run.benchmark("plan", 0.5, end=T0 + 3)
    run.benchmark("copy", 2.0, end=T0 + 5, part="00000")
    run.benchmark("copy", 4.0, end=T0 + 7, part="00001")
    run.benchmark("verify", 1.0, end=T0 + 8, part="00000")
    return run


def page_of(run: RunDir, phase: str = "final") -> str:
    report = ferry_report.build(str(run.path), "r1", phase, "/src", "az://acct/ctr", True)
    module = sys.modules.get("ferry_history")
    if getattr(module, "in_report", False):
        report["history"], report["projection"] = module.records, module.projection
    out = run.path / "page.html"
    if "history" in report:
        ferry_html.write(report, str(out))
    else:
        # A report without its history: the page's command reads it beside the run.
        write_json(str(run.path / "report.json"), report)
        ferry_html.main([str(run.path), "--out", str(out)])
    return out.read_text(encoding="utf-8")


def plots(page: str) -> dict[str, str]:
    """{plot id: its SVG} of every svg.plot of the page."""
    return {
        m.group(1): m.group(0)
        for m in re.finditer(r'<svg class="plot" id="plot-([a-z]+)".*?</svg>', page, re.S)
    }


# ---------------------------------------------------------------------------------------------


def test_every_section_and_plot_is_there(finished, history):
    page = page_of(finished)
    found = plots(page)
    assert set(found) == set(PLOTS)
    for name, svg in found.items():
        assert 'class="mark' in svg, f"plot {name} has no marks"
    for heading in (
        "The final pass, projected",
        "Migration history",
        "This pass over time",
        "Copy partitions",
        "Failures (1)",
    ):
        assert f"<h2>{heading}</h2>" in page
    assert PROJECTION["line"] in page
    assert "converging" in page and "the delta shrinks by 60 % a pass" in page
    assert all(html.escape(a) in page for a in PROJECTION["assumptions"])
    # The history table has one row per pass, and its Blob requests add up the kinds.
    for label in ("baseline", "incremental 2", "incremental 3"):
        assert f"<td>{label}</td>" in page
    assert '<td class="num">1,002</td>' in page
    assert history.roots == [], "the report's own history is shown, not read again"


def test_a_report_without_history_has_it_read_from_the_run_root(finished, history):
    history.in_report = False
    page = page_of(finished)
    assert history.roots == [str(finished.path.parent)], (
        "the history is read from the run's output directory"
    )
    assert set(plots(page)) == set(PLOTS) and PROJECTION["line"] in page


def test_the_page_fetches_nothing_and_escapes_text(finished, history):
    page = page_of(finished)
    assert page.startswith("<!DOCTYPE html>")
    for outside in ("<link", " src=", " href=", "url(", "@import", "@font-face"):
        assert outside not in page, (
            f"{outside!r} would make the page depend on something outside it"
        )
    assert "a/&lt;b&gt;&amp;c.txt" in page and "403 &lt;forbidden&gt;" in page
    assert "<b>&c" not in page
    # Its checks are inline and write their verdict where the browser test reads it.
    assert "document.body.dataset.checks" in page


def test_time_per_step_stacks_each_pass(finished, history):
    steps = plots(page_of(finished))["steps"]
    marks = re.findall(r'<rect class="mark"[^>]*><title>([^<]*)</title>', steps)
    assert "baseline: copy 15.0 min" in marks
    assert "incremental 2: list_dest 15.0 s" in marks
    assert len(marks) == 3 + 3 + 3


def test_the_timeline_places_each_job_from_its_timing_file(finished, history):
    spans = ferry_report.build(str(finished.path), "r1", "final", "/s", "/d", True)["jobs"]
    copy1 = next(s for s in spans if (s["step"], s["part"]) == ("copy", "00001"))
    assert (copy1["start"], copy1["end"], copy1["bytes"]) == (T0 + 3, T0 + 7, 4_000_000)
    timeline = plots(page_of(finished))["timeline"]
    assert "part 00000" in timeline and "part 00001" in timeline and ">list_source<" in timeline
    assert "copy part 00001: 4.0 s, 3.8 MiB, 976.6 KiB/s" in timeline


def test_jobs_on_several_nodes_get_a_table_of_what_each_spent(finished, history):
    assert "<h3>By node</h3>" not in page_of(finished)
    finished.benchmark("copy", 2.0, end=T0 + 5, part="00000", cpu=1.5, rss=40, node="node1")
    finished.benchmark("copy", 4.0, end=T0 + 7, part="00001", cpu=3, rss=50, node="node2")
    page = page_of(finished)
    assert "<h3>By node</h3>" in page
    assert re.search(r"<td>node2</td>.*?3\.8 MiB", page, re.S), page


def test_a_job_stopped_mid_way_shows_from_its_progress_file(finished, history):
    finished.plan(copy=[("00000", 3, 3000)], verify=[("00000", 5, 8000), ("00001", 1, 1000)])
    progress = finished.path / ferry_run_dir.PROGRESS["verify"].format(part="00001")
    progress.parent.mkdir()
    doc = {
        "version": 1,
        "command": "verify",
        "pid": 1,
        "host": "elsewhere",
        "node": None,
        "started": T0 + 7,
        "updated": T0 + 9,
        "finished": False,
        "files": {"done": 1, "failed": 0, "total": None},
        "bytes": {"done": 1000, "total": None},
        "bytes_per_second": 500,
        "requests": RunDir.requests(),
    }
    progress.write_text(json.dumps(doc))
    timeline = plots(page_of(finished))["timeline"]
    assert 'class="mark unfinished"' in timeline
    assert "verify part 00001: 2.0 s, 1000 B, 500 B/s (stopped)" in timeline


def test_a_single_run_without_history_shows_itself(finished, history):
    history.records, history.projection = [], None
    page = page_of(finished)
    assert "No migration history beside this run yet" in page
    assert "No projection" in page
    found = plots(page)
    assert set(found) == {"delta", "steps", "timeline", "throughput"}
    assert "<td>final</td>" in page
    assert "final: planned 5" in found["delta"]


def test_without_the_history_module_the_page_is_still_written(finished, monkeypatch):
    """A report rebuilt where ferry_history.py is not (an archive of the run, another checkout)."""
    monkeypatch.setitem(sys.modules, "ferry_history", None)  # import fails
    page = page_of(finished)
    assert "No migration history beside this run yet" in page and "timeline" in plots(page)


def test_a_broken_history_costs_the_page_nothing_else(finished, history, capsys):
    history.in_report = False
    history.error = ValueError("line 3 is not JSON")
    page = page_of(finished)
    assert "No migration history beside this run yet" in page
    assert "line 3 is not JSON" in capsys.readouterr().err


def test_a_projection_not_possible_yet_says_why(finished, history):
    history.projection = {"ok": False, "why_not": "one pass recorded: no delta trend yet"}
    page = page_of(finished)
    assert "No projection yet: one pass recorded: no delta trend yet." in page
    assert "projection" not in plots(page)


def test_a_diverging_migration_is_flagged(finished, history):
    history.projection = {
        **PROJECTION,
        "converging": "diverging",
        "why": "the delta grows faster than a pass copies",
    }
    page = page_of(finished)
    assert (
        '<p class="warn">The passes: <b>diverging</b> (the delta grows faster than a pass copies).</p>'
        in page
    )


def test_the_report_writes_the_page_beside_report_md(finished, history):
    ferry_report.main(
        [
            "build",
            str(finished.path),
            "--run-name",
            "r1",
            "--phase",
            "incremental",
            "--source",
            "/s",
            "--dest",
            "/d",
        ]
    )
    assert (finished.path / "report.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_an_incomplete_run_gets_report_incomplete_html_and_the_rerun_removes_it(finished, history):
    finished.result("copy", "00001").unlink()
    finished.copy_failed("00001", "")
    ferry_report.main(
        [
            "build",
            str(finished.path),
            "--run-name",
            "r1",
            "--phase",
            "incremental",
            "--source",
            "/s",
            "--dest",
            "/d",
            "--by-status",
        ]
    )
    page = finished.path / "report-incomplete.html"
    assert "incomplete" in page.read_text(encoding="utf-8")
    assert not (finished.path / "report.html").exists()
    ferry_run_dir.discard_incomplete(str(finished.path))
    assert not page.exists()


def test_the_real_history_of_two_passes_is_on_the_page(tmp_path):
    """ferry_report.py --history appends each pass to the real ferry_history and hands the
    history and its projection to the page: two passes, two rows, and the projection's line."""
    import ferry_projection

    root = tmp_path / "r1"
    for phase, end in (("baseline", T0 + 8), ("incremental", T0 + 3600)):
        run = RunDir(root / phase)
        run.plan(copy=[("00000", 3, 3_000_000)], verify=[("00000", 3, 3_000_000)])
        run.copied("00000", copied=3, bytes_copied=3_000_000, seconds=1.0)
        run.verified("00000", same=3, seconds=0.5)
        run.benchmark("list_source", 1.0, end=end - 6)
        run.benchmark("plan", 0.5, end=end - 5)
        run.benchmark("copy", 2.0, end=end - 2, part="00000")
        run.benchmark("verify", 1.0, end=end, part="00000")
        ferry_report.main(
            [
                "build",
                str(run.path),
                "--run-name",
                "r1",
                "--phase",
                phase,
                "--source",
                "/s",
                "--dest",
                "/d",
                "--history",
                str(run.path),
            ]
        )
    report = json.loads((root / "incremental" / "report.json").read_text())
    assert [r["phase"] for r in report["history"]] == ["baseline", "incremental"]
    page = (root / "incremental" / "report.html").read_text(encoding="utf-8")
    assert "<td>baseline</td>" in page and "<td>incremental 1</td>" in page
    assert "No migration history beside this run yet" not in page
    if report["projection"].get("ok"):
        assert html.escape(ferry_projection.line(report["projection"])[1:]) in page
    else:
        assert "No projection yet" in page


def test_a_report_of_another_version_is_refused_by_name(finished, capsys):
    """A report.json from before the job states were one vocabulary has no `state` per
    partition: the page says to make the report again rather than fail on a missing key."""
    old = ferry_report.build(str(finished.path), "r1", "baseline", "/s", "/d", True)
    del old["version"]
    write_json(str(finished.path / "report.json"), old)
    with pytest.raises(SystemExit):
        ferry_html.main([str(finished.path), "--out", str(finished.path / "page.html")])
    assert "a report of version 1" in capsys.readouterr().err
    assert not (finished.path / "page.html").exists()


# ---------------------------------------------------------------------------------------------
# what a person reads (issue 42): what verify compared, the deletions, a refused prune


def checks(page: str) -> str:
    """The page's "Checks and deletions" list, its tags dropped."""
    found = re.search(r'<ul class="checks">(.*?)</ul>', page, re.S)
    assert found, "no checks list on the page"
    return html.unescape(re.sub(r"<[^>]+>", "", found.group(1).replace("</li>", "\n")))


@pytest.fixture
def pruned(tmp_path) -> RunDir:
    """A final pass that deleted what its plan found only on the destination."""
    run = RunDir(tmp_path / "r1" / "final")
    run.plan(
        copy=[("00000", 2, 2000)],
        verify=[("00000", 2, 2000)],
        extra_on_dest={"files": 3, "bytes": 3_000_000},
        prune_partitions=[{"id": "00000", "files": 3, "bytes": 3_000_000}],
        prune_dirs=1,
    )
    run.copied("00000", copied=2, bytes_copied=2000, replaced=1, removed=4)
    run.verified("00000", same=2)
    run.pruned({"deleted": 3, "would_delete": 3}, part="00000")
    run.pruned({"dirs": 1, "dirs_deleted": 1})
    run.deletion_list("00000", ["a", "b", "c"])
    run.deletion_list(None, ["d/"])
    run.final_check({"same": 2, "compared": ["size", "md5", "metadata"]})
    return run


def test_the_page_says_what_each_verify_compared(pruned, history):
    said = checks(page_of(pruned))
    assert "Verify (copied files, by sizes): 2 same, 0 differ" in said, said
    assert (
        "Final check of the whole trees, by sizes, MD5s and metadata (mtime, mode, owner…): "
        "2 same" in said
    ), said


def test_the_page_shows_the_deletions_with_links_to_their_lists(pruned, history):
    page = page_of(pruned)
    said = checks(page)
    assert (
        "Deletions: 3 files and symlinks and 1 directories deleted of the plan's 3 files "
        f"({ferry_html.fmt_bytes(3_000_000)}) and 1 directories; the deleted paths: "
        "prune/part-00000.deleted.tsv, prune/dirs.deleted.tsv" in said
    ), said
    for rel in ("prune/part-00000.deleted.tsv", "prune/dirs.deleted.tsv"):
        assert f'<a href="{rel}">' in page and (pruned.path / rel).is_file()
    assert (
        "Replaced: 1 entries of another type at the destination (with what was under them, 4 entries deleted)"
        in said
    ), said


def test_a_pass_before_the_final_says_what_the_final_will_delete(pruned, history):
    said = checks(page_of(pruned, phase="incremental"))
    assert (
        "Deletions: none (only the final pass deletes); the plan found 3 files "
        f"({ferry_html.fmt_bytes(3_000_000)}) only on the destination" in said
    ), said


def test_a_refused_prune_shows_with_its_reason_in_config_terms(finished, history):
    finished.pruned(
        {
            "would_delete": 18,
            "refused": "18 of 100 destination entries would be deleted, more than --max-delete "
            "10 % allows; raise --max-delete or pass --force",
        },
        failed=True,
    )
    page = page_of(finished)
    said = checks(page)
    assert (
        "Deletions: prune refused (nothing deleted): 18 of 100 destination entries would be "
        "deleted, more than prune.max_delete 10 % allows; raise prune.max_delete or set "
        "prune.force: true" in said
    ), said
    assert "--max-delete" not in page and '<span class="refused">' in page


def test_a_final_pass_whose_prune_did_not_run_says_so(finished, history):
    said = checks(page_of(finished))
    assert "Deletions: none (prune did not run; see the failures)" in said, said
