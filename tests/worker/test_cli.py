"""The rest of the command-line contract: dry runs, filters, rm, mk, env, errors, --json fields."""

from __future__ import annotations

import hashlib
import json
import os
import re
import uuid

import pytest
from support.azurite import KEY
from support.blobs import file_blobs, folder_stubs
from support.manifest import parse_manifest
from support.summary import section
from support.trees import files_only, make_tree, odd_names_spec, snapshot

FILTER_TREE = {
    "a.txt": b"a",
    "b.log": b"bb",
    "sub/c.txt": b"ccc",
    "sub/d.log": b"dddd",
    "sub/deep/e.txt": b"e",
}


def blob_names(container) -> list[str]:
    """The files' blobs (directories are folder stubs besides)."""
    return sorted(file_blobs(container))


def test_dry_run_changes_nothing(tmp_path, container, run_ferry):
    src = tmp_path / "src"
    contents = make_tree(src, FILTER_TREE)

    up = run_ferry("copy", src, container, "--recursive", "--dry-run", "--json")
    assert up.json["dry_run"] is True
    assert up.json["files"]["total"] == len(contents)
    assert blob_names(container) == [], "--dry-run uploaded something"

    local_dst = tmp_path / "local-dst"
    run_ferry("copy", src, local_dst, "--recursive", "--dry-run")
    assert not local_dst.exists() or snapshot(local_dst) == {}, "--dry-run wrote locally"

    container.client.upload_blob("remote-only.txt", b"r")
    down_dst = tmp_path / "down-dst"
    down = run_ferry("copy", container, down_dst, "--recursive", "--dry-run", "--json")
    assert down.json["dry_run"] is True and down.json["files"]["total"] == 1
    assert not down_dst.exists() or snapshot(down_dst) == {}, "--dry-run downloaded something"


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--include", "*.txt"], ["a.txt", "sub/c.txt", "sub/deep/e.txt"]),
        (["--exclude", "*.log"], ["a.txt", "sub/c.txt", "sub/deep/e.txt"]),
        (["--include", "sub/**"], ["sub/c.txt", "sub/d.log", "sub/deep/e.txt"]),
        (["--exclude", "sub/**"], ["a.txt", "b.log"]),
        (["--exclude", "*.log", "--exclude", "sub/deep/**"], ["a.txt", "sub/c.txt"]),
    ],
)
def test_include_exclude_upload(tmp_path, container, run_ferry, args, expected):
    src = tmp_path / "src"
    make_tree(src, FILTER_TREE)
    result = run_ferry("copy", src, container, "--recursive", *args, "--json")
    assert blob_names(container) == expected
    assert result.json["files"]["copied"] == len(expected)


def test_include_exclude_on_ls_and_download(tmp_path, container, run_ferry):
    src, dst = tmp_path / "src", tmp_path / "dst"
    make_tree(src, FILTER_TREE)
    run_ferry("copy", src, container, "--recursive")
    _, entries = parse_manifest(
        run_ferry("ls", container, "--recursive", "--exclude", "*.log").stdout
    )
    assert sorted(e.path.decode() for e in entries if e.type == "f") == [
        "a.txt",
        "sub/c.txt",
        "sub/deep/e.txt",
    ]
    assert sorted(e.path.decode() for e in entries if e.type != "f") == ["sub", "sub/deep"], (
        "folder stubs are directories"
    )
    run_ferry("copy", container, dst, "--recursive", "--include", "*.log")
    assert sorted(p.decode() for p in files_only(snapshot(dst))) == ["b.log", "sub/d.log"]


def test_blob_ls_reports_sizes_and_md5(tmp_path, container, run_ferry):
    src = tmp_path / "src"
    contents = make_tree(src, {"x.bin": 123_457, "dir/y.txt": b"hello\n", "dir/empty": b""})
    run_ferry("copy", src, container, "--recursive")
    _, entries = parse_manifest(run_ferry("ls", container, "--recursive").stdout)
    got = {e.path: (e.type, e.size, e.md5) for e in entries}
    want = {p: ("f", len(c), hashlib.md5(c).hexdigest()) for p, c in contents.items()}
    want[b"dir"] = ("d", 0, hashlib.md5(b"").hexdigest())  # its folder stub
    assert got == want


def test_az_scheme_uses_account_and_endpoint_from_env(tmp_path, container, run_ferry, azurite):
    container.client.upload_blob("p/q.txt", b"via az://")
    env = {"AZURE_STORAGE_BLOB_ENDPOINT": azurite.endpoint}
    _, entries = parse_manifest(
        run_ferry("ls", f"az://{container.name}", "--recursive", env=env).stdout
    )
    assert [e.path for e in entries] == [b"p/q.txt"]
    run_ferry("copy", f"az://{container.name}/p", tmp_path / "dst", "--recursive", env=env)
    assert (tmp_path / "dst" / "q.txt").read_bytes() == b"via az://"


