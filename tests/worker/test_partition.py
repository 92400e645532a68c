"""`ferry partition` end to end, checked against the real fpart (Debian's /usr/bin/fpart, 1.5.1).

What fpart 1.5.1 really does (read from its source, src/file_entry.c and src/dispatch.c, and
pinned by test_fpart_reference_behaviour below, so that a different fpart fails loudly):

* ``-n N``: sort by size, biggest first, each file to the least-loaded of N partitions (LPT);
  always N partitions, empty ones included.
* ``-f F`` / ``-s S`` without ``-L``: first fit, in input order, over all partitions opened so
  far; with ``-s`` a file larger than S goes to a special partition 0.
* ``-L`` (live mode, in order, constant memory; what ferry's ``--max-files``/``--max-bytes``
  claim to match): a file is *added* to the open partition, and the partition closes once it
  holds F files or at least S bytes. So a partition may go over S by up to one file, and a file
  larger than S gets a partition of its own only if it happens to start one.

The order of files matters for every in-order mode, and ``ferry ls -r`` (a parallel walk) does
not list in fpart's fts order; comparisons of in-order modes therefore hand fpart ferry's own
order with ``-i``, which still makes fpart stat every file in the tree.
"""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
from pathlib import Path

import ferry_docs
import pytest
from support.manifest import parse_manifest, unescape_path
from support.trees import File, Link, make_tree, odd_names_spec, snapshot

FPART = "/usr/bin/fpart"
KiB, MiB = 1 << 10, 1 << 20


# ---------------------------------------------------------------------------------------------
# helpers


