"""Issue 42, item 5: the pre-flight. What can be known of a migration without listing it (the
source there and readable, the destination's container name valid and the credentials taken, the
carried state's location usable) is checked by both engines' start hook before the lock and
before any job: a pass refused so ends naming the config key to change, with nothing listed,
nothing created, no traceback and no advice to -resume (which cannot help a config error)."""

from __future__ import annotations

import base64
import os
import uuid
from pathlib import Path

import pytest
from support.nextflow import nextflow, params_for
from support.pipeline import base_config, migration_tree, pipeline

ENGINES = ["snakemake", "nextflow"]


def run_engine(engine: str, tmp_path: Path, ferry_bin, source, dest, env=None):
    outdir = tmp_path / "results"
    if engine == "snakemake":
        config = base_config(ferry_bin, outdir, source, dest, "baseline")
        return pipeline(*config, env=env, expect=None)
    params = params_for(ferry_bin, outdir, source, dest, "baseline")
    return nextflow(tmp_path / "launch", params=params, env=env, expect=None)


def assert_refused(proc, tmp_path: Path, key: str) -> str:
    """Refused by the pre-flight, naming `key`, with nothing run and no run records left."""
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0, text[-3000:]
    assert "ferry: pre-flight: the pass cannot begin" in text, text[-3000:]
    assert f"config field '{key}'" in text, text[-3000:]
    assert "Traceback" not in text and "-resume" not in text, text[-3000:]
    root = tmp_path / "results" / "t"
    # Neither the migration's record nor its lock: the refused pass never began.
    assert not (root / "migration.json").exists() and not (root / "lock.json").exists()
    run = root / "baseline"
    made = {p.name for p in run.iterdir()} if run.exists() else set()
    # Nextflow opens its trace file there before the workflow starts; nothing else is made.
    assert made <= {"pipeline_info"}, made
    work = tmp_path / "launch" / "work"
    assert not work.exists() or not any(work.iterdir()), "a task ran after the pre-flight failed"
    return text


def unmade(azurite) -> tuple[str, object]:
    """A container URL of a name no container has, and its SDK client."""
    name = f"preflight-{uuid.uuid4().hex[:12]}"
    return azurite.url(name), azurite.service_client().get_container_client(name)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("engine", ENGINES)
def test_a_missing_source_is_refused_and_creates_nothing(engine, tmp_path, ferry_bin, azurite):
    dest, client = unmade(azurite)
    missing = tmp_path / "no-such-share"
    proc = run_engine(engine, tmp_path, ferry_bin, missing, dest)
    text = assert_refused(proc, tmp_path, "source")
    assert f"{missing} does not exist" in text, text[-3000:]
    assert not client.exists(), "the destination container was made for a source that is not there"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("engine", ENGINES)
def test_an_invalid_container_name_is_refused_before_the_crawl(
    engine, tmp_path, ferry_bin, azurite
):
    src = tmp_path / "src"
    migration_tree(src, files=3, big=0)
    proc = run_engine(engine, tmp_path, ferry_bin, src, azurite.url("nf"))
    text = assert_refused(proc, tmp_path, "dest")
    assert 'invalid container name "nf"' in text and "3 to 63" in text, text[-3000:]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("engine", ENGINES)
def test_a_refused_key_is_named_before_the_crawl(engine, tmp_path, ferry_bin, container):
    src = tmp_path / "src"
    migration_tree(src, files=3, big=0)
    wrong = {"AZURE_STORAGE_KEY": base64.b64encode(os.urandom(64)).decode()}
    proc = run_engine(engine, tmp_path, ferry_bin, src, container, env=wrong)
    text = assert_refused(proc, tmp_path, "dest")
    assert "'auth'" in text and "credentials were refused" in text and "403" in text, text[-3000:]
    assert not list(container.client.list_blobs()), "something was written with a refused key"