def test_rm_dry_run_then_rm(tmp_path, container, run_ferry):
    src = tmp_path / "src"
    make_tree(src, FILTER_TREE)
    run_ferry("copy", src, container, "--recursive")
    everything = blob_names(container)

    run_ferry("rm", container.at("sub"), "--recursive", "--dry-run")
    assert blob_names(container) == everything, "rm --dry-run deleted something"

    run_ferry("rm", container.at("sub"), "--recursive", "--exclude", "*.log")
    assert blob_names(container) == ["a.txt", "b.log", "sub/d.log"]
    run_ferry("rm", container, "--recursive")
    assert blob_names(container) == []


def test_mk_creates_the_container(azurite, run_ferry):
    name = f"made-by-ferry-{uuid.uuid4().hex[:12]}"
    svc = azurite.service_client()
    run_ferry("mk", azurite.url(name))
    assert svc.get_container_client(name).exists()
    svc.delete_container(name)


@pytest.mark.parametrize(
    "env, source, secret",
    [
        ({}, "key", KEY),
        (
            {
                "FERRY_AUTH": None,
                "AZURE_STORAGE_KEY": None,
                "AZURE_STORAGE_SAS_TOKEN": "sv=2024-11-04&ss=b&srt=sco&sp=rl&sig=c2VjcmV0LXNpZ25hdHVyZS12YWx1ZQ%3D%3D",
            },
            "sas",
            "c2VjcmV0LXNpZ25hdHVyZS12YWx1ZQ",
        ),
    ],
)
def test_env_names_the_source_and_never_the_secret(run_ferry, env, source, secret):
    result = run_ferry("env", env=env)
    out = result.stdout + result.stderr
    # The source's own name as a word ("sas" must not be satisfied by "sas-url" or a variable name).
    assert re.search(rf"(?<![\w-]){source}(?![\w-])", out.lower()), out
    for fragment in (secret, secret[:12], secret[-12:]):
        assert fragment not in out, f"ferry env printed part of the secret: {out!r}"


@pytest.mark.parametrize(
    "args",
    [
        ["copy", "{src}", "ftp://127.0.0.1:9/path", "--recursive"],
        ["copy", "{tmp}/does-not-exist", "{tmp}/dst", "--recursive"],
        ["ls", "{tmp}/does-not-exist"],
        ["copy", "{src}"],
        ["copy", "{src}", "{tmp}/dst", "--block-size", "lots"],
        ["frobnicate"],
    ],
)
def test_bad_usage_or_location_exits_2_with_a_message(tmp_path, run_ferry, args):
    src = tmp_path / "src"
    make_tree(src, {"f": b"f"})
    result = run_ferry(*[a.format(src=src, tmp=tmp_path) for a in args], check=2)
    assert result.stderr.strip(), "exit 2 needs a message on stderr"
    assert not (tmp_path / "dst").exists()


def test_missing_key_is_a_clear_error_before_any_request(tmp_path, container, proxy, run_ferry):
    src = tmp_path / "src"
    make_tree(src, {"f": b"f"})
    result = run_ferry(
        "copy",
        src,
        container.via(proxy.port),
        "--recursive",
        env={"AZURE_STORAGE_KEY": None},
        check=2,
    )
    assert "AZURE_STORAGE_KEY" in result.stderr, result.stderr
    assert proxy.requests() == [], "ferry contacted the service without credentials"
    result = run_ferry(
        "ls",
        container.via(proxy.port),
        env={"AZURE_STORAGE_ACCOUNT": None, "AZURE_STORAGE_KEY": None},
        check=2,
    )
    assert "AZURE_STORAGE" in result.stderr, result.stderr


def test_copy_json_summary_fields(tmp_path, container, run_ferry):
    src = tmp_path / "src"
    contents = make_tree(src, {"one": b"1" * 10, "two": b"2" * 20, "three/3": b"3" * 30})
    result = run_ferry("copy", src, container, "--recursive", "--json")
    j = result.json
    assert set(j) >= {
        "command",
        "source",
        "dest",
        "dry_run",
        "files",
        "bytes",
        "blocks",
        "retries",
        "failures",
        "seconds",
    }, sorted(j)
    assert j["command"] == "copy" and j["dry_run"] is False
    assert j["source"].rstrip("/") == str(src) and j["dest"].rstrip("/") == str(container)
    assert section(j, "files") == {"total": 3, "copied": 3, "skipped": 0, "failed": 0}
    assert section(j, "bytes") == {"total": 60, "copied": 60, "skipped": 0}
    assert section(j, "blocks")["reused"] == 0
    assert section(j, "retries") == {"total": 0, "by_status": {}}
    assert j["failures"] == []
    assert isinstance(j["seconds"], (int, float)) and 0 <= j["seconds"] < 60
    assert sorted(file_blobs(container)) == sorted(p.decode() for p in contents)
    assert folder_stubs(container) == ["three"]

    again = run_ferry("copy", src, container, "--recursive", "--json").json
    assert section(again, "files") == {"total": 3, "copied": 0, "skipped": 3, "failed": 0}
    assert section(again, "bytes") == {"total": 60, "copied": 0, "skipped": 60}


