// One `ferry copy` per partition. The worker's JSON is the task's output; when the worker reports
// failed files (exit 1) the task fails, its JSON goes to failed/ for the report, and -resume
// redoes exactly this partition.

process TRANSFER {
    tag "part-${part}"
    label 'ferry_transfer'
    errorStrategy { Ferry.strategy(task, params.job_retries as int) }

    input:
    val run                                               // ferry, auth_env, source, dest, copy_args_sh
    tuple val(part), path(manifest, stageAs: 'plan/copy/*')

    output:
    tuple val(part), path("rec/copy/part-${part}.json"), emit: json
    path 'rec', emit: rec

    script:
    """
    ${run.auth_env ? "export ${run.auth_env}" : ''}
    ferry-task --out rec/copy/part-${part}.json --log rec/logs/transfer/part-${part}.log \\
        --bench rec/benchmarks/transfer/part-${part}.tsv --failed rec/failed/copy-part-${part}.json -- \\
        ${Ferry.q(run.ferry)} copy ${Ferry.q(run.source)} ${Ferry.q(run.dest)} --files-from ${Ferry.q(manifest)} \\
        ${run.copy_args_sh} --no-progress --json
    """

    stub:
    """
    mkdir -p rec/copy rec/logs/transfer rec/benchmarks/transfer
    echo '{"command": "copy", "files": {"copied": 0, "skipped": 0, "failed": 0, "ignored": 0}, "bytes": {"copied": 0, "skipped": 0}, "seconds": 0}' > rec/copy/part-${part}.json
    : > rec/logs/transfer/part-${part}.log
    printf 's\\tcpu_time\\tmax_rss\\n0\\t0\\t0\\n' > rec/benchmarks/transfer/part-${part}.tsv
    """
}
