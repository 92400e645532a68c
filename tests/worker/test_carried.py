"""The destination carried from pass to pass (docs/scale.md): what `ferry carry` leaves is what a
fresh listing of the destination would say, `ferry ls --carried` hands it on without a List
request, and the state is never used once a pass took it without leaving a new one, once it
describes another destination, or once a probe finds the destination changed behind ferry's back."""

from __future__ import annotations

import json
import os

import pytest
from support.ferry import new_container
from support.proxy import FaultProxy
from support.trees import make_tree

TREE = {
    "a/x.txt": b"x" * 10,
    "a/b/y.txt": b"y" * 20,
    "gone.txt": b"g",
    "stays.txt": b"s" * 5,
    **{f"many/f{i:03d}": b"%d" % i for i in range(40)},
}


def lines(listing: bytes) -> list[bytes]:
    """A listing's entries, as the plan compares them: in any order, and a directory's mtime left
    out (it moves with every entry made or removed in it, and the plan never compares it)."""
    out = []
    for line in listing.splitlines():
        if line.startswith(b"#"):
            continue
        fields = line.split(b"\t")
        if fields[1] == b"d":
            fields[3] = b"-"
        out.append(b"\t".join(fields))
    return sorted(out)


class Pass:
    """One pass of a migration, by hand: list (carried or fresh), plan, copy, verify with
    --observed, prune, carry."""

    def __init__(self, run_ferry, tmp, src, dest, state):
        self.run_ferry, self.tmp, self.src, self.dest, self.state = run_ferry, tmp, src, dest, state
        self.n = 0

    def ls_dest(self, *flags, name=None):
        self.n += 1
        name = name or f"pass{self.n}"
        summary = self.tmp / f"{name}-dest-summary.json"
        out = self.run_ferry(
            "ls",
            "-r",
            self.dest,
            "--carried",
            self.state,
            "--pass",
            name,
            "--summary",
            summary,
            *flags,
        )
        listing = self.tmp / f"{name}-dest.tsv"
        listing.write_bytes(out.stdout_bytes)
        return listing, json.loads(summary.read_text())

    def run(self, name=None, prune=False):
        """A whole pass; returns the dest listing's summary."""
        dest_listing, summary = self.ls_dest(name=name)
        name = name or f"pass{self.n}"
        src_listing = self.tmp / f"{name}-src.tsv"
        src_listing.write_bytes(self.run_ferry("ls", "-r", self.src).stdout_bytes)
        plan = self.tmp / f"{name}-plan"
        self.run_ferry(
            "plan",
            src_listing,
            dest_listing,
            "--out",
            plan,
            "--phase",
            "incremental",
            "--parts",
            "2",
        )
        observed = []
        for part in sorted((plan / "copy").glob("part-*.tsv")):
            self.run_ferry("copy", self.src, self.dest, "--files-from", part)
            seen = self.tmp / f"{name}-{part.stem}.observed.tsv"
            self.run_ferry(
                "verify", self.src, self.dest, "--files-from", part, "--observed", seen, "--json"
            )
            observed.append(seen)
        deleted = []
        if prune:
            log = self.tmp / f"{name}-deleted.tsv"
            self.run_ferry(
                "prune",
                "--yes",
                self.src,
                self.dest,
                "--files-from",
                src_listing,
                "--dest-from",
                dest_listing,
                "--force",
                "--log",
                log,
                "--json",
            )
            deleted = ["--deleted", log]
        self.run_ferry(
            "carry",
            self.dest,
            "--state",
            self.state,
            "--pass",
            name,
            "--listing",
            dest_listing,
            *(["--observed", *observed] if observed else []),
            *deleted,
            "--json",
        )
        return summary


@pytest.fixture(params=["local", "blob"])
def ends(request, tmp_path, azurite):
    src = tmp_path / "src"
    make_tree(src, TREE)
    if request.param == "local":
        (tmp_path / "dst").mkdir()
        return src, tmp_path / "dst", tmp_path / "state"
    dest = new_container(azurite, request)
    state = new_container(azurite, request)
    return src, dest, state.at("ferry-state")


