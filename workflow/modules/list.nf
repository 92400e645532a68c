// Listings are the ground truth of a phase: the plan, the partitions and the report derive from
// them. The run key (the run directory: run name, phase, pass) is a task input, so a new phase, a
// new pass or another source never reuses an old listing, while -resume of the same run does.

process LIST {
    tag "${side}"
    label 'ferry'
    errorStrategy { Ferry.strategy(task, run.spec.retries as int) }
    // The listing lies outside `rec` (every step's records, which the report gathers): it may be large.
    publishDir "${run.run_dir}", mode: 'copy', pattern: "${run.layout.listing_dir}/*.tsv"

    input:
    tuple val(side), val(run)        // 'source' or 'dest', and the run key and step spec

    output:
    tuple val(side), path("${Ferry.record(run, "list_${side}", 'out')}"), emit: listing
    path 'rec', emit: rec

    script:
    Ferry.task("list_${side}", run, out: Ferry.record(run, "list_${side}", 'out'))

    stub:
    Ferry.task("list_${side}", run, out: Ferry.record(run, "list_${side}", 'out'), stub: true)
}

// `ferry copy` refuses to create a missing container (a typo would otherwise create a new one
// silently); the baseline is where a migration legitimately starts from nothing.
process MAKE_DEST {
    label 'ferry'
    errorStrategy { Ferry.strategy(task, run.spec.retries as int) }

    input:
    val run

    output:
    val true, emit: ready
    path 'rec', emit: rec

    script:
    Ferry.task('make_dest', run)

    stub:
    Ferry.task('make_dest', run, stub: true)
}
