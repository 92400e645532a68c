# The image every Azure Batch task runs in (profiles/azurebatch, docs/azure-batch.md): the ferry
# worker, python3 and fpart, Open MPI with mpi4py and numpy for the replication, bin/ferry-task and
# the shared scripts. The worker is built by the same command the project's set-up runs and tests
# (scripts/setup.sh --worker).
#
#   docker build -t <registry>.azurecr.io/ferry:0.1.0 .

FROM rust:1-bookworm AS build
WORKDIR /src
COPY worker/ worker/
# The run directory's layout, which the worker compiles in (worker/src/run_dir.rs).
COPY workflow/scripts/run_dir.json workflow/scripts/
COPY scripts/setup.sh scripts/
RUN scripts/setup.sh --worker

FROM debian:bookworm-slim
# procps: Nextflow's task metrics (ps). python3-jsonschema: the scripts read the worker's
# documents through their schema (ferry_docs.py). openmpi-bin,
# python3-mpi4py, python3-numpy: the REPLICATE process runs `mpirun ... python3 -m mpi4py
# replicate.py` (workflow/modules/replicate.nf). Debian's builds, not requirements.txt's wheels:
# its mpi4py is built against this Open MPI and needs no compiler in the image; replicate.py
# runs on both (mpi4py 3.1 and 4, numpy 1.24 and 2).
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates python3 fpart procps \
      openmpi-bin python3-mpi4py python3-numpy python3-jsonschema \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/worker/target/release/ferry /usr/local/bin/ferry
COPY bin/ferry-task /usr/local/bin/ferry-task
COPY workflow/scripts/ /opt/ferry/workflow/scripts/
# Where the Nextflow modules look for ferry_report.py (and replicate.py) inside a task.
ENV FERRY_SCRIPTS=/opt/ferry/workflow/scripts
# A container's tasks run as root, which mpirun refuses unless told it is meant.
ENV OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
RUN ferry --version && ferry-task --help > /dev/null \
 && python3 -c "import sys; sys.path.insert(0, '/opt/ferry/workflow/scripts'); import ferry_docs" \
 && mpirun --version > /dev/null && python3 -c "import mpi4py.MPI, numpy"
