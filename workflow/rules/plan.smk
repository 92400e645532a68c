# The checkpoint: only after it has run does Snakemake know how many transfer/verify jobs exist.


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
    params:
        ferry=FERRY,
        phase=PHASE,
        dest_is_blob=ferrylib.is_blob(DEST),
        compare=config["compare"],
        partition=config["partition"],
    group:
        PREPARE_GROUP
    threads: res("plan", "threads")
    resources:
        **requests("plan", runtime=False),
    conda:
        "../envs/ferry.yaml"
    script:
        "../scripts/plan.py"
