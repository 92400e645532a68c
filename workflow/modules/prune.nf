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

    output:
    path("${Ferry.rec(run, 'prune', 'out')}"), emit: json
    path 'rec', emit: rec

    script:
    Ferry.task('prune', run)

    stub:
    Ferry.task('prune', run, stub: true)
}
