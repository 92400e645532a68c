# Deleting is the one irreversible step, so it is fenced three ways: it exists only in the final
# phase, it needs every verify of the phase to have passed (they are its inputs), and ferry prune
# itself refuses beyond delete.max_delete unless delete.force is set.


rule prune:
    input:
        verified=all_verify_json,
    output:
        json=f"{RUN}/prune/prune.json",
    log:
        deleted=f"{RUN}/prune/deleted.txt",
        stderr=f"{RUN}/logs/prune.log",
    benchmark:
        f"{RUN}/benchmarks/prune.tsv"
    retries: config["job_retries"]
    conda:
        "../envs/ferry.yaml"
    threads: res("prune", "threads")
    resources:
        **requests("prune"),
    params:
        env=AUTH_ENV,
        ferry=FERRY,
        source=SOURCE,
        dest=DEST,
        args=PRUNE_ARGS,
        failed=f"{RUN}/failed/prune.json",
    # The sorted listings go into the run directory beside the output, not to a /tmp that may be
    # a tmpfs counted against the job's memory.
    shell:
        'mkdir -p "$(dirname {params.failed:q})"; rm -f {params.failed:q}; '
        "{params.env} {params.ferry:q} prune {params.source:q} {params.dest:q} {params.args}"
        ' --scratch "$(dirname {output.json:q})" --log {log.deleted:q} --json > {output.json:q} 2> {log.stderr:q}'
        " || {{ rc=$?; cp {output.json:q} {params.failed:q}; exit $rc; }}"
