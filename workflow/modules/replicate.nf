// One dataset onto every rank of an MPI job, reading the source once (workflow/scripts/replicate.py,
// docs/replicate.md): one task that is the whole MPI job. Give it the nodes through the executor
// (Slurm: clusterOptions '--nodes=N'; here: ranks on one host).

process REPLICATE {
    label 'ferry_transfer'
    errorStrategy { Ferry.strategy(task, params.job_retries as int) }
    publishDir "${run.run_dir}", mode: 'copy', saveAs: { name -> name.startsWith('rec/') ? name.substring(4) : name }

    input:
    val run                 // ferry, auth_env, source, dest, replicate_args_sh, mpirun_sh

    output:
    path 'rec/replicate.json', emit: json
    path 'rec/logs/replicate.log', emit: log

    script:
    """
    ${run.auth_env ? "export ${run.auth_env}" : ''}
    mkdir -p rec/logs
    ${run.mpirun_sh} python3 -m mpi4py "\${FERRY_SCRIPTS:-${projectDir}/workflow/scripts}/replicate.py" \\
        ${Ferry.q(run.source)} ${Ferry.q(run.dest)} --ferry ${Ferry.q(run.ferry)} ${run.replicate_args_sh} \\
        --json rec/replicate.json 2> rec/logs/replicate.log
    """

    stub:
    """
    mkdir -p rec/logs
    echo '{"command": "replicate"}' > rec/replicate.json
    : > rec/logs/replicate.log
    """
}
