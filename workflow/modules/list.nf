// Listings are the ground truth of a phase: the plan, the partitions and the report derive from
// them. The run key (the run directory: run name, phase, pass) is a task input, so a new phase, a
// new pass or another source never reuses an old listing, while -resume of the same run does.
// With list.jobs > 1 each side is listed by that many tasks, one per range of the key space
// (`shard`, 1 to list.jobs) that SHARD cut first; with one, `shard` is null.

process LIST {
    tag "${side}${shard != null ? ' ' + shard : ''}"
    label 'ferry'
    errorStrategy { Ferry.strategy(task, run.spec.retries as int) }
    // The listing lies outside `rec` (every step's records, which the report gathers): it may be large.
    publishDir "${run.run_dir}", mode: 'copy', pattern: "${run.layout.listing_dir}/*.tsv"

    input:
    tuple val(side), val(shard), val(run)   // 'source' or 'dest', the list job, the run key and step spec
    path shards, stageAs: Ferry.shards()  // SHARD's cuts; [] with one list job per side

    output:
    tuple val(side), path("${Ferry.listRecord(run, "list_${side}", 'out', shard)}"), emit: listing
    path 'rec', emit: rec

    script:
    Ferry.task("list_${side}", run, shard: shard, out: Ferry.listRecord(run, "list_${side}", 'out', shard),
               set: [shards: Ferry.shards()])

    stub:
    Ferry.task("list_${side}", run, shard: shard, out: Ferry.listRecord(run, "list_${side}", 'out', shard),
               set: [shards: Ferry.shards()], stub: true)
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
