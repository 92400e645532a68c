// After prune, one `ferry verify` of the whole trees: it must find nothing missing or extra.

process FINAL_CHECK {
    label 'ferry'
    errorStrategy { Ferry.strategy(task, run.spec.retries as int) }

    input:
    val run
    path pruned                                           // prune's report: runs only after prune

    output:
    path 'rec', emit: rec

    script:
    Ferry.task('final_check', run)

    stub:
    Ferry.task('final_check', run, stub: true)
}
