# The image every Azure Batch task runs in (profiles/azurebatch, docs/azure-batch.md): the ferry
# worker, python3 and fpart, bin/ferry-task and the shared scripts. The worker is built by the
# same command the project's set-up runs and tests (scripts/setup.sh --worker).
#
#   docker build -t <registry>.azurecr.io/ferry:0.1.0 .

FROM rust:1-bookworm AS build
WORKDIR /src
COPY worker/ worker/
COPY scripts/setup.sh scripts/
RUN scripts/setup.sh --worker

FROM debian:bookworm-slim
# time: per-task timings (bin/ferry-task); procps: Nextflow's task metrics (ps).
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates python3 fpart time procps \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/worker/target/release/ferry /usr/local/bin/ferry
COPY bin/ferry-task /usr/local/bin/ferry-task
COPY workflow/scripts/ /opt/ferry/workflow/scripts/
# Where the Nextflow modules look for ferry_report.py (and replicate.py) inside a task.
ENV FERRY_SCRIPTS=/opt/ferry/workflow/scripts
RUN ferry --version && python3 /opt/ferry/workflow/scripts/ferry_report.py --help > /dev/null
