// What this phase copies and verifies, cut into partitions: `ferry plan` (the worker decides, so
// the two engines cannot drift). Its directory is the fan-out: one copy per copy part, one verify
// per verify part.

process PLAN {
    label 'ferry'
    errorStrategy { Ferry.strategy(task, run.spec.retries as int) }
    publishDir "${run.run_dir}", mode: 'copy', pattern: "${Ferry.planDir()}/**"

    input:
    val run
    // Each side's listings under the names the list tasks gave them (one per list job), which are
    // the names the step's `listings` patterns expand to.
    path source_listing, stageAs: Ferry.listings()
    path dest_listing, stageAs: Ferry.listings()          // [] in the baseline
    val dest_ready                                        // the baseline waits for MAKE_DEST
    path shards, stageAs: Ferry.shards()                  // [] with one list job per side

    output:
    path(Ferry.plan()), emit: plan
    path Ferry.planPart('copy', '*'), emit: copy, optional: true
    path Ferry.planPart('verify', '*'), emit: verify, optional: true
    path Ferry.planPart('prune', '*'), emit: prune, optional: true
    path Ferry.planDir('prune'), emit: prune_dir  // with the directories to delete, for PRUNE_DIRS
    path "${Ferry.planDir()}/**", emit: files    // with summaries and delete.tsv, for the run directory
    path 'rec', emit: rec                     // its log and timing, and a copy of plan.json

    script:
    Ferry.task('plan', run, set: run.spec.listings + [shards: Ferry.shards(), plan_dir: Ferry.planDir()])

    // Two copy partitions (and, in the final phase, two verify partitions): enough to walk every edge.
    stub:
    Ferry.task('plan', run, set: run.spec.listings + [shards: Ferry.shards(), plan_dir: Ferry.planDir()], stub: true)
}
