# The run report: built from the worker's own --json outputs and Snakemake's benchmark files, so
# its numbers are the ones the jobs measured, not estimates.


rule report:
    input:
        unpack(report_inputs),
    output:
        json=f"{RUN}/report.json",
        md=f"{RUN}/report.md",
    log:
        f"{RUN}/logs/report.log",
    params:
        run_dir=lambda wc, output: os.path.dirname(output.json),
        run_name=RUN_NAME,
        phase=PHASE,
        source=ferrylib.redact(SOURCE),
        dest=ferrylib.redact(DEST),
        checksum=FINAL and config["checksum"],
    threads: res("report", "threads")
    resources:
        **requests("report"),
    conda:
        "../envs/ferry.yaml"
    script:
        "../scripts/ferry_report.py"
