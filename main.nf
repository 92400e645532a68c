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
    MIGRATE(resolved.config, resolved.derived)
    MIGRATE.out.report.map { json -> FerryConfig.finish(json, resolved.derived.run_dir) }
}

// One dataset onto every MPI rank: nextflow run main.nf -entry REPLICATE --source SRC --dest 'DIR/{rank}'
workflow REPLICATE {
    def run = resolved.derived
    MPI_REPLICATE(run.subMap(['run_dir', 'ferry', 'auth_env', 'replicate_args_sh', 'mpirun_sh'])
              + [source: resolved.config.source, dest: resolved.config.dest])
}
