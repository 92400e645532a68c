// One `ferry copy` per partition. The worker's JSON is the task's output; when the worker reports
// failed files (exit 1) the task fails, its JSON goes to failed/ for the report, and -resume
// redoes exactly this partition.

process COPY {
    tag "${Ferry.partName(part)}"
    label 'ferry'
    errorStrategy { Ferry.strategy(task, run.spec.retries as int) }

    input:
    val run
    tuple val(part), path(manifest, stageAs: "${Ferry.planDir('copy')}/*")

    output:
    tuple val(part), path("${Ferry.rec(run, 'copy', 'out', part)}"), emit: json
    path 'rec', emit: rec

    script:
    Ferry.task('copy', run, part: part, set: [manifest: manifest])

    stub:
    Ferry.task('copy', run, part: part, set: [manifest: manifest], stub: true)
}
