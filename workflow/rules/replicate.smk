# The MPI replication (docs/replicate.md): one job of `replicate.ranks` MPI tasks that lists the
# source once, downloads a share on each rank and broadcasts the rest. Its own target
# (`snakemake replicate`), never part of the migration phases' DAG.
#
# On Slurm the job asks for `tasks` (and `nodes`) and starts its ranks with the configured
# launcher inside the allocation: snakemake-executor-plugin-slurm treats a job with an `mpi`
# resource as an MPI job and leaves the launch to the rule's command.

REPLICATE = RESOLVED["config"]["replicate"]
REPLICATE_RUN = RUN_INFO["replicate_dir"]


# Under --software-deployment-method conda the rule's environment brings Python, mpi4py and Open
# MPI; otherwise the interpreter running Snakemake (the project's venv, which has mpi4py) runs it.
REPLICATE_PYTHON = (
    "python"
    if "conda"
    in {str(m).lower() for m in workflow.deployment_settings.deployment_method}
    else sys.executable
)


rule replicate:
    output:
        report=os.path.join(REPLICATE_RUN, ferry_run_dir.REPLICATE_REPORT),
        bench=records_in(REPLICATE_RUN, "replicate").bench,
    log:
        records_in(REPLICATE_RUN, "replicate").log,
    retries: retries("replicate")
    conda:
        "../envs/replicate.yaml"
    resources:
        **requests("replicate"),
        # Slurm rejects a node count below one: only ask for nodes when one is configured.
        **({"nodes": REPLICATE["nodes"]} if REPLICATE["nodes"] else {}),
        mpi=REPLICATE["launcher"],
        tasks=REPLICATE["ranks"],
    message:
        message("replicate")
    shell:
        task("replicate", REPLICATE_RUN) + f" --set python={literal(REPLICATE_PYTHON)}"
