# The run report: built by workflow/scripts/ferry_report.py (the same command the Nextflow
# pipeline runs) from the worker's own --json outputs and the steps' timing files, so its numbers
# are the ones the jobs measured, not estimates.


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
        args=shlex.join(RUN_INFO["report_args"]),
    shell:
        f"{literal(sys.executable)} {literal(REPORT)} build {literal(RUN)}"
        " {params.args} --json {output.json:q} --md {output.md:q} 2> {log:q}"
