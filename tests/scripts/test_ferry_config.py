"""The pipelines' one contract, without an engine: ferry_config.resolve() (the config checked once,
old key names moved, every step's command, requests and retries) and ferry_task.py (a step's
records, placeholders, failed-job handling, prune's guard)."""

from __future__ import annotations

import json
import os
import socket

import ferry_config
import ferry_report
import ferry_run
import ferry_task
import pytest
from ferrylib import ConfigError
from support.rundir import RunDir

MIGRATION = {"source": "/data/share", "dest": "az://archive/share"}


def resolve(**params):
    return ferry_config.resolve({**MIGRATION, **params}, basedir="/opt/ferry")


def test_every_step_has_its_command_requests_and_retries():
    res = resolve(phase="incremental", job_retries=2)
    assert set(res["steps"]) == set(ferry_config.STEPS)
    for step, spec in res["steps"].items():
        assert spec["retries"] == 2, step
        assert set(spec["resources"]) == {
            "threads",
            "mem_mb",
            "runtime",
            "slurm_partition",
            "slurm_account",
            "slurm_spread",
        }, step
        assert spec["resources"]["slurm_spread"] is False, step
        if step not in ("report", "replicate"):
            assert {k: spec["values"][k] for k in MIGRATION} == MIGRATION, step
    copy = res["steps"]["copy"]["argv"]
    assert copy[:5] == [
        "/opt/ferry/worker/target/release/ferry",
        "copy",
        "{source}",
        "{dest}",
        "--files-from",
    ]
    assert copy[copy.index("--compare") + 1] == "size-mtime"
    # make_dest asks for what the listings ask for, final_check for what verify asks for.
    assert res["steps"]["make_dest"]["resources"] == res["steps"]["list_source"]["resources"]
    assert res["steps"]["final_check"]["resources"] == res["steps"]["verify"]["resources"]
    assert (
        res["run"]["dir"] == "results/share-" + res["run"]["name"].split("-")[-1] + "/incremental"
    )


def test_baseline_copies_without_comparing_and_plans_from_one_listing():
    steps = resolve(phase="baseline")["steps"]
    copy = steps["copy"]["argv"]
    assert copy[copy.index("--compare") + 1] == "none"
    assert "{dest_listing}" not in steps["plan"]["argv"]
    assert "{dest_listing}" in resolve(phase="final")["steps"]["plan"]["argv"]


def test_list_concurrency_reaches_every_step_that_lists():
    assert all("FERRY_LIST_CONCURRENCY" not in spec["env"] for spec in resolve()["steps"].values())
    steps = resolve(list={"concurrency": 4}, auth="key")["steps"]
    for step in ("list_source", "list_dest", "copy", "verify", "prune", "final_check"):
        assert steps[step]["env"] == {"FERRY_AUTH": "key", "FERRY_LIST_CONCURRENCY": "4"}, step


def test_requests_fall_back_to_default_and_carry_slurm_settings():
    res = resolve(
        resources={
            "default": {"threads": 1, "mem_mb": 500, "runtime": 9},
            "copy": {"mem_mb": 3000, "slurm_partition": "big", "slurm_account": "lab"},
            "list": {},
        }
    )
    assert res["steps"]["copy"]["resources"] == {
        "threads": 2,
        "mem_mb": 3000,
        "runtime": 720,
        "slurm_partition": "big",
        "slurm_account": "lab",
        "slurm_spread": False,
    }
    # An empty table takes every value from the configured list table merged with the defaults.
    assert res["steps"]["list_source"]["resources"]["slurm_partition"] == ""
    assert res["steps"]["report"]["resources"]["mem_mb"] == 1000


