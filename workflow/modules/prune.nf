// Deleting is the one irreversible step, so it is fenced: it exists only in the final phase, the
// workflow starts it only once every verify has ended, this task itself refuses unless every verify
// partition of the plan passed (`ferry_report.py verified`: an empty or failed fan-out never
// reaches `ferry prune`), and ferry prune refuses beyond delete.max_delete and on an empty source.

process PRUNE {
    label 'ferry_prune'
    errorStrategy { Ferry.strategy(task, params.job_retries as int) }

    input:
    val run                                               // ferry, auth_env, source, dest, prune_args_sh
    path plan, stageAs: 'rec/plan/plan.json'
    path verified, stageAs: 'rec/verify/*'

    output:
    path 'rec/prune/prune.json', emit: json
    path 'rec', emit: rec

    script:
    """
    ${run.auth_env ? "export ${run.auth_env}" : ''}
    mkdir -p rec/logs rec/prune
    python3 "\${FERRY_SCRIPTS:-${projectDir}/workflow/scripts}/ferry_report.py" verified rec 2> rec/logs/prune.log
    # The deletion list is named relative to the run directory, as in the Snakemake pipeline;
    # the sorted listings go there too, not to a /tmp that may be a tmpfs counted as memory.
    cd rec
    ferry-task --out prune/prune.json --log logs/prune.log --bench benchmarks/prune.tsv --failed failed/prune.json -- \\
        ${Ferry.q(run.ferry)} prune ${Ferry.q(run.source)} ${Ferry.q(run.dest)} ${run.prune_args_sh} \\
        --scratch prune --log prune/deleted.txt --json
    """

    stub:
    """
    mkdir -p rec/prune rec/logs rec/benchmarks
    echo '{"command": "prune", "deleted": 0, "would_delete": 0, "refused": null}' > rec/prune/prune.json
    : > rec/prune/deleted.txt
    : > rec/logs/prune.log
    printf 's\\tcpu_time\\tmax_rss\\n0\\t0\\t0\\n' > rec/benchmarks/prune.tsv
    """
}