def test_what_a_pass_carries_is_what_a_fresh_listing_says(ends, run_ferry, tmp_path):
    src, dest, state = ends
    p = Pass(run_ferry, tmp_path, src, dest, state)
    first = p.run()
    assert first["carried"]["used"] is False
    assert "no carried state" in first["carried"]["reason"]
    # Changes between passes: content, mode, a deletion, a file replacing a directory.
    (src / "a/x.txt").write_bytes(b"changed")
    os.chmod(src / "stays.txt", 0o600)
    (src / "gone.txt").unlink()
    (src / "new").mkdir()
    (src / "new/n.txt").write_bytes(b"n")
    for f in (src / "a/b").iterdir():
        f.unlink()
    (src / "a/b").rmdir()
    (src / "a/b").write_bytes(b"now a file")
    second = p.run(prune=True)
    assert second["carried"]["used"] is True, second["carried"]
    assert second["carried"]["written_by"] == "pass1"
    assert second["requests"]["list_pages"] == 0
    carried, summary = p.ls_dest("--probe", "1000")
    assert summary["carried"]["used"] is True, summary["carried"]
    fresh = run_ferry("ls", "-r", dest).stdout_bytes
    assert lines(carried.read_bytes()) == lines(fresh)


@pytest.mark.parametrize("writer", ["copy", "prune", "mk"])
def test_a_pass_that_wrote_and_left_no_state_makes_the_next_list_fresh(
    ends, run_ferry, tmp_path, writer
):
    src, dest, state = ends
    p = Pass(run_ferry, tmp_path, src, dest, state)
    p.run()
    (src / "new.txt").write_bytes(b"n")
    (src / "gone.txt").unlink()
    # A pass lists, begins to write, and dies before its carry (a kill, a failed copy).
    _, took = p.ls_dest(name="killed")
    assert took["carried"]["used"] is True
    carried = ["--carried", state, "--pass", "killed"]
    if writer == "copy":
        run_ferry("copy", "-r", src, dest, *carried)
    elif writer == "prune":
        run_ferry("prune", src, dest, "--yes", "--force", "--log", tmp_path / "del.tsv", *carried)
    else:
        run_ferry("mk", dest, "--source", src, *carried)
    _, after = p.ls_dest(name="next")
    assert after["carried"]["used"] is False
    assert "killed wrote to the destination and did not leave a new" in after["carried"]["reason"]
    fresh = run_ferry("ls", "-r", dest).stdout_bytes
    assert after["entries"] == len(lines(fresh))


def test_a_pass_that_failed_before_writing_leaves_the_state_to_the_next(ends, run_ferry, tmp_path):
    """Issue 42 (3): listing, planning and a dry run write nothing; a pass that stops there (a
    refused plan, a kill, an audit's fresh listing) leaves the next pass the state to carry."""
    src, dest, state = ends
    p = Pass(run_ferry, tmp_path, src, dest, state)
    p.run()
    _, took = p.ls_dest(name="refused")
    assert took["carried"]["used"] is True
    _, fresh = p.ls_dest("--fresh", name="audit")
    assert (fresh["carried"]["used"], fresh["carried"]["reason"]) == (
        False,
        "a fresh listing was asked for",
    )
    carried = ["--carried", state, "--pass", "dry"]
    run_ferry("copy", "-r", src, dest, "--dry-run", *carried)
    run_ferry("prune", src, dest, "--dry-run", "--log", tmp_path / "del.tsv", *carried)
    _, after = p.ls_dest(name="next")
    assert after["carried"]["used"] is True, after["carried"]


def test_a_probe_finds_what_changed_behind_ferrys_back(azurite, request, run_ferry, tmp_path):
    src = tmp_path / "src"
    make_tree(src, TREE)
    dest, state = new_container(azurite, request), new_container(azurite, request)
    with FaultProxy(azurite.port) as proxy:
        # The destination is named as the proxy's: a state describes one destination URL.
        p = Pass(run_ferry, tmp_path, src, dest.via(proxy.port), state.at("s"))
        p.run()
        dest.client.upload_blob("stays.txt", b"rewritten by another tool", overwrite=True)
        proxy.clear_log()
        _, summary = p.ls_dest("--probe", "1000")
        heads = len(proxy.requests("HEAD"))
    reason = summary["carried"]["reason"]
    assert summary["carried"]["used"] is False
    assert "1 of 44 carried entries probed differ" in reason and "stays.txt" in reason, reason
    # Every file and link looked up once (directories are not probed), then the fresh listing.
    assert heads == 44
    assert summary["requests"]["list_pages"] >= 1


def test_a_state_describes_one_destination(tmp_path, run_ferry):
    src, other = tmp_path / "src", tmp_path / "other"
    make_tree(src, TREE)
    make_tree(other, {"o": b"o"})
    (tmp_path / "dst").mkdir()
    p = Pass(run_ferry, tmp_path, src, tmp_path / "dst", tmp_path / "state")
    p.run()
    p.dest = other
    _, summary = p.ls_dest()
    assert "describes" in summary["carried"]["reason"], summary["carried"]


