// The MPI replication (docs/replicate.md): one dataset onto every rank, the source read once, by
// workflow/scripts/replicate.py with the same arguments as the Snakemake `replicate` rule. One
// task is the whole MPI job: on Slurm it asks for replicate.ranks tasks (and replicate.nodes) and
// starts them with replicate.launcher ("srun --mpi=pmix --kill-on-bad-exit=1"); locally, mpirun.

process REPLICATE {
    errorStrategy { Ferry.strategy(task, params.job_retries as int) }
    memory { "${params.replicate.mem_mb * task.attempt} MB" }
    time { "${params.replicate.runtime * task.attempt} min" }
    clusterOptions { "--ntasks=${params.replicate.ranks}" + (params.replicate.nodes ? " --nodes=${params.replicate.nodes}" : '') }
    publishDir "${run.run_dir}", mode: 'copy', saveAs: { name -> name.startsWith('rec/') ? name.substring(4) : name }

    input:
    val run                 // run_dir, ferry, auth_env, launcher, ranks, source, dest, args_sh

    output:
    path 'rec/report.json', emit: json
    path 'rec/{replicate.log,benchmark.tsv}'

    script:
    """
    ${run.auth_env ? "export ${run.auth_env}" : ''}
    ferry-task --out rec/replicate.out --log rec/replicate.log --bench rec/benchmark.tsv -- \\
        ${run.launcher} -n ${run.ranks} python3 -m mpi4py "\${FERRY_SCRIPTS:-${projectDir}/workflow/scripts}/replicate.py" \\
        ${Ferry.q(run.source)} ${Ferry.q(run.dest)} --ferry ${Ferry.q(run.ferry)} ${run.args_sh} --json rec/report.json
    """

    stub:
    """
    mkdir -p rec
    echo '{"command": "replicate"}' > rec/report.json
    : > rec/replicate.log
    printf 's\\tcpu_time\\tmax_rss\\n0\\t0\\t0\\n' > rec/benchmark.tsv
    """
}
