# Listings are the ground truth of a phase: the plan, the partitions and the report all derive
# from them, so they are taken once per run directory and reused when a failed run is resumed.


rule list_source:
    output:
        f"{RUN}/listing/source.tsv",
    log:
        f"{RUN}/logs/list_source.log",
    benchmark:
        f"{RUN}/benchmarks/list_source.tsv"
    retries: config["job_retries"]
    group:
        PREPARE_GROUP
    conda:
        "../envs/ferry.yaml"
    threads: res("list", "threads")
    resources:
        **requests("list"),
    params:
        env=AUTH_ENV,
        ferry=FERRY,
        location=SOURCE,
        args=LIST_ARGS,
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
    retries: config["job_retries"]
    group:
        PREPARE_GROUP
    conda:
        "../envs/ferry.yaml"
    threads: res("list", "threads")
    resources:
        **requests("list"),
    params:
        env=AUTH_ENV,
        ferry=FERRY,
        location=DEST,
        args=LIST_ARGS,
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
    retries: config["job_retries"]
    group:
        PREPARE_GROUP
    conda:
        "../envs/ferry.yaml"
    threads: res("list", "threads")
    resources:
        **requests("default"),
    params:
        env=AUTH_ENV,
        ferry=FERRY,
        location=DEST,
        source=SOURCE,
    shell:
        "{params.env} {params.ferry:q} mk {params.location:q} --source {params.source:q} > {output:q}.tmp 2> {log:q}"
        " && mv {output:q}.tmp {output:q}"
