# Listings are the ground truth of a phase: the plan, the partitions and the report all derive
# from them, so they are taken once per run directory and reused when a failed run is resumed.


rule list_source:
    output:
        f"{RUN}/listing/source.tsv",
    log:
        f"{RUN}/logs/list_source.log",
    benchmark:
        f"{RUN}/benchmarks/list_source.tsv"
    params:
        env=AUTH_ENV,
        ferry=FERRY,
        location=SOURCE,
        args=LIST_ARGS,
    group:
        PREPARE_GROUP
    retries: config["job_retries"]
    threads: res("list", "threads")
    resources:
        **requests("list"),
    conda:
        "../envs/ferry.yaml"
    shell:
        "{params.env} {params.ferry:q} ls {params.location:q} --recursive --format tsv {params.args}"
        " > {output:q}.tmp 2> {log:q} && mv {output:q}.tmp {output:q}"


rule list_dest:
    output:
        f"{RUN}/listing/dest.tsv",
    log:
        f"{RUN}/logs/list_dest.log",
    benchmark:
        f"{RUN}/benchmarks/list_dest.tsv"
    params:
        env=AUTH_ENV,
        ferry=FERRY,
        location=DEST,
        args=LIST_ARGS,
    group:
        PREPARE_GROUP
    retries: config["job_retries"]
    threads: res("list", "threads")
    resources:
        **requests("list"),
    conda:
        "../envs/ferry.yaml"
    shell:
        "{params.env} {params.ferry:q} ls {params.location:q} --recursive --format tsv {params.args}"
        " > {output:q}.tmp 2> {log:q} && mv {output:q}.tmp {output:q}"


rule make_dest:
    # ferry copy refuses to create a missing container (a typo would otherwise create a new
    # one silently); the baseline is where a migration legitimately starts from nothing.
    output:
        f"{RUN}/listing/dest-ready.txt",
    log:
        f"{RUN}/logs/make_dest.log",
    params:
        env=AUTH_ENV,
        ferry=FERRY,
        location=DEST,
    group:
        PREPARE_GROUP
    retries: config["job_retries"]
    threads: res("list", "threads")
    resources:
        **requests("default"),
    conda:
        "../envs/ferry.yaml"
    shell:
        "{params.env} {params.ferry:q} mk {params.location:q} > {output:q}.tmp 2> {log:q}"
        " && mv {output:q}.tmp {output:q}"
