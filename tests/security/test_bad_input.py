"""Bad input gets a clear error naming where it is, and nothing is acted upon: manifests, flags,
names, unreadable sources. Each case runs the real binary."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from support.blobs import blob_name, file_blobs
from support.ferry import ferry_env
from support.trees import make_tree, snapshot

NOBODY = pwd.getpwnam("nobody").pw_uid

GOOD = b"#ferry-manifest v1\tpath\ttype\tsize\tmtime\tmd5\na.txt\tf\t2\t-\t-\n"

# (id, manifest bytes, the line the error must name, words the message must hold)
BAD_MANIFESTS = [
    ("malformed-size", GOOD + b"b.txt\tf\tlots\t-\t-\n", 3, "bad size"),
    ("bad-type", GOOD + b"b.txt\tq\t2\t-\t-\n", 3, "bad type"),
    ("too-many-fields", GOOD + b"b.txt\tf\t2\t-\t-\textra\n", 3, "too many fields"),
    ("bad-escape", GOOD + b"b\\q.txt\tf\t2\t-\t-\n", 3, "bad escape"),
    ("truncated-hex-escape", GOOD + b"b\\x4\tf\t2\t-\t-\n", 3, "escape"),
    # 32 bytes, but 3-byte characters: slicing by bytes would split one.
    ("multibyte-md5", GOOD + "b.txt\tf\t2\t-\t{}ab\n".format("€" * 10).encode(), 3, "bad md5"),
    ("not-utf8", GOOD + b"b\xff.txt\tf\t2\t-\t-\n", 3, "not UTF-8"),
    (
        "unknown-header",
        b"#ferry-manifest v9\tpath\ttype\tsize\tmtime\tmd5\na.txt\tf\t2\t-\t-\n",
        1,
        "v9",
    ),
    ("crlf", GOOD.replace(b"\n", b"\r\n"), 1, "CR LF"),
    (
        # Whole (its end record counts its lines), so that prune reads to the duplicate.
        "duplicate",
        GOOD + b"b.txt\tf\t2\t-\t-\na.txt\tf\t2\t-\t-\n#ferry-end\tentries=3\tbytes=6\n",
        4,
        "listed twice (first on line 2)",
    ),
    ("dot-dot-file", GOOD + b"../escape.txt\tf\t2\t-\t-\n", 3, "unsafe path"),
    ("dot-dot-dir", GOOD + b"../outside\td\t0\t-\t-\n", 3, "unsafe path"),
    ("dot-dir", GOOD + b"sub/./x\td\t0\t-\t-\n", 3, "unsafe path"),
    ("ten-mb-line", GOOD + b"x" * (10 << 20) + b"\tf\t1\t-\t-\n", 3, "line longer than 64 KiB"),
]


@pytest.mark.parametrize(
    "data,line,words", [c[1:] for c in BAD_MANIFESTS], ids=[c[0] for c in BAD_MANIFESTS]
)
def test_bad_manifest_is_refused_with_its_line_before_anything_is_copied(
    tmp_path, run_ferry, data, line, words
):
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    (src / "a.txt").write_bytes(b"hi")
    (src / "b.txt").write_bytes(b"hi")
    (tmp_path / "outside").mkdir()
    manifest = tmp_path / "m.tsv"
    manifest.write_bytes(data)
    out = run_ferry("copy", src, dst, "--files-from", manifest, check=2)
    assert f"m.tsv:{line}:" in out.stderr and words in out.stderr, out.stderr
    assert "panicked" not in out.stderr
    # The good first line was not acted upon: the manifest is checked whole before any copy.
    assert not dst.exists() or not any(dst.iterdir())
    assert not any((tmp_path / "outside").iterdir())
    # prune and verify read manifests the same way: a bad one is refused, nothing deleted.
    dst.mkdir(exist_ok=True)
    (dst / "keep.txt").write_bytes(b"keep")
    pruned = run_ferry(
        "prune",
        "--yes",
        src,
        dst,
        "--files-from",
        manifest,
        "--log",
        tmp_path / "prune.tsv",
        check=1,
    )
    assert "refused" in pruned.stderr and f"m.tsv:{line}:" in pruned.stderr
    assert (dst / "keep.txt").exists()
    verified = run_ferry("verify", src, dst, "--files-from", manifest, check=2)
    assert f"m.tsv:{line}:" in verified.stderr


def test_verify_download_without_checksum_is_a_usage_error(tmp_path, run_ferry):
    (tmp_path / "a").mkdir()
    out = run_ferry("verify", tmp_path / "a", tmp_path / "a", "--download", check=2)
    assert "--checksum" in out.stderr


def test_a_manifest_entry_that_vanished_is_reported_and_the_rest_copied(tmp_path, run_ferry):
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    (src / "a.txt").write_bytes(b"hi")
    manifest = tmp_path / "m.tsv"
    manifest.write_bytes(GOOD + b"gone.txt\tf\t5\t-\t-\n")
    out = run_ferry("copy", src, dst, "--files-from", manifest, "--json", check=1)
    assert out.json["files"]["copied"] == 1 and out.json["files"]["failed"] == 1
    assert [f["path"] for f in out.json["failures"]] == ["gone.txt"]
    assert (dst / "a.txt").read_bytes() == b"hi" and not (dst / "gone.txt").exists()


def test_a_permission_denied_file_or_directory_is_reported_and_the_rest_copied(tmp_path, run_ferry):
    """Root reads everything whatever the modes, so ferry runs as `nobody` here: the denial is
    the kernel's, not a simulation."""
    base = Path(tempfile.mkdtemp(prefix="ferry-perm-"))
    try:
        base.chmod(0o755)
        src, dst = base / "src", base / "dst"
        make_tree(
            src, {"ok.txt": b"ok", "open/x.txt": b"x", "secret.txt": b"s", "locked/inner.txt": b"i"}
        )
        (src / "secret.txt").chmod(0o000)
        (src / "locked").chmod(0o000)
        dst.mkdir()
        os.chown(dst, NOBODY, NOBODY)
        # nobody may not be able to reach the build tree (a checkout under a 0700 directory): run a
        # copy of the binary from the world-readable base instead.
        exe = base / "ferry"
        shutil.copy2(run_ferry.binary, exe)

        def as_nobody(*args):
            return ["runuser", "-u", "nobody", "--", str(exe), *run_ferry.command(args)[1:]]

        cmd = as_nobody("copy", "-r", src, dst, "--json")
        out = subprocess.run(
            cmd, env=ferry_env(), cwd=base, capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 1, out.stderr
        summary = json.loads(out.stdout)
        errors = " | ".join(f"{f['path']}: {f['error']}" for f in summary["failures"])
        assert (
            "secret.txt" in errors and "locked" in errors and errors.count("Permission denied") == 2
        ), errors
        assert (dst / "ok.txt").read_bytes() == b"ok" and (dst / "open/x.txt").read_bytes() == b"x"
        assert not (dst / "secret.txt").exists() and not (dst / "locked/inner.txt").exists()
        # A listing that met a denied directory is incomplete: prune refuses to act on it.
        make_tree(dst, {"stale.txt": b"old"})
        os.chown(dst / "stale.txt", NOBODY, NOBODY)
        cmd = as_nobody("prune", "--yes", src, dst, "--force", "--log", base / "p.tsv")
        pruned = subprocess.run(
            cmd, env=ferry_env(), cwd=base, capture_output=True, text=True, timeout=60
        )
        assert pruned.returncode == 1 and "refused" in pruned.stderr, pruned.stderr
        assert (dst / "stale.txt").exists()
    finally:
        (base / "src" / "locked").chmod(0o755)
        shutil.rmtree(base)


NAMES = {
    "caf\u00e9-nfc.txt": b"nfc",  # the same word in NFC and NFD: two names, two files
    "cafe\u0301-nfc.txt": b"nfd",
    "Case.txt": b"1",
    "case.txt": b"2",
    "CASE.TXT": b"3",  # distinct here, one on a case-folding FS
    "/".join(["d" * 200] * 4) + "/" + "f" * 150 + ".txt": b"about 1,000 bytes of path",
    " lead space/ -dash/#hash/%25/?q=1&x#frag.txt": b"url-ish",
    "tab\tand\nnewline.txt": b"ws",
}


def test_odd_names_round_trip_through_blob_storage(tmp_path, container, run_ferry):
    src, dst = tmp_path / "src", tmp_path / "dst"
    make_tree(src, NAMES)
    run_ferry("copy", "-r", src, container)
    assert sorted(file_blobs(container)) == sorted(
        map(blob_name, NAMES)
    )  # (and a folder stub per directory)
    run_ferry("copy", "-r", container, dst)
    got = {
        p.decode(): (dst / p.decode()).read_bytes()
        for p, e in snapshot(dst).items()
        if e.type == "f"
    }
    assert got == NAMES
    run_ferry("verify", src, container, "--checksum")


def test_blob_names_that_cannot_be_local_names_fail_clearly_and_the_rest_arrive(
    tmp_path, container, run_ferry
):
    for name, data in {
        "conflict": b"a file",
        "conflict/child.txt": b"a file under it",
        "x" * 300 + ".txt": b"component over 255 bytes",
        "fine.txt": b"fine",
    }.items():
        container.client.upload_blob(name, data)
    dst = tmp_path / "dst"
    out = run_ferry("copy", "-r", container, dst, "--json", check=1)
    failed = {f["path"]: f["error"] for f in out.json["failures"]}
    assert len(failed) == 2 and "x" * 300 + ".txt" in failed, failed
    assert "name too long" in failed["x" * 300 + ".txt"].lower()
    assert len({"conflict", "conflict/child.txt"} & set(failed)) == 1, failed
    assert (dst / "fine.txt").read_bytes() == b"fine"
    assert "panicked" not in out.stderr
