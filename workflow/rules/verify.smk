# Verification per partition. In baseline/incremental each verify checks the files its copy just
# wrote; in the final phase the verify partitions cover the whole source and wait for every copy,
# and prune waits for every verify.


rule verify:
    input:
        manifest=verify_manifest,
        after=verify_after,
    output:
        json=records("verify").out,
        observed=f"{RUN}/{ferry_run_dir.OBSERVED}",
        bench=records("verify").bench,
    log:
        records("verify").log,
    retries: retries("verify")
    group:
        partition_group()
    conda:
        "../envs/ferry.yaml"
    threads: threads("verify")
    resources:
        **requests("verify", runtime=AUDIT),
    message:
        message("verify")
    shell:
        task("verify") + " --set manifest={input.manifest:q}"


rule final_check:
    input:
        pruned=records("prune_dirs").out,
    output:
        json=records("final_check").out,
        bench=records("final_check").bench,
    log:
        records("final_check").log,
    retries: retries("final_check")
    conda:
        "../envs/ferry.yaml"
    threads: threads("final_check")
    resources:
        **requests("final_check"),
    message:
        message("final_check")
    shell:
        task("final_check")
