"""End-to-end tests of the Snakemake pipeline (Snakefile, workflow/, profiles/local).

Every test runs the real `snakemake` on the real worker. The destination is checked with the
Python Azure SDK or by reading files, never with ferry itself, so a worker bug cannot hide a
pipeline bug. The helpers are in tests/support/pipeline.py.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from support.latencyfs import LatencyFS
from support.pipeline import (
    REPO,
    assert_no_secret,
    base_config,
    blob_snapshot,
    held_lock,
    jobs_per_step,
    local_snapshot,
    md5s,
    migration_tree,
    modify_tree,
    pipeline,
    report,
    write_file,
)

# Few, large partitions: each job has a fixed start-up cost, and the suite runs on 2 cores.
THREE_PARTS = "plan={mode: parts, parts: 3}"


# ---------------------------------------------------------------------------------------------
# static checks: no worker call, nothing touched


def test_lint_is_clean(tmp_path):
    proc = pipeline(
        f"source={tmp_path / 'src'}", f"dest={tmp_path / 'dst'}", extra_args=("--lint",)
    )
    assert "Congratulations, your workflow is in a good condition" in proc.stdout + proc.stderr


def test_dry_run_prints_plan_and_touches_nothing(tmp_path, ferry_bin, container):
    src = tmp_path / "src"
    migration_tree(src, files=5, big=0)
    outdir = tmp_path / "results"
    proc = pipeline(
        *base_config(ferry_bin, outdir, src, container, "final"), extra_args=("--dry-run",)
    )
    text = proc.stdout + proc.stderr
    # A line a job, its step named (the rules' message).
    for job in ("ferry list_source:", "ferry list_dest:", "ferry plan:", "ferry report:"):
        assert job in text, f"{job} missing from the dry-run plan"
    assert "This was a dry-run" in text
    assert container.blobs() == {}
    assert not outdir.exists(), "a dry run wrote run records"

    local_dest = tmp_path / "nfs"
    pipeline(
        *base_config(ferry_bin, outdir, src, local_dest, "baseline"), extra_args=("--dry-run",)
    )
    assert not local_dest.exists()
    assert not outdir.exists()


@pytest.mark.parametrize(
    "override, field",
    [
        ("phase=sideways", "phase"),
        ("plan={mode: diagonal}", "plan.mode"),
        ("plan={parts: 0}", "plan.parts"),
        ("compare=crc32", "compare"),
        ("copy={concurrency: lots}", "copy.concurrency"),
        ("prune={max_delete: everything}", "prune.max_delete"),
        ("resources={copy: {mem_mb: -5}}", "resources.copy.mem_mb"),
        ("dest=az://archive/x?sv=2024&sig=abc", "dest"),
        ("bogus_key=1", "bogus_key"),
    ],
)
def test_bad_config_is_rejected_before_any_job(tmp_path, ferry_bin, override, field):
    src = tmp_path / "src"
    migration_tree(src, files=3, big=0)
    outdir = tmp_path / "results"
    cfg = base_config(ferry_bin, outdir, src, tmp_path / "dst", "baseline") + [override]
    proc = pipeline(*cfg, expect=None)
    assert proc.returncode != 0
    text = proc.stdout + proc.stderr
    assert "ferry: invalid configuration: config field" in text, text[-3000:]
    assert f"'{field}'" in text, f"the error does not name {field!r}:\n{text[-3000:]}"
    assert not outdir.exists() and not (tmp_path / "dst").exists()


def test_fpart_with_blob_source_is_rejected(tmp_path, ferry_bin):
    outdir = tmp_path / "results"
    cfg = base_config(ferry_bin, outdir, "az://archive/share", tmp_path / "dst", "baseline")
    proc = pipeline(*cfg, "plan={tool: fpart}", expect=None)
    assert proc.returncode != 0
    assert "plan.tool" in proc.stdout + proc.stderr
    assert not outdir.exists()


# ---------------------------------------------------------------------------------------------
# the real migration


@pytest.mark.timeout(420)
def test_blob_migration_through_all_phases(tmp_path, ferry_bin, container):
    src = tmp_path / "src"
    content = migration_tree(src)
    outdir = tmp_path / "results"
    dest = container.at("share")

    # --- baseline ---------------------------------------------------------------------------
    pipeline(*base_config(ferry_bin, outdir, src, dest, "baseline"), THREE_PARTS)
    assert blob_snapshot(container, "share/") == md5s(content)
    rep = report(outdir, "baseline")
    total_bytes = sum(len(d) for d in content.values()) + len(
        "../top.txt"
    )  # the link holds its target
    assert rep["status"] == "complete"
    entries = len(content) + 1  # and the symlink
    assert rep["totals"]["files"] == {
        "source": entries,
        "planned": entries,
        "copied": entries,
        "skipped": 0,
        "ignored": 0,
        "failed": 0,
        "metadata_only": 0,
        "replaced": 0,
        "removed": 0,
    }
    assert rep["plan"]["source"]["symlinks_not_migrated"] == 0
    link = container.client.get_blob_client("share/docs/link-to-top")
    assert link.get_blob_properties().metadata["is_symlink"] == "true"
    assert link.download_blob().readall() == b"../top.txt"
    assert rep["totals"]["bytes"]["source"] == total_bytes
    assert rep["totals"]["bytes"]["copied"] == total_bytes
    assert rep["totals"]["verify"]["same"] == entries, "every file and the symlink"
    assert (
        sum(
            rep["totals"]["verify"][k]
            for k in ("differ", "missing_on_dst", "missing_on_src", "error")
        )
        == 0
    )
    assert len(rep["partitions"]) == 3
    # Every file and the symlink in the parts; the six directories (docs, data, data/sub, names
    # with spaces, ünïcødé, gone), which a blob destination keeps as folder stubs, besides them.
    assert sum(p["files"] for p in rep["partitions"]) == entries
    assert rep["plan"]["to_copy"]["dirs"] == 6
    assert all(p["state"] == "done" and p["worker_seconds"] is not None for p in rep["partitions"])
    assert jobs_per_step(rep) == {
        "list_source": 1,
        "make_dest": 1,
        "plan": 1,
        "copy": 3,
        "verify": 3,
        "carry": 1,
    }
    assert rep["failures"] == []
    # What the baseline wrote, carried to the next pass: every file, the link and the folders.
    assert rep["totals"]["dest_listing"]["left"]["entries"] == entries + 6
    md = (outdir / "t" / "baseline" / "report.md").read_text()
    assert "Where the time went" in md and "| copy | 3 |" in md

    # --- the source moves on ------------------------------------------------------------------
    before_deletes = dict(md5s(content))
    added, changed, deleted = modify_tree(src, content)

    # --- incremental: new and changed files arrive, nothing is deleted ------------------------
    pipeline(*base_config(ferry_bin, outdir, src, dest, "incremental"), THREE_PARTS)
    snap = blob_snapshot(container, "share/")
    expected_inc = {**{k: v for k, v in before_deletes.items() if k in deleted}, **md5s(content)}
    assert snap == expected_inc, "incremental must bring every change over and delete nothing"
    rep = report(outdir, "incremental")
    assert rep["status"] == "complete"
    plan = rep["plan"]
    assert plan["to_copy"]["new"] == len(added)
    assert plan["to_copy"]["changed"] >= 1  # f005 changed size; f006 may be left to ferry's compare
    assert plan["extra_on_dest"]["files"] == len(deleted)
    files = rep["totals"]["files"]
    assert files["failed"] == 0
    assert files["copied"] >= len(added) + len(changed)
    assert files["copied"] + files["skipped"] == files["planned"]
    assert rep["totals"]["verify"]["same"] == files["planned"]
    assert "prune" not in jobs_per_step(rep)
    # The destination was not listed: the pass planned against what the baseline left.
    listed = rep["totals"]["dest_listing"]["listed"]
    assert (listed["used"], listed["written_by"]) == (True, "baseline"), listed
    assert rep["totals"]["requests"]["by_step"]["list_dest"]["list_pages"] == 0
    # Every verify line says what was compared: sizes, before the final pass.
    assert rep["totals"]["verify_compared"] == ["size"]
    page = (outdir / "t" / "incremental" / "report.html").read_text(encoding="utf-8")
    assert "(copied files, by sizes): " in page

    # --- final: prune, full verify, identical trees ------------------------------------------
    pipeline(*base_config(ferry_bin, outdir, src, dest, "final"), THREE_PARTS, "checksum=true")
    assert blob_snapshot(container, "share/") == md5s(content)
    rep = report(outdir, "final")
    assert rep["status"] == "complete"
    assert rep["totals"]["dest_listing"]["listed"]["written_by"] == "incremental"
    # Prune deleted from the listings the plan used: it listed neither side.
    assert rep["totals"]["requests"]["by_step"]["prune"]["list_pages"] == 0
    assert rep["totals"]["prune"]["deleted"] == len(deleted)
    assert not rep["totals"]["prune"]["refused"]
    # The final pass verifies what it copied; the whole tree is the audit's, after it.
    assert rep["totals"]["verify"]["same"] == rep["totals"]["files"]["planned"]
    assert rep["totals"]["final_check"] is None
    assert rep["totals"]["files"]["failed"] == 0
    assert rep["checksum_verified"] is True
    # The files to delete went in the plan's parts (as many as asked, at most one a file), each
    # its own job with its own list of what it deleted; then the directories' job.
    logs = sorted((outdir / "t" / "final" / "prune").glob("*.deleted.tsv"))
    assert len(logs) == min(3, len(deleted)) + 1, logs
    deleted_log = "".join(log.read_text() for log in logs)
    for rel in deleted:
        assert rel in deleted_log
    # report.html shows the deletions, with a link to each list, and what verify compared.
    page = (outdir / "t" / "final" / "report.html").read_text(encoding="utf-8")
    for log in logs:
        assert f'<a href="prune/{log.name}">' in page, log.name
    assert f"{len(deleted)} files and symlinks and" in page
    rules = jobs_per_step(rep)
    assert rules["prune"] == min(3, len(deleted)) and rules["prune_dirs"] == 1
    assert rules["carry"] == 1 and rules["list_dest"] == 1
    assert "final_check" not in rules
    assert_no_secret(outdir, REPO / ".snakemake" / "log")


@pytest.mark.timeout(300)
def test_local_to_nfs_style_directory_with_fpart(tmp_path, ferry_bin):
    src = tmp_path / "src"
    content = migration_tree(src, files=60)
    dest = tmp_path / "nfs" / "share"
    outdir = tmp_path / "results"
    fpart = "plan={tool: fpart, mode: max-files, max_files: 25}"

    pipeline(*base_config(ferry_bin, outdir, src, dest, "baseline"), fpart)
    assert local_snapshot(dest) == md5s(content)
    assert os.readlink(dest / "docs" / "link-to-top") == "../top.txt"
    rep = report(outdir, "baseline")
    assert rep["totals"]["files"]["copied"] == len(content) + 1  # and the symlink
    assert len(rep["partitions"]) == 3  # 65 entries, at most 25 per part
    assert all(p["files"] <= 25 for p in rep["partitions"])
    assert rep["plan"]["partitioning"]["tool"] == "fpart"

    _added, _changed, deleted = modify_tree(src, content)
    pipeline(*base_config(ferry_bin, outdir, src, dest, "final"), fpart)
    assert local_snapshot(dest) == md5s(content)
    assert os.readlink(dest / "docs" / "link-to-top") == "../top.txt"
    rep = report(outdir, "final")
    assert rep["status"] == "complete"
    assert rep["totals"]["prune"]["deleted"] == len(deleted)
    pipeline(*base_config(ferry_bin, outdir, src, dest, "audit"), fpart)
    rep = report(outdir, "audit")
    assert rep["status"] == "complete", rep["failures"]
    verify = rep["totals"]["verify"]
    # Every file, the symlink and every directory (with its mtime: prune has set them).
    dirs = sum(1 for p in src.rglob("*") if p.is_dir() and not p.is_symlink())
    assert verify["same"] == len(content) + 1 + dirs
    assert verify["differ"] == verify["missing_on_dst"] == verify["missing_on_src"] == 0


@pytest.mark.timeout(300)
@pytest.mark.fuse
def test_each_step_of_a_phase_lists_an_nfs_like_destination_once(tmp_path, ferry_bin):
    """On a mount where every request is a round trip (tools/latencyfs, counting), each step of
    a phase reads the destination's directories about once between all its jobs, and nothing per
    file: an unchanged incremental phase costs what `ferry ls -r` of the destination costs."""
    src = tmp_path / "src"
    content = migration_tree(src, files=200)
    outdir = tmp_path / "results"
    # Parts cut in path order, as the default modes do: a directory falls in one part, or in
    # two where a part ends inside it. (Balanced parts of a tree this small are LPT over single
    # files, which puts every directory in every part: docs/nfs.md.)
    by_path = "plan={mode: max-files, max_files: 60}"
    (tmp_path / "backing").mkdir()
    fs = LatencyFS(tmp_path / "backing", tmp_path / "mnt", attr_timeout=30, entry_timeout=30)
    dest = fs.mountpoint / "share"

    def counted(run) -> dict:
        """Requests by kind one command makes, on a fresh mount (nothing cached from before)."""
        fs.unmount()
        fs.mount()
        fs.reset()
        run()
        snap = fs.snapshot()
        return {**{k: v for k, v in snap["ops"].items() if v}, "total": snap["total"]}

    def phase(name: str) -> dict:
        return counted(lambda: pipeline(*base_config(ferry_bin, outdir, src, dest, name), by_path))

    try:
        baseline = phase("baseline")
        listing = counted(
            lambda: subprocess.run([ferry_bin, "ls", "-r", dest], check=True, capture_output=True)
        )
        dirs = listing["opendir"]
        assert dirs == 1 + sum(1 for p in src.rglob("*") if p.is_dir() and not p.is_symlink())
        parts = len(report(outdir, "baseline")["partitions"])
        assert parts >= 3
        # The directories a step's jobs read between them: each directory once, and those a part
        # ends inside once more.
        step = dirs + parts - 1
        # Copy (its jobs read what earlier ones made) and verify.
        assert dirs <= baseline["opendir"] <= 2 * step, baseline
        # A few for each job (its roots), none per file.
        assert baseline.get("getattr", 0) < len(content) / 8, baseline

        unchanged = phase("incremental")
        # The destination is not listed at all (the pass plans against the state the baseline
        # carried): one lookup for each entry probed (dest_probe, 64), a few for the roots.
        assert unchanged.get("opendir", 0) <= 1 and not unchanged.get("readdirplus"), unchanged
        assert 64 <= unchanged.get("lookup", 0) <= 64 + 10, unchanged

        _added, _changed, deleted = modify_tree(src, content)
        final = phase("final")
        assert local_snapshot(fs.source / "share") == md5s(content)
        # Only copy and verify read directories, those the change touched; the destination's
        # listing and prune do not (the state is carried, prune deletes from the plan's
        # listings), nor a whole-tree check (the audit's, after the downtime). The files that
        # changed looked up, the probe's 64 entries, and a few requests for each job: far fewer
        # than one a file.
        assert final["opendir"] <= 2 * step, final
        lookups = final.get("lookup", 0) + final.get("getattr", 0)
        assert lookups < len(content) / 4 + 64, final
        assert final.get("unlink", 0) == len(deleted), final
    finally:
        fs.unmount()


@pytest.mark.timeout(240)
def test_incremental_with_nothing_changed_runs_no_transfer(tmp_path, ferry_bin):
    src = tmp_path / "src"
    content = migration_tree(src, files=40, big=0)
    dest = tmp_path / "dst"
    outdir = tmp_path / "results"
    pipeline(*base_config(ferry_bin, outdir, src, dest, "baseline"))
    # The same migration spelt otherwise (issue 42): continued, not refused, not begun again.
    respelt = f"{tmp_path}/./src/"
    pipeline(*base_config(ferry_bin, outdir, respelt, dest, "incremental"))
    rep = report(outdir, "incremental")
    assert rep["plan"]["unchanged"] == len(content) + 1  # the symlink too
    assert rep["totals"]["files"]["planned"] == 0
    assert rep["partitions"] == []
    assert "copy" not in jobs_per_step(rep)
    # A second incremental pass gets its own run directory.
    pipeline(*base_config(ferry_bin, outdir, src, dest, "incremental"), "pass=2")
    assert report(outdir, "incremental-pass2")["totals"]["files"]["planned"] == 0
    recorded = json.loads((outdir / "t" / "migration.json").read_text())
    assert (recorded["source"], recorded["dest"]) == (str(src), str(dest))
    # Another tree under the same run name is refused before any job, naming both ends.
    other = tmp_path / "other"
    migration_tree(other, files=2, big=0)
    proc = pipeline(*base_config(ferry_bin, outdir, other, dest, "final"), expect=None)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "config field 'source'" in text, text[-3000:]
    assert str(src) in text and str(other) in text and "'run_name'" in text
    assert not (outdir / "t" / "final").exists()
    # One pass at a time: a pass that finds the lock held by a running engine stops before any
    # job, naming the holder.
    with held_lock(outdir / "t", "incremental-pass3") as holder:
        proc = pipeline(*base_config(ferry_bin, outdir, src, dest, "final"), expect=None)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 3, text[-3000:]
    assert "another pass of this migration is running: pass incremental-pass3" in text
    assert f"pid {holder.pid}" in text and "Traceback" not in text
    assert not (outdir / "t" / "final").exists()


@pytest.mark.timeout(300)
def test_rerun_after_failed_partition_redoes_only_that_partition(
    tmp_path, ferry_bin, read_only_dir
):
    src = tmp_path / "src"
    content = migration_tree(src, files=30, big=0)
    # The only file under blocked/ lands in exactly one partition.
    content["blocked/only.txt"] = b"needs a directory the destination cannot have yet\n"
    write_file(src, "blocked/only.txt", content["blocked/only.txt"])
    dest = tmp_path / "dst"
    outdir = tmp_path / "results"
    cfg = base_config(ferry_bin, outdir, src, dest, "baseline") + [
        "plan={mode: max-files, max_files: 8}"
    ]

    # The directory blocked/, read-only at the destination (as the source's in every other
    # respect, so nothing but its file needs writing), makes that one copy fail.
    (dest / "blocked").mkdir(parents=True)
    st = (src / "blocked").stat()
    os.utime(dest / "blocked", ns=(st.st_atime_ns, st.st_mtime_ns))
    unblock = read_only_dir(dest / "blocked")
    proc = pipeline(*cfg, expect=None)
    assert proc.returncode != 0
    run = outdir / "t" / "baseline"
    partial = json.loads((run / "report-incomplete.json").read_text())
    assert partial["status"] == "incomplete"
    failed = [p for p in partial["partitions"] if p["state"] == "failed"]
    ok = [p for p in partial["partitions"] if p["state"] == "done"]
    assert len(failed) == 1, partial["partitions"]
    assert len(ok) == len(partial["partitions"]) - 1 >= 2
    copy_failures = [f for f in partial["failures"] if f["stage"] == "copy"]
    assert len(copy_failures) == 1
    assert copy_failures[0]["partition"] == failed[0]["id"]
    assert copy_failures[0]["path"] == "blocked/only.txt"
    # The failed partition's verify never started; the others' did.
    verify_status = {v["id"]: v["state"] for v in partial["verify_partitions"]}
    assert verify_status.pop(failed[0]["id"]) == "pending"
    assert set(verify_status.values()) == {"done"}
    assert not (run / "report.json").exists()
    assert sorted(p.name for p in run.glob("report-incomplete.*")) == [
        "report-incomplete.html",
        "report-incomplete.json",
        "report-incomplete.md",
    ]
    good_outputs = {p["id"]: (run / "copy" / f"part-{p['id']}.json").stat().st_mtime_ns for p in ok}

    unblock()
    proc = pipeline(*cfg)
    assert local_snapshot(dest) == md5s(content)
    rep = report(outdir, "baseline")
    assert rep["status"] == "complete"
    assert jobs_per_step(rep)["copy"] == len(partial["partitions"])  # one benchmark per partition
    for part, mtime in good_outputs.items():
        assert (run / "copy" / f"part-{part}.json").stat().st_mtime_ns == mtime, (
            f"partition {part} was redone"
        )
    # Each job's line names its step and part (the rules' message).
    text = proc.stdout + proc.stderr
    assert text.count(": ferry copy part ") == 1, "only the failed partition may be copied again"
    # Every page of the failed attempt's report went with it.
    assert list(run.glob("report-incomplete.*")) == [] and not (run / "failed").exists()
    # Both runs are in the migration's history, the failed one as failed (docs/pipeline.md, History).
    runs = [json.loads(line) for line in (outdir / "t" / "history.jsonl").read_text().splitlines()]
    assert [(r["status"], r["failed"] > 0) for r in runs] == [("failed", True), ("complete", False)]


@pytest.mark.timeout(240)
def test_prune_refuses_beyond_max_delete(tmp_path, ferry_bin):
    src = tmp_path / "src"
    content = migration_tree(src, files=20, big=0)
    dest = tmp_path / "dst"
    outdir = tmp_path / "results"
    pipeline(*base_config(ferry_bin, outdir, src, dest, "baseline"))
    victims = sorted(content)[:6]
    for rel in victims:
        (src / rel).unlink()
    proc = pipeline(
        *base_config(ferry_bin, outdir, src, dest, "final"), "prune={max_delete: 2}", expect=None
    )
    assert proc.returncode != 0
    for rel in victims:
        assert (dest / rel).exists(), "prune deleted past max_delete"
    # The plan judged the pass's deletions as its prune would: refused before any copy.
    partial = json.loads((outdir / "t" / "final" / "report-incomplete.json").read_text())
    plan = [f for f in partial["failures"] if f["stage"] == "plan"]
    assert plan and "prune would be refused" in str(plan[0]), partial["failures"]
    assert "raise prune.max_delete" in str(plan[0]) and "--max-delete" not in str(plan[0])
    assert "copy" not in jobs_per_step(partial) and "prune" not in jobs_per_step(partial)
    # Its page shows the refusal among the deletions, in the config's keys.
    refused = partial["totals"]["prune"]
    assert refused["refused_by"] == "plan" and "raise prune.max_delete" in refused["refused"]
    page = (outdir / "t" / "final" / "report-incomplete.html").read_text(encoding="utf-8")
    assert "prune refused (by the plan, before any copy)</span>: 6 of " in page, page


def test_a_destination_file_newer_than_its_source_stops_the_pass_at_its_plan(tmp_path, ferry_bin):
    """Something wrote at the destination since the baseline (or the pass's ends are swapped):
    the incremental's plan refuses before any copy, naming copy.overwrite_newer, and the file
    stays; with the key set (a restore of older versions at the source), the pass copies it."""
    src = tmp_path / "src"
    content = migration_tree(src, files=10, big=0)
    dest, outdir = tmp_path / "dst", tmp_path / "results"
    pipeline(*base_config(ferry_bin, outdir, src, dest, "baseline"))
    edited = sorted(content)[0]
    (dest / edited).write_bytes(b"edited at the destination, after the baseline\n")
    proc = pipeline(*base_config(ferry_bin, outdir, src, dest, "incremental"), expect=None)
    assert proc.returncode != 0
    assert (dest / edited).read_bytes() == b"edited at the destination, after the baseline\n"
    partial = json.loads((outdir / "t" / "incremental" / "report-incomplete.json").read_text())
    plan = [f for f in partial["failures"] if f["stage"] == "plan"]
    assert plan and "destination files are newer" in str(plan[0]), partial["failures"]
    assert "set copy.overwrite_newer: true" in str(plan[0]), plan[0]
    assert "copy" not in jobs_per_step(partial)
    pipeline(
        *base_config(ferry_bin, outdir, src, dest, "incremental"),
        "copy={block_size: 1MiB, concurrency: 4, parallel_files: 4, overwrite_newer: true}",
    )
    assert (dest / edited).read_bytes() == (src / edited).read_bytes()
