// With list.jobs > 1, once before the list jobs: `ferry shard` cuts the key space into one range
// per list job and, past the baseline, makes the one carried-or-fresh decision for the
// destination that every list job of the destination follows (listing/shards.json).

process SHARD {
    label 'ferry'
    errorStrategy { Ferry.strategy(task, run.spec.retries as int) }
    // Beside the listings in the run directory; ferry-task leaves a copy in `rec`, for the report.
    publishDir "${run.run_dir}", mode: 'copy', pattern: "${run.layout.listing_dir}/*.json"

    input:
    val run

    output:
    path("${Ferry.record(run, 'shard', 'out')}"), emit: shards
    path 'rec', emit: rec

    script:
    Ferry.task('shard', run, out: Ferry.record(run, 'shard', 'out'))

    stub:
    Ferry.task('shard', run, out: Ferry.record(run, 'shard', 'out'), stub: true)
}
