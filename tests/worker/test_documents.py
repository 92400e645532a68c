"""Every JSON document the worker prints or writes is what its checked-in schema says
(workflow/scripts/worker-documents.schema.json, generated from worker/src/documents.rs; the
worker's own test fails while it is stale), and the pipeline's reader (ferry_docs.py) refuses one
with a key renamed or a count that is not an integer. Local trees: the documents' shapes do not
depend on the backend (their requests are all zeros here); Azurite for the lease, Blob's alone."""

from __future__ import annotations

import json

import ferry_docs
import pytest
from support.trees import make_tree

LEASE_ID = "6f1c2a3e-0d4b-4c8e-9a51-2b7d3e4f5a6b"
FILES = {"a.txt": b"a\n", "d/b.txt": b"bb\n", "d/e/c.txt": b"ccc\n"}


@pytest.fixture
def phase(tmp_path, run_ferry, container):
    """A baseline copied and verified into a run directory laid out as the pipeline's."""
    src, dst, run = tmp_path / "src", tmp_path / "dst", tmp_path / "run"
    make_tree(src, FILES)
    run.mkdir()
    docs = {}
    listed = run_ferry("ls", "--recursive", src, "--summary", run / "ls.json")
    (run / "source.tsv").write_bytes(listed.stdout_bytes)
    docs["ls_summary"] = json.loads((run / "ls.json").read_text())
    run_ferry("shard", src, "--jobs", "2", "--out", run / "shards.json")
    docs["shards"] = json.loads((run / "shards.json").read_text())
    run_ferry("mk", dst, "--summary", run / "mk.json")
    docs["mk_summary"] = json.loads((run / "mk.json").read_text())
    run_ferry("plan", run / "source.tsv", "--out", run / "plan", "--phase", "baseline")
    docs["plan"] = json.loads((run / "plan" / "plan.json").read_text())
    docs["partition"] = run_ferry(
        "partition", run / "source.tsv", "--out", run / "parts", "--parts", "2", "--json"
    ).json
    manifest = run / "plan" / "copy" / "part-00000.tsv"
    progress = run / "progress" / "copy-part-00000.json"
    progress.parent.mkdir()
    copied = run_ferry(
        "copy", src, dst, "--files-from", manifest, "--json", "--progress-file", progress
    )
    docs["copy"] = copied.json
    docs["progress"] = json.loads(progress.read_text())
    (run / "copy").mkdir()
    (run / "copy" / "part-00000.json").write_text(copied.stdout)
    docs["verify"] = run_ferry("verify", src, dst, "--json").json
    docs["prune"] = run_ferry("prune", src, dst, "--dry-run", "--json").json
    docs["rm"] = run_ferry("rm", "--recursive", "--dry-run", dst / "d", "--json").json
    docs["status"] = run_ferry("status", run, "--json").json
    state = tmp_path / "state"
    docs["carry"] = run_ferry("carry", dst, "--state", state, "--pass", "baseline", "--json").json
    docs["check"] = run_ferry("check", src, dst, "--state", state, "--json").json
    docs["units"] = json.loads(run_ferry("units", "--size", "4MiB", "--rate", "1Gbps").stdout)
    run_ferry("shard", src, "--jobs", "2", "--out", run / "shards.json")
    docs["shards"] = json.loads((run / "shards.json").read_text())
    # The one document of a Blob location alone.
    leased = run_ferry("lease", container.at("state"), "acquire", "--id", LEASE_ID)
    docs["lease"] = json.loads(leased.stdout)
    return docs


def test_every_document_is_what_its_schema_says(phase):
    assert set(phase) == set(ferry_docs.SCHEMAS), "a document without a test, or one unknown"
    for kind, doc in phase.items():
        assert doc["version"] == ferry_docs.VERSION, kind
        ferry_docs.check(kind, doc, kind)
    assert phase["verify"]["passed"] is True and phase["verify"]["same"] == len(FILES)


def test_status_counts_are_integers(phase):
    status = phase["status"]["progress"]
    assert status["files"] == {"planned": len(FILES), "done": len(FILES)}
    tally = status["copy"]
    assert all(isinstance(n, int) for n in tally.values()) and tally["done"] == 1, tally
    floats = json.loads(json.dumps(phase["status"]))
    floats["progress"]["files"]["planned"] = float(len(FILES))  # "files": 3.0, as it once was
    with pytest.raises(ferry_docs.DocumentError, match="3.0 is not of type 'integer'"):
        ferry_docs.check("status", floats)


@pytest.mark.parametrize("kind", ["copy", "verify", "plan", "progress"])
def test_a_renamed_key_is_an_error(phase, kind):
    doc = json.loads(json.dumps(phase[kind]))
    key = next(k for k in doc if k != "version")
    doc[key + "_renamed"] = doc.pop(key)
    with pytest.raises(ferry_docs.DocumentError, match=f"'{key}' is a required property"):
        ferry_docs.check(kind, doc)
