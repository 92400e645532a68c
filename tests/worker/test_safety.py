"""Regression tests for defects found by trying ferry as a new user would and by reading its code
(issue 8): symlinks below a root, location errors, prune's directories, stale resumed blocks,
sources that change while copied. Each test names the promise it holds (docs/reliability.md)."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os

import pytest
from support.interrupt import fail_after_change, kill_once_blocks_staged, sdk_block_id
from support.proxy import ABSENT
from support.trees import Dir, File, make_tree, snapshot

MiB = 1 << 20


def fixed_dir(path, mode=0o711, mtime_ns=1_500_000_000_000_000_000):
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(mode)
    os.utime(path, ns=(mtime_ns, mtime_ns))
    st = path.stat()
    return (st.st_mode, st.st_mtime_ns, sorted(os.listdir(path)))


def state(path):
    st = path.stat()
    return (st.st_mode, st.st_mtime_ns, sorted(os.listdir(path)))


@pytest.mark.parametrize("route", ["local", "download"])
def test_a_symlinked_directory_in_the_destination_is_never_written_through(
    tmp_path, run_ferry, container, route
):
    src, dst, elsewhere = tmp_path / "src", tmp_path / "dst", tmp_path / "elsewhere"
    make_tree(
        src,
        {
            "shadow/x.txt": b"x",
            "shadow/deeper/y.txt": b"y",
            "plain.txt": b"plain",
            "big/z.bin": File(size=5 * MiB),
        },
    )
    before = fixed_dir(elsewhere)
    dst.mkdir()
    (dst / "shadow").symlink_to(elsewhere)
    if route == "local":
        out = run_ferry("copy", "-r", src, dst, "--json")
    else:
        run_ferry("copy", "-r", src, container)
        out = run_ferry("copy", "-r", container, dst, "--json")
    assert state(elsewhere) == before, "a file or directory metadata went through dst/shadow"
    # The source has a directory there: the link is replaced by one (a type change between
    # passes), itself removed, never followed.
    assert out.json["files"]["failed"] == 0, out.json
    assert not (dst / "shadow").is_symlink() and (dst / "shadow").is_dir()
    assert (dst / "shadow/x.txt").read_bytes() == b"x" and (
        dst / "shadow/deeper/y.txt"
    ).read_bytes() == b"y"
    assert (dst / "plain.txt").read_bytes() == b"plain" and (
        dst / "big/z.bin"
    ).stat().st_size == 5 * MiB


def test_a_manifest_cannot_read_through_a_symlink_out_of_the_source(tmp_path, run_ferry):
    src, dst, outside = tmp_path / "src", tmp_path / "dst", tmp_path / "outside"
    make_tree(outside, {"secret.txt": b"not yours"})
    make_tree(src, {"ok.txt": b"ok"})
    (src / "out").symlink_to(outside)
    (src / "loop").symlink_to("loop")
    manifest = tmp_path / "m.tsv"
    manifest.write_text("ok.txt\tf\t2\t-\t-\nout/secret.txt\tf\t9\t-\t-\nloop/x\tf\t1\t-\t-\n")
    out = run_ferry("copy", src, dst, "--files-from", manifest, "--json", check=1)
    assert sorted(f["path"] for f in out.json["failures"]) == ["loop/x", "out/secret.txt"]
    assert not (dst / "out").exists() and not (dst / "loop").exists()
    assert (dst / "ok.txt").read_bytes() == b"ok"
    # A plain recursive copy keeps both links as links, following neither.
    again = tmp_path / "dst2"
    run_ferry("copy", "-r", src, again)
    assert os.readlink(again / "out") == str(outside) and os.readlink(again / "loop") == "loop"


@pytest.mark.parametrize(
    "args",
    [
        ["ls", "https://acct.blob.core.windows.net/Bad_Name?sv=2024-01-01&sp=r&sig=PLANTEDSIG"],
        ["ls", "http://127.0.0.1:9/acct/Bad_Name/x?sv=2024-01-01&sig=PLANTEDSIG"],
        ["copy", "ftp://acct/ctr?sig=PLANTEDSIG", "dst"],
        ["verify", "https://acct.blob.core.windows.net/?sig=PLANTEDSIG", "dst"],
        ["rm", "https://acct.blob.core.windows.net/ctr/%ff?sig=PLANTEDSIG"],
    ],
)
def test_location_errors_never_print_the_sas(run_ferry, args):
    out = run_ferry(*args, check=2)
    assert "PLANTEDSIG" not in out.stdout + out.stderr, out.stderr
    assert "query hidden" in out.stderr, out.stderr


def test_prune_reports_a_directory_it_could_not_delete(tmp_path, run_ferry):
    src, dst = tmp_path / "src", tmp_path / "dst"
    make_tree(src, {"keep.txt": b"k"})
    make_tree(dst, {"keep.txt": b"k", "old/gone.txt": b"g"})
    # The temp files of a download still running (it holds its journal's lock): invisible to
    # listings and never removed, so `old` looks empty, but rmdir fails.
    fds = [
        os.open(dst / "old" / f".ferry-0123456789abcdef.{s}", os.O_CREAT | os.O_RDWR, 0o1600)
        for s in ("partial", "journal")
    ]
    try:
        fcntl.lockf(fds[1], fcntl.LOCK_EX)
        out = run_ferry(
            "prune", "--yes", src, dst, "--force", "--log", tmp_path / "log.tsv", "--json", check=1
        )
        assert out.json["deleted"] == 1 and out.json["failed"] == 1, out.json
        assert out.json["leftovers_removed"] == 0, out.json
        assert (
            out.json["failures"][0]["path"] == "old"
            and "not deleted" in out.json["failures"][0]["error"]
        )
        plain = run_ferry(
            "prune", "--yes", src, dst, "--force", "--log", tmp_path / "log2.tsv", check=1
        )
        assert "failed: old: directory not deleted" in plain.stderr
    finally:
        for fd in fds:
            os.close(fd)


def test_resume_after_an_in_place_edit_commits_only_current_bytes(
    tmp_path, container, proxy, run_ferry
):
    """Kill mid-upload, rewrite one staged block in place (same size, same mtime), re-run: the
    blob must hold the new bytes. Block IDs come from each block's MD5, so the stale staged block
    cannot match; the unchanged staged blocks are still reused."""
    src = tmp_path / "src"
    blocks = 8
    contents = make_tree(src, {"big.bin": File(size=blocks * MiB)})
    path = src / "big.bin"
    st = path.stat()
    kill_once_blocks_staged(
        proxy,
        lambda: run_ferry.spawn(
            "copy",
            src,
            container.via(proxy.port),
            "-r",
            "--block-size",
            "1MiB",
            "--concurrency",
            "1",
            log_dir=tmp_path,
        ),
        3,
        blocks * 4,
    )
    blob = container.client.get_blob_client("big.bin")
    staged = [b.id for b in blob.get_block_list("uncommitted")[1]]
    assert len(staged) == 3

    new = bytearray(contents[b"big.bin"])
    new[MiB + 10 : MiB + 20] = b"EDITEDEDIT"  # inside block 1, one of the staged ones
    with open(path, "r+b") as f:
        f.write(new)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns

    proxy.clear_rules()
    proxy.clear_log()
    out = run_ferry("copy", src, container.via(proxy.port), "-r", "--block-size", "1MiB", "--json")
    assert blob.download_blob().readall() == bytes(new), "stale staged bytes were committed"
    assert out.json["blocks"] == {"sent": blocks - 2, "reused": 2}, out.json["blocks"]
    resent = {sdk_block_id(r.block_id) for r in proxy.requests("PUT", comp="block")}
    assert len(resent & set(staged)) == 0, "a staged block was sent again"
    run_ferry("verify", src, container, "--checksum")


def test_a_source_rewritten_during_upload_fails_the_file_and_commits_nothing(
    tmp_path, container, proxy, run_ferry
):
    src = tmp_path / "src"
    make_tree(src, {"big.bin": File(size=6 * MiB), "small.txt": b"small"})
    path = src / "big.bin"
    hold = proxy.add(
        "stall", method="PUT", query={"comp": "block"}, skip=1, count=1, stall_timeout=60
    )
    proc = run_ferry.spawn(
        "copy",
        src,
        container.via(proxy.port),
        "-r",
        "--block-size",
        "1MiB",
        "--concurrency",
        "1",
        "--json",
        log_dir=tmp_path,
    )

    def rewrite():  # same size, new bytes: only ctime tells
        with open(path, "r+b") as f:
            f.write(os.urandom(6 * MiB))

    summary = fail_after_change(proc, proxy, hold, tmp_path, "the second block to stall", rewrite)
    assert [f["path"] for f in summary["failures"]] == ["big.bin"]
    assert "changed while being copied" in summary["failures"][0]["error"]
    assert set(container.blobs()) == {"small.txt"}, "a blob mixing two versions was committed"
    # A re-run copies the current version whole.
    run_ferry("copy", src, container, "-r", "--block-size", "1MiB")
    assert container.client.download_blob("big.bin").readall() == path.read_bytes()


def test_a_blob_rewritten_during_download_fails_instead_of_mixing_versions(
    tmp_path, container, proxy, run_ferry
):
    old, new = os.urandom(40 * MiB), os.urandom(40 * MiB)
    container.client.upload_blob("big.bin", old)
    dst = tmp_path / "dst"
    # The second range's body stalls after 64 KiB; meanwhile the blob is replaced.
    hold = proxy.add(
        "stall_body",
        method="GET",
        path=r"/big\.bin$",
        query={"comp": ABSENT},
        skip=1,
        count=1,
        body_bytes=64 * 1024,
        stall_timeout=60,
    )
    proc = run_ferry.spawn(
        "copy",
        container.via(proxy.port),
        dst,
        "-r",
        "--concurrency",
        "1",
        "--json",
        log_dir=tmp_path,
    )
    summary = fail_after_change(
        proc,
        proxy,
        hold,
        tmp_path,
        "a range to stall mid-body",
        lambda: container.client.upload_blob("big.bin", new, overwrite=True),
    )
    assert "changed while being copied" in summary["failures"][0]["error"], summary
    assert not (dst / "big.bin").exists()
    assert not dst.exists() or os.listdir(dst) == [], "partial data left behind"
    proxy.clear_rules()
    run_ferry("copy", container.via(proxy.port), dst, "-r")
    assert hashlib.md5((dst / "big.bin").read_bytes()).digest() == hashlib.md5(new).digest()


def test_mk_with_a_container_sas_accepts_the_existing_container(run_ferry, container):
    """A container SAS cannot create containers (403): `mk` of the container it names must still
    succeed, as the pipeline's baseline phase runs it."""
    import datetime

    from azure.storage.blob import ContainerSasPermissions, generate_container_sas
    from support.azurite import ACCOUNT, KEY

    sas = generate_container_sas(
        ACCOUNT,
        container.name,
        account_key=KEY,
        permission=ContainerSasPermissions(read=True, list=True),
        expiry=datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1),
    )
    env = {"AZURE_STORAGE_KEY": None, "FERRY_AUTH": None}
    run_ferry("mk", f"{container.at('sub')}?{sas}", env=env)
    other = container.replace(container.name, container.name[:-1] + "z")
    denied = run_ferry("mk", f"{other}?{sas}", env=env, check=2)
    assert "403" in denied.stderr


