"""The window, forecast (workflow/scripts/ferry_history.py): whether the final pass would go
through as the migration stands — its deletions against prune.max_delete, the destination
carried or listed fresh (as the state and the records say), a source that lost more than it
usually does — and the history's columns holding what happened. On histories written by hand
(test_ferry_history.measured's passes); no engine."""

from __future__ import annotations

import json

import ferry_history
import ferry_html
import ferry_markdown
import ferry_projection
import ferry_report
import pytest
from ferry_projection import Settings
from support.rundir import RunDir
from test_ferry_history import HOUR, MIB, SOURCE, T0, measured


def with_deletions(rec: dict, files: int, dirs: int = 0) -> dict:
    """The pass's plan found `files` only at the destination (and `dirs` directories they leave)."""
    rec["planned"].update(deleted=files, deleted_bytes=files * MIB, prune_dirs=dirs, dest_dirs=0)
    return rec


def incrementals(deltas: list[tuple[int, int]], every: float = HOUR) -> list[dict]:
    """A baseline, then incremental passes `every` apart finding (files, bytes) each."""
    out = [measured("baseline", T0, SOURCE)]
    for n, (files, byts) in enumerate(deltas, 1):
        rec = measured("incremental", T0 + n * every, files, n)
        rec["planned"]["bytes"] = rec["copied"]["bytes"] = byts
        rec["carried"] = True
        # The destination lists slower than the source (a far service): a fresh listing costs.
        rec["steps"]["list_dest"] = {"seconds": 2 * SOURCE / 100, "span": 2 * SOURCE / 100}
        out.append(rec)
    return out


# --- converging -----------------------------------------------------------------------------------


def test_fewer_files_of_more_bytes_is_not_converging():
    # The files shrink, the bytes grow 5x: each pass copies more than the one before.
    history = incrementals([(400, 100 * MIB), (150, 200 * MIB), (60, 500 * MIB)])
    p = ferry_projection.project(history, now=T0 + 4 * HOUR)
    assert p["converging"] == "diverging", p["why"]
    assert "grew in bytes" in p["why"] and "400, 150, 60 files" in p["why"]
    assert "passes diverging" in p["line"]


def test_a_delta_shrinking_in_files_and_bytes_is_converging():
    history = incrementals([(400, 400 * MIB), (150, 150 * MIB), (60, 60 * MIB)])
    p = ferry_projection.project(history, now=T0 + 4 * HOUR)
    assert p["converging"] == "converging", p["why"]
    assert "in files and in bytes" in p["why"]


# --- the final pass's deletions against prune.max_delete ------------------------------------------


def test_a_final_pass_whose_prune_would_be_refused_is_said_with_the_key_and_a_value():
    """17.6 % of the destination is gone from the source: the final pass's prune (10 %) would be
    refused inside the window, and every pass's projection says so before it."""
    history = incrementals([(400, 400 * MIB), (150, 150 * MIB)])
    with_deletions(history[-1], 1760)
    p = ferry_projection.project(history, now=T0 + 3 * HOUR)
    v = p["final_pass"]
    assert not v["goes_through"]
    assert v["deletions"] == {"entries": 1760, "of": SOURCE, "files": 1760, "limit": "10%"}
    assert v["needed_max_delete"] == "18%"
    assert "final pass would NOT go through" in p["line"]
    assert "more than prune.max_delete 10% allows" in p["line"]
    assert 'set prune.max_delete: "18%"' in p["line"]
    assert "incremental-pass2/plan/delete.tsv" in p["line"]
    assert "--max-delete" not in p["line"]
    text = "\n".join(ferry_markdown.projection_markdown(p))
    assert "**The final pass would NOT go through**" in text
    assert 'set prune.max_delete: "18%"' in text
    # The limit the config sets, or prune.force, lets it through.
    for settings in (Settings(max_delete="18%"), Settings(force=True), Settings(max_delete="2000")):
        p = ferry_projection.project(history, now=T0 + 3 * HOUR, settings=settings)
        assert p["final_pass"]["goes_through"], settings
        assert "the final pass would go through" in p["line"]


def test_deletions_newer_than_the_whole_source_are_forecast_as_the_prune_refuses_them():
    """The final pass's prune refuses deletions newer than everything at the source (newer.rs):
    the plan of every pass counts them, and the forecast says so before the window."""
    history = incrementals([(400, 400 * MIB), (150, 150 * MIB)])
    with_deletions(history[-1], 12)
    history[-1]["planned"]["newer"] = {"count": 2, "examples": ["new/report.docx", "x"]}
    p = ferry_projection.project(history, now=T0 + 3 * HOUR)
    assert not p["final_pass"]["goes_through"]
    assert "2 files to delete are newer than everything at the source" in p["line"]
    assert "new/report.docx" in p["line"] and "set prune.force: true" in p["line"]
    forced = ferry_projection.project(history, now=T0 + 3 * HOUR, settings=Settings(force=True))
    assert forced["final_pass"]["goes_through"]


