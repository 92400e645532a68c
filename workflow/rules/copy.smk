# One `ferry copy` per partition. The worker's JSON is the job's output; when the worker reports
# failed files (exit 1) ferry_task.py keeps its JSON under failed/ for the report, Snakemake
# discards the job's outputs, and a re-run redoes exactly this partition.


rule copy:
    input:
        manifest=ferry_run_dir.plan_part("copy", "{part}", RUN),
    output:
        json=records("copy").out,
        bench=records("copy").bench,
    log:
        records("copy").log,
    retries: retries("copy")
    group:
        partition_group()
    conda:
        "../envs/ferry.yaml"
    threads: threads("copy")
    resources:
        **requests("copy"),
    message:
        message("copy")
    shell:
        task("copy") + " --set manifest={input.manifest:q}"
