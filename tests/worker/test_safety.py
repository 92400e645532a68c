"""Regression tests for defects found by trying ferry as a new user would and by reading its code
(issue 8): symlinks below a root, location errors, prune's directories, stale resumed blocks,
sources that change while copied. Each test names the promise it holds (docs/reliability.md)."""

from __future__ import annotations

import fcntl
import hashlib
import os

import pytest
from support.interrupt import fail_after_change, kill_once_blocks_staged, sdk_block_id
from support.proxy import ABSENT
from support.trees import File, make_tree

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
            "prune", src, dst, "--force", "--log", tmp_path / "log.tsv", "--json", check=1
        )
        assert out.json["deleted"] == 1 and out.json["failed"] == 1, out.json
        assert out.json["leftovers_removed"] == 0, out.json
        assert (
            out.json["failures"][0]["path"] == "old"
            and "not deleted" in out.json["failures"][0]["error"]
        )
        plain = run_ferry("prune", src, dst, "--force", "--log", tmp_path / "log2.tsv", check=1)
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
