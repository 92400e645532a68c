// Deleting is the one irreversible step, so it is fenced: it exists only in the final phase, the
// workflow starts it only once every verify has ended, the step itself refuses unless every verify
// partition of the plan passed (ferry_task.py's guard, the same in the Snakemake pipeline: an
// empty or failed fan-out never reaches `ferry prune`), and ferry prune refuses beyond
// prune.max_delete and on an empty source.

process PRUNE {
    label 'ferry'
    errorStrategy { Ferry.strategy(task, run.spec.retries as int) }

    input:
    val run
    path plan, stageAs: 'rec/plan/plan.json'
    path verified, stageAs: 'rec/verify/*'
    // The listings the plan used: prune deletes what they say the source lacks, listing nothing.
    // Outside `rec`, which the report gathers: they may be large.
    path source_listing, stageAs: 'listing/*'
    path dest_listing, stageAs: 'listing/*'
    path shards, stageAs: 'listing/shards.json'   // [] with one list job per side

    output:
    path("${Ferry.rec(run, 'prune', 'out')}"), emit: json
    path("rec/${run.layout.deleted_log}"), emit: deleted
    path 'rec', emit: rec

    script:
    Ferry.task('prune', run, set: run.spec.listings + [shards: 'listing/shards.json'])

    stub:
    Ferry.task('prune', run, set: run.spec.listings + [shards: 'listing/shards.json'], stub: true)
}
