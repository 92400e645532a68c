// The destination as this pass left it, for the next pass to plan against instead of listing it
// (docs/scale.md): `ferry carry` patches the listing the plan used with what every verify saw and
// what prune deleted, and leaves it at the state location. A pass that fails before this step
// leaves no new state, and the next pass lists the destination fresh.

process CARRY {
    label 'ferry'
    errorStrategy { Ferry.strategy(task, run.spec.retries as int) }

    input:
    val run
    path plan, stageAs: Ferry.inRec(Ferry.plan())
    path observed, stageAs: Ferry.recordsOf('verify', 'observed')
    path dest_listing, stageAs: Ferry.listings()                 // [] in the baseline, which lists nothing
    path deleted, stageAs: Ferry.recordsOf('prune', 'deleted')   // what every prune job deleted: [] but in the final phase
    path shards, stageAs: Ferry.shards()                         // [] with one list job per side

    output:
    path("${Ferry.rec(run, 'carry', 'out')}"), emit: json
    path 'rec', emit: rec

    script:
    Ferry.task('carry', run, set: run.spec.listings + [shards: Ferry.shards()])

    stub:
    Ferry.task('carry', run, set: run.spec.listings + [shards: Ferry.shards()], stub: true)
}
