// Verification per partition. In baseline/incremental each verify checks the files its transfer
// just wrote; in the final phase the verify partitions cover the whole source and wait for every
// transfer.

process VERIFY {
    tag "part-${part}"
    label 'ferry_verify'
    errorStrategy { Ferry.strategy(task, params.job_retries as int) }

    input:
    val run                                               // ferry, auth_env, source, dest, verify_args_sh
    tuple val(part), path(manifest, stageAs: 'plan/verify/*')

    output:
    tuple val(part), path("rec/verify/part-${part}.json"), emit: json
    path 'rec', emit: rec

    script:
    """
    ${run.auth_env ? "export ${run.auth_env}" : ''}
    ferry-task --out rec/verify/part-${part}.json --log rec/logs/verify/part-${part}.log \\
        --bench rec/benchmarks/verify/part-${part}.tsv --failed rec/failed/verify-part-${part}.json -- \\
        ${Ferry.q(run.ferry)} verify ${Ferry.q(run.source)} ${Ferry.q(run.dest)} --files-from ${Ferry.q(manifest)} \\
        ${run.verify_args_sh} --json
    """

    stub:
    """
    mkdir -p rec/verify rec/logs/verify rec/benchmarks/verify
    echo '{"command": "verify", "same": 0, "differ": 0, "missing_on_dst": 0, "missing_on_src": 0, "error": 0, "seconds": 0}' > rec/verify/part-${part}.json
    : > rec/logs/verify/part-${part}.log
    printf 's\\tcpu_time\\tmax_rss\\n0\\t0\\t0\\n' > rec/benchmarks/verify/part-${part}.tsv
    """
}
