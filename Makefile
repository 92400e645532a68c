# ferry: install, build, test and demo. Every target works from a fresh clone (see scripts/setup.sh).
SHELL := /bin/bash
CARGO_MANIFEST := worker/Cargo.toml
PYTEST := .venv/bin/pytest

.PHONY: setup build test demo bench nextflow-schema

setup:
	scripts/setup.sh

build:
	cargo build --release --manifest-path $(CARGO_MANIFEST)

test: setup
	cargo test --release --manifest-path $(CARGO_MANIFEST)
	$(PYTEST) -q tests

demo: setup
	scripts/demo.sh

# Benchmark campaigns (minutes; results in benchmarks/results/, explained in docs/benchmarks.md).
bench: setup
	.venv/bin/python benchmarks/campaign.py all
	benchmarks/pipeline.sh
	.venv/bin/python benchmarks/replicate.py

# nextflow_schema.json is generated from workflow/schemas/config.schema.yaml (a test checks it).
nextflow-schema:
	.venv/bin/python workflow/scripts/ferry_config.py nextflow-schema > nextflow_schema.json
