# ferry: install, build, test and demo. Every target works from a fresh clone (see scripts/setup.sh).
SHELL := /bin/bash
CARGO_MANIFEST := worker/Cargo.toml
PYTEST := .venv/bin/pytest

.PHONY: setup build lint test test-fast demo bench nextflow-schema worker-schema faults-deep

setup:
	scripts/setup.sh

build:
	cargo build --release --manifest-path $(CARGO_MANIFEST)

# Formatting and lints, each a gate: rustfmt, clippy (warnings denied), ruff (ruff.toml), no
# function over 100 lines in the scripts or the worker (tools/long_functions.py), snakefmt, and
# the worker's floors (tools/import_floors.py over worker/floors.toml: no circle, no import up).
# Nextflow 24.10 has no linter (`nextflow lint` arrived in 25.04).

lint: setup
	cargo fmt --manifest-path $(CARGO_MANIFEST) --check
	cargo clippy --release --all-targets --quiet --manifest-path $(CARGO_MANIFEST) -- -D warnings
	.venv/bin/ruff check --quiet .
	.venv/bin/ruff format --check --quiet .
	.venv/bin/python tools/long_functions.py --lang python workflow/scripts
	.venv/bin/snakefmt --check Snakefile workflow/rules
	.venv/bin/python tools/import_floors.py
	.venv/bin/python tools/long_functions.py worker/src

# The pytest suite runs as two runs side by side (scripts/test-suite.sh): the Slurm tests, which
# mostly wait on the cluster, beside the others.
test: lint
	cargo test --release --manifest-path $(CARGO_MANIFEST)
	PYTEST="$(PYTEST)" scripts/test-suite.sh

# The everyday loop (under 3 minutes): the worker's build and Rust unit tests, then every pytest
# suite but the slow ones, by their markers (pytest.ini): Snakemake/Nextflow runs, Slurm, MPI,
# FUSE (latencyfs) and the fault suites. `make test` runs everything.
SLOW_MARKERS := pipeline or slurm or mpi or fuse or faults
test-fast: lint
	cargo test --release --manifest-path $(CARGO_MANIFEST)
	$(PYTEST) -q -m "not ($(SLOW_MARKERS))" tests

# The fault suite's slow mode (docs/reliability.md): more seeds, higher rates, 500 kills (≈ 25 min).
# FERRY_FAULT_SEED=<seed> replays a run; FERRY_FAULTS_REPORT=<file> writes its figures as JSON.
faults-deep: setup
	$(PYTEST) -q --deep --timeout 3600 tests/faults

demo: setup
	scripts/demo.sh

# Benchmark campaigns (minutes; results in benchmarks/results/, explained in docs/benchmarks.md).
bench: setup
	.venv/bin/python benchmarks/campaign.py all
	.venv/bin/python benchmarks/replicate.py

# nextflow_schema.json is generated from workflow/schemas/config.schema.yaml (a test checks it).
nextflow-schema:
	.venv/bin/python workflow/scripts/ferry_config.py nextflow-schema > nextflow_schema.json

# The worker documents' JSON Schema, generated from their types (worker/src/documents.rs); the
# worker's tests fail while the checked-in one is stale.
worker-schema: build
	worker/target/release/ferry schema > workflow/scripts/worker-documents.schema.json