def test_old_key_names_still_work_with_a_warning_each():
    res = resolve(
        worker={"block_size": "4MiB", "auth": "key", "include": ["*.txt"]},
        partition={"mode": "parts", "parts": 3},
        delete={"max_delete": 7},
        resources={"transfer": {"mem_mb": 1234}},
        replicate={"runtime": 99},
    )
    cfg = res["config"]
    assert cfg["copy"]["block_size"] == "4MiB" and cfg["copy"]["max_retries"] == 5
    assert cfg["auth"] == "key" and cfg["list"]["include"] == ["*.txt"]
    assert cfg["plan"]["parts"] == 3 and cfg["prune"]["max_delete"] == 7
    assert (
        cfg["resources"]["copy"]["mem_mb"] == 1234
        and cfg["resources"]["replicate"]["runtime"] == 99
    )
    assert not {"worker", "partition", "delete"} & set(cfg)
    assert len(res["warnings"]) == 7
    assert "config field 'worker.block_size'" not in " ".join(res["warnings"])
    assert any(w.startswith("config field 'worker' is now 'copy'") for w in res["warnings"])
    assert res["steps"]["copy"]["env"] == {"FERRY_AUTH": "key"}
    assert res["steps"]["list_source"]["argv"][-4:-2] == ["--include", "*.txt"]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"phase": "sideways"}, "phase"),
        ({"plan": {"parts": 0}}, "plan.parts"),
        ({"copy": {"concurrency": "lots"}}, "copy.concurrency"),
        ({"copy": {"speed": 3}}, "copy.speed"),
        ({"plan": {"max_bytes": "12 parsecs"}}, "plan.max_bytes"),
        ({"copy": {"block_size": "lots"}}, "copy.block_size"),
        ({"resources": {"copy": {"mem_mb": -5}}}, "resources.copy.mem_mb"),
        ({"dest": "/data/share/"}, "source' and 'dest"),
    ],
)
def test_one_error_format_naming_the_field(params, field):
    with pytest.raises(ConfigError, match=f"config field.? '{field}'"):
        resolve(**params)


def test_the_final_check_and_report_follow_the_phase():
    # The whole-tree check is the audit's, after the downtime, unless asked for inside it.
    assert not resolve(phase="final")["run"]["final_check"]
    assert resolve(phase="final", final_check=True)["run"]["final_check"]
    inside = {"phase": "final", "final_check": True}
    assert not resolve(**inside, list={"include": ["a*"], "exclude": []})["run"]["final_check"]
    assert not resolve(**inside, prune={"dry_run": True})["run"]["final_check"]
    args = resolve(phase="final", checksum=True, final_check=True)["run"]["report_args"]
    # The final check compares metadata too: directories (which no partition's verify sees),
    # attributes and ACLs.
    assert "--metadata" in resolve(**inside)["steps"]["final_check"]["argv"]
    assert (
        args[args.index("--phase") + 1] == "final"
        and "--checksum" in args
        and "--final-check" in args
    )


def test_the_steps_each_phase_runs():
    """run.phase_steps: what the Snakemake report asks for, and so what a phase runs."""
    every = ["plan", "copy", "verify", "carry", "report"]

    def steps(**params):
        found = resolve(**params)["run"]["phase_steps"]
        assert [s for s in ferry_config.STEPS if s in found] == found, "in STEPS order"
        return set(found) - set(every)

    assert steps(phase="baseline") == {"list_source", "make_dest"}
    assert steps(phase="incremental") == {"list_source", "list_dest"}
    assert steps(phase="audit") == {"list_source", "list_dest"}
    assert steps(phase="final") == {"list_source", "list_dest", "prune", "prune_dirs"}
    assert steps(phase="final", final_check=True) == {
        "list_source",
        "list_dest",
        "prune",
        "prune_dirs",
        "final_check",
    }
    assert "shard" in steps(phase="incremental", list={"jobs": 2})
    assert set(every) <= set(resolve(phase="audit")["run"]["phase_steps"])


def test_the_report_is_told_the_pass_and_where_the_run_directory_is():
    """Nextflow builds the report on a copy of the records in a work directory: it appends the
    run's record to the history beside the real run directory, named absolute."""
    resolved = resolve(phase="incremental", **{"pass": 3}, outdir="out", run_name="m")
    args = resolved["run"]["report_args"]
    assert args[args.index("--pass") + 1] == "3"
    history = args[args.index("--history") + 1]
    assert history.startswith("/") and history.endswith("/out/m/incremental-pass3")
    # The projection of the final pass in an incremental pass's report verifies as the final will.
    assert "--final-checksum" not in args and "--checksum" not in args
    args = resolve(phase="incremental", checksum=True)["run"]["report_args"]
    assert "--final-checksum" in args and "--checksum" not in args