# ---------------------------------------------------------------------------------------------
# Issue 45, item 1: what a type change replaces is a deletion.


def replace_a_directory(tmp_path, run_ferry, container, route: str, n: int):
    """A destination whose directory data/ holds `n` files, and a source with a file at data:
    (source, destination, what the destination holds)."""
    old, new = tmp_path / "old", tmp_path / "new"
    make_tree(old, {f"data/u{i:03d}": b"%d\n" % i for i in range(n)} | {"keep.txt": b"k"})
    make_tree(new, {"data": b"tiny\n", "keep.txt": b"k"})
    if route == "upload":
        run_ferry("copy", "-r", old, container)
        return new, container, lambda: sorted(container.blobs())
    dst = tmp_path / "dst"
    run_ferry("copy", "-r", old, dst)
    if route == "download":
        run_ferry("copy", "-r", new, container)
        return container, dst, lambda: snapshot(dst)
    return new, dst, lambda: snapshot(dst)


def logged(log) -> list[str]:
    from support.manifest import parse_manifest

    comments, entries = parse_manifest(log.read_text(encoding="utf-8"))
    assert comments and comments[0].startswith("#ferry-manifest"), comments
    return [e.path.decode() for e in entries]


@pytest.mark.parametrize(
    "route, n",
    [("local", 500), ("upload", 50), ("download", 50)],
    ids=["local", "upload", "download"],
)
def test_a_directory_replaced_by_a_file_is_a_deletion_shown_counted_and_guarded(
    tmp_path, run_ferry, container, route, n
):
    """Issue 45 item 1: `copy` replaced a directory of 500 files by a one-line file, exit 0,
    with no --max-delete, no deletion log, and a dry run that hid it. What goes under a
    replaced directory is a deletion: shown, counted, refused past --max-delete, logged."""
    src, dst, contents = replace_a_directory(tmp_path, run_ferry, container, route, n)
    before = contents()
    log = tmp_path / "replaced.tsv"

    dry = run_ferry("copy", "-r", src, dst, "--dry-run", "--log", log)
    assert f"would replace directory data ({n} entries under it" in dry.stdout, dry.stdout
    assert "--max-delete" in dry.stderr and "refused" in dry.stderr, dry.stderr
    assert contents() == before
    assert sorted(logged(log)) == sorted([f"data/u{i:03d}" for i in range(n)] + ["data"])
    log.unlink()
    doc = run_ferry("copy", "-r", src, dst, "--dry-run", "--json", "--log", log).json
    assert (doc["files"]["replaced"], doc["files"]["removed"]) == (1, n + 1), doc["files"]
    assert [(r["path"], r["was"], r["entries"]) for r in doc["replacements"]] == [
        ("data", "dir", n + 1)
    ], doc["replacements"]
    assert doc["warning"] and doc["refused"] is None, doc
    log.unlink()

    # Past --max-delete (50% by default): refused before anything is written or deleted.
    refused = run_ferry("copy", "-r", src, dst, "--log", log, check=1)
    assert "refused" in refused.stderr and "--max-delete" in refused.stderr, refused.stderr
    assert "data" in refused.stderr and "--force" in refused.stderr, refused.stderr
    assert contents() == before and not log.exists()
    doc = run_ferry("copy", "-r", src, dst, "--max-delete", str(n - 1), "--json", check=1).json
    assert doc["refused"] and f"{n} of " in doc["refused"] and doc["files"]["copied"] == 0, doc
    assert contents() == before

    # Within the limit: replaced, and every entry that went is in the log.
    doc = run_ferry("copy", "-r", src, dst, "--max-delete", str(n), "--log", log, "--json").json
    assert doc["failures"] == [] and doc["files"]["replaced"] == 1, doc
    assert doc["log"] == str(log)
    assert sorted(logged(log)) == sorted([f"data/u{i:03d}" for i in range(n)] + ["data"])
    if route == "upload":
        assert container.client.download_blob("data").readall() == b"tiny\n"
        assert not [b for b in container.blobs() if b.startswith("data/")]
    else:
        assert (dst / "data").read_bytes() == b"tiny\n"


