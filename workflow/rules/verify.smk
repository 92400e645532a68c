# Verification per partition. In baseline/incremental each verify checks the files its transfer
# just wrote; in the final phase the verify partitions cover the whole source and wait for every
# transfer, and prune waits for every verify.


rule verify:
    input:
        manifest=verify_manifest,
        after=verify_after,
    output:
        json=f"{RUN}/verify/part-{{part}}.json",
    log:
        f"{RUN}/logs/verify/part-{{part}}.log",
    benchmark:
        f"{RUN}/benchmarks/verify/part-{{part}}.tsv"
    retries: config["job_retries"]
    group:
        partition_group()
    conda:
        "../envs/ferry.yaml"
    threads: res("verify", "threads")
    resources:
        **requests("verify", runtime=FINAL),
    params:
        env=AUTH_ENV,
        ferry=FERRY,
        source=SOURCE,
        dest=DEST,
        args=VERIFY_ARGS,
        failed=lambda wc: f"{RUN}/failed/verify-part-{wc.part}.json",
    shell:
        'mkdir -p "$(dirname {params.failed:q})"; rm -f {params.failed:q}; '
        "{params.env} {params.ferry:q} verify {params.source:q} {params.dest:q} --files-from {input.manifest:q}"
        " {params.args} --json > {output.json:q} 2> {log:q}"
        " || {{ rc=$?; cp {output.json:q} {params.failed:q}; exit $rc; }}"


rule final_check:
    input:
        prune=f"{RUN}/prune/prune.json",
    output:
        json=f"{RUN}/verify/final-check.json",
    log:
        f"{RUN}/logs/final_check.log",
    benchmark:
        f"{RUN}/benchmarks/final_check.tsv"
    retries: config["job_retries"]
    conda:
        "../envs/ferry.yaml"
    threads: res("verify", "threads")
    resources:
        **requests("verify"),
    params:
        env=AUTH_ENV,
        ferry=FERRY,
        source=SOURCE,
        dest=DEST,
        failed=f"{RUN}/failed/final-check.json",
    # As prune: the sorted listings go into the run directory, beside the output.
    shell:
        'mkdir -p "$(dirname {params.failed:q})"; rm -f {params.failed:q}; '
        "{params.env} {params.ferry:q} verify {params.source:q} {params.dest:q}"
        ' --scratch "$(dirname {output.json:q})" --json > {output.json:q} 2> {log:q}'
        " || {{ rc=$?; cp {output.json:q} {params.failed:q}; exit $rc; }}"