def test_deletions_within_the_limit_go_through_and_are_counted_as_prune_counts_them():
    history = incrementals([(400, 400 * MIB), (150, 150 * MIB)])
    # 900 files and the 150 directories they leave empty, of 10,000 files and 500 directories.
    with_deletions(history[-1], 900, dirs=150)
    history[-1]["planned"]["dest_dirs"] = 500
    p = ferry_projection.project(history, now=T0 + 3 * HOUR)
    v = p["final_pass"]
    assert v["deletions"]["entries"] == 1050 and v["deletions"]["of"] == 10_500
    assert v["goes_through"] and v["refused"] is None
    assert "1,050 of 10,500 destination entries to delete, within prune.max_delete 10%" in p["line"]


def test_a_source_that_lost_everything_would_be_refused():
    history = incrementals([(400, 400 * MIB)])
    history[-1]["source"] = {"files": 0, "bytes": 0}
    p = ferry_projection.project(history, now=T0 + 2 * HOUR)
    assert not p["final_pass"]["goes_through"]
    assert "no entries at the source" in p["line"] and "prune.force" in p["line"]


def test_a_source_that_lost_more_than_it_usually_does_is_named():
    history = incrementals([(400, 400 * MIB), (150, 150 * MIB), (60, 60 * MIB)])
    # 5, then 10 more, then 310 more files gone from the source (the deletions pending add up).
    for rec, gone in zip(history[1:], (5, 15, 325)):
        with_deletions(rec, gone)
    p = ferry_projection.project(history, now=T0 + 4 * HOUR)
    v = p["final_pass"]
    assert v["goes_through"]  # 325 of 10,000 is within 10 %
    assert v["source_loss"]["files"] == 310 and v["source_loss"]["usual"] == 10
    assert "but the source lost 310 files since the pass before" in p["line"]
    # Once the final pass has run, its loss was the cut-over's own: nothing said.
    history[-1]["phase"] = "final"
    assert ferry_projection.project(history, now=T0 + 4 * HOUR)["final_pass"]["source_loss"] is None
    history[-1]["phase"] = "incremental"
    # As it usually does: nothing said.
    with_deletions(history[-1], 25)
    assert ferry_projection.project(history, now=T0 + 4 * HOUR)["final_pass"]["source_loss"] is None


# --- carried or fresh: priced as the next pass will do it -----------------------------------------


def listing_seconds(p: dict) -> float:
    return p["steps"]["listing"]


def test_a_failed_pass_that_took_the_state_makes_the_next_list_fresh(tmp_path):
    history = incrementals([(400, 400 * MIB), (150, 150 * MIB)])
    carried = ferry_projection.project(history, now=T0 + 3 * HOUR)
    assert carried["final_pass"]["dest_listing"]["carried"]
    # A third pass planned against the state, wrote, and failed before leaving a new one.
    failed = measured("incremental", T0 + 2.5 * HOUR, 0, 3, status="failed")
    failed.update(carried=False, dest_listed="carried")
    p = ferry_projection.project([*history, failed], now=T0 + 3 * HOUR)
    assert not p["final_pass"]["dest_listing"]["carried"]
    assert "incremental-pass3 (failed) left no carried state" in p["line"]
    # The listing is priced as both sides listed, not as the source alone.
    assert listing_seconds(p) > listing_seconds(carried)
    assert any("listed fresh" in a for a in p["assumptions"])


def test_a_pass_that_failed_before_deciding_leaves_the_state_carried():
    """A wrong key fails the pass at its first request, before any write: the state is not
    taken (a pass takes it with its first write)."""
    history = incrementals([(400, 400 * MIB), (150, 150 * MIB)])
    failed = measured("incremental", T0 + 2.5 * HOUR, 0, 3, status="failed")
    failed.update(carried=False, dest_listed=None)
    p = ferry_projection.project([*history, failed], now=T0 + 3 * HOUR)
    assert p["final_pass"]["dest_listing"]["carried"]


