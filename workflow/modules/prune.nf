// Deleting is the one irreversible step, so it is fenced: it exists only in the final phase, the
// workflow starts it only once every verify has ended, the step itself refuses unless every verify
// partition of the plan passed (ferry_task.py's guard, the same in the Snakemake pipeline: an
// empty or failed fan-out never reaches `ferry prune`), and ferry prune refuses beyond
// prune.max_delete (of the whole pass, in every job) and on an empty source. The plan cut the files
// to delete into parts, deleted at once (PRUNE); the directories they leave go after them all
// (PRUNE_DIRS). Nothing is listed: `ferry prune --plan` deletes what the plan's join found.

process PRUNE {
    tag "${Ferry.partName(part)}"
    label 'ferry'
    errorStrategy { Ferry.strategy(task, run.spec.retries as int) }

    input:
    val run
    path plan, stageAs: Ferry.inRec(Ferry.plan())   // for the guard
    path verified, stageAs: Ferry.recordsOf('verify', 'out')
    path planned, stageAs: Ferry.plan()             // for `ferry prune --plan plan`
    tuple val(part), path(manifest, stageAs: "${Ferry.planDir('prune')}/*")

    output:
    path("${Ferry.rec(run, 'prune', 'out', part)}"), emit: json
    path("${Ferry.rec(run, 'prune', 'deleted', part)}"), emit: deleted
    path 'rec', emit: rec

    script:
    Ferry.task('prune', run, part: part, set: [plan_dir: Ferry.planDir()])

    stub:
    Ferry.task('prune', run, part: part, set: [plan_dir: Ferry.planDir()], stub: true)
}

process PRUNE_DIRS {
    label 'ferry'
    errorStrategy { Ferry.strategy(task, run.spec.retries as int) }

    input:
    val run
    path plan, stageAs: Ferry.inRec(Ferry.plan())
    path verified, stageAs: Ferry.recordsOf('verify', 'out')
    path planned, stageAs: Ferry.plan()
    path deletions, stageAs: Ferry.planDir('prune')          // its dirs.tsv and touched.tsv
    path pruned, stageAs: Ferry.recordsOf('prune', 'out') // every part's report: after them all

    output:
    path("${Ferry.rec(run, 'prune_dirs', 'out')}"), emit: json
    path("${Ferry.rec(run, 'prune_dirs', 'deleted')}"), emit: deleted
    path 'rec', emit: rec

    script:
    Ferry.task('prune_dirs', run, set: [plan_dir: Ferry.planDir()])

    stub:
    Ferry.task('prune_dirs', run, set: [plan_dir: Ferry.planDir()], stub: true)
}