def sized_tree(root: Path, n: int, seed: int, limit: int, per_dir: int = 9) -> dict[bytes, int]:
    """``n`` sparse files of varied sizes (zero, small, medium, exactly ``limit``, larger than
    ``limit``) spread over directories, plus two empty directories. Returns {path: size}."""
    rng = random.Random(seed)
    sizes = {}
    for i in range(n):
        kind = rng.random()
        if kind < 0.05:
            size = 0
        elif kind < 0.60:
            size = rng.randrange(1, 64 * KiB)
        elif kind < 0.85:
            size = rng.randrange(64 * KiB, limit * 7 // 10)
        elif kind < 0.88:
            size = limit
        else:
            size = rng.randrange(limit + 1, 4 * limit)
        rel = f"d{i // per_dir:03d}/f{i:05d}.bin"
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            f.truncate(size)  # sparse: sizes are all that matter here
        sizes[rel.encode()] = size
    (root / "empty-dir").mkdir()
    (root / "d000" / "empty-subdir").mkdir()
    return sizes


def ls_manifest(run_ferry, root: Path, out: Path) -> Path:
    out.write_bytes(run_ferry("ls", root, "--recursive").stdout_bytes)
    return out


def manifest_files(path: Path) -> list[tuple[bytes, int]]:
    """(path, size) of the non-directory entries of a ferry manifest, in file order."""
    _, entries = parse_manifest(path.read_text(encoding="utf-8"))
    return [(e.path, e.size) for e in entries if e.type != "d"]


def read_loose_manifest(path: Path) -> list[tuple[bytes, str, int | None]]:
    """Like parse_manifest, but also accepts the '-' size ferry writes for bare (fpart) paths."""
    out = []
    for line in path.read_text(encoding="utf-8").split("\n"):
        if not line or line.startswith("#"):
            continue
        fields = line.split("\t")
        assert len(fields) in (5, 9), f"{path.name}: {line!r}"  # v1 or v2
        out.append(
            (unescape_path(fields[0]), fields[1], None if fields[2] == "-" else int(fields[2]))
        )
    return out


def ferry_partition(run_ferry, manifest: Path, out: Path, *limits, check=True):
    """`ferry partition --json`: its summary, as printed and as written, checked against its
    schema (the worker's `partition` document, documents.rs)."""
    r = run_ferry("partition", manifest, "--out", out, "--json", *map(str, limits), check=check)
    if r.returncode != 0:
        return r, None
    summary = ferry_docs.check("partition", json.loads((out / "summary.json").read_text()))
    assert json.loads(r.stdout) == summary, "--json prints the summary.json it writes"
    return r, summary


def ferry_parts(out: Path, summary: dict) -> list[list[tuple[bytes, int]]]:
    """Every part named in summary.json, as (path, size) lists; checks the summary's counts."""
    names = sorted(p.name for p in out.glob("part-*.tsv"))
    assert names == [p["file"] for p in summary["partitions"]], "part files on disk != summary.json"
    assert [p["index"] for p in summary["partitions"]] == list(range(len(names)))
    parts = []
    for p in summary["partitions"]:
        files = manifest_files(out / p["file"])
        assert (len(files), sum(s for _, s in files)) == (p["files"], p["bytes"]), (p, files[:5])
        parts.append(files)
    assert summary["parts"] == len(parts)
    assert summary["files"] == sum(len(p) for p in parts)
    assert summary["bytes"] == sum(s for p in parts for _, s in p)
    return parts


def run_fpart(args, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [FPART, *map(str, args)], cwd=cwd, capture_output=True, timeout=60, stdin=subprocess.DEVNULL
    )


def fpart_parts(template: Path) -> dict[int, list[bytes]]:
    """{partition number: paths} from fpart's ``-o template`` files (``template.N``), './' dropped."""
    out = {}
    for f in template.parent.iterdir():
        stem, _, num = f.name.rpartition(".")
        if stem == template.name and num.isdigit():
            lines = f.read_bytes().split(b"\n")
            assert lines[-1] == b"", f"{f} is not newline-terminated"
            out[int(num)] = [p[2:] if p.startswith(b"./") else p for p in lines[:-1]]
    return out


def fpart_list(manifest: Path, dest: Path) -> Path:
    """fpart's -i input in the manifest's own order: './path' per line."""
    dest.write_bytes(b"".join(b"./" + p + b"\n" for p, _ in manifest_files(manifest)))
    return dest


def assert_each_file_once(parts, sizes: dict[bytes, int]):
    seen = [p for part in parts for p, _ in part]
    dupes = sorted({p for p in seen if seen.count(p) > 1}) if len(seen) != len(set(seen)) else []
    assert not dupes, f"files in more than one part: {dupes[:10]}"
    assert set(seen) == set(sizes), (
        f"missing: {sorted(set(sizes) - set(seen))[:10]}, "
        f"unexpected: {sorted(set(seen) - set(sizes))[:10]}"
    )
    wrong = {p: (s, sizes[p]) for part in parts for p, s in part if s != sizes[p]}
    assert not wrong, f"sizes in the parts differ from the tree: {wrong}"


def imbalance(loads) -> float:
    mean = sum(loads) / len(loads)
    return (max(loads) / mean - 1) * 100


# ---------------------------------------------------------------------------------------------
# fpart itself: the behaviour the comparisons below rely on


def test_fpart_reference_behaviour(tmp_path):
    """Pins what Debian's fpart does, so the ferry comparisons rest on facts, not on folklore."""
    tree = tmp_path / "t"
    tree.mkdir()
    order = [("a", 4), ("b", 4), ("big1", 25), ("big2", 30), ("c", 3), ("d", 8), ("e", 2), ("f", 1)]
    listing = tmp_path / "list"
    listing.write_bytes(b"".join(b"./" + n.encode() + b"\n" for n, _ in order))
    for name, size in order:
        (tree / name).write_bytes(b"x" * size)

    v = run_fpart(["-V"], tree)
    assert (v.stdout + v.stderr).startswith(b"fpart v1.5.1"), (
        "the comparisons were written for 1.5.1"
    )
    # Live mode: add, then close once >= 10 bytes. [a b big1] = 33 bytes: over the limit with three
    # files, and big1 does not get a partition of its own; big2 does, only because it starts one;
    # [c d] = 11 bytes goes over the limit too.
    r = run_fpart(["-L", "-s", "10", "-i", listing, "-o", tmp_path / "live"], tree)
    assert r.returncode == 0, r.stderr
    assert fpart_parts(tmp_path / "live") == {
        1: [b"a", b"b", b"big1"],
        2: [b"big2"],
        3: [b"c", b"d"],
        4: [b"e", b"f"],
    }
    # Non-live: first fit in input order over every partition so far; files over the limit go to
    # the special partition 0.
    r = run_fpart(["-s", "10", "-i", listing, "-o", tmp_path / "nonlive"], tree)
    assert r.returncode == 0, r.stderr
    assert fpart_parts(tmp_path / "nonlive") == {
        0: [b"big1", b"big2"],
        1: [b"a", b"b", b"e"],
        2: [b"c", b"f"],
        3: [b"d"],
    }
    # Live mode by count: exactly F per partition, in order.
    r = run_fpart(["-L", "-f", "3", "-i", listing, "-o", tmp_path / "count"], tree)
    assert fpart_parts(tmp_path / "count") == {
        1: [b"a", b"b", b"big1"],
        2: [b"big2", b"c", b"d"],
        3: [b"e", b"f"],
    }
    # -n refuses -f, -s and -L.
    for bad in (["-n", "3", "-f", "2"], ["-n", "3", "-s", "10"], ["-n", "3", "-L"]):
        r = run_fpart([*bad, "-o", "-", "."], tree)
        assert r.returncode != 0 and b"incompatible" in r.stderr, bad


# ---------------------------------------------------------------------------------------------
# ferry against fpart on generated trees


TREES = [
    pytest.param(37, 1, id="37-files"),
    pytest.param(400, 2, id="400-files"),
    pytest.param(1500, 3, id="1500-files"),
]


@pytest.mark.parametrize("n, seed", TREES)
@pytest.mark.parametrize("max_files", [1, 7, 100])
def test_max_files_matches_fpart_live(tmp_path, run_ferry, n, seed, max_files):
    tree = tmp_path / "tree"
    sizes = sized_tree(tree, n, seed, limit=MiB)
    manifest = ls_manifest(run_ferry, tree, tmp_path / "m.tsv")
    _, summary = ferry_partition(run_ferry, manifest, tmp_path / "out", "--max-files", max_files)
    parts = ferry_parts(tmp_path / "out", summary)
    assert summary["mode"] == "max-files"
    assert_each_file_once(parts, sizes)
    over = [i for i, p in enumerate(parts) if len(p) > max_files]
    assert not over, f"parts over {max_files} files: {over}"
    assert all(parts), "an empty part"

    # fpart crawling the tree itself, live and not: by count alone the order cannot matter.
    for live in (["-L"], []):
        r = run_fpart([*live, "-f", max_files, "-o", tmp_path / f"fp{len(live)}", "."], tree)
        assert r.returncode == 0, r.stderr
        got = fpart_parts(tmp_path / f"fp{len(live)}")
        assert sorted(p for ps in got.values() for p in ps) == sorted(sizes)
        assert len(parts) == len(got) == math.ceil(n / max_files), (live, len(parts), len(got))

    # Given ferry's order, fpart -L must make exactly ferry's parts.
    r = run_fpart(
        [
            "-L",
            "-f",
            max_files,
            "-i",
            fpart_list(manifest, tmp_path / "list"),
            "-o",
            tmp_path / "same-order",
        ],
        tree,
    )
    assert r.returncode == 0, r.stderr
    same = fpart_parts(tmp_path / "same-order")
    assert [same[k] for k in sorted(same)] == [[p for p, _ in part] for part in parts]


BYTE_LIMITS = [
    pytest.param(("--max-bytes", "1MiB"), id="1MiB"),
    pytest.param(("--max-bytes", "3MiB"), id="3MiB"),
    pytest.param(("--max-bytes", "1MiB", "--max-files", "5"), id="1MiB-and-5-files"),
]


def _byte_limits(limits) -> tuple[int, int]:
    opts = dict(zip(limits[::2], limits[1::2]))
    return {"1MiB": MiB, "3MiB": 3 * MiB}[opts["--max-bytes"]], int(opts.get("--max-files", 0))


@pytest.mark.parametrize("n, seed", TREES)
@pytest.mark.parametrize("limits", BYTE_LIMITS)
def test_max_bytes_meets_its_limits(tmp_path, run_ferry, n, seed, limits):
    max_bytes, max_files = _byte_limits(limits)
    tree = tmp_path / "tree"
    sizes = sized_tree(tree, n, seed, limit=MiB)
    assert any(s > max_bytes for s in sizes.values()), "the tree must hold files over the limit"
    manifest = ls_manifest(run_ferry, tree, tmp_path / "m.tsv")
    _, summary = ferry_partition(run_ferry, manifest, tmp_path / "out", *limits)
    parts = ferry_parts(tmp_path / "out", summary)
    assert summary["mode"] == ("max-bytes" if not max_files else "max-files-bytes")
    assert_each_file_once(parts, sizes)
    assert all(parts), "an empty part"

    # fpart's live-mode rule: a part closes as soon as it reaches S bytes (or F files), so
    # only its last file may take it past S, and every part but the last did reach a limit.
    loads = [sum(s for _, s in p) for p in parts]
    over = [(i, loads[i], len(p)) for i, p in enumerate(parts) if loads[i] - p[-1][1] >= max_bytes]
    assert not over, f"parts that went on past {max_bytes} bytes (index, bytes, files): {over[:10]}"
    short = [
        (i, loads[i], len(p))
        for i, p in enumerate(parts[:-1])
        if loads[i] < max_bytes and not (max_files and len(p) == max_files)
    ]
    assert not short, f"parts closed before reaching a limit (index, bytes, files): {short[:10]}"
    if max_files:
        assert all(len(p) <= max_files for p in parts)
    # A file over S that opens a part has it to itself.
    opened = [part for part in parts if part[0][1] >= max_bytes and len(part) > 1]
    assert not opened, f"oversized files that opened a part but share it: {opened[:3]}"
    # In order: concatenating the parts gives back the manifest's order.
    assert [p for part in parts for p, _ in part] == [p for p, _ in manifest_files(manifest)]


@pytest.mark.parametrize("limits", BYTE_LIMITS)
def test_max_bytes_part_count_matches_fpart_live(tmp_path, run_ferry, limits):
    """ferry says --max-bytes fills parts like fpart's live mode; count fpart's parts on the same input."""
    max_bytes, max_files = _byte_limits(limits)
    tree = tmp_path / "tree"
    sizes = sized_tree(tree, 400, 2, limit=MiB)
    manifest = ls_manifest(run_ferry, tree, tmp_path / "m.tsv")
    _, summary = ferry_partition(run_ferry, manifest, tmp_path / "out", *limits)
    parts = ferry_parts(tmp_path / "out", summary)

    # fpart's live mode, fed ferry's order (the part count of any in-order mode depends on it).
    fp_args = ["-L", "-s", max_bytes] + (["-f", max_files] if max_files else [])
    r = run_fpart(
        [*fp_args, "-i", fpart_list(manifest, tmp_path / "list"), "-o", tmp_path / "fp"], tree
    )
    assert r.returncode == 0, r.stderr
    fp = fpart_parts(tmp_path / "fp")
    assert sorted(p for v in fp.values() for p in v) == sorted(sizes)
    fp_loads = {k: sum(sizes[p] for p in v) for k, v in sorted(fp.items())}
    fp_over = sum(1 for k, v in fp.items() if fp_loads[k] > max_bytes and len(v) > 1)
    assert len(parts) == len(fp), (
        f"ferry {' '.join(limits)} made {len(parts)} parts, fpart {' '.join(map(str, fp_args))} on the same "
        f"files in the same order made {len(fp)}. fpart adds a file and then closes the partition once it "
        f"reaches the limit, so {fp_over} of its partitions hold more than {max_bytes} bytes in several "
        f"files; ferry closes a part before the file that would overflow it."
    )


@pytest.mark.parametrize("n, seed", TREES)
@pytest.mark.parametrize("nparts", [1, 3, 8])
def test_parts_matches_fpart_n(tmp_path, run_ferry, n, seed, nparts):
    tree = tmp_path / "tree"
    sizes = sized_tree(tree, n, seed, limit=MiB)
    manifest = ls_manifest(run_ferry, tree, tmp_path / "m.tsv")
    _, summary = ferry_partition(run_ferry, manifest, tmp_path / "out", "--parts", nparts)
    parts = ferry_parts(tmp_path / "out", summary)
    assert summary["mode"] == "parts"
    assert_each_file_once(parts, sizes)

    r = run_fpart(["-n", nparts, "-o", tmp_path / "fp", "."], tree)
    assert r.returncode == 0, r.stderr
    fp = fpart_parts(tmp_path / "fp")
    assert len(parts) == len(fp) == nparts
    # LPT on the same sizes: whatever the tie-breaking, the multiset of part loads is the same.
    ferry_loads = sorted(sum(s for _, s in p) for p in parts)
    fpart_loads = sorted(sum(sizes[p] for p in v) for v in fp.values())
    assert ferry_loads == fpart_loads
    assert summary["imbalance_pct"] == pytest.approx(imbalance(ferry_loads), abs=0.01)


def test_more_parts_than_files_gives_empty_parts_like_fpart(tmp_path, run_ferry):
    tree = tmp_path / "tree"
    make_tree(tree, {"a": b"aaa", "b": b"b", "c/d": b"dd"})
    manifest = ls_manifest(run_ferry, tree, tmp_path / "m.tsv")
    _, summary = ferry_partition(run_ferry, manifest, tmp_path / "out", "--parts", "5")
    parts = ferry_parts(tmp_path / "out", summary)
    assert sorted(len(p) for p in parts) == [0, 0, 1, 1, 1]
    assert run_fpart(["-n", "5", "-o", tmp_path / "fp", "."], tree).returncode == 0
    assert sorted(len(v) for v in fpart_parts(tmp_path / "fp").values()) == [0, 0, 1, 1, 1]


@pytest.mark.parametrize(
    "combo",
    [
        ("--parts", "3", "--max-files", "2"),
        ("--parts", "3", "--max-bytes", "1MiB"),
        ("-n", "3", "-f", "2"),
        ("-n", "3", "-s", "10"),
    ],
)
def test_parts_with_limits_is_refused_like_fpart(tmp_path, run_ferry, combo):
    tree = tmp_path / "tree"
    make_tree(tree, {"a": b"a", "b": b"b"})
    manifest = ls_manifest(run_ferry, tree, tmp_path / "m.tsv")
    out = tmp_path / "out"
    r = run_ferry("partition", manifest, "--out", out, *combo, check=2)
    assert "cannot be combined" in r.stderr, r.stderr
    assert not out.exists(), "a refused partition still wrote output"
    fp_combo = [
        {"--parts": "-n", "--max-files": "-f", "--max-bytes": "-s"}.get(a, a) for a in combo
    ]
    fp_combo = ["10" if a == "1MiB" else a for a in fp_combo]
    assert run_fpart([*fp_combo, "-o", "-", "."], tree).returncode != 0, (
        "fpart accepts this combination"
    )


@pytest.mark.parametrize(
    "limits",
    [
        ("--parts", "4"),
        ("--max-files", "3"),
        ("--max-bytes", "1MiB"),
        ("--max-files", "3", "--max-bytes", "1MiB"),
    ],
)
def test_empty_input_gives_zero_parts_and_says_so(tmp_path, run_ferry, limits):
    tree = tmp_path / "tree"
    (tree / "only" / "empty-dirs").mkdir(parents=True)
    manifests = {
        "listing of a tree with no files": ls_manifest(run_ferry, tree, tmp_path / "m.tsv"),
        "empty file (fpart output of nothing)": tmp_path / "empty.txt",
    }
    manifests["empty file (fpart output of nothing)"].write_bytes(b"")
    for what, manifest in manifests.items():
        out = tmp_path / ("out-" + manifest.stem)
        r, summary = ferry_partition(run_ferry, manifest, out, *limits)
        assert summary["parts"] == 0 and summary["files"] == 0 and summary["partitions"] == [], (
            what,
            summary,
        )
        assert not list(out.glob("part-*.tsv")), what
        assert "no files" in r.stderr and "zero parts" in r.stderr, (what, r.stderr)
    # fpart agrees: nothing to pack, no partitions.
    assert run_fpart(["-L", "-f", "3", "-o", tmp_path / "fp", "."], tree).returncode == 0
    assert fpart_parts(tmp_path / "fp") == {}


def test_rerun_into_the_same_directory_leaves_no_stale_parts(tmp_path, run_ferry):
    tree = tmp_path / "tree"
    sized_tree(tree, 30, 9, limit=MiB)
    manifest = ls_manifest(run_ferry, tree, tmp_path / "m.tsv")
    out = tmp_path / "out"
    ferry_partition(run_ferry, manifest, out, "--max-files", "2")
    assert len(list(out.glob("part-*.tsv"))) == 15
    _, summary = ferry_partition(run_ferry, manifest, out, "--parts", "2")
    assert sorted(p.name for p in out.glob("part-*.tsv")) == ["part-00000.tsv", "part-00001.tsv"]
    assert summary["parts"] == 2


# ---------------------------------------------------------------------------------------------
# fpart's own output as input


PLAIN_NAMES = [
    "top.txt",
    "with space.txt",
    "-leading-dash.txt",
    "--double",
    "#hash-first.txt",
    "sub/#inner-hash",
    "sub/mid#hash",
    "ünïcödé-名前.txt",
    "100%.txt",
    "sub/deeper/x.bin",
]


def test_fpart_output_is_accepted_by_partition_and_copy(tmp_path, run_ferry):
    tree = tmp_path / "tree"
    contents = make_tree(
        tree,
        {name: File(data=f"{i}:{name}\n".encode() * (i + 1)) for i, name in enumerate(PLAIN_NAMES)},
    )
    r = run_fpart(
        ["-o", tmp_path / "parts", "-n", "3", "."], tree
    )  # run inside the tree, as fpsync does
    assert r.returncode == 0, r.stderr
    fp = fpart_parts(tmp_path / "parts")
    assert sorted(p for v in fp.values() for p in v) == sorted(contents)
    assert (tmp_path / "parts.1").read_bytes().startswith(b"./"), (
        "fpart was expected to write ./paths"
    )

    dst = tmp_path / "dst"
    for k, paths in sorted(fp.items()):
        part = tmp_path / f"parts.{k}"
        # As input to ferry partition: every bare path comes through, once.
        _, summary = ferry_partition(run_ferry, part, tmp_path / f"re{k}", "--max-files", "2")
        got = [
            e
            for f in sorted((tmp_path / f"re{k}").glob("part-*.tsv"))
            for e in read_loose_manifest(f)
        ]
        assert sorted(p for p, _, _ in got) == sorted(paths)
        assert summary["files"] == len(paths)
        # As input to ferry copy --files-from.
        cp = run_ferry("copy", tree, dst, "--files-from", part, "--json")
        assert cp.json["files"]["copied"] == len(paths) and cp.json["files"]["failed"] == 0, cp.json
    got = {p: e.md5 for p, e in snapshot(dst).items() if e.type == "f"}
    want = {p: e.md5 for p, e in snapshot(tree).items() if e.type == "f"}
    assert got == want


def test_max_bytes_on_fpart_output_never_silently_ignores_the_limit(tmp_path, run_ferry):
    """Bare paths carry no size. ferry partition must then refuse --max-bytes or find the sizes;
    putting everything in one part reported as 0 bytes is neither."""
    tree = tmp_path / "tree"
    sizes = sized_tree(tree, 60, 7, limit=MiB)
    assert run_fpart(["-o", tmp_path / "bare", "-n", "1", "."], tree).returncode == 0
    r, summary = ferry_partition(
        run_ferry, tmp_path / "bare.1", tmp_path / "out", "--max-bytes", "1MiB", check=False
    )
    if r.returncode != 0:
        assert r.returncode == 2 and "size" in r.stderr, r.stderr
        return
    parts = [
        [p for p, _, _ in read_loose_manifest(tmp_path / "out" / p["file"])]
        for p in summary["partitions"]
    ]
    over = [
        (i, sum(sizes[p] for p in part), len(part))
        for i, part in enumerate(parts)
        if sum(sizes[p] for p in part) > MiB and len(part) > 1
    ]
    assert not over, (
        f"{len(over)} of {len(parts)} parts are over --max-bytes 1MiB (index, real bytes, files): "
        f"{over[:5]}; summary.json says {summary['bytes']} bytes in all"
    )


AWKWARD_FPART_NAMES = [
    pytest.param(b"back\\slash.txt", id="backslash"),
    pytest.param(b"literal-backslash-n\\n.txt", id="backslash-n"),
    pytest.param(b"latin1-\xe9t\xe9.txt", id="non-utf8"),
    pytest.param(b"tab\there.txt", id="tab"),
]


@pytest.mark.parametrize("name", AWKWARD_FPART_NAMES)
def test_fpart_output_with_awkward_names(tmp_path, run_ferry, name):
    """fpart writes names raw, one per line (only a newline in a name cannot be represented)."""
    tree = tmp_path / "tree"
    contents = make_tree(tree, {b"plain.txt": b"plain\n", b"sub/" + name: b"awkward\n"})
    r = run_fpart(["-o", tmp_path / "parts", "-n", "1", "."], tree)
    assert r.returncode == 0, r.stderr
    part = tmp_path / "parts.1"
    assert sorted(part.read_bytes().split(b"\n")) == sorted([b"", b"./plain.txt", b"./sub/" + name])

    # Bare paths carry no sizes, so split by count (--parts and --max-bytes refuse them).
    r, summary = ferry_partition(run_ferry, part, tmp_path / "re", "--max-files", "1", check=False)
    assert r.returncode == 0, f"ferry partition refused fpart's output: {r.stderr.strip()}"
    got = sorted(
        p for f in (tmp_path / "re").glob("part-*.tsv") for p, _, _ in read_loose_manifest(f)
    )
    assert got == sorted(contents), "ferry partition read fpart's paths as other names"

    dst = tmp_path / "dst"
    cp = run_ferry("copy", tree, dst, "--files-from", part, check=False)
    assert cp.returncode == 0, (
        f"ferry copy --files-from refused fpart's output: {cp.stderr.strip()}"
    )
    assert {p: e.md5 for p, e in snapshot(dst).items() if e.type == "f"} == {
        p: e.md5 for p, e in snapshot(tree).items() if e.type == "f"
    }


# ---------------------------------------------------------------------------------------------
# LPT balance, determinism


def test_lpt_balances_a_skewed_set_within_two_percent(tmp_path, run_ferry):
    tree = tmp_path / "tree"
    rng = random.Random(11)
    sizes = {}
    for rel, size in [("big/one", 900 * MiB), ("big/two", 750 * MiB), ("big/three", 600 * MiB)]:
        sizes[rel.encode()] = size
    for i in range(3000):
        sizes[f"small/d{i // 100:02d}/f{i:04d}".encode()] = rng.randrange(1, 2 * MiB)
    for rel, size in sizes.items():
        path = tree / rel.decode()
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            f.truncate(size)
    manifest = ls_manifest(run_ferry, tree, tmp_path / "m.tsv")
    for nparts in (2, 4):
        out = tmp_path / f"out{nparts}"
        _, summary = ferry_partition(run_ferry, manifest, out, "--parts", nparts)
        parts = ferry_parts(out, summary)
        assert_each_file_once(parts, sizes)
        # My own sums from the part files, not the summary's.
        loads = [sum(s for _, s in p) for p in parts]
        assert len(loads) == nparts
        assert imbalance(loads) < 2.0, loads
        assert summary["imbalance_pct"] < 2.0
        assert summary["imbalance_pct"] == pytest.approx(imbalance(loads), abs=0.01)
        # The big files must not share a part while small ones could fill the others.
        big_homes = {i for i, p in enumerate(parts) for path, _ in p if path.startswith(b"big/")}
        assert len(big_homes) == min(3, nparts)


@pytest.mark.parametrize(
    "limits",
    [
        ("--parts", "5"),
        ("--max-files", "13"),
        ("--max-bytes", "2MiB"),
        ("--max-files", "13", "--max-bytes", "2MiB"),
    ],
)
def test_two_runs_give_byte_identical_parts(tmp_path, run_ferry, limits):
    tree = tmp_path / "tree"
    sized_tree(tree, 300, 4, limit=MiB)
    manifest = ls_manifest(run_ferry, tree, tmp_path / "m.tsv")
    runs = []
    for k in range(2):
        out = tmp_path / f"run{k}"
        ferry_partition(run_ferry, manifest, out, *limits)
        runs.append({f.name: f.read_bytes() for f in sorted(out.iterdir())})
    assert runs[0].keys() == runs[1].keys()
    assert len([n for n in runs[0] if n.startswith("part-")]) > 1
    assert runs[0] == runs[1], [n for n in runs[0] if runs[0][n] != runs[1][n]]


def test_parts_assignment_does_not_depend_on_listing_order(tmp_path, run_ferry):
    """Two workers that each list the tree get the same --parts split, whatever order ls gave."""
    tree = tmp_path / "tree"
    sized_tree(tree, 300, 5, limit=MiB)
    manifest = ls_manifest(run_ferry, tree, tmp_path / "m.tsv")
    lines = manifest.read_bytes().split(b"\n")
    header, body = lines[0], [line for line in lines[1:] if line and not line.startswith(b"#")]
    end = [line for line in lines if line.startswith(b"#ferry-end")]
    shuffled = tmp_path / "shuffled.tsv"
    random.Random(1).shuffle(body)
    shuffled.write_bytes(b"\n".join([header, *body, *end]) + b"\n")
    sets = []
    for m in (manifest, shuffled):
        out = tmp_path / ("out-" + m.stem)
        _, summary = ferry_partition(run_ferry, m, out, "--parts", "6")
        sets.append([sorted(p for p, _ in part) for part in ferry_parts(out, summary)])
    assert sets[0] == sets[1]


# ---------------------------------------------------------------------------------------------
# odd names through partition and copy --files-from


EXTRA_ODD = {
    b"lead/\tleading-tab": b"t\n",
    b"lead/\nleading-newline": b"n\n",
    b"#top-hash": b"h\n",
    b"-top-dash": b"d\n",
    b"nonutf8-\xff\xfe/\x80inside-\xc3(": b"bad utf8 twice\n",
    b"trailing-backslash\\": b"bs\n",
    b"looks-escaped-\\x41-\\t-\\n": b"literal escapes\n",
}


@pytest.mark.parametrize("limits", [("--parts", "3"), ("--max-files", "4"), ("--max-bytes", "64")])
def test_odd_names_survive_partition_and_copy_of_each_part(tmp_path, run_ferry, limits):
    src, dst = tmp_path / "src", tmp_path / "dst"
    spec = {
        **odd_names_spec(local_only=True),
        **EXTRA_ODD,
        b"links/to-odd": Link(b"../odd/tab\there.txt"),
        b"empty\tdir/\n": File(data=b""),
    }
    make_tree(src, spec)
    os.mkdir(src / "really empty dir")
    manifest = ls_manifest(run_ferry, src, tmp_path / "m.tsv")
    out = tmp_path / "parts"
    _, summary = ferry_partition(run_ferry, manifest, out, *limits)
    parts = ferry_parts(out, summary)
    assert summary["parts"] > 1

    want = snapshot(src)
    in_parts = sorted(p for part in parts for p, _ in part)
    assert in_parts == sorted(p for p, e in want.items() if e.type != "d"), (
        "names changed in partitioning"
    )
    dirs = sorted(e.path for e in parse_manifest((out / "dirs.tsv").read_text(encoding="utf-8"))[1])
    assert dirs == sorted(p for p, e in want.items() if e.type == "d")

    for part in sorted(out.glob("part-*.tsv")) + [out / "dirs.tsv"]:
        run_ferry("copy", src, dst, "--files-from", part)
    got = snapshot(dst)
    assert set(got) == set(want), sorted(set(got) ^ set(want))[:10]
    diff = [
        (p, w, got[p])
        for p, w in want.items()
        if (got[p].type, got[p].md5, got[p].target, got[p].mode)
        != (w.type, w.md5, w.target, w.mode)
        or (w.type == "f" and got[p].mtime_ns != w.mtime_ns)
    ]
    assert not diff, diff[:5]


def test_file_weight_counts_each_file_beside_its_bytes(tmp_path, run_ferry):
    """`--file-weight W` (the replication's download split): LPT balances bytes + W per file, so
    many small files no longer count as nothing against one large one; the parts keep the real
    sizes. Only --parts takes it."""
    sizes = {b"big.bin": MiB, **{f"small/f{i:02d}".encode(): KiB for i in range(64)}}
    manifest = tmp_path / "m.tsv"
    manifest.write_text(
        "#ferry-manifest v1\tpath\ttype\tsize\tmtime\tmd5\n"
        + "".join(f"{p.decode()}\tf\t{s}\t-\t-\n" for p, s in sizes.items())
    )
    _, summary = ferry_partition(run_ferry, manifest, tmp_path / "bytes", "--parts", 2)
    by_bytes = ferry_parts(tmp_path / "bytes", summary)
    assert sorted(len(p) for p in by_bytes) == [1, 64], (
        "by bytes alone, the large file has a part to itself"
    )

    weight = 64 * KiB
    _, summary = ferry_partition(
        run_ferry, manifest, tmp_path / "weighed", "--parts", 2, "--file-weight", "64KiB"
    )
    parts = ferry_parts(tmp_path / "weighed", summary)
    assert_each_file_once(parts, sizes)
    loads = [sum(s + weight for _, s in p) for p in parts]
    assert max(loads) - min(loads) <= KiB + weight, loads
    assert summary["bytes"] == sum(sizes.values())

    r, _ = ferry_partition(
        run_ferry, manifest, tmp_path / "refused", "--max-files", 4, "--file-weight", "1", check=2
    )
    assert "--file-weight balances --parts" in r.stderr
