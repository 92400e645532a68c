// What this phase copies and verifies, cut into partitions: `ferry plan` (the worker decides, so
// the two engines cannot drift). Its directory is the fan-out: one transfer per copy part, one
// verify per verify part.

process PLAN {
    label 'ferry_plan'
    errorStrategy { Ferry.strategy(task, params.job_retries as int) }
    publishDir "${run.run_dir}", mode: 'copy', pattern: 'plan/**'

    input:
    val run                                               // run_dir, ferry, plan_args_sh
    path source_listing, stageAs: 'listing/source.tsv'
    path dest_listing, stageAs: 'listing/dest.tsv'        // [] in the baseline
    val dest_ready                                        // the baseline waits for MAKE_DEST

    output:
    path 'plan/plan.json', emit: plan
    path 'plan/copy/part-*.tsv', emit: copy, optional: true
    path 'plan/verify/part-*.tsv', emit: verify, optional: true
    path 'plan/**', emit: files               // with summaries and delete.tsv, for the run directory
    path 'rec', emit: rec

    script:
    """
    mkdir -p rec/plan
    ferry-task --out plan.out --log rec/logs/plan.log --bench rec/benchmarks/plan.tsv -- \\
        ${Ferry.q(run.ferry)} plan listing/source.tsv ${dest_listing ? 'listing/dest.tsv' : ''} --out plan ${run.plan_args_sh}
    cp plan/plan.json rec/plan/plan.json
    """

    stub:
    // Two copy parts (and, in the final phase, two verify parts): enough to walk every edge.
    def verify = run.final ? 'verify' : 'copy'
    """
    mkdir -p plan/copy plan/verify rec/plan rec/logs rec/benchmarks
    for part in 00000 00001; do
        printf '#ferry-manifest v1\\n' > plan/copy/part-\$part.tsv
        ${run.final ? 'cp plan/copy/part-\$part.tsv plan/verify/' : ''}
    done
    cat > plan/plan.json <<'JSON'
    {"phase": "stub", "copy_partitions": [{"id": "00000", "files": 0, "bytes": 0}, {"id": "00001", "files": 0, "bytes": 0}],
     "verify_partitions": [{"id": "00000", "files": 0, "bytes": 0}, {"id": "00001", "files": 0, "bytes": 0}]}
    JSON
    cp plan/plan.json rec/plan/plan.json
    : > rec/logs/plan.log
    printf 's\\tcpu_time\\tmax_rss\\n0\\t0\\t0\\n' > rec/benchmarks/plan.tsv
    """
}
