"""The run report of one phase: report.json (for machines), report.md and report.html (for
people). One command for both engines (docs/pipeline.md, "The report"):

    ferry_report.py build RUN_DIR --run-name N --phase P [--pass K] --source S --dest D [--checksum]
                          [--final-check] [--final-checksum] [--history DIR] [--json FILE --md FILE | --by-status]

(the options after RUN_DIR: ferry_config.py's run.report_args). One way through: ferry_run.py
reads the run directory (each worker document through its schema), ferry_model.py makes the
report of it, and the renderers write it: report.json as it is, report.md (ferry_markdown.py),
report.html (ferry_html.py). With --history (the run directory as it is on disk), the run's
record is appended to the migration's history first and the report carries the history and
the projection of the final pass (ferry_history.py).

Built by scanning the run directory rather than from a list of inputs, so the same code serves a
finished run (everything present) and a failed one (whatever it left: then the report is
report-incomplete.*, and the successful re-run writes the real one). The partitions the report
expects come from plan.json; files of other partitions in the directory (left from an older
plan) are ignored.
"""

from __future__ import annotations

import argparse
import os
import sys

import ferry_history
import ferry_html
import ferry_markdown
import ferry_model
import ferry_projection
import ferry_run
import ferry_run_dir
from ferry_run_dir import REPORT
from ferrylib import load_json, write_json


def build(
    run_dir: str,
    run_name: str,
    phase: str,
    source: str,
    dest: str,
    complete: bool,
    final_check_expected: bool = False,
) -> dict:
    """The report of run_dir as these options describe it (without its history)."""
    args = ["--run-name", run_name, "--phase", phase, "--source", source, "--dest", dest]
    opts = ferry_run.options(run_dir, args + (["--final-check"] if final_check_expected else []))
    return ferry_model.build(ferry_run.read(run_dir), opts, complete)


def write(report: dict, paths: dict[str, str]) -> None:
    """The report's three forms at paths {json, md, html} (ferry_run_dir.report_paths)."""
    write_json(paths["json"], ferry_model.check(report, paths["json"]))
    tmp = f"{paths['md']}.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(ferry_markdown.markdown(report))
    os.replace(tmp, paths["md"])
    ferry_html.write(report, paths["html"])


def add_history(report: dict, opts, ended_in_error: bool = False) -> None:
    """Append this run's record to the migration's history (--history) and put the history and
    the final pass's projection into the report. A history that cannot be written (a run
    directory this machine does not see) costs the report nothing but these sections."""
    if not opts.history:
        return
    if not os.path.isdir(opts.history):
        # The report runs where the run directory is not (an Azure Batch node): a history made
        # here would be lost with the node.
        print(
            f"ferry: no history: the run directory {opts.history} is not on this machine",
            file=sys.stderr,
        )
        return
    try:
        ferry_history.record_run(
            opts.history, report, ended_in_error=ended_in_error, pass_=opts.pass_
        )
        records = ferry_history.load(ferry_history.run_root(opts.history))
    except OSError as err:
        print(f"ferry: no history: {err}", file=sys.stderr)
        return
    report["history"] = records
    report["projection"] = ferry_projection.project(
        records,
        checksum=opts.checksum or opts.final_checksum,
        settings=ferry_projection.Settings(
            max_delete=opts.max_delete or ferry_projection.DEFAULT_MAX_DELETE,
            force=opts.prune_force,
            dest_listing=opts.dest_listing,
            state=opts.state,
        ),
    )


def write_incomplete(run_dir: str, report_args: list[str]) -> None:
    """onerror hook: record what the failed run achieved; never raise (the run already failed)."""
    try:
        if not os.path.isdir(run_dir):
            return
        opts = ferry_run.options(run_dir, report_args)
        report = ferry_model.build(ferry_run.read(run_dir), opts, complete=False)
        add_history(report, opts, ended_in_error=True)
        paths = ferry_run_dir.report_paths(run_dir, complete=False)
        write(report, paths)
        print(f"ferry: partial report in {paths['md']}", file=sys.stderr)
    except Exception as err:  # noqa: BLE001 - a broken partial report must not hide the real error
        print(f"ferry: could not write the partial report: {err}", file=sys.stderr)


def ended(run_dir: str, report_json: str | None = None) -> list[str]:
    """What both engines print when a pass completes: where its report is, and the one-line
    projection of the final pass (ferry_history.py). report_json: where to read the report when
    it is not yet in run_dir (Nextflow publishes it on its own); [] without a report."""
    paths = ferry_run_dir.report_paths(run_dir, complete=True)
    source = report_json or paths["json"]
    report = load_json(source)
    if report is None:
        return []
    ferry_model.check(report, source)
    said = [
        f"ferry: the {report['phase']} pass is complete; its report: {paths['html']} "
        f"(and {paths['md']})"
    ]
    projection = report.get("projection")  # none in a report made without the history
    if projection:
        # The time, then whether the final pass would go through: a line each.
        said.append(f"ferry: {ferry_projection.line(projection, verdict=False)}")
        if projection["ok"]:
            said.append(f"ferry: {ferry_projection.verdict_words(projection['final_pass'])}")
    return said


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ferry_report.py", description="The run report of one pipeline phase."
    )
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser(
        "build",
        help="write the report of RUN_DIR",
        parents=[ferry_run.options_parser(add_help=False)],
    )
    b.add_argument(
        "--json", dest="json_path", help=f"report JSON (default RUN_DIR/{REPORT['json']})"
    )
    b.add_argument("--md", dest="md_path", help=f"report Markdown (default RUN_DIR/{REPORT['md']})")
    b.add_argument(
        "--by-status",
        action="store_true",
        help="name the files report-incomplete.* when the run is incomplete",
    )
    e = sub.add_parser(
        "ended", help="after a complete pass: where its report is, and the projection"
    )
    e.add_argument("run_dir")
    e.add_argument(
        "--json", dest="json_path", help=f"the report to read (default RUN_DIR/{REPORT['json']})"
    )
    return p


def main(argv=None) -> int:
    opts = parser().parse_args(argv)
    if opts.command == "ended":
        for line in ended(opts.run_dir, opts.json_path):
            print(line)
        return 0
    report = ferry_model.build(ferry_run.read(opts.run_dir), opts)
    add_history(report, opts)
    paths = ferry_run_dir.report_paths(
        opts.run_dir, complete=not opts.by_status or report["status"] == "complete"
    )
    if opts.json_path:
        paths["json"] = opts.json_path
    if opts.md_path:
        paths["md"] = opts.md_path
        paths["html"] = os.path.splitext(opts.md_path)[0] + ".html"
    write(report, paths)
    print(f"ferry: report {report['status']}, {len(report['failures'])} failures", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