def test_a_state_inside_the_destination_is_refused(tmp_path, run_ferry):
    dst = tmp_path / "dst"
    make_tree(dst, {"f": b"f"})
    out = run_ferry("ls", "-r", dst, "--carried", dst / ".state", "--pass", "p", check=2)
    assert "outside the destination" in out.stderr


def test_a_carried_listing_that_cannot_be_read_means_a_fresh_listing(tmp_path, run_ferry):
    src = tmp_path / "src"
    make_tree(src, TREE)
    (tmp_path / "dst").mkdir()
    p = Pass(run_ferry, tmp_path, src, tmp_path / "dst", tmp_path / "state")
    p.run()
    (tmp_path / "state" / "dest.tsv").unlink()
    _, summary = p.ls_dest()
    assert "cannot be read" in summary["carried"]["reason"], summary["carried"]
    assert summary["entries"] == len(TREE) + 3  # and the directories a, a/b, many


def test_a_pass_refused_by_the_destination_gives_the_state_back(
    azurite, request, run_ferry, tmp_path
):
    """Issue 42: a pass that fails on its first request (a wrong key: 403) has written nothing;
    its re-run with the right key carries the state instead of listing the whole destination."""
    src = tmp_path / "src"
    make_tree(src, TREE)
    dest, state = new_container(azurite, request), tmp_path / "state"
    p = Pass(run_ferry, tmp_path, src, dest, state)
    p.run()
    wrong = {"AZURE_STORAGE_KEY": "d3Jvbmcga2V5IHdyb25nIGtleSB3cm9uZyBrZXk="}
    out = run_ferry("ls", "-r", dest, "--carried", state, "--pass", "typo", env=wrong, check=2)
    assert "403" in out.stderr or "authoriz" in out.stderr.lower(), out.stderr
    assert json.loads((state / "dest.json").read_text())["taken_by"] is None
    _, after = p.ls_dest(name="fixed")
    assert after["carried"]["used"] is True, after["carried"]


def test_a_listing_that_did_not_complete_is_carried_nowhere(tmp_path, run_ferry):
    """Issue 45 (3): carry refuses a listing without its end record, naming it; a carried listing
    without one (cut short, or written before the record) means a fresh listing."""
    src = tmp_path / "src"
    make_tree(src, TREE)
    (tmp_path / "dst").mkdir()
    state = tmp_path / "state"
    p = Pass(run_ferry, tmp_path, src, tmp_path / "dst", state)
    p.run()
    listing, took = p.ls_dest(name="cut")
    assert took["carried"]["used"] is True
    cut = tmp_path / "cut.tsv"
    cut.write_text(listing.read_text().rsplit("#ferry-end", 1)[0])
    before = (state / "dest.tsv").read_bytes()
    r = run_ferry(
        "carry", tmp_path / "dst", "--state", state, "--pass", "cut", "--listing", cut, check=2
    )
    assert f"{cut}: no end record" in r.stderr and "list again" in r.stderr, r.stderr
    assert (state / "dest.tsv").read_bytes() == before
    p.run(name="whole")
    carried = state / "dest.tsv"
    carried.write_text(carried.read_text().rsplit("#ferry-end", 1)[0])
    _, summary = p.ls_dest(name="after-cut")
    assert summary["carried"]["used"] is False, summary["carried"]
    assert "no end record" in summary["carried"]["reason"], summary["carried"]


def test_a_passes_writers_take_the_state_at_once(tmp_path, run_ferry):
    """A pass's copy and prune jobs start together, each taking the state before its first
    write: none fails for another's taking it at the same moment (seen: "File exists")."""
    import subprocess

    src = tmp_path / "src"
    make_tree(src, TREE)
    (tmp_path / "dst").mkdir()
    state = tmp_path / "state"
    Pass(run_ferry, tmp_path, src, tmp_path / "dst", state).run()
    argv = run_ferry.command(["mk", tmp_path / "dst", "--carried", state, "--pass", "final"])
    jobs = [
        subprocess.Popen(argv, env=run_ferry.env(None), stderr=subprocess.PIPE, text=True)
        for _ in range(12)
    ]
    said = [(job.wait(60), job.stderr.read()) for job in jobs]
    assert all(rc == 0 for rc, _ in said), said
    assert json.loads((state / "dest.json").read_text())["taken_by"] == "final"
