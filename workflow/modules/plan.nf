// What this phase copies and verifies, cut into partitions: `ferry plan` (the worker decides, so
// the two engines cannot drift). Its directory is the fan-out: one copy per copy part, one verify
// per verify part.

process PLAN {
    label 'ferry'
    errorStrategy { Ferry.strategy(task, run.spec.retries as int) }
    publishDir "${run.run_dir}", mode: 'copy', pattern: 'plan/**'

    input:
    val run
    // Each side's listings under the names the list tasks gave them (one per list job), which are
    // the names the step's `listings` patterns expand to.
    path source_listing, stageAs: 'listing/*'
    path dest_listing, stageAs: 'listing/*'               // [] in the baseline
    val dest_ready                                        // the baseline waits for MAKE_DEST
    path shards, stageAs: 'listing/shards.json'           // [] with one list job per side

    output:
    path("${run.layout.plan}"), emit: plan
    path 'plan/copy/part-*.tsv', emit: copy, optional: true
    path 'plan/verify/part-*.tsv', emit: verify, optional: true
    path 'plan/prune/part-*.tsv', emit: prune, optional: true
    path 'plan/prune', emit: prune_dir        // with the directories to delete, for PRUNE_DIRS
    path 'plan/**', emit: files               // with summaries and delete.tsv, for the run directory
    path 'rec', emit: rec                     // its log and timing, and a copy of plan.json

    script:
    Ferry.task('plan', run, set: run.spec.listings + [shards: 'listing/shards.json', plan_dir: 'plan'])

    // Two copy partitions (and, in the final phase, two verify partitions): enough to walk every edge.
    stub:
    Ferry.task('plan', run, set: run.spec.listings + [shards: 'listing/shards.json', plan_dir: 'plan'], stub: true)
}
