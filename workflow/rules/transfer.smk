# One `ferry copy` per partition. The worker's JSON is the job's output; when the worker reports
# failed files (exit 1) Snakemake discards that output so a re-run redoes exactly this partition,
# and a copy kept under failed/ lets the report say what went wrong.


rule transfer:
    input:
        manifest=f"{RUN}/plan/copy/part-{{part}}.tsv",
    output:
        json=f"{RUN}/copy/part-{{part}}.json",
    log:
        f"{RUN}/logs/transfer/part-{{part}}.log",
    benchmark:
        f"{RUN}/benchmarks/transfer/part-{{part}}.tsv"
    retries: config["job_retries"]
    group:
        partition_group()
    conda:
        "../envs/ferry.yaml"
    threads: res("transfer", "threads")
    resources:
        **requests("transfer"),
    params:
        env=AUTH_ENV,
        ferry=FERRY,
        source=SOURCE,
        dest=DEST,
        args=COPY_ARGS,
        failed=lambda wc: f"{RUN}/failed/copy-part-{wc.part}.json",
    shell:
        'mkdir -p "$(dirname {params.failed:q})"; rm -f {params.failed:q}; '
        "{params.env} {params.ferry:q} copy {params.source:q} {params.dest:q} --files-from {input.manifest:q}"
        " {params.args} --no-progress --json > {output.json:q} 2> {log:q}"
        " || {{ rc=$?; cp {output.json:q} {params.failed:q}; exit $rc; }}"
