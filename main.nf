#!/usr/bin/env nextflow
// ferry: phased migration of file trees between local/NFS file systems and Azure Blob Storage
// (docs/pipeline.md), and MPI replication of one dataset to many nodes (-entry REPLICATE).
//
//   nextflow run main.nf -profile local -params-file config/config.yaml --source SRC --dest DST --phase baseline

include { MIGRATE   } from './workflow/migrate.nf'
include { REPLICATE as MPI_REPLICATE } from './workflow/modules/replicate.nf'

// The config as workflow/scripts/ferry_config.py resolved it (nextflow.config), the code the
// Snakemake pipeline uses, on this machine, before any task is submitted.
def resolved = FerryConfig.resolved(params)
resolved.warnings.each { log.warn "ferry: ${it}" }
// The run directory's names, for the processes' inputs and outputs (Ferry.LAYOUT).
Ferry.use(resolved.layout)

workflow {
    if (resolved.run.replicate_only)
        error "ferry: no migration configured (config fields 'source' and 'dest' are empty); for the replication, run -entry REPLICATE"
    FerryConfig.started(resolved.run, projectDir, workflow.stubRun)
    MIGRATE(resolved.run, resolved.steps, resolved.layout)
    MIGRATE.out.report.map { json -> FerryConfig.finish(json, resolved, projectDir) }
}

// Ctrl-C (or a scheduler's SIGTERM) on the head: how to resume.
workflow.onError { FerryConfig.stopped(workflow.errorMessage) }

// One dataset onto every MPI rank (docs/replicate.md), separate from the migration phases:
//   nextflow run main.nf -entry REPLICATE --replicate.source SRC --replicate.dest 'DIR/{rank}'
workflow REPLICATE {
    MPI_REPLICATE([run_dir: resolved.run.replicate_dir, spec: resolved.steps.replicate, layout: resolved.layout])
}
