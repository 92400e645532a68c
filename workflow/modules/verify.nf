// Verification per partition. In baseline/incremental each verify checks the files its copy just
// wrote; in the final phase the verify partitions cover the whole source and wait for every copy.

process VERIFY {
    tag "${Ferry.partName(part)}"
    label 'ferry'
    errorStrategy { Ferry.strategy(task, run.spec.retries as int) }

    input:
    val run
    tuple val(part), path(manifest, stageAs: "${Ferry.planDir('verify')}/*")

    output:
    tuple val(part), path("${Ferry.rec(run, 'verify', 'out', part)}"), emit: json
    path("${Ferry.rec(run, 'verify', 'observed', part)}"), emit: observed   // what it saw, for CARRY
    path 'rec', emit: rec

    script:
    Ferry.task('verify', run, part: part, set: [manifest: manifest])

    stub:
    Ferry.task('verify', run, part: part, set: [manifest: manifest], stub: true)
}
