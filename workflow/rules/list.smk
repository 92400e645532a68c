# Listings are the ground truth of a phase: the plan, the partitions and the report all derive
# from them, so they are taken once per run directory and reused when a failed run is resumed.
# With list.jobs > 1, each side is listed by that many jobs, one per range of the key space
# ({shard}), which the shard step cuts first; the plan reads their listings as one.


rule shard:
    # Once, before the list jobs: the cuts of the key space, and past the baseline the one
    # carried-or-fresh decision for the destination that its list jobs follow.
    output:
        shards=records("shard").out,
        bench=records("shard").bench,
    log:
        records("shard").log,
    retries: retries("shard")
    conda:
        "../envs/ferry.yaml"
    threads: threads("shard")
    resources:
        **requests("shard"),
    message:
        message("shard")
    shell:
        task("shard")


rule list_source:
    input:
        unpack(lambda wc: {"shards": records("shard").out} if SHARDED else {}),
    output:
        listing=list_records("list_source").out,
        bench=list_records("list_source").bench,
    log:
        list_records("list_source").log,
    retries: retries("list_source")
    group:
        PREPARE_GROUP
    conda:
        "../envs/ferry.yaml"
    threads: threads("list_source")
    resources:
        **requests("list_source"),
    message:
        message("list_source")
    shell:
        task("list_source")


rule list_dest:
    input:
        unpack(lambda wc: {"shards": records("shard").out} if SHARDED else {}),
    output:
        listing=list_records("list_dest").out,
        bench=list_records("list_dest").bench,
    log:
        list_records("list_dest").log,
    retries: retries("list_dest")
    group:
        PREPARE_GROUP
    conda:
        "../envs/ferry.yaml"
    threads: threads("list_dest")
    resources:
        **requests("list_dest"),
    message:
        message("list_dest")
    shell:
        task("list_dest")


rule make_dest:
    # ferry copy refuses to create a missing container (a typo would otherwise create a new
    # one silently); the baseline is where a migration legitimately starts from nothing.
    output:
        ready=records("make_dest").out,
        bench=records("make_dest").bench,
    log:
        records("make_dest").log,
    retries: retries("make_dest")
    group:
        PREPARE_GROUP
    conda:
        "../envs/ferry.yaml"
    threads: threads("make_dest")
    resources:
        **requests("make_dest"),
    message:
        message("make_dest")
    shell:
        task("make_dest")
