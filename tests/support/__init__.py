"""Every helper of ferry's tests (tests/README.md): running the worker (ferry), Azurite, the fault
proxy and toxiproxy, trees and snapshots, sparse files (holes), the manifest format, the
pipelines' runs (pipeline, nextflow, slurm, rundir), the token stand-in and its CA, latencyfs.
Test modules import from here, never from each other."""
