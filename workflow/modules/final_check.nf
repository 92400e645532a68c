// After prune, one `ferry verify` of the whole trees: it must find nothing missing or extra. Its
// sorted listings go into the task's records directory (ferry-task creates rec/verify), not /tmp.

process FINAL_CHECK {
    label 'ferry_verify'
    errorStrategy { Ferry.strategy(task, params.job_retries as int) }

    input:
    val run                                               // ferry, auth_env, source, dest
    path pruned                                           // prune's report: runs only after prune

    output:
    path 'rec', emit: rec

    script:
    """
    ${run.auth_env ? "export ${run.auth_env}" : ''}
    ferry-task --out rec/verify/final-check.json --log rec/logs/final_check.log \\
        --bench rec/benchmarks/final_check.tsv --failed rec/failed/final-check.json -- \\
        ${Ferry.q(run.ferry)} verify ${Ferry.q(run.source)} ${Ferry.q(run.dest)} --scratch rec/verify --json
    """

    stub:
    """
    mkdir -p rec/verify rec/logs rec/benchmarks
    echo '{"command": "verify", "same": 0, "differ": 0, "missing_on_dst": 0, "missing_on_src": 0, "error": 0, "seconds": 0}' > rec/verify/final-check.json
    : > rec/logs/final_check.log
    printf 's\\tcpu_time\\tmax_rss\\n0\\t0\\t0\\n' > rec/benchmarks/final_check.tsv
    """
}
