// Listings are the ground truth of a phase: the plan, the partitions and the report derive from
// them. The run key (the run directory: run name, phase, pass) is a task input, so a new phase, a
// new pass or another source never reuses an old listing, while -resume of the same run does.

process LIST {
    tag "${side}"
    label 'ferry_list'
    errorStrategy { Ferry.strategy(task, params.job_retries as int) }
    publishDir "${run.run_dir}", mode: 'copy', pattern: 'listing/*.tsv'

    input:
    val run                          // run_dir, ferry, auth_env, list_args_sh
    tuple val(side), val(location)   // 'source' or 'dest', and where; a string, never staged

    output:
    tuple val(side), path("listing/${side}.tsv"), emit: listing
    path 'rec', emit: rec

    script:
    def step = "list_${side}"
    """
    ${run.auth_env ? "export ${run.auth_env}" : ''}
    ferry-task --out listing/${side}.tsv --log rec/logs/${step}.log --bench rec/benchmarks/${step}.tsv -- \\
        ${Ferry.q(run.ferry)} ls ${Ferry.q(location)} --recursive --format tsv ${run.list_args_sh}
    """

    stub:
    def step = "list_${side}"
    """
    mkdir -p listing rec/logs rec/benchmarks
    printf '#ferry-manifest v1\\n' > listing/${side}.tsv
    : > rec/logs/${step}.log
    printf 's\\tcpu_time\\tmax_rss\\n0\\t0\\t0\\n' > rec/benchmarks/${step}.tsv
    """
}

// `ferry copy` refuses to create a missing container (a typo would otherwise create a new one
// silently); the baseline is where a migration legitimately starts from nothing.
process MAKE_DEST {
    label 'ferry_list'
    errorStrategy { Ferry.strategy(task, params.job_retries as int) }

    input:
    val run                                               // ferry, auth_env, source
    val location

    output:
    val location, emit: ready
    path 'rec', emit: rec

    script:
    """
    ${run.auth_env ? "export ${run.auth_env}" : ''}
    mkdir -p rec/listing
    ferry-task --out rec/listing/dest-ready.txt --log rec/logs/make_dest.log --bench make_dest.tsv -- \\
        ${Ferry.q(run.ferry)} mk ${Ferry.q(location)} --source ${Ferry.q(run.source)}
    """

    stub:
    """
    mkdir -p rec/listing rec/logs
    : > rec/listing/dest-ready.txt
    : > rec/logs/make_dest.log
    """
}
