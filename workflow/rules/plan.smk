# The checkpoint: only after it has run does Snakemake know how many transfer/verify jobs exist.
# `ferry plan` (docs/plan.md) compares the listings in bounded memory and writes the partitions,
# delete.tsv and plan.json, replacing the plan directory only once it is complete.


checkpoint plan:
    input:
        unpack(
            lambda wc: {"source": f"{RUN}/listing/source.tsv"}
            | (
                {"dest_ready": f"{RUN}/listing/dest-ready.txt"}
                if PHASE == "baseline"
                else {"dest": f"{RUN}/listing/dest.tsv"}
            )
        ),
    output:
        plan=directory(f"{RUN}/plan"),
    log:
        f"{RUN}/logs/plan.log",
    benchmark:
        f"{RUN}/benchmarks/plan.tsv"
    group:
        PREPARE_GROUP
    conda:
        "../envs/ferry.yaml"
    threads: res("plan", "threads")
    resources:
        **requests("plan", runtime=False),
    params:
        ferry=FERRY,
        dest_listing=lambda wc, input: (
            shlex.quote(input.dest) if PHASE != "baseline" else ""
        ),
        args=PLAN_ARGS,
    shell:
        "{params.ferry:q} plan {input.source:q} {params.dest_listing} --out {output.plan:q} {params.args} 2> {log:q}"
