# The checkpoint: only after it has run does Snakemake know how many copy/verify jobs exist.
# `ferry plan` (docs/plan.md) compares the listings in bounded memory and writes the partitions,
# delete.tsv and plan.json, replacing the plan directory only once it is complete.


checkpoint plan:
    input:
        unpack(
            lambda wc: {"source": listings("list_source")}
            | (
                {"dest_ready": records("make_dest").out}
                if PHASE == "baseline"
                else {"dest": listings("list_dest")}
            )
            | ({"shards": records("shard").out} if SHARDED else {})
        ),
    output:
        plan=directory(f"{RUN}/{ferry_run_dir.PLAN_DIR}"),
        bench=records("plan").bench,
    log:
        records("plan").log,
    retries: retries("plan")
    group:
        PREPARE_GROUP
    conda:
        "../envs/ferry.yaml"
    threads: threads("plan")
    resources:
        **requests("plan", runtime=SHARDED),
    message:
        message("plan")
    shell:
        task("plan")
