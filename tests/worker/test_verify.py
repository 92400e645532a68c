"""`ferry verify` end to end: local<->local and local<->Azurite.

Changes to the destination are made with the filesystem or the Python SDK, never with ferry, and
the text report is checked against the real `rclone check --combined` (the format the contract
says it follows).
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from azure.storage.blob import BlobBlock, ContentSettings
from support.ferry import REPO_ROOT
from support.trees import File, Link, make_tree, odd_names_spec

MiB = 1 << 20
REPO = REPO_ROOT
RCLONE = REPO / ".venv" / "bin" / "rclone"

# The multi-block file is uploaded in 1 MiB blocks: 2.5 MiB + a little is three blocks.
BIG = "deep/er/big.bin"
BIG_SIZE = 2 * MiB + MiB // 2 + 4093


def base_spec() -> dict:
    return {
        "a.txt": b"alpha\n",
        "b.txt": b"bravo\n",
        "empty": b"",
        "nested/c.txt": b"charlie charlie\n",
        "nested/deeper/d.bin": File(size=70_000),
        BIG: File(size=BIG_SIZE),
        **odd_names_spec(prefix="odd/"),
    }


class Side:
    """One end of a verify: a local directory or an Azurite container, changed behind ferry's back."""

    def __init__(self, kind: str, location, root: Path | None = None, container=None):
        self.kind, self.location, self.root, self.container = kind, str(location), root, container

    def write(self, rel: str, data: bytes):
        if self.root is not None:
            path = self.root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            # Keep the mtime: verify must not lean on it, and nor must this test.
            st = os.stat(path) if path.exists() else None
            path.write_bytes(data)
            if st:
                os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        else:
            self.container.client.upload_blob(
                rel,
                data,
                overwrite=True,
                content_settings=ContentSettings(content_md5=bytearray(hashlib.md5(data).digest())),
            )

    def read(self, rel: str) -> bytes:
        if self.root is not None:
            return (self.root / rel).read_bytes()
        return self.container.client.download_blob(rel).readall()

    def delete(self, rel: str):
        if self.root is not None:
            (self.root / rel).unlink()
        else:
            self.container.client.delete_blob(rel)


@pytest.fixture(params=["local", "azurite"])
def pair(request, tmp_path, run_ferry):
    """(source dir, destination Side, {rel: bytes}) with the destination a fresh ferry copy of the source."""
    src = tmp_path / "src"
    spec = base_spec()
    if request.param == "local":
        spec.update(odd_names_spec(prefix="local-odd/", local_only=True))
        spec["links/to-a"] = Link("../a.txt")
    contents = make_tree(src, spec)
    if request.param == "local":
        dst = Side("local", tmp_path / "dst", root=tmp_path / "dst")
    else:
        container = request.getfixturevalue("container")
        dst = Side("azurite", container, container=container)
    run_ferry("copy", src, dst.location, "--recursive", "--block-size", "1MiB")
    return src, dst, contents


def entry_count(contents: dict, dst: Side) -> int:
    """Files and (local only) symlinks: what verify compares."""
    return len(contents) + (1 if dst.kind == "local" else 0)


def counts(j: dict) -> tuple:
    return j["same"], j["differ"], j["missing_on_dst"], j["missing_on_src"], j["error"]


def statuses(j: dict) -> dict:
    return {e["path"]: e["status"] for e in j["entries"]}


def text_rows(stdout: str) -> list[tuple[str, str, str]]:
    """(mark, path, reason) per line of the text report."""
    rows = []
    for line in stdout.splitlines():
        mark, sp, rest = line.partition(" ")
        assert sp == " " and len(mark) == 1, f"not a 'mark path' line: {line!r}"
        path, _, reason = rest.partition("\t")
        rows.append((mark, path, reason))
    return rows


# ---------------------------------------------------------------------------------------------


