# The run report: built by workflow/scripts/ferry_report.py with the command the resolution gives
# both engines (run.report_argv) from the worker's own --json outputs and the steps' timing files,
# so its numbers are the ones the jobs measured, not estimates. A run found incomplete writes
# report-incomplete.*, not the outputs below, and so fails.


rule report:
    input:
        unpack(report_inputs),
    output:
        json=REPORT_PATHS["json"],
        md=REPORT_PATHS["md"],
        # Written beside report.md by the same command (workflow/scripts/ferry_html.py).
        html=REPORT_PATHS["html"],
    log:
        os.path.join(RUN, ferry_run_dir.REPORT["log"]),
    conda:
        "../envs/ferry.yaml"
    threads: threads("report")
    resources:
        **requests("report"),
    params:
        argv=shlex.join(
            ferry_run_dir.fill(
                RUN_INFO["report_argv"],
                {"run_dir": RUN, "history": os.path.abspath(RUN)},
            )
        ),
    message:
        message("report")
    shell:
        f"{literal(sys.executable)} {literal(REPORT)}" + " {params.argv} 2> {log:q}"