def test_verify_json_and_exit_status(tmp_path, container, run_ferry):
    src = tmp_path / "src"
    make_tree(
        src, {"same.txt": b"same", "changed.txt": b"before", "gone.txt": b"g", "extra/x": b"x"}
    )
    run_ferry("copy", src, container, "--recursive")
    ok = run_ferry("verify", src, container, "--checksum", "--json").json
    assert ok["command"] == "verify"
    assert (ok["same"], ok["differ"], ok["missing_on_dst"], ok["missing_on_src"], ok["error"]) == (
        4,
        0,
        0,
        0,
        0,
    )

    # Same size, different bytes: only a checksum comparison can see it.
    container.client.upload_blob("changed.txt", b"after!", overwrite=True)
    container.client.delete_blob("gone.txt")
    container.client.upload_blob("only-remote.txt", b"r")
    bad = run_ferry("verify", src, container, "--checksum", "--json", check=1).json
    assert (bad["same"], bad["differ"], bad["missing_on_dst"], bad["missing_on_src"]) == (
        2,
        1,
        1,
        1,
    ), bad
    statuses = {e["path"].rsplit("/", 1)[-1]: e["status"] for e in bad["entries"]}
    assert statuses.get("changed.txt") in ("differ", "*"), bad["entries"]
    assert statuses.get("gone.txt") in ("missing_on_dst", "-"), bad["entries"]
    assert statuses.get("only-remote.txt") in ("missing_on_src", "+"), bad["entries"]
    json.dumps(bad)  # the whole object is plain JSON


def test_names_gives_scripts_raw_paths_and_temp_names(tmp_path, run_ferry):
    """`ferry names` (hidden, for the replication): per manifest entry its canonical line, its
    raw path, for a file the names of its temp and journal files, its type, size and MD5, and
    (with --held only) whether a destination holds it, each field NUL-ended."""
    src = tmp_path / "src"
    want = make_tree(src, {**odd_names_spec(local_only=True), "sub/plain.txt": b"p"})
    listing = run_ferry("ls", "-r", src).stdout_bytes
    manifest = tmp_path / "m.tsv"
    manifest.write_bytes(listing)
    out = run_ferry("names", manifest).stdout_bytes
    fields = out.split(b"\0")
    assert len(fields) % 8 == 1 and fields[-1] == b""
    records = [fields[i : i + 8] for i in range(0, len(fields) - 1, 8)]
    kinds = {r[1]: r[4] for r in records}
    assert kinds[b"sub"] == b"dir" and kinds[b"sub/plain.txt"] == b"file"
    assert all(r[5] == str(len(want[r[1]])).encode() for r in records if r[1] in want)
    assert all(r[7] == b"" for r in records), "held is said with --held only"
    entries = [line for line in listing.splitlines(keepends=True) if not line.startswith(b"#")]
    assert [r[0] + b"\n" for r in records] == entries
    files = {r[1]: (r[2], r[3]) for r in records if r[0].split(b"\t")[1] == b"f"}
    assert set(files) == set(want)
    assert all(not r[2] and not r[3] for r in records if r[1] not in files)
    temps = [t for pair in files.values() for t in pair]
    assert len(set(temps)) == len(temps)
    assert all(t.startswith(b".ferry-") and b"/" not in t for t in temps)
    # Written beside their file with the worker's mark (the sticky bit, docs/worker.md), the
    # names are ones every listing skips.
    for path, (partial, journal) in files.items():
        parent = os.path.join(os.fsencode(src), os.path.dirname(path))
        for name in (partial, journal):
            fd = os.open(os.path.join(parent, name), os.O_CREAT | os.O_WRONLY, 0o1600)
            os.write(fd, b"half")
            os.close(fd)

    def listed(text: bytes) -> list:
        return sorted(line.split(b"\t", 1)[0] for line in text.splitlines())

    assert listed(run_ferry("ls", "-r", src).stdout_bytes) == listed(listing)

    manifest.write_text(
        "#ferry-manifest v1\tpath\ttype\tsize\tmtime\tmd5\nok\tf\t1\t-\t-\na/../b\tf\t1\t-\t-\n"
    )
    r = run_ferry("names", manifest, check=2)
    assert "m.tsv:3: a/../b: unsafe path" in r.stderr, r.stderr
