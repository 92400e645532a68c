// The MPI replication (docs/replicate.md): one dataset onto every rank, the source read once, by
// workflow/scripts/replicate.py with the same command as the Snakemake `replicate` rule. One task
// is the whole MPI job: on Slurm it asks for replicate.ranks tasks (and replicate.nodes;
// profiles/slurm) and starts them with replicate.launcher ("srun --mpi=pmix --kill-on-bad-exit=1");
// locally, mpirun.

process REPLICATE {
    label 'ferry'
    errorStrategy { Ferry.strategy(task, run.spec.retries as int) }
    publishDir "${run.run_dir}", mode: 'copy', saveAs: { name -> name.startsWith('rec/') ? name.substring(4) : name }

    input:
    val run                 // run_dir and the step's spec

    output:
    path("rec/${run.layout.replicate_report}"), emit: json
    path("${Ferry.rec(run, 'replicate', 'log')}")
    path("${Ferry.rec(run, 'replicate', 'bench')}")

    script:
    Ferry.task('replicate', run)

    stub:
    Ferry.task('replicate', run, stub: true)
}
