# The MPI replication (docs/replicate.md): one job of `replicate.ranks` MPI tasks that lists the
# source once, downloads a share on each rank and broadcasts the rest. Its own target
# (`snakemake replicate`), never part of the migration phases' DAG.
#
# On Slurm the job asks for `tasks` (and `nodes`) and starts its ranks with the configured
# launcher inside the allocation: snakemake-executor-plugin-slurm treats a job with an `mpi`
# resource as an MPI job and leaves the launch to the rule's command.

REPLICATE = config["replicate"]
REPLICATE_RUN = os.path.join(
    config["outdir"], "replicate", ferrylib.run_name_for(REPLICATE["source"], REPLICATE["dest"])
)


def _replicate_args():
    r = REPLICATE
    args = ["--chunk-size", str(ferrylib.parse_size(r["chunk_size"])), "--depth", str(r["depth"])]
    if r["download_ranks"]:
        args += ["--download-ranks", str(r["download_ranks"])]
    if r["max_bandwidth"]:
        args += ["--max-bandwidth", r["max_bandwidth"]]
    if r["manifest"]:
        args += ["--manifest", os.path.abspath(r["manifest"])]
    if r["verify"]:
        args.append("--verify")
    return _join(args)


# Slurm rejects a node count below one: only ask for nodes when one is configured.
_REPLICATE_NODES = {"nodes": REPLICATE["nodes"]} if REPLICATE["nodes"] else {}


rule replicate:
    output:
        report=f"{REPLICATE_RUN}/report.json",
    log:
        f"{REPLICATE_RUN}/replicate.log",
    benchmark:
        f"{REPLICATE_RUN}/benchmark.tsv"
    params:
        env=AUTH_ENV,
        python=sys.executable,
        script=os.path.join(workflow.basedir, "workflow", "scripts", "replicate.py"),
        ferry=FERRY,
        source=lambda wc: REPLICATE["source"],
        # A function: "{rank}" is for replicate.py, not a Snakemake wildcard.
        dest=lambda wc: REPLICATE["dest"],
        args=_replicate_args(),
    resources:
        mpi=REPLICATE["launcher"],
        tasks=REPLICATE["ranks"],
        mem_mb=REPLICATE["mem_mb"],
        runtime=REPLICATE["runtime"],
        **_REPLICATE_NODES,
    shell:
        "{params.env} {resources.mpi} -n {resources.tasks} {params.python:q} -m mpi4py {params.script:q}"
        " {params.source:q} {params.dest:q} --ferry {params.ferry:q} {params.args}"
        " --json {output.report:q} 2> {log:q}"
