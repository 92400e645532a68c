"""`ferry check SOURCE DEST [--state LOC]`, the pre-flight (issue 42, item 5): what can be known
of a migration's ends without listing them, each check with its verdict, exit 1 when one failed;
nothing is created on the way (docs/worker.md, "ferry check")."""

from __future__ import annotations

import base64
import os
import uuid

import ferry_docs
from support.trees import make_tree


def checks(run_ferry, *args, want: int, env=None) -> dict:
    """{subject: (problem, message)} of `ferry check --json`, the document checked first."""
    proc = run_ferry("check", *args, "--json", check=want, env=env)
    doc = ferry_docs.parse("check", proc.stdout, "ferry check")
    assert doc["ok"] is (want == 0)
    return {c["subject"]: (c["problem"], c["message"]) for c in doc["checks"]}


def test_usable_ends_pass_and_nothing_is_made(run_ferry, tmp_path):
    make_tree(tmp_path / "src", {"a.txt": b"a\n"})
    dest, state = tmp_path / "new" / "dst", tmp_path / "results" / "state"
    found = checks(run_ferry, tmp_path / "src", dest, "--state", state, want=0)
    assert {k: v[0] for k, v in found.items()} == {"source": None, "dest": None, "state": None}
    assert "does not exist yet" in found["dest"][1] and str(tmp_path) in found["dest"][1]
    assert not (tmp_path / "new").exists() and not (tmp_path / "results").exists()
    lines = run_ferry("check", tmp_path / "src", dest).stdout.splitlines()
    assert [line.split()[:2] for line in lines] == [["source", "ok"], ["dest", "ok"]]


def test_a_missing_source_fails_and_the_destination_is_not_made(run_ferry, tmp_path):
    found = checks(run_ferry, tmp_path / "gone", tmp_path / "dst", want=1)
    assert found["source"] == ("missing", f"{tmp_path / 'gone'} does not exist")
    assert found["dest"][0] is None and not (tmp_path / "dst").exists()


def test_a_file_is_neither_a_source_nor_a_destination_s_parent(run_ferry, tmp_path):
    (tmp_path / "file").write_text("x")
    found = checks(run_ferry, tmp_path / "file", tmp_path / "file" / "dst", want=1)
    assert found["source"][0] == "not_a_directory"
    assert found["dest"][0] == "not_a_directory" and "its parent" in found["dest"][1]


def test_ends_that_overlap_fail(run_ferry, tmp_path):
    make_tree(tmp_path / "src", {"a.txt": b"a\n"})
    found = checks(run_ferry, tmp_path / "src", tmp_path / "src" / "copy", want=1)
    assert found["dest"][0] == "overlap" and "inside the source" in found["dest"][1]


def test_an_unreadable_carried_state_fails(run_ferry, tmp_path):
    make_tree(tmp_path / "src", {"a.txt": b"a\n"})
    make_tree(tmp_path / "state", {"dest.json": b"{not json"})
    found = checks(
        run_ferry, tmp_path / "src", tmp_path / "dst", "--state", tmp_path / "state", want=1
    )
    assert found["state"][0] == "unreadable" and "not JSON" in found["state"][1]


def test_blob_ends(run_ferry, tmp_path, azurite, container):
    """A source container must exist; a destination's need not (the pass makes it), and the
    check does not make it either."""
    make_tree(tmp_path / "src", {"a.txt": b"a\n"})
    name = f"check-{uuid.uuid4().hex[:12]}"
    absent = azurite.url(name)
    found = checks(run_ferry, absent, tmp_path / "dst", "--state", absent, want=1)
    assert found["source"][0] == "missing" and "does not exist" in found["source"][1]
    assert found["state"][0] is None
    found = checks(run_ferry, tmp_path / "src", absent, want=0)
    assert "does not exist yet" in found["dest"][1]
    assert not azurite.service_client().get_container_client(name).exists()
    found = checks(run_ferry, container, absent, want=0)
    assert found["source"] == (None, f"{container}: reachable with the credentials")


def test_a_refused_key_fails_with_the_status(run_ferry, tmp_path, container):
    make_tree(tmp_path / "src", {"a.txt": b"a\n"})
    wrong = {"AZURE_STORAGE_KEY": base64.b64encode(os.urandom(64)).decode()}
    found = checks(run_ferry, tmp_path / "src", container, want=1, env=wrong)
    problem, message = found["dest"]
    assert problem == "credentials" and "HTTP 403" in message, message


def test_an_invalid_container_name_fails_every_verb(run_ferry, tmp_path, azurite):
    make_tree(tmp_path / "src", {"a.txt": b"a\n"})
    found = checks(run_ferry, tmp_path / "src", azurite.url("nf"), want=1)
    assert found["dest"][0] == "invalid" and 'invalid container name "nf"' in found["dest"][1]
    for verb in (["mk", azurite.url("nf")], ["ls", azurite.url("ab-")]):
        proc = run_ferry(*verb, check=2)
        assert "invalid container name" in proc.stderr and "3 to 63" in proc.stderr, proc.stderr


def test_mk_makes_no_destination_for_a_source_that_is_not_there(run_ferry, tmp_path, azurite):
    """The pipelines' make_dest (`mk DEST --source SRC`) made the container for a mistyped
    source while the source was being listed."""
    name = f"check-{uuid.uuid4().hex[:12]}"
    for dest in (azurite.url(name), tmp_path / "dst"):
        proc = run_ferry("mk", dest, "--source", tmp_path / "gone", check=2)
        assert f"{tmp_path / 'gone'} does not exist" in proc.stderr, proc.stderr
    assert not azurite.service_client().get_container_client(name).exists()
    assert not (tmp_path / "dst").exists()
