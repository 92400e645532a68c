"""Bad input gets a clear error naming where it is, and nothing is acted upon: manifests, flags,
locations. Each case runs the real binary; none needs Azurite."""

from __future__ import annotations

import pytest

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
    ("unknown-header", b"#ferry-manifest v9\tpath\ttype\tsize\tmtime\tmd5\na.txt\tf\t2\t-\t-\n", 1, "v9"),
    ("crlf", GOOD.replace(b"\n", b"\r\n"), 1, "CR LF"),
    ("duplicate", GOOD + b"b.txt\tf\t2\t-\t-\na.txt\tf\t2\t-\t-\n", 4, "listed twice (first on line 2)"),
    ("dot-dot-file", GOOD + b"../escape.txt\tf\t2\t-\t-\n", 3, "unsafe path"),
    ("dot-dot-dir", GOOD + b"../outside\td\t0\t-\t-\n", 3, "unsafe path"),
    ("dot-dir", GOOD + b"sub/./x\td\t0\t-\t-\n", 3, "unsafe path"),
    ("ten-mb-line", GOOD + b"x" * (10 << 20) + b"\tf\t1\t-\t-\n", 3, "line longer than 64 KiB"),
]


@pytest.mark.parametrize("data,line,words", [c[1:] for c in BAD_MANIFESTS], ids=[c[0] for c in BAD_MANIFESTS])
def test_bad_manifest_is_refused_with_its_line_before_anything_is_copied(tmp_path, run_ferry, data, line, words):
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
    pruned = run_ferry("prune", src, dst, "--files-from", manifest, "--log", tmp_path / "prune.tsv", check=1)
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
