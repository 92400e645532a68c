# The run report: built by workflow/scripts/ferry_report.py (the same command the Nextflow
# pipeline runs) from the worker's own --json outputs and Snakemake's benchmark files, so its
# numbers are the ones the jobs measured, not estimates.


rule report:
    input:
        unpack(report_inputs),
    output:
        json=f"{RUN}/report.json",
        md=f"{RUN}/report.md",
    log:
        f"{RUN}/logs/report.log",
    conda:
        "../envs/ferry.yaml"
    threads: res("report", "threads")
    resources:
        **requests("report"),
    params:
        python=sys.executable,
        script=os.path.join(workflow.basedir, "workflow", "scripts", "ferry_report.py"),
        run_dir=lambda wc, output: os.path.dirname(output.json),
        run_name=RUN_NAME,
        phase=PHASE,
        source=ferrylib.redact(SOURCE),
        dest=ferrylib.redact(DEST),
        flags=" ".join(
            (["--checksum"] if FINAL and config["checksum"] else [])
            + (["--final-check"] if FINAL_CHECK else [])
        ),
    shell:
        "{params.python:q} {params.script:q} build {params.run_dir:q} --run-name {params.run_name:q}"
        " --phase {params.phase:q} --source {params.source:q} --dest {params.dest:q} {params.flags}"
        " --json {output.json:q} --md {output.md:q} 2> {log:q}"
