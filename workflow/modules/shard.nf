// With list.jobs > 1, once before the list jobs: `ferry shard` cuts the key space into one range
// per list job and, past the baseline, makes the one carried-or-fresh decision for the
// destination that every list job of the destination follows (listing/shards.json).

process SHARD {
    label 'ferry'
    errorStrategy { Ferry.strategy(task, run.spec.retries as int) }
    // Beside the listings in the run directory; the copy in `rec` is the report's.
    publishDir "${run.run_dir}", mode: 'copy', pattern: "${Ferry.rec(run, 'shard', 'out')}", saveAs: { name -> name.substring(4) }

    input:
    val run

    output:
    path("${Ferry.rec(run, 'shard', 'out')}"), emit: shards
    path 'rec', emit: rec

    script:
    Ferry.task('shard', run)

    stub:
    Ferry.task('shard', run, stub: true)
}
