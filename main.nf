#!/usr/bin/env nextflow
// ferry: phased migration of file trees between local/NFS file systems and Azure Blob Storage
// (docs/pipeline.md), and MPI replication of one dataset to many nodes (-entry REPLICATE).
//
//   nextflow run main.nf -profile local -params-file config/config.yaml --source SRC --dest DST --phase baseline

include { MIGRATE   } from './workflow/migrate.nf'
include { REPLICATE as MPI_REPLICATE } from './workflow/modules/replicate.nf'

// The config is checked against workflow/schemas/config.schema.yaml and resolved by the same
// code the Snakemake pipeline uses, on this machine, before any task is submitted.
def resolved = FerryConfig.resolve(params, projectDir)

workflow {
    if (resolved.derived.replicate_only)
        error "ferry: no migration configured (config fields 'source' and 'dest' are empty); for the replication, run -entry REPLICATE"
    MIGRATE(resolved.config, resolved.derived)
    MIGRATE.out.report.map { json -> FerryConfig.finish(json, resolved.derived.run_dir) }
}

// One dataset onto every MPI rank (docs/replicate.md), separate from the migration phases:
//   nextflow run main.nf -entry REPLICATE --replicate.source SRC --replicate.dest 'DIR/{rank}'
workflow REPLICATE {
    def cfg = resolved.config
    MPI_REPLICATE([run_dir: resolved.derived.replicate_run_dir, ferry: resolved.derived.ferry,
                   auth_env: resolved.derived.auth_env, launcher: cfg.replicate.launcher, ranks: cfg.replicate.ranks,
                   source: cfg.replicate.source, dest: cfg.replicate.dest, args_sh: resolved.derived.replicate_args_sh])
}