@pytest.mark.parametrize("route", ["local", "upload", "download"])
def test_a_file_replaced_by_a_directory_is_counted_and_logged(
    tmp_path, run_ferry, container, route
):
    """The reverse deletes one file: counted and logged, within any limit that allows it."""
    old, new = tmp_path / "old", tmp_path / "new"
    make_tree(old, {"data": b"was a file\n"})
    make_tree(new, {"data/inner.txt": b"now a directory's\n"})
    if route == "upload":
        run_ferry("copy", "-r", old, container)
        src, dst = new, container
    else:
        dst = tmp_path / "dst"
        run_ferry("copy", "-r", old, dst)
        src = new
        if route == "download":
            run_ferry("copy", "-r", new, container)
            src = container
    log = tmp_path / "log.tsv"
    doc = run_ferry("copy", "-r", src, dst, "--log", log, "--json").json
    assert doc["failures"] == [] and (doc["files"]["replaced"], doc["files"]["removed"]) == (1, 1)
    assert [(r["path"], r["was"]) for r in doc["replacements"]] == [("data", "file")]
    assert logged(log) == ["data"]


def test_default_deletion_logs_never_share_a_name(tmp_path, run_ferry):
    """Two copies (or prunes) in one second each keep their own log."""
    src, dst, _ = replace_a_directory(tmp_path, run_ferry, None, "local", 5)
    state = tmp_path / "state"
    for _ in range(3):
        run_ferry("copy", "-r", src, dst, "--dry-run", env={"XDG_STATE_HOME": str(state)})
        run_ferry("prune", "--yes", src, dst, "--dry-run", env={"XDG_STATE_HOME": str(state)})
    logs = sorted(os.listdir(state / "ferry"))
    assert len(logs) == 6 and len({name.split(".")[0] for name in logs}) == 6, logs
    assert sum(name.startswith("copy-") for name in logs) == 3, logs