def test_one_report_command_for_both_engines(tmp_path):
    """The report's command comes whole from the resolution (run.report_argv): each engine only
    says where the records are ({run_dir}: the run directory, or Nextflow's gathered copy) and
    the history ({history}: the run directory on disk, or Nextflow's copy staged into the task),
    and the pages are named by the run's status, whichever engine made them."""
    run = resolve(phase="final", checksum=True)["run"]
    staged = str(tmp_path / "history" / "final")
    argv = ferry_task.fill(run["report_argv"], {"run_dir": str(tmp_path), "history": staged})
    args = run["report_args"]
    at = args.index("--history") + 1
    assert argv == ["build", str(tmp_path), *args[:at], staged, *args[at + 1 :], "--by-status"]
    opts = ferry_report.parser().parse_args(argv)
    assert opts.run_dir == str(tmp_path) and opts.by_status and opts.checksum
    assert opts.history == staged
    assert opts.json_path is None and opts.md_path is None


def test_cli_prints_the_resolution_or_a_named_error(tmp_path, capsys):
    params = tmp_path / "params.json"
    params.write_text(json.dumps({"phase": "final"}))
    assert ferry_config.main(["resolve", str(params)]) == 2
    assert (
        "ferry: invalid configuration: config fields 'source' and 'dest' are required"
        in capsys.readouterr().err
    )
    params.write_text(json.dumps({**MIGRATION, "dest": "rel/dest", "pass": "3"}))
    assert ferry_config.main(["resolve", str(params), "--absolute"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["config"]["dest"] == str(tmp_path.cwd() / "rel" / "dest")
    assert res["run"]["dir"].endswith("/baseline-pass3")


def test_fill_replaces_whole_arguments_only():
    argv = ["ferry", "ls", "{source}", "{cut}", "a{source}", "{not an id}"]
    assert ferry_task.fill(argv, {"source": "/s p", "cut": ["--parts", "2"]}) == [
        "ferry",
        "ls",
        "/s p",
        "--parts",
        "2",
        "a{source}",
        "{not an id}",
    ]
    with pytest.raises(ferry_task.MissingValue, match="no value for {dest}"):
        ferry_task.fill(["{dest}"], {})


def test_records_layout():
    rec = ferry_task.records("copy", "00003", "run")
    assert rec == (
        "run/copy/part-00003.json",
        "run/logs/copy/part-00003.log",
        "run/benchmarks/copy/part-00003.tsv",
        "run/failed/copy-part-00003.json",
    )
    assert ferry_task.records("plan", root="run").out is None


def _spec(script: str) -> str:
    return json.dumps(
        {"argv": ["sh", "-c", script, "sh", "{manifest}"], "values": {}, "env": {"GREETING": "hi"}}
    )


def test_a_step_that_succeeds_leaves_its_output_log_and_timing(tmp_path):
    rc = ferry_task.main(
        [
            "copy",
            "--records",
            str(tmp_path),
            "--part",
            "00001",
            "--set",
            "manifest=m.tsv",
            "--spec",
            _spec('echo "{\\"got\\": \\"$1 $GREETING\\"}"; echo said >&2'),
        ]
    )
    rec = ferry_task.records("copy", "00001", str(tmp_path))
    assert rc == 0
    assert json.loads(open(rec.out).read()) == {"got": "m.tsv hi"}
    assert open(rec.log).read() == "said\n"
    header, row = open(rec.bench).read().splitlines()
    assert header.split("\t") == ["s", "cpu_time", "max_rss", "node"]
    assert row.split("\t")[3] == (os.environ.get("SLURMD_NODENAME") or socket.gethostname())
    assert not (tmp_path / "failed").exists()


def test_a_failed_step_keeps_its_report_under_failed_and_passes_the_status_on(tmp_path):
    rec = ferry_task.records("copy", "00002", str(tmp_path))
    rc = ferry_task.main(
        [
            "copy",
            "--records",
            str(tmp_path),
            "--part",
            "00002",
            "--set",
            "manifest=m.tsv",
            "--spec",
            _spec('echo "{\\"failed\\": 1}"; exit 1'),
        ]
    )
    assert rc == 1
    assert not (tmp_path / "copy" / "part-00002.json").exists()
    assert json.loads(open(rec.failed).read()) == {"failed": 1}
    assert (tmp_path / "benchmarks" / "copy" / "part-00002.tsv").exists()
    # A later success clears the earlier failure.
    assert (
        ferry_task.main(
            [
                "copy",
                "--records",
                str(tmp_path),
                "--part",
                "00002",
                "--set",
                "manifest=m.tsv",
                "--spec",
                _spec("echo '{}'"),
            ]
        )
        == 0
    )
    assert not (tmp_path / "failed" / "copy-part-00002.json").exists()


def test_a_signal_reads_as_the_shell_reports_it(tmp_path):
    rc = ferry_task.main(
        [
            "copy",
            "--records",
            str(tmp_path),
            "--part",
            "0",
            "--set",
            "manifest=m",
            "--spec",
            _spec("kill -9 $$"),
        ]
    )
    assert rc == 137


def test_prune_runs_the_worker_only_when_its_guard_lets_it(tmp_path):
    """The guard's verdicts: tests/scripts/test_ferry_report.py. Here, that a refusal is logged and
    fails the step without running the command, and that a pass runs it."""
    spec = json.dumps({"argv": ["sh", "-c", "echo '{\"deleted\": 0}'"], "values": {}})
    jobs = {
        ("prune", "--part", "00000"): ("logs/prune/part-00000.log", "prune/part-00000.json"),
        ("prune_dirs",): ("logs/prune_dirs.log", "prune/dirs.json"),
    }
    for job, (log, out) in jobs.items():
        assert ferry_task.main([*job, "--records", str(tmp_path), "--spec", spec]) == 1
        assert "ferry: prune refused: no plan" in (tmp_path / log).read_text()
        assert not (tmp_path / out).exists()
    RunDir(tmp_path).plan()
    for job, (_, out) in jobs.items():
        assert ferry_task.main([*job, "--records", str(tmp_path), "--spec", spec]) == 0
        assert json.loads((tmp_path / out).read_text()) == {"deleted": 0}


# --- list.jobs: the listings taken by several jobs ------------------------------------------------


def test_one_list_job_per_side_runs_todays_commands():
    res = resolve(phase="incremental")
    assert res["config"]["list"]["jobs"] == 1 and res["run"]["shards"] == []
    steps = res["steps"]
    for step in ("list_source", "list_dest", "plan", "prune", "prune_dirs", "carry"):
        assert not {"--shards", "--shard", "{shards}"} & set(steps[step]["argv"]), step
    assert steps["list_dest"]["argv"][3:] == [
        "--recursive",
        "--format",
        "tsv",
        "--carried",
        "{state}",
        "--pass",
        "incremental",
        "--probe",
        "64",
        "--summary",
        "{summary}",
    ]
    plain = {"source_listing": "listing/source.tsv", "dest_listing": "listing/dest.tsv"}
    for step in ("plan", "carry"):
        assert steps[step]["listings"] == plain, step


def test_list_jobs_share_one_cut_of_the_key_space_and_one_carried_decision():
    res = resolve(phase="incremental", list={"jobs": 3}, dest_probe=5)
    steps = res["steps"]
    assert res["run"]["shards"] == ["1", "2", "3"]
    assert steps["shard"]["argv"][1:] == [
        "shard",
        "{source}",
        "{dest}",
        "--jobs",
        "3",
        "--out",
        "{out}",
        "--carried",
        "{state}",
        "--pass",
        "incremental",
        "--probe",
        "5",
    ]
    assert steps["shard"]["values"]["state"] == steps["list_dest"]["values"]["state"]
    assert steps["shard"]["resources"] == steps["list_source"]["resources"]
    # Each list job lists its range; the destination's follows the shard step's decision.
    source = steps["list_source"]["argv"]
    assert source[source.index("--shards") :] == [
        "--shards",
        "{shards}",
        "--shard",
        "{shard}",
        "--summary",
        "{summary}",
    ]
    dest = steps["list_dest"]["argv"]
    assert dest[dest.index("--carried") :] == [
        "--carried",
        "{state}",
        "--pass",
        "incremental",
        "--shards",
        "{shards}",
        "--shard",
        "{shard}",
        "--summary",
        "{summary}",
    ]
    # Every reader of the listings reads the N of each side as one.
    sharded = {
        "source_listing": "listing/source-{shard}.tsv",
        "dest_listing": "listing/dest-{shard}.tsv",
    }
    for step in ("plan", "carry"):
        argv = steps[step]["argv"]
        assert argv[argv.index("--shards") + 1] == "{shards}", step
        assert steps[step]["listings"] == sharded, step
    assert "{dest_listing}" in steps["carry"]["argv"]
    # Prune reads what the plan's join decided, no listing.
    prune = steps["prune"]["argv"]
    assert prune[prune.index("--plan") + 1] == "{plan_dir}"
    assert not {"--shards", "--files-from", "--dest-from"} & set(prune)


def test_the_shard_step_decides_as_the_destination_listing_did():
    baseline = resolve(phase="baseline", list={"jobs": 2})["steps"]
    # The baseline lists no destination: the shard step cuts by the source alone.
    assert baseline["shard"]["argv"][1:] == ["shard", "{source}", "--jobs", "2", "--out", "{out}"]
    assert "--shards" not in baseline["carry"]["argv"]  # the baseline's carry reads no listing
    assert "--shards" in baseline["plan"]["argv"]
    for params in ({"phase": "audit"}, {"phase": "final", "dest_listing": "fresh"}):
        argv = resolve(list={"jobs": 2}, **params)["steps"]["shard"]["argv"]
        assert argv[-1] == "--fresh", params
    assert "--fresh" not in resolve(phase="final", list={"jobs": 2})["steps"]["shard"]["argv"]


@pytest.mark.parametrize("jobs", [0, "two"])
def test_list_jobs_is_a_count_of_one_or_more(jobs):
    with pytest.raises(ConfigError, match="config field 'list.jobs'"):
        resolve(list={"jobs": jobs})


def test_a_list_job_leaves_its_own_records_and_a_worker_writes_its_own_output(tmp_path):
    """A list job's listing, summary, log and timing go to its sharded records, its {shard} and
    the shards file filled in; a verb that writes its document itself (`--out`) gets a path
    where the task's output goes."""
    script = 'printf "%s\\n" "$@"; printf "{}" > "$3"'
    spec = {
        "argv": ["sh", "-c", script, "sh", "{shard}", "{shards}", "{summary}"],
        "values": {},
    }
    args = ["list_source", "--records", str(tmp_path), "--shard", "2"]
    assert ferry_task.main([*args, "--spec", json.dumps(spec)]) == 0
    rec = ferry_task.records("list_source", root=str(tmp_path), shard="2")
    assert rec.out == str(tmp_path / "listing" / "source-2.tsv")
    assert open(rec.out).read().splitlines() == [
        "2",
        str(tmp_path / "listing" / "shards.json"),
        str(tmp_path / "listing" / "source-2-summary.json"),
    ]
    assert os.path.exists(rec.log) and os.path.exists(rec.bench)
    assert rec.bench.endswith(os.path.join("benchmarks", "list_source", "shard-2.tsv"))

    shard = {"argv": ["sh", "-c", 'echo cut; echo \'{"jobs": 2}\' > "$1"', "sh", "{out}"]}
    assert ferry_task.main(["shard", "--records", str(tmp_path), "--spec", json.dumps(shard)]) == 0
    rec = ferry_task.records("shard", root=str(tmp_path))
    assert json.loads(open(rec.out).read()) == {"jobs": 2}
    assert open(rec.log).read() == "cut\n"
    assert not os.path.exists(rec.out + ".tmp")
    # Written where the engine publishes it from (Nextflow's SHARD): a copy stays among the
    # records, for the report.
    os.remove(rec.out)
    elsewhere = str(tmp_path / "published.json")
    args = ["shard", "--records", str(tmp_path), "--out", elsewhere]
    assert ferry_task.main([*args, "--spec", json.dumps(shard)]) == 0
    assert json.loads(open(elsewhere).read()) == json.loads(open(rec.out).read()) == {"jobs": 2}


def test_a_plan_over_list_jobs_reads_the_patterns_the_worker_expands(tmp_path):
    spec = {
        "argv": ["sh", "-c", 'printf "%s\\n" "$@"', "sh", "{source_listing}", "{dest_listing}"],
        "values": {},
        "listings": {
            "source_listing": "listing/source-{shard}.tsv",
            "dest_listing": "listing/dest-{shard}.tsv",
        },
    }
    assert ferry_task.main(["plan", "--records", str(tmp_path), "--spec", json.dumps(spec)]) == 0
    log = (tmp_path / "logs" / "plan.log").read_text().splitlines()
    assert log == [
        str(tmp_path / "listing" / "source-{shard}.tsv"),
        str(tmp_path / "listing" / "dest-{shard}.tsv"),
    ]


def test_a_pass_of_another_migration_under_its_run_name_is_refused(tmp_path, monkeypatch):
    """Issue 42: the first pass records what the migration's ends are; a later pass spelt
    otherwise continues it, and one whose end differs (a `run_name` reused) is refused before
    anything runs, naming both and the key to change."""
    import ferry_history

    monkeypatch.chdir(tmp_path)
    (tmp_path / "share").mkdir()
    first = resolve(source="share", outdir="out", run_name="m")
    ferry_history.start(
        first["run"]["dir"], "snakemake", [], pid=os.getpid(), migration=first["run"]["migration"]
    )
    recorded = json.loads((tmp_path / "out" / "m" / "migration.json").read_text())
    assert recorded == {
        "version": 1,
        "source": str(tmp_path / "share"),
        "dest": first["run"]["migration"]["dest"],
    }
    resolve(source=f"{tmp_path}/share/", outdir="out", run_name="m", phase="incremental")
    (tmp_path / "other").mkdir()
    with pytest.raises(ConfigError) as refused:
        resolve(source="other", outdir="out", run_name="m", phase="final")
    message = str(refused.value)
    assert "config field 'source'" in message and "'run_name'" in message
    assert str(tmp_path / "other") in message and str(tmp_path / "share") in message


def test_a_migration_begun_under_its_spelling_keeps_its_run_directory(tmp_path, monkeypatch):
    """Run roots named after a spelling (before names were derived from what the ends are) are
    continued, so that an upgrade mid-migration does not start another one."""
    from ferrylib import legacy_run_name

    monkeypatch.chdir(tmp_path)
    (tmp_path / "share").mkdir()
    spelt = legacy_run_name("share/", MIGRATION["dest"])
    (tmp_path / "out" / spelt).mkdir(parents=True)
    assert resolve(source="share/", outdir="out")["run"]["name"] == spelt
    assert resolve(source="share", outdir="out")["run"]["name"] != spelt


def test_ctrl_c_stops_the_worker_and_keeps_the_steps_records_without_a_traceback(tmp_path):
    """SIGINT to the step (an engine's Ctrl-C, or a signal to this process alone) is passed on to
    the worker as SIGTERM, which it stops on even where it inherited SIGINT ignored (a Nextflow
    task); the step then leaves its log and timing, exits 128 + 15, and prints no traceback. The
    spec comes from a file (--spec-file), as Snakemake's rules pass it."""
    import signal
    import subprocess
    import sys
    import time

    started = tmp_path / "started"
    worker = f"import pathlib, time; pathlib.Path({str(started)!r}).touch(); time.sleep(60)"
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"argv": [sys.executable, "-c", worker], "values": {}}))
    step = subprocess.Popen(
        [sys.executable, ferry_task.__file__, "list_source", "--records", str(tmp_path / "run")]
        + ["--spec-file", str(spec)],
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 30
    while not started.exists():
        assert step.poll() is None and time.monotonic() < deadline, "the worker never started"
        time.sleep(0.05)
    step.send_signal(signal.SIGINT)
    _out, err = step.communicate(timeout=30)
    assert step.returncode == 128 + signal.SIGTERM, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    rec = ferry_task.records("list_source", root=str(tmp_path / "run"))
    assert os.path.exists(rec.log) and os.path.exists(rec.bench)
    assert not os.path.exists(rec.out), "a stopped listing is no listing"


# --- older over newer, and a prune that cannot ask (issue 42) ----------------------------------


@pytest.mark.parametrize("overwrite", [False, True])
def test_copy_overwrite_newer_reaches_the_plan_and_every_copy(overwrite):
    """The plan decides what is copied: it and the copies it feeds judge the same rule, lifted
    by one key; a refusal is said again in the key's terms."""
    steps = resolve(phase="final", copy={"overwrite_newer": overwrite})["steps"]
    for step in ("plan", "copy"):
        assert ("--overwrite-newer" in steps[step]["argv"]) is overwrite, step
        assert ["pass --overwrite-newer", "set copy.overwrite_newer: true"] in steps[step][
            "config_keys"
        ], step
    assert "--overwrite-newer" not in resolve(phase="final")["steps"]["copy"]["argv"]


def test_the_pipelines_prune_without_asking_and_their_plan_is_not_told_to(tmp_path):
    steps = resolve(phase="final")["steps"]
    for step in ("prune", "prune_dirs"):
        assert "--yes" in steps[step]["argv"], step
    assert "--yes" not in steps["plan"]["argv"]
    log = tmp_path / "plan.log"
    log.write_text(
        "ferry plan: 3 of 9 files to copy\n"
        "ferry: plan refused: the pass's copy would be refused: 1 destination files are newer than"
        " the source's (a.txt): …; if the source's older versions are meant (a restore), pass"
        " --overwrite-newer\n"
    )
    ferry_task.in_config_terms(str(log), ferry_config.PRUNE_KEYS)
    said = log.read_text().splitlines()
    # The engines show the log as it is: the worker's flag is nowhere in it, the key is.
    assert said[0] == "ferry plan: 3 of 9 files to copy" and len(said) == 2
    assert said[-1].endswith("set copy.overwrite_newer: true (in the pipeline's config)")
    assert "--overwrite-newer" not in log.read_text()


def test_an_attempt_that_never_finished_is_kept_beside_for_the_report(tmp_path):
    """A retry's progress file would replace the lost attempt's: it is kept as .lost-<n>.json,
    which the report reads (where the attempt ran, the requests it made); a finished one is not."""
    progress = tmp_path / "progress" / "copy-part-00000.json"
    progress.parent.mkdir()

    def attempt(node: str, finished: bool) -> None:
        doc = {
            "version": 1,
            "command": "copy",
            "pid": 1,
            "host": "elsewhere",
            "node": node,
            "started": 1.0,
            "updated": 2.0,
            "finished": finished,
            "files": {"done": 0, "failed": 0, "total": None},
            "bytes": {"done": 1000, "total": None},
            "bytes_per_second": 500,
            "requests": RunDir.requests(),
        }
        progress.write_text(json.dumps(doc))
        ferry_task.keep_lost(str(progress), str(tmp_path), str(tmp_path / "rec"))

    attempt("node2", finished=False)
    attempt("node3", finished=False)
    attempt("node1", finished=True)
    assert [doc["node"] for doc in ferry_run.lost(str(progress))] == ["node2", "node3"]
    assert json.loads(progress.read_text())["node"] == "node1"
    # Among the records an engine publishes on its own (Nextflow's rec/) too.
    assert sorted(p.name for p in (tmp_path / "rec" / "progress").iterdir()) == [
        "copy-part-00000.lost-1.json",
        "copy-part-00000.lost-2.json",
    ]
