# The MPI replication (docs/replicate.md): one job of `replicate.ranks` MPI tasks that lists the
# source once, downloads a share on each rank and broadcasts the rest. Its own target
# (`snakemake replicate`), never part of the migration phases' DAG.
#
# On Slurm the job asks for `tasks` (and `nodes`) and starts its ranks with the configured
# launcher inside the allocation: snakemake-executor-plugin-slurm treats a job with an `mpi`
# resource as an MPI job and leaves the launch to the rule's command.

REPLICATE = config["replicate"]
REPLICATE_RUN = ferry_config.replicate_run_dir(config)
REPLICATE_ARGS = shlex.join(ferry_config.replicate_args(config))


# Under --software-deployment-method conda the rule's environment brings Python, mpi4py and Open
# MPI; otherwise the interpreter running Snakemake (the project's venv, which has mpi4py) runs it.
REPLICATE_PYTHON = (
    "python"
    if "conda"
    in {str(m).lower() for m in workflow.deployment_settings.deployment_method}
    else sys.executable
)


# Slurm rejects a node count below one: only ask for nodes when one is configured.
_REPLICATE_NODES = {"nodes": REPLICATE["nodes"]} if REPLICATE["nodes"] else {}


rule replicate:
    output:
        report=f"{REPLICATE_RUN}/report.json",
    log:
        f"{REPLICATE_RUN}/replicate.log",
    benchmark:
        f"{REPLICATE_RUN}/benchmark.tsv"
    conda:
        "../envs/replicate.yaml"
    resources:
        **_REPLICATE_NODES,
        mpi=REPLICATE["launcher"],
        tasks=REPLICATE["ranks"],
        mem_mb=REPLICATE["mem_mb"],
        runtime=REPLICATE["runtime"],
    params:
        env=AUTH_ENV,
        python=REPLICATE_PYTHON,
        script=os.path.join(workflow.basedir, "workflow", "scripts", "replicate.py"),
        ferry=FERRY,
        source=lambda wc: REPLICATE["source"],
        # A function: "{rank}" is for replicate.py, not a Snakemake wildcard.
        dest=lambda wc: REPLICATE["dest"],
        args=REPLICATE_ARGS,
    shell:
        "{params.env} {resources.mpi} -n {resources.tasks} {params.python:q} -m mpi4py {params.script:q}"
        " {params.source:q} {params.dest:q} --ferry {params.ferry:q} {params.args}"
        " --json {output.report:q} 2> {log:q}"