MISSING_VERB = {
    "copy": ["copy", "-r"],
    "verify": ["verify"],
    "ls": ["ls", "-r"],
    "prune": ["prune", "--yes", "--max-delete", "100%", "--force"],
    "rm": ["rm", "-r"],
}


@pytest.mark.parametrize("verb", list(MISSING_VERB))
@pytest.mark.parametrize("missing", ["nosuch.txt", "nosuchprefix", "nosuchprefix/"])
def test_a_missing_blob_source_is_an_error_naming_it(tmp_path, container, run_ferry, verb, missing):
    """Issue 45 (7a): a blob or prefix that is not there (no blob at or under it, no folder stub)
    fails as a missing local path does, naming it; before, copy said "copied 0 files", exit 0,
    and prune --force then took the destination for the remains of an emptied source."""
    make_tree(tmp_path / "src", {"p/a.txt": b"a\n"})
    run_ferry("copy", "-r", tmp_path / "src", container)
    out = tmp_path / "out"
    make_tree(out, {"keep.txt": b"keep\n"})
    ends = [container.at(f"p/{missing}")] + ([] if verb in ("ls", "rm") else [out])
    # prune refuses (exit 1: nothing deleted), the others fail (exit 2), as for a local path.
    r = run_ferry(*MISSING_VERB[verb], *ends, check=1 if verb == "prune" else 2)
    assert f"p/{missing}: not found" in r.stderr, r.stderr
    assert sorted(os.listdir(out)) == ["keep.txt"] and (out / "keep.txt").read_bytes() == b"keep\n"
    assert "p/a.txt" in container.blobs()
    local = run_ferry(*MISSING_VERB[verb], tmp_path / "nosuch", *ends[1:], check=False)
    assert local.returncode == r.returncode, local.stderr