def test_the_state_on_disk_decides_carried_or_fresh(tmp_path):
    history = incrementals([(400, 400 * MIB), (150, 150 * MIB)])
    state = tmp_path / "state"
    state.mkdir()
    doc = {"version": 1, "dest": "d", "written_by": "incremental-pass2", "entries": 10_000}

    def at(**fields) -> dict:
        (state / "dest.json").write_text(json.dumps({**doc, **fields}))
        return ferry_projection.project(
            history, now=T0 + 3 * HOUR, settings=Settings(state=str(state))
        )

    free = at(taken_by=None)
    assert free["final_pass"]["dest_listing"] == {
        "carried": True,
        "why": "left by incremental-pass2, 10,000 entries",
    }
    taken = at(taken_by="final")
    assert not taken["final_pass"]["dest_listing"]["carried"]
    assert "taken by final, which did not leave a new one" in taken["line"]
    assert listing_seconds(taken) > listing_seconds(free)
    (state / "dest.json").unlink()
    gone = ferry_projection.project(history, now=T0 + 3 * HOUR, settings=Settings(state=str(state)))
    assert "there is no carried state at" in gone["line"]
    fresh = ferry_projection.project(
        history, now=T0 + 3 * HOUR, settings=Settings(dest_listing="fresh")
    )
    assert "dest_listing is fresh" in fresh["line"]
    assert listing_seconds(fresh) == pytest.approx(listing_seconds(taken))


# --- the history's columns -------------------------------------------------------------------------


def row_of(text: list[str], run_dir: str) -> list[str]:
    head = [c.strip() for c in text[0].strip("|").split("|")]
    line = next(x for x in text if x.startswith(f"| {run_dir} |"))
    return dict(zip(head, (c.strip() for c in line.strip("|").split("|"))))


def test_the_history_says_deleted_only_for_what_was_deleted():
    incremental = with_deletions(measured("incremental", T0 + HOUR, 10, 1), 40)
    dry = with_deletions(measured("final", T0 + 2 * HOUR, 10, 1), 40)
    dry.update(run_dir="final-dry", deleted={"files": 0, "dirs": 0})
    final = with_deletions(measured("final", T0 + 3 * HOUR, 10, 2), 40)
    final["deleted"] = {"files": 40, "dirs": 2}
    text = ferry_markdown.history_markdown([incremental, dry, final])
    assert row_of(text, "incremental")["would delete"] == "40"
    assert row_of(text, "incremental")["deleted"] == "0"
    assert row_of(text, "final-dry")["deleted"] == "0"
    assert row_of(text, "final-pass2")["deleted"] == "40"


def a_run(tmp_path, deleted: int, dry_run: bool = False) -> RunDir:
    """A pass whose plan found 7 files only at the destination; its prune (if a final pass's)
    deleted `deleted` of them."""
    run = RunDir(tmp_path / "run")
    run.plan(
        copy=[("00000", 1, 100)],
        verify=[("00000", 1, 100)],
        extra_on_dest={"files": 7, "bytes": 700},
        dest={"files": 10, "bytes": 1000},
    )
    run.copied("00000", copied=1, bytes_copied=100, seconds=0.1)
    run.verified("00000", same=1, seconds=0.1)
    fields = {"deleted": deleted, "would_delete": 7 if dry_run else 0, "dry_run": dry_run}
    run.pruned({**fields, "log": "prune.log", "failures": []})
    return run


@pytest.mark.parametrize(
    ("phase", "deleted", "dry_run", "expected"),
    [("incremental", 0, False, 0), ("final", 0, True, 0), ("final", 7, False, 7)],
)
def test_a_record_s_deleted_is_what_its_prune_deleted(tmp_path, phase, deleted, dry_run, expected):
    run = a_run(tmp_path, deleted, dry_run)
    report = ferry_report.build(str(run.path), "m", phase, "/s", "/d", complete=True)
    rec = ferry_history.record(report, None, phase, "complete", T0 + 60)
    assert rec["planned"]["deleted"] == 7  # what only the destination holds: would delete
    assert rec["deleted"]["files"] == expected
    row = row_of(ferry_markdown.history_markdown([rec]), phase)
    assert (row["would delete"], row["deleted"]) == ("7", str(expected))


def test_report_html_says_whether_the_final_pass_would_go_through():
    history = incrementals([(400, 400 * MIB), (150, 150 * MIB)])
    with_deletions(history[-1], 1760)
    page = ferry_html.projection_section(ferry_projection.project(history, now=T0 + 3 * HOUR))
    assert '<p class="warn" id="final-pass">The final pass would NOT go through' in page
    assert "set prune.max_delete: &quot;18%&quot;" in page
