"""Fidelity across passes (issue 29): what changes at a live source between passes — a chmod, a
chown, a file that becomes a directory — reaches the destination on the next pass, by the one
"same file?" rule (worker/src/same.rs) that plan, copy and verify share; and a source and
destination that overlap are refused by every verb before anything is written or deleted."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess

import pytest
from support.trees import Dir, File, Link, describe_differences, make_tree, snapshot


def comparable(root, dir_mtimes: bool = True) -> dict:
    """A snapshot of everything ferry carries; directory mtimes only where asked (a pipeline's
    parallel parts write into one directory in no order, so its mtime is the last write's)."""
    snap = snapshot(root)
    if not dir_mtimes:
        snap = {
            p: dataclasses.replace(e, mtime_ns=0) if e.type == "d" else e for p, e in snap.items()
        }
    return snap


def same_tree(src, dst, dir_mtimes: bool = True) -> None:
    want, got = comparable(src, dir_mtimes), comparable(dst, dir_mtimes)
    assert got == want, describe_differences(want, got)


def copy_json(run_ferry, *args) -> dict:
    return json.loads(run_ferry("copy", *args, "--json").stdout)


def test_chmod_and_chown_between_passes_set_metadata_only(tmp_path, run_ferry):
    src, dst = tmp_path / "src", tmp_path / "dst"
    make_tree(
        src,
        {"a.txt": File(size=3000), "b.txt": File(size=5000), "sub/c.txt": b"c", "sub/d.txt": b"d"},
    )
    copy_json(run_ferry, "-r", src, dst)
    same_tree(src, dst)

    os.chmod(src / "a.txt", 0o600)
    os.chown(src / "b.txt", 1234, 5678)
    os.chmod(src / "sub", 0o750)
    os.chmod(src / "sub" / "c.txt", 0o4755)
    verify = json.loads(run_ferry("verify", src, dst, "--metadata", "--json", check=1).stdout)
    assert verify["differ"] == 4, verify

    out = copy_json(run_ferry, "-r", src, dst)
    assert out["files"]["copied"] == 0 and out["bytes"]["copied"] == 0, out
    assert out["files"]["metadata_only"] == 3, out  # the directory is finished like any directory
    same_tree(src, dst)
    assert json.loads(run_ferry("verify", src, dst, "--metadata", "--json").stdout)["differ"] == 0

    # Converged: the next pass sends nothing and sets nothing.
    out = copy_json(run_ferry, "-r", src, dst)
    assert (out["files"]["copied"], out["files"]["metadata_only"], out["bytes"]["copied"]) == (
        0,
        0,
        0,
    ), out


def test_without_mode_in_preserve_a_chmod_is_not_carried(tmp_path, run_ferry):
    src, dst = tmp_path / "src", tmp_path / "dst"
    make_tree(src, {"a.txt": File(size=100, mode=0o644)})
    copy_json(run_ferry, "-r", src, dst)
    os.chmod(src / "a.txt", 0o600)
    out = copy_json(run_ferry, "-r", src, dst, "--preserve", "all,no-mode")
    assert out["files"]["metadata_only"] == 0 and out["files"]["skipped"] == 1, out
    assert (dst / "a.txt").stat().st_mode & 0o7777 == 0o644


TYPE_CHANGES = {
    # before -> after, at the same name
    "file-to-dir": (
        File(data=b"was a file"),
        {"inner.txt": b"now a directory's file", "deeper/x": b"x"},
    ),
    "dir-to-file": ({"old.txt": b"old", "old-sub/y": b"y"}, File(data=b"now a file")),
    "file-to-link": (File(data=b"plain"), Link("file-to-dir")),
    "link-retarget": (Link("target-one"), Link("target-two-longer")),
    "link-to-dir": (Link("elsewhere"), {"z.txt": b"z"}),
}


def lay_out(root, state: dict) -> None:
    spec = {}
    for name, item in state.items():
        if isinstance(item, dict):
            spec[f"{name}/"] = Dir()
            spec.update({f"{name}/{k}": v for k, v in item.items()})
        else:
            spec[name] = item
    make_tree(root, {k.rstrip("/"): v for k, v in spec.items()})


def change_types(src) -> None:
    import shutil

    for name, (_, _after) in TYPE_CHANGES.items():
        path = src / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    lay_out(src, {name: after for name, (_, after) in TYPE_CHANGES.items()})


def test_a_type_change_between_passes_converges_in_one_copy(tmp_path, run_ferry):
    src, dst = tmp_path / "src", tmp_path / "dst"
    lay_out(
        src, {name: before for name, (before, _) in TYPE_CHANGES.items()} | {"keep.txt": b"keep"}
    )
    copy_json(run_ferry, "-r", src, dst)
    same_tree(src, dst)
    change_types(src)
    # A small tree: its replacements are past the default 10%, which is not the subject here.
    out = copy_json(run_ferry, "-r", src, dst, "--max-delete", "100%")
    assert out["files"]["failed"] == 0, out
    assert out["files"]["replaced"] >= 2, out  # file-to-dir's and dir-to-file's old entries
    same_tree(src, dst)
    out = copy_json(run_ferry, "-r", src, dst)
    assert (out["files"]["copied"], out["files"]["replaced"]) == (0, 0), out


def test_a_type_change_converges_through_plan_parts_and_prune(tmp_path, run_ferry):
    """The pipelines' path: a final-phase plan cut into parts, one copy per part in any order,
    then prune — a directory replacing a file must not fail the part whose files land in it."""
    src, dst, plan = tmp_path / "src", tmp_path / "dst", tmp_path / "plan"
    before = {name: before for name, (before, _) in TYPE_CHANGES.items()}
    lay_out(src, before | {f"bulk/{i:03}.bin": File(size=200 + i) for i in range(30)})
    copy_json(run_ferry, "-r", src, dst)
    change_types(src)
    os.chmod(src / "bulk" / "007.bin", 0o600)
    (tmp_path / "s.tsv").write_bytes(run_ferry("ls", "-r", src).stdout_bytes)
    (tmp_path / "d.tsv").write_bytes(run_ferry("ls", "-r", dst).stdout_bytes)
    doc = json.loads(
        run_ferry(
            "plan",
            tmp_path / "s.tsv",
            tmp_path / "d.tsv",
            "--out",
            plan,
            "--phase",
            "final",
            "--parts",
            "4",
            "--json",
        ).stdout
    )
    assert doc["to_copy"]["metadata_only"] == 1, doc["to_copy"]
    assert doc["to_copy"]["type_changed"] == len(TYPE_CHANGES) - 1, doc[
        "to_copy"
    ]  # a retarget is a change
    # Parts in reverse order: the part that makes a directory need not run first.
    for part in sorted((plan / "copy").glob("part-*.tsv"), reverse=True):
        out = copy_json(run_ferry, src, dst, "--files-from", part)
        assert out["files"]["failed"] == 0, out
    # As the pipelines prune: against the source's listing.
    run_ferry(
        "prune", "--yes", src, dst, "--files-from", tmp_path / "s.tsv", "--max-delete", "100%"
    )
    same_tree(src, dst, dir_mtimes=False)
    assert json.loads(run_ferry("verify", src, dst, "--metadata", "--json").stdout)["differ"] == 0


def test_plan_sees_mode_and_owner_of_both_listings(tmp_path, run_ferry):
    src, dst = tmp_path / "src", tmp_path / "dst"
    make_tree(src, {"a": b"a", "b": b"b", "c": b"c", "empty/": Dir(), "d/e": b"e"})
    copy_json(run_ferry, "-r", src, dst)
    os.chmod(src / "a", 0o640)
    os.chown(src / "b", 4321, 4321)
    os.chmod(src / "d", 0o700)
    listings = []
    for side in (src, dst):
        text = run_ferry("ls", "-r", side).stdout
        assert text.startswith("#ferry-manifest v2\tpath\ttype\tsize\tmtime\tmd5\tmode\towner"), (
            text[:80]
        )
        path = tmp_path / f"{side.name}.tsv"
        path.write_text(text)
        listings.append(path)
    doc = json.loads(
        run_ferry(
            "plan", *listings, "--out", tmp_path / "plan", "--phase", "incremental", "--json"
        ).stdout
    )
    assert (doc["to_copy"]["files"], doc["to_copy"]["metadata_only"], doc["to_copy"]["dirs"]) == (
        0,
        2,
        1,
    ), doc["to_copy"]
    planned = (tmp_path / "plan" / "copy" / "part-00000.tsv").read_text().splitlines()
    assert planned[-1].startswith("#ferry-end\tentries=3\t"), planned
    assert sorted(line.split("\t")[0] for line in planned[1:-1]) == ["a", "b", "d"], planned


@pytest.fixture
def nested(tmp_path):
    src = tmp_path / "src"
    make_tree(src, {"keep.txt": b"keep", "inner/x.txt": b"x"})
    (tmp_path / "alias").symlink_to(src)
    return src


@pytest.mark.parametrize(
    "how", ["dest-inside", "source-inside", "same-through-symlink", "inside-through-symlink"]
)
@pytest.mark.parametrize("verb", ["copy", "verify", "prune"])
def test_overlapping_roots_are_refused_by_every_verb(tmp_path, run_ferry, nested, verb, how):
    src = nested
    pair = {
        "dest-inside": (src, src / "inner"),
        "source-inside": (src / "inner", src),
        "same-through-symlink": (src, tmp_path / "alias"),
        "inside-through-symlink": (tmp_path / "alias", src / "inner"),
    }[how]
    before = comparable(src)
    args = {"copy": ["-r"], "verify": [], "prune": ["--max-delete", "100%", "--yes"]}[verb]
    r = run_ferry(verb, *args, *pair, check=False)
    assert r.returncode != 0
    assert "overlap" in r.stderr, r.stderr
    assert comparable(src) == before, "nothing written or deleted"


def test_a_bind_mount_of_a_subdirectory_is_seen_through(tmp_path, run_ferry, nested):
    """The destination is a bind mount of a directory inside the source: by path the two are
    apart, on disk one contains the other."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if (
        subprocess.run(["mount", "--bind", nested / "inner", mnt], capture_output=True).returncode
        != 0
    ):
        pytest.fail("mount --bind failed: the suite runs as root (README)")
    try:
        before = comparable(nested)
        r = run_ferry("prune", "--yes", nested, mnt / "deeper", "--max-delete", "100%", check=False)
        assert r.returncode != 0 and "overlap" in r.stderr, r.stderr
        r = run_ferry("copy", "-r", nested, mnt, check=False)
        assert r.returncode != 0 and "overlap" in r.stderr, r.stderr
        assert comparable(nested) == before
    finally:
        subprocess.run(["umount", mnt], check=True)


@pytest.mark.parametrize("verb", ["copy", "verify", "prune"])
def test_one_container_spelt_by_two_hosts_is_one_root_to_every_verb(
    tmp_path, container, run_ferry, verb
):
    """127.0.0.1 and localhost reach one Azurite: the destination lies inside the source however
    the endpoint is spelt (before, the pair passed and the prune deleted the source's own files)."""
    make_tree(tmp_path / "src", {"p/a.txt": b"a\n", "p/sub/b.txt": b"b\n", "p/sub/only": b"o\n"})
    run_ferry("copy", "-r", tmp_path / "src", container)
    before = {n: container.client.download_blob(n).readall() for n in container.blobs()}
    alias = container.at("p/sub").replace("http://127.0.0.1:", "http://localhost:", 1)
    assert alias != container.at("p/sub")
    args = {"copy": ["-r"], "verify": [], "prune": ["--max-delete", "100%", "--yes"]}[verb]
    r = run_ferry(verb, *args, container.at("p"), alias, check=2)
    assert "overlap" in r.stderr and "spelt two ways" in r.stderr, r.stderr
    after = {n: container.client.download_blob(n).readall() for n in container.blobs()}
    assert after == before, "nothing written or deleted"


@pytest.mark.timeout(400)
@pytest.mark.parametrize("engine", ["snakemake", "nextflow"])
@pytest.mark.pipeline
def test_the_final_phase_carries_metadata_and_type_changes(tmp_path, ferry_bin, engine):
    """Baseline, then a live source: a chmod, a chown, a directory's chmod, a file that became a
    directory and a directory that became a file; the final phase converges in one run (it
    used to fail its copy, so verify and prune never ran) and its verify checks metadata."""
    from support.nextflow import nextflow, params_for
    from support.pipeline import base_config, pipeline

    src, dest, outdir = tmp_path / "src", tmp_path / "dst", tmp_path / "results"
    lay_out(
        src,
        {"dir-to-file": {"a": b"a", "b/c": b"c"}, "file-to-dir": File(data=b"f")}
        | {f"data/{i:02}.txt": File(size=100 + i) for i in range(24)}
        | {"empty/": Dir()},
    )
    parts = "plan={mode: parts, parts: 3}"

    def run(phase: str) -> dict:
        # The final pass's whole-tree check looks at every attribute these passes carry.
        if engine == "snakemake":
            pipeline(*base_config(ferry_bin, outdir, src, dest, phase), parts, "final_check=true")
        else:
            nextflow(
                tmp_path / "launch",
                params=params_for(
                    ferry_bin,
                    outdir,
                    src,
                    dest,
                    phase,
                    plan={"mode": "parts", "parts": 3},
                    final_check=True,
                ),
            )
        return json.loads((outdir / "t" / phase / "report.json").read_text())

    assert run("baseline")["status"] == "complete"
    same_tree(src, dest, dir_mtimes=False)
    os.chmod(src / "data" / "03.txt", 0o600)
    os.chown(src / "data" / "04.txt", 2000, 3000)
    os.chmod(src / "data", 0o711)
    import shutil

    shutil.rmtree(src / "dir-to-file")
    (src / "dir-to-file").write_bytes(b"now a file")
    (src / "file-to-dir").unlink()
    lay_out(src, {"file-to-dir": {"x": b"x", "y/z": b"z"}})

    rep = run("final")
    assert rep["status"] == "complete", rep["failures"]
    assert rep["plan"]["to_copy"]["metadata_only"] == 2, rep["plan"]["to_copy"]
    assert rep["plan"]["to_copy"]["type_changed"] == 2, rep["plan"]["to_copy"]
    assert (
        rep["totals"]["files"]["metadata_only"] >= 2 and rep["totals"]["files"]["replaced"] >= 1
    ), rep["totals"]["files"]
    assert rep["totals"]["verify"]["differ"] == 0 and rep["totals"]["final_check"]["differ"] == 0
    # Directory mtimes too: prune gives the source's back to those the parts left otherwise.
    same_tree(src, dest)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("engine", ["snakemake", "nextflow"])
@pytest.mark.pipeline
def test_a_pipeline_into_its_own_source_is_refused(tmp_path, ferry_bin, engine):
    """The destination inside the source: the pre-flight refuses the pass before anything is
    listed or copied, naming the config fields, and the source is left as it was (no copy
    nested into itself)."""
    from support.nextflow import nextflow, params_for
    from support.pipeline import base_config, pipeline

    src, outdir = tmp_path / "src", tmp_path / "results"
    make_tree(src, {"a.txt": b"a", "sub/b.txt": b"b"})
    dest = src / "backup"
    before = comparable(src)
    if engine == "snakemake":
        proc = pipeline(*base_config(ferry_bin, outdir, src, dest, "baseline"), expect=None)
    else:
        proc = nextflow(
            tmp_path / "launch",
            params=params_for(ferry_bin, outdir, src, dest, "baseline"),
            expect=None,
        )
    said = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "pre-flight" in said and "overlap" in said and "config field 'dest'" in said, said
    # Nothing of the migration began (Nextflow's own trace file aside).
    assert not (outdir / "t" / "migration.json").exists()
    assert not (outdir / "t" / "baseline" / "listing").exists()
    assert comparable(src) == before


def retarget(link, target: str, mtime_ns: int) -> None:
    """What a package manager does to `libfoo.so.1`: a new target of the same length, and (as
    often) the same second."""
    os.unlink(link)
    os.symlink(target, link)
    os.utime(link, ns=(mtime_ns, mtime_ns), follow_symlinks=False)


@pytest.mark.parametrize("compare", ["size-mtime", "md5"])
def test_a_retargeted_symlink_is_carried_whatever_its_length_and_mtime(
    tmp_path, run_ferry, compare
):
    src, dst = tmp_path / "src", tmp_path / "dst"
    make_tree(
        src,
        {
            "libfoo.so.1.2.3": b"old",
            "libfoo.so.1.2.4": b"new",
            "libfoo.so.1": Link("libfoo.so.1.2.3"),
        },
    )
    link = src / "libfoo.so.1"
    mtime = os.lstat(link).st_mtime_ns
    copy_json(run_ferry, "-r", src, dst, "--compare", compare)
    assert os.readlink(dst / "libfoo.so.1") == "libfoo.so.1.2.3"

    retarget(link, "libfoo.so.1.2.4", mtime)
    out = copy_json(run_ferry, "-r", src, dst, "--compare", compare)
    assert os.readlink(dst / "libfoo.so.1") == "libfoo.so.1.2.4", out
    assert out["files"]["failed"] == 0, out
    same_tree(src, dst)
    # The listings tell it too: a verify of the old link against the new one differs.
    retarget(link, "libfoo.so.1.2.3", mtime)
    assert json.loads(run_ferry("verify", src, dst, "--json", check=1).stdout)["differ"] == 1


def test_a_retargeted_symlink_is_carried_through_blob(tmp_path, run_ferry, container):
    src, back = tmp_path / "src", tmp_path / "back"
    make_tree(src, {"libfoo.so.1": Link("libfoo.so.1.2.3")})
    link = src / "libfoo.so.1"
    mtime = os.lstat(link).st_mtime_ns
    copy_json(run_ferry, "-r", src, container)
    retarget(link, "libfoo.so.1.2.4", mtime)
    out = copy_json(run_ferry, "-r", src, container)
    assert out["files"]["copied"] == 1, out
    copy_json(run_ferry, "-r", container, back)
    assert os.readlink(back / "libfoo.so.1") == "libfoo.so.1.2.4"
    # And back down: the local copy's link is retargeted too.
    retarget(link, "libfoo.so.1.2.3", mtime)
    copy_json(run_ferry, "-r", src, container)
    out = copy_json(run_ferry, "-r", container, back)
    assert os.readlink(back / "libfoo.so.1") == "libfoo.so.1.2.3", out


def test_compare_md5_reruns_symlinks_and_carries_an_mtime_alone(tmp_path, run_ferry, container):
    src, dst = tmp_path / "src", tmp_path / "dst"
    make_tree(src, {"a.txt": File(size=3000), "link": Link("a.txt"), "sub/b.txt": b"b"})
    for target in (dst, container):
        copy_json(run_ferry, "-r", src, target, "--compare", "md5")
        out = copy_json(run_ferry, "-r", src, target, "--compare", "md5")
        assert out["files"]["failed"] == 0 and out["files"]["copied"] == 0, out
    os.utime(src / "a.txt", ns=(1_500_000_000_123_456_789,) * 2)
    for target in (dst, container):
        out = copy_json(run_ferry, "-r", src, target, "--compare", "md5")
        assert (out["files"]["copied"], out["files"]["metadata_only"], out["bytes"]["copied"]) == (
            0,
            1,
            0,
        ), out
        out = copy_json(run_ferry, "-r", src, target, "--compare", "md5")
        assert (out["files"]["copied"], out["files"]["metadata_only"]) == (0, 0), out
    assert os.stat(dst / "a.txt").st_mtime_ns == 1_500_000_000_123_456_789
    listed = run_ferry("ls", container).stdout
    assert "1500000000.123456789" in listed, listed


ROOT = os.geteuid() == 0


def differing(run_ferry, *args) -> set[str]:
    r = run_ferry("verify", *args, "--json", check=False)
    return {e["path"] for e in r.json["entries"] if e["status"] == "differ"}


def test_verify_metadata_compares_attributes_acls_and_directories(tmp_path, run_ferry):
    """`verify --metadata` reads the attributes it compares (a digest of each entry's, as copy
    does), and a directory's mode, owner and ACLs, of a whole tree and of a manifest's entries."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    make_tree(src, {"f": b"f", "d/g": b"g", "d/sub/h": b"h", "e/i": b"i", "bin": b"\x7fELF"})
    os.setxattr(src / "f", "user.colour", b"blue")
    subprocess.run(["setfacl", "-d", "-m", "g:55:rx", src / "d"], check=True)
    if ROOT:
        subprocess.run(["setcap", "cap_net_raw+ep", str(src / "bin")], check=True)
    run_ferry("copy", "-r", src, dst)
    manifest = tmp_path / "source.tsv"
    manifest.write_bytes(run_ferry("ls", "-r", src).stdout_bytes)
    assert differing(run_ferry, src, dst, "--metadata") == set()
    assert differing(run_ferry, src, dst, "--metadata", "--files-from", manifest) == set()

    os.removexattr(dst / "f", "user.colour")
    subprocess.run(["setfacl", "-m", "u:77:r", dst / "d" / "g"], check=True)
    subprocess.run(["setfacl", "-k", dst / "d"], check=True)
    os.chmod(dst / "d" / "sub", 0o700)
    os.utime(dst / "e", ns=(1_500_000_000_000_000_000, 1_500_000_000_000_000_000))
    want = {"f", "d/g", "d", "d/sub", "e"}
    if ROOT:
        os.removexattr(dst / "bin", "security.capability")
        os.chown(dst / "d" / "sub", 0, 55)
        want.add("bin")
    assert differing(run_ferry, src, dst, "--metadata") == want
    # A partition compares directories' mtimes only when told they are settled (the audit's):
    # during a pass, other parts still write into them.
    partition = ("--metadata", "--files-from", manifest)
    assert differing(run_ferry, src, dst, *partition, "--dir-mtimes") == want
    assert differing(run_ferry, src, dst, *partition) == want - {"e"}
    # Without --metadata, the bytes alone: all the same.
    assert differing(run_ferry, src, dst) == set()


def test_prune_leaves_the_directories_it_touched_with_their_source_mtimes(tmp_path, run_ferry):
    """A deletion moves its directory's mtime: prune puts the source's back on each directory it
    deleted something from, the root included (as rsync --delete -t leaves them), and on any
    other whose mtime is not the source's (a pipeline's parts write into one in no order)."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    make_tree(
        src,
        {
            "a/keep": b"k",
            "a/old": b"o",
            "a/b/keep": b"k",
            "a/b/gone/x": b"x",
            "a/untouched/keep": b"k",
            "top-old": b"t",
            "top": b"t",
        },
    )
    run_ferry("copy", "-r", src, dst)
    import shutil

    (src / "a" / "old").unlink()
    shutil.rmtree(src / "a" / "b" / "gone")
    (src / "top-old").unlink()
    for i, d in enumerate((src / "a", src / "a" / "b", src / "a" / "untouched", src)):
        os.utime(d, ns=(1_500_000_000_000_000_000, 1_500_000_000_123_456_789 + i))
    run_ferry("copy", "-r", src, dst)
    os.utime(dst / "a" / "untouched", ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
    r = run_ferry(
        "prune",
        "--yes",
        src,
        dst,
        "--max-delete",
        "100%",
        "--log",
        tmp_path / "deleted.tsv",
        "--json",
    )
    assert (r.json["deleted"], r.json["failed"]) == (3, 0), r.json
    same_tree(src, dst)
    assert os.stat(dst).st_mtime_ns == os.stat(src).st_mtime_ns
    assert differing(run_ferry, src, dst, "--metadata") == set()


def test_a_blob_and_a_directory_of_one_name_settle_the_same_on_every_pass(
    tmp_path, run_ferry, container, other_container
):
    """Blob `a` and blob `a/x` in one container: a tree cannot hold both. The directory wins on
    every pass, blob `a` is named as a conflict each time (exit 1), and no pass removes what
    another wrote."""
    c = container.client
    c.upload_blob("a", b"the object\n")
    c.upload_blob("a/x", b"beneath\n")
    c.upload_blob("b", b"plain\n")
    dst = tmp_path / "L"
    for n in range(3):
        r = run_ferry("copy", "-r", container, dst, "--json", check=1)
        [(path, why)] = [(f["path"], f["error"]) for f in r.json["failures"]]
        assert path == "a" and "a/x" in why and "directory is kept" in why, (n, r.json)
        assert (dst / "a" / "x").read_bytes() == b"beneath\n", n
        assert (dst / "b").read_bytes() == b"plain\n", n
        assert r.json["files"]["replaced"] == 0, (n, r.json)
    # A pass of one part holding the object alone (a plan's part) leaves the directory too.
    part = tmp_path / "part.tsv"
    part.write_text("a\n")
    r = run_ferry("copy", "-r", container, dst, "--files-from", part, "--json", check=1)
    assert "a/x" in r.json["failures"][0]["error"], r.json
    assert (dst / "a" / "x").read_bytes() == b"beneath\n"
    # Blob → Blob keeps both.
    run_ferry("copy", "-r", container, other_container)
    assert {"a", "a/x", "b"} <= set(other_container.blobs())