def test_an_empty_folder_and_a_container_are_sources_still(tmp_path, container, run_ferry):
    """What is there but empty is no missing source: a folder stub, an empty container."""
    make_tree(tmp_path / "src", {"p/empty": Dir()})
    run_ferry("copy", "-r", tmp_path / "src", container)
    run_ferry("copy", "-r", container.at("p/empty"), tmp_path / "one")
    run_ferry("copy", "-r", container.at("p/empty/"), tmp_path / "two")
    container.client.delete_blobs(*container.blobs())
    run_ferry("copy", "-r", container, tmp_path / "three")


# Entries named like ferry's temp files (issue 45, item 2): only a file ferry made (its exact
# generated name and the mark it gives it) is one; anything else of such a name is the user's.
LOOKALIKES = {
    ".ferry-data.partial/sub/file": b"in a directory named like a temp file\n",
    ".ferry-0123456789abcdef.partial": b"named exactly as a temp file is\n",
    "d/.ferry-0123456789abcdef.journal": b"1 2 3\n",
    "d/.ferry-stage-0.partial": b"named as a staging directory is\n",
    "d/keep.txt": b"k\n",
}


@pytest.mark.parametrize("route", ["local", "upload", "download"])
def test_source_entries_named_like_temp_files_are_copied_counted_and_verified(
    tmp_path, run_ferry, container, route
):
    src, dst = tmp_path / "src", tmp_path / "dst"
    make_tree(src, LOOKALIKES)
    if route == "download":
        # Written by another tool: the blobs stand on their own, not as ferry's upload of them.
        for name, data in LOOKALIKES.items():
            container.client.upload_blob(name, data)
        src = container
    if route == "upload":
        dst = container
    first = run_ferry("copy", "-r", src, dst, "--json")
    assert first.json["files"]["copied"] == len(LOOKALIKES), first.json["files"]
    if route == "upload":
        held = {b.name for b in container.client.list_blobs() if b.size}
        assert held == set(LOOKALIKES), held
    else:
        for name, data in LOOKALIKES.items():
            assert (dst / name).read_bytes() == data, name
    again = run_ferry("copy", "-r", src, dst, "--json")
    assert again.json["files"]["copied"] == 0, "copied again on every pass: never seen as there"
    assert again.json["files"]["skipped"] == len(LOOKALIKES), again.json["files"]
    same = run_ferry("verify", src, dst, "--checksum", "--json")
    assert same.json["same"] == len(LOOKALIKES), same.json
    # Verify looks at them: one gone from the destination is missing.
    if route == "upload":
        container.client.delete_blob(".ferry-0123456789abcdef.partial")
    else:
        (dst / ".ferry-0123456789abcdef.partial").unlink()
    missing = run_ferry("verify", src, dst, "--checksum", "--json", check=1)
    assert missing.json["missing_on_dst"] == 1, missing.json