def test_identical_trees_verify_clean(pair, run_ferry):
    src, dst, contents = pair
    n = entry_count(contents, dst)
    for extra in ([], ["--checksum"]):
        r = run_ferry("verify", src, dst.location, *extra, "--json")
        assert counts(r.json) == (n, 0, 0, 0, 0), r.json
        assert r.json["entries"] == []
        text = run_ferry("verify", src, dst.location, *extra)
        assert text.stdout == "", "an identical tree must list nothing without --all"
        assert (
            f"{n} same, 0 differ, 0 missing on destination, 0 missing on source, 0 errors"
            in text.stderr
        )
    listed = run_ferry("verify", src, dst.location, "--checksum", "--all")
    rows = text_rows(listed.stdout)
    assert {m for m, _, _ in rows} == {"="} and len(rows) == n


def test_one_changed_byte_is_caught_only_with_checksum(pair, run_ferry):
    src, dst, contents = pair
    n = entry_count(contents, dst)
    # Flip one byte in the middle of the multi-block file on the source, and one in a small file
    # on the destination: sizes stay the same.
    big = bytearray((src / BIG).read_bytes())
    big[BIG_SIZE // 2] ^= 0x01
    st = os.stat(src / BIG)
    (src / BIG).write_bytes(bytes(big))
    os.utime(src / BIG, ns=(st.st_atime_ns, st.st_mtime_ns))
    dst.write("nested/c.txt", b"charlie Charlie\n")

    plain = run_ferry("verify", src, dst.location, "--json")
    assert counts(plain.json) == (n, 0, 0, 0, 0), "without --checksum only sizes are compared"

    r = run_ferry("verify", src, dst.location, "--checksum", "--json", check=1)
    assert counts(r.json) == (n - 2, 2, 0, 0, 0), r.json
    assert statuses(r.json) == {BIG: "differ", "nested/c.txt": "differ"}
    assert all("md5" in e["reason"] for e in r.json["entries"]), r.json["entries"]

    text = run_ferry("verify", src, dst.location, "--checksum", check=1)
    assert sorted((m, p) for m, p, _ in text_rows(text.stdout)) == [
        ("*", BIG),
        ("*", "nested/c.txt"),
    ]


def test_changed_size_is_caught_without_checksum(pair, run_ferry):
    src, dst, contents = pair
    n = entry_count(contents, dst)
    dst.write("b.txt", b"bravo!\n")
    r = run_ferry("verify", src, dst.location, "--json", check=1)
    assert counts(r.json) == (n - 1, 1, 0, 0, 0), r.json
    [e] = r.json["entries"]
    assert (e["path"], e["status"]) == ("b.txt", "differ") and "size" in e["reason"], e
    text = run_ferry("verify", src, dst.location, check=1)
    assert [(m, p) for m, p, _ in text_rows(text.stdout)] == [("*", "b.txt")]
    assert "1 differ" in text.stderr


def test_missing_and_extra_files_are_reported(pair, run_ferry):
    src, dst, contents = pair
    n = entry_count(contents, dst)
    dst.delete("nested/deeper/d.bin")
    dst.write("nested/only-on-dst.txt", b"extra\n")
    dst.write(
        "odd/with space.txt", (src / "odd" / "with space.txt").read_bytes()
    )  # rewritten, same bytes
    r = run_ferry("verify", src, dst.location, "--checksum", "--json", check=1)
    assert counts(r.json) == (n - 1, 0, 1, 1, 0), r.json
    assert statuses(r.json) == {
        "nested/deeper/d.bin": "missing_on_dst",
        "nested/only-on-dst.txt": "missing_on_src",
    }
    text = run_ferry("verify", src, dst.location, check=1)
    assert "1 missing on destination, 1 missing on source" in text.stderr
    assert {p for _, p, _ in text_rows(text.stdout)} == {
        "nested/deeper/d.bin",
        "nested/only-on-dst.txt",
    }


def test_text_marks_are_those_of_rclone_check_combined(tmp_path, run_ferry):
    """The contract says the marks are `rclone check --combined`'s; ask rclone itself."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    make_tree(
        src,
        {
            "same.txt": b"same\n",
            "sub/same-size.txt": b"abcd\n",
            "sub/other-size.txt": b"123\n",
            "only-on-src.txt": b"src\n",
            "deep/x/y.txt": b"y\n",
        },
    )
    make_tree(
        dst,
        {
            "same.txt": b"same\n",
            "sub/same-size.txt": b"abce\n",
            "sub/other-size.txt": b"1234\n",
            "only-on-dst.txt": b"dst\n",
            "deep/x/y.txt": b"y\n",
        },
    )
    rc = subprocess.run(
        [str(RCLONE), "check", "--config", os.devnull, "--combined", "-", str(src), str(dst)],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        env={k: v for k, v in os.environ.items() if not k.startswith("RCLONE_")},
    )
    assert rc.returncode == 1, rc.stderr
    want = sorted(tuple(line.split(" ", 1)) for line in rc.stdout.splitlines())
    assert len(want) == 6, rc.stdout
    got = run_ferry("verify", src, dst, "--checksum", "--all", check=1)
    assert sorted((m, p) for m, p, _ in text_rows(got.stdout)) == want, (
        f"ferry verify --all:\n{got.stdout}\nrclone check --combined -:\n{rc.stdout}"
    )


# ---------------------------------------------------------------------------------------------
# blobs without Content-MD5


def upload_without_md5(container, name: str, data: bytes, block: int = MiB):
    """Stage blocks and commit a block list without ever setting Content-MD5."""
    blob = container.client.get_blob_client(name)
    ids = []
    for i in range(0, len(data), block):
        bid = uuid.uuid4().hex
        blob.stage_block(bid, data[i : i + block])
        ids.append(BlobBlock(block_id=bid))
    blob.commit_block_list(ids)
    assert blob.get_blob_properties().content_settings.content_md5 is None, (
        "Azurite set a Content-MD5 anyway"
    )


@pytest.mark.parametrize("how", ["sdk-block-list", "ferry-no-put-md5"])
def test_blob_without_content_md5_needs_download(tmp_path, container, run_ferry, how):
    src = tmp_path / "src"
    contents = make_tree(src, {"small.txt": b"small\n"})
    run_ferry("copy", src, container, "--recursive")
    contents |= make_tree(src, {"sub/no-md5.bin": File(size=2 * MiB + 12345)})
    if how == "sdk-block-list":
        upload_without_md5(container, "sub/no-md5.bin", contents[b"sub/no-md5.bin"])
    else:
        up = run_ferry(
            "copy", src, container, "--recursive", "--block-size", "1MiB", "--no-put-md5", "--json"
        )
        assert up.json["files"]["copied"] == 1, up.json
    props = container.blobs()
    assert props["sub/no-md5.bin"].content_settings.content_md5 is None, (
        "precondition: a blob without Content-MD5"
    )
    assert props["small.txt"].content_settings.content_md5 is not None

    assert counts(run_ferry("verify", src, container, "--json").json) == (2, 0, 0, 0, 0)

    r = run_ferry("verify", src, container, "--checksum", "--json", check=1)
    assert counts(r.json) == (1, 0, 0, 0, 1), r.json
    [e] = r.json["entries"]
    assert (e["path"], e["status"]) == ("sub/no-md5.bin", "error"), e
    assert "Content-MD5" in e["reason"] and "--download" in e["reason"], e
    text = run_ferry("verify", src, container, "--checksum", check=1)
    [(mark, path, reason)] = text_rows(text.stdout)
    assert (mark, path) == ("!", "sub/no-md5.bin") and "--download" in reason, text.stdout
    # Either direction: the blob as the source too.
    back = run_ferry("verify", container, src, "--checksum", "--json", check=1)
    assert statuses(back.json) == {"sub/no-md5.bin": "error"}

    ok = run_ferry("verify", src, container, "--checksum", "--download", "--json")
    assert counts(ok.json) == (2, 0, 0, 0, 0), ok.json
    assert counts(
        run_ferry("verify", container, src, "--checksum", "--download", "--json").json
    ) == (2, 0, 0, 0, 0)

    # --download really hashes the bytes: one flipped byte, same size, still no Content-MD5.
    data = bytearray(contents[b"sub/no-md5.bin"])
    data[MiB + 7] ^= 0xFF
    upload_without_md5(container, "sub/no-md5.bin", bytes(data))
    bad = run_ferry("verify", src, container, "--checksum", "--download", "--json", check=1)
    assert counts(bad.json) == (1, 1, 0, 0, 0), bad.json
    assert statuses(bad.json) == {"sub/no-md5.bin": "differ"}
    assert "md5" in bad.json["entries"][0]["reason"]


def test_json_counts_with_every_status_at_once(tmp_path, container, run_ferry):
    src = tmp_path / "src"
    contents = make_tree(
        src,
        {f"same/{i:02d}.txt": b"same %d\n" % i for i in range(7)}
        | {
            "differ/size.txt": b"12345\n",
            "differ/bytes.txt": b"abcdef\n",
            "gone/1.txt": b"1\n",
            "gone/2.txt": b"2\n",
            "nomd5.bin": File(size=MiB + 1),
        },
    )
    run_ferry("copy", src, container, "--recursive")
    c = container.client
    c.upload_blob("differ/size.txt", b"123456\n", overwrite=True)
    (src / "differ" / "bytes.txt").write_bytes(b"abcdeF\n")
    c.delete_blob("gone/1.txt")
    c.delete_blob("gone/2.txt")
    for name in ("extra/a", "extra/b", "extra/c"):
        c.upload_blob(name, b"x")
    upload_without_md5(container, "nomd5.bin", contents[b"nomd5.bin"])

    r = run_ferry("verify", src, container, "--checksum", "--json", check=1)
    assert r.json["command"] == "verify"
    assert counts(r.json) == (7, 2, 2, 3, 1), r.json
    assert statuses(r.json) == {
        "differ/size.txt": "differ",
        "differ/bytes.txt": "differ",
        "gone/1.txt": "missing_on_dst",
        "gone/2.txt": "missing_on_dst",
        "extra/a": "missing_on_src",
        "extra/b": "missing_on_src",
        "extra/c": "missing_on_src",
        "nomd5.bin": "error",
    }
    with_all = run_ferry("verify", src, container, "--checksum", "--json", "--all", check=1)
    assert len(with_all.json["entries"]) == 15
    assert sum(e["status"] == "same" for e in with_all.json["entries"]) == 7


def test_retargeted_symlink_is_a_difference(tmp_path, run_ferry):
    """local<->local: a symlink's content is its target; a same-length new target is still a change."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    make_tree(src, {"t1": b"1", "t2": b"2", "link": Link("t1")})
    run_ferry("copy", src, dst, "--recursive")
    assert counts(run_ferry("verify", src, dst, "--checksum", "--json").json) == (3, 0, 0, 0, 0)
    os.unlink(dst / "link")
    os.symlink("t2", dst / "link")
    r = run_ferry("verify", src, dst, "--checksum", "--json", check=False)
    assert statuses(r.json) == {"link": "differ"}, r.json
    assert r.returncode == 1


# ---------------------------------------------------------------------------------------------
# whole trees: both listings sorted on disk (in --scratch), merge-joined, rows streamed

SMALL_RUNS = {"FERRY_SORT_MEMORY": "1KiB"}
# Around the byte '/' (0x2f): '-' and '.' sort before it, '0' and '\\' after, a tab first.
ORDER_NAMES = [b"a", b"a-b", b"a.b", b"a0", b"a\tb", b"a\\b", b"a\xffb", b"b"]


def order_spec() -> dict:
    spec = {d + b"/" + f: b"same " + d + f for d in ORDER_NAMES for f in ORDER_NAMES}
    spec.update({d + b".file": b"file" for d in ORDER_NAMES})
    return spec


def escaped(p: bytes) -> str:
    from support.manifest import escape_path

    return escape_path(p)


def test_ordering_edge_cases_rows_in_byte_order(tmp_path, run_ferry):
    src, dst = tmp_path / "src", tmp_path / "dst"
    make_tree(src, order_spec())
    make_tree(dst, order_spec())
    want = {}
    for d in ORDER_NAMES:
        (dst / os.fsdecode(d + b"/a.b")).write_bytes(
            b"another size, longer than any name"
        )  # differ
        (dst / os.fsdecode(d + b"/a-b")).unlink()  # missing on dst
        make_tree(dst, {d + b"/a.c": b"extra", d + b"/a.b.d/x": b"extra"})  # missing on src
        want.update(
            {
                d + b"/a.b": "differ",
                d + b"/a-b": "missing_on_dst",
                d + b"/a.c": "missing_on_src",
                d + b"/a.b.d/x": "missing_on_src",
            }
        )
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    j = run_ferry("verify", src, dst, "--json", "--scratch", scratch, env=SMALL_RUNS, check=1).json
    # The directories only at the destination come after the rows, as prune removes them.
    dirs = sorted(d + b"/a.b.d" for d in ORDER_NAMES)
    assert statuses(j) == {escaped(p): st for p, st in want.items()} | {
        escaped(d): "missing_on_src" for d in dirs
    }
    same = len(order_spec()) - len(ORDER_NAMES) * 2
    assert counts(j) == (same, len(ORDER_NAMES), len(ORDER_NAMES), 3 * len(ORDER_NAMES), 0), j
    # Rows come in the byte order of the paths, the order of the merge-join.
    rows = [escaped(p) for p in sorted(want) + dirs]
    assert [e["path"] for e in j["entries"]] == rows
    text = run_ferry("verify", src, dst, "--scratch", scratch, env=SMALL_RUNS, check=1)
    marks = {"differ": "*", "missing_on_dst": "+", "missing_on_src": "-"}
    assert [(m, p) for m, p, _ in text_rows(text.stdout)] == [
        (marks[want.get(p, "missing_on_src")], escaped(p)) for p in sorted(want) + dirs
    ]
    every = run_ferry(
        "verify", src, dst, "--json", "--all", "--scratch", scratch, env=SMALL_RUNS, check=1
    ).json
    assert len(every["entries"]) == same + len(want) + len(dirs)
    assert [e["path"] for e in every["entries"]] == [
        escaped(p) for p in sorted(set(order_spec()) | set(want))
    ] + [escaped(d) for d in dirs]
    assert not list(scratch.iterdir()), "scratch files left behind"


def test_scratch_is_removed_after_success_difference_and_failure(tmp_path, run_ferry):
    src, dst = tmp_path / "src", tmp_path / "dst"
    make_tree(src, base_spec())
    run_ferry("copy", src, dst, "--recursive")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    for args, status in (([], 0), (["--json", "--checksum"], 0)):
        run_ferry("verify", src, dst, *args, "--scratch", scratch, env=SMALL_RUNS, check=status)
        assert not list(scratch.iterdir()), args
    (dst / "a.txt").write_bytes(b"changed size\n")
    for args in ([], ["--json"], ["--json", "--all"]):
        run_ferry("verify", src, dst, *args, "--scratch", scratch, env=SMALL_RUNS, check=1)
        assert not list(scratch.iterdir()), args
    r = run_ferry("verify", tmp_path / "missing", dst, "--scratch", scratch, check=2)
    assert "missing" in r.stderr
    r = run_ferry(
        "verify", src, tmp_path / "dst-missing", "--scratch", scratch, env=SMALL_RUNS, check=2
    )
    assert "dst-missing" in r.stderr, r.stderr
    assert not list(scratch.iterdir())
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    run_ferry("verify", src, dst, env={**SMALL_RUNS, "TMPDIR": str(tmpdir)}, check=1)
    assert not list(tmpdir.iterdir()), "scratch left in TMPDIR"


def test_sigterm_mid_listing_removes_the_scratch(tmp_path, container, proxy, run_ferry):
    src = tmp_path / "src"
    make_tree(src, {f"d{i:02d}/f{j}": b"x" for i in range(20) for j in range(5)})
    run_ferry("copy", src, container, "--recursive")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    stall = proxy.add(
        "stall", method="GET", query={"comp": "list"}, stall_timeout=60, after_stall="drop"
    )
    proc = run_ferry.spawn(
        "verify",
        src,
        container.via(proxy.port),
        "--json",
        "--scratch",
        scratch,
        env=SMALL_RUNS,
        log_dir=tmp_path,
    )
    try:
        deadline = time.monotonic() + 30
        while proxy.stalled < 1:
            assert time.monotonic() < deadline, "the destination listing never stalled"
            time.sleep(0.05)
        [work] = list(scratch.iterdir())
        assert len(list(work.glob("source-*.run"))) > 1, (
            "the source was sorted in runs before the listing"
        )
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    finally:
        proc.kill()
        proxy.release(stall)
    assert not list(scratch.iterdir()), "scratch files left behind"
    assert "stopped by SIGTERM" in (tmp_path / "ferry.stderr").read_text()


@pytest.mark.parametrize("dest", ["local", "blob"])
def test_directories_only_at_the_destination_are_reported(tmp_path, run_ferry, request, dest):
    """As `prune --dry-run` lists them: a directory the source lacks with nothing under it that
    the source has, empty or holding only extra files; the source's own directories are not."""
    src = tmp_path / "src"
    make_tree(src, {"keep/a.txt": b"a\n", "keep/sub/b.txt": b"b\n"})
    if dest == "local":
        dst = tmp_path / "dst"
        run_ferry("copy", "-r", src, dst)
        (dst / "gone" / "deeper").mkdir(parents=True)
        (dst / "keep" / "extra").mkdir()
        (dst / "keep" / "extra" / "f").write_bytes(b"x")
        want = {"gone", "gone/deeper", "keep/extra", "keep/extra/f"}
    else:
        dst = request.getfixturevalue("container")
        run_ferry("copy", "-r", src, dst)
        (src / "gone" / "deeper").mkdir(parents=True)
        run_ferry("copy", "-r", src, dst)
        (src / "gone" / "deeper").rmdir()
        (src / "gone").rmdir()
        want = {"gone", "gone/deeper"}
    pruned = run_ferry("prune", src, dst, "--dry-run", "--max-delete", "100%", check=False)
    r = run_ferry("verify", src, dst, "--json", check=1)
    assert statuses(r.json) == {p: "missing_on_src" for p in want}, (r.json, pruned.stdout)
    assert r.json["missing_on_src"] == len(want), r.json
    text = run_ferry("verify", src, dst, "--metadata", check=1)
    assert {p for m, p, _ in text_rows(text.stdout) if m == "-"} == want


def test_metadata_names_a_hard_link_broken_at_the_source(tmp_path, run_ferry):
    """A link broken at the source with both halves unchanged stays linked after a copy (as
    rsync -H); `verify --metadata` names both names rather than calling them the same."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    make_tree(src, {"a": b"same bytes\n", "other": b"o\n"})
    os.link(src / "a", src / "b")
    run_ferry("copy", "-r", src, dst)
    assert os.stat(dst / "a").st_ino == os.stat(dst / "b").st_ino
    st = os.stat(src / "b")
    os.unlink(src / "b")
    (src / "b").write_bytes(b"same bytes\n")
    os.utime(src / "b", ns=(st.st_atime_ns, st.st_mtime_ns))
    os.utime(src, ns=(os.stat(dst).st_atime_ns, os.stat(dst).st_mtime_ns))
    run_ferry("copy", "-r", src, dst)
    assert os.stat(dst / "a").st_ino == os.stat(dst / "b").st_ino, "kept linked, as rsync"
    assert counts(run_ferry("verify", src, dst, "--json").json) == (3, 0, 0, 0, 0)
    r = run_ferry("verify", src, dst, "--metadata", "--json", check=1)
    reasons = {e["path"]: e["reason"] for e in r.json["entries"] if e["status"] == "differ"}
    assert set(reasons) == {"a", "b"}, r.json
    assert all("hard-linked at the destination" in why for why in reasons.values()), reasons