@pytest.mark.parametrize("side", ["local", "blob"])
def test_a_tree_without_recursive_is_an_error_that_says_add_r(tmp_path, container, run_ferry, side):
    """Issue 42 (1): `ferry copy DIR DEST` without -r printed "copied 0 files" and exited 0;
    as cp's, it is an error naming the fix, and nothing is made."""
    make_tree(tmp_path / "src", {"sub/f.txt": b"f", "top.txt": b"t"})
    src = tmp_path / "src"
    if side == "blob":
        run_ferry("copy", "-r", src, container.at("p"))
        src = container.at("p")
    r = run_ferry("copy", src, tmp_path / "out", check=2)
    assert "is a directory: add -r (--recursive)" in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------
# Older over newer (issue 42): swapped SOURCE and DEST, or someone writing at the destination.

OLD_NS = 1_600_000_000_123_456_789  # the migrated tree's times, long before the mistake


def old_tree(root):
    make_tree(
        root,
        {
            "a.txt": File(b"a1\n", mtime_ns=OLD_NS),
            "sub/b.txt": File(b"b1\n", mtime_ns=OLD_NS),
            "sub/c.txt": File(b"c1\n", mtime_ns=OLD_NS),
        },
    )


def updated(path, data):
    """The source's file edited since the last pass: new bytes, a later mtime."""
    path.write_bytes(data)
    os.utime(path, ns=(OLD_NS + 10**12, OLD_NS + 10**12))


@pytest.mark.parametrize("route", ["local", "download"])
def test_a_swapped_copy_never_replaces_newer_files_at_the_real_source(
    tmp_path, run_ferry, container, route
):
    """`ferry copy -r DEST SRC` after the source's files were edited: the older copies would
    replace the newer originals. Refused before anything is written, with the count, examples
    and the fix; --dry-run --json counts them; --overwrite-newer (a restore) copies."""
    src = tmp_path / "src"
    old_tree(src)
    dest = tmp_path / "dst" if route == "local" else container
    run_ferry("copy", "-r", src, dest)
    updated(src / "a.txt", b"a2 edited\n")
    updated(src / "sub" / "b.txt", b"b2 edited\n")
    before = snapshot(src)
    r = run_ferry("copy", "-r", dest, src, check=1)
    assert "2 destination files are newer" in r.stderr, r.stderr
    assert "a.txt" in r.stderr and "sub/b.txt" in r.stderr and "--overwrite-newer" in r.stderr
    assert snapshot(src) == before, "nothing written"
    dry = run_ferry("copy", "-r", dest, src, "--dry-run", "--json").json
    assert dry["files"]["newer_at_dest"] == 2, dry["files"]
    j = run_ferry("copy", "-r", dest, src, "--json", check=1).json
    assert j["refused"] and j["files"]["copied"] == 0, j
    run_ferry("copy", "-r", dest, src, "--overwrite-newer")
    assert (src / "a.txt").read_bytes() == b"a1\n", "a restore, asked for"


def test_an_upload_never_replaces_a_newer_blob(tmp_path, run_ferry, container):
    """local → Blob: the container's blob is newer (by the mtime ferry stored) than the file
    now at the source, an older version: not replaced without --overwrite-newer."""
    newer, older = tmp_path / "newer", tmp_path / "older"
    old_tree(older)
    old_tree(newer)
    updated(newer / "a.txt", b"a2 edited\n")
    run_ferry("copy", "-r", newer, container)
    r = run_ferry("copy", "-r", older, container, check=1)
    assert "1 destination files are newer" in r.stderr and "a.txt" in r.stderr, r.stderr
    assert container.client.download_blob("a.txt").readall() == b"a2 edited\n"
    run_ferry("copy", "-r", older, container, "--overwrite-newer")
    assert container.client.download_blob("a.txt").readall() == b"a1\n"


@pytest.mark.parametrize("where", ["local", "blob"])
def test_a_swapped_prune_never_deletes_what_is_newer_than_the_whole_source(
    tmp_path, run_ferry, container, where
):
    """`ferry prune DEST SRC` after a file was created at the source: it is newer than
    everything at the (swapped) source, so the prune refuses, naming it, and deletes nothing;
    --force deletes it."""
    src = tmp_path / "src"
    old_tree(src)
    dest = tmp_path / "dst" if where == "local" else container
    run_ferry("copy", "-r", src, dest)
    (src / "sub" / "new.txt").write_bytes(b"written today\n")
    before = snapshot(src)
    log = tmp_path / "p.tsv"
    r = run_ferry("prune", "--yes", "--max-delete", "100%", dest, src, "--log", log, check=1)
    assert "1 files to delete are newer than everything at the source" in r.stderr, r.stderr
    assert "sub/new.txt" in r.stderr and "--force" in r.stderr, r.stderr
    assert snapshot(src) == before, "nothing deleted"
    dry = run_ferry("prune", "--max-delete", "100%", dest, src, "--dry-run", "--log", log)
    assert "a real run would be refused" in dry.stderr, dry.stderr
    run_ferry("prune", "--yes", "--max-delete", "100%", "--force", dest, src, "--log", log)
    assert not (src / "sub" / "new.txt").exists()


def test_a_plan_refuses_copies_over_newer_files_and_deletions_newer_than_the_source(
    tmp_path, run_ferry
):
    """The pipeline's decision is the plan's: the same rules, before the first copy."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    old_tree(src)
    run_ferry("copy", "-r", src, dst)
    updated(dst / "a.txt", b"edited at the destination\n")
    (dst / "sub" / "new.txt").write_bytes(b"written at the destination\n")
    for d in (src, dst):
        (tmp_path / f"{d.name}.tsv").write_bytes(run_ferry("ls", "-r", d).stdout_bytes)
    plan = ["plan", tmp_path / "src.tsv", tmp_path / "dst.tsv", "--out", tmp_path / "plan"]
    r = run_ferry(*plan, "--phase", "incremental", check=1)
    assert "copy would be refused: 1 destination files are newer" in r.stderr, r.stderr
    assert "a.txt" in r.stderr and "--overwrite-newer" in r.stderr
    assert not (tmp_path / "plan").exists(), "a refused plan is written nowhere"
    final = [*plan, "--phase", "final", "--overwrite-newer", "--max-delete", "100%"]
    r = run_ferry(*final, check=1)
    assert "1 files to delete are newer than everything at the source" in r.stderr, r.stderr
    assert "sub/new.txt" in r.stderr
    run_ferry(*final, "--force")
    doc = json.loads((tmp_path / "plan" / "plan.json").read_text())
    assert doc["newer_at_dest"]["count"] == 1 and doc["newer_deletions"]["count"] == 1, doc
    r = run_ferry("prune", "--yes", src, dst, "--plan", tmp_path / "plan", check=1)
    assert "newer than everything at the source" in r.stderr, r.stderr
