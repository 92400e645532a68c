"""Scenario `nfs`: copies to an NFS-like mount (tools/latencyfs)."""

from __future__ import annotations

import contextlib
import resource
import shutil
import subprocess
from pathlib import Path

from support.latencyfs import LatencyFS
from support.latencyfs import build as build_latencyfs

from ..checks import count_fpart, diff_trees
from ..common import MANY_FILES, GiB, KiB, MiB, Settings, bench_env, q, rel, rmtree, slug
from ..datasets import Dataset, files_dataset, stale_seed
from ..peers import fpsync, mpirun, stage
from ..services import LatencyHost
from ..timing import Group, Row
from .local import PRESERVE_BEFORE

NFS_DELAYS_MS = (1, 5)


# Serial peers keep one request in flight: at 100,000 files and ~10–20 requests a file, 5 ms a
# request is hours a run. They run at 1 ms only, and on shapes of at most SERIAL_MAX_FILES small
# files (one rsync -a of 100,000 at 1 ms takes half an hour, 50 times fpsync's), labelled.
SERIAL = ("rsync -a", "cp -a")
SERIAL_MAX_FILES = 25_000


def shapes(s: Settings) -> list[tuple[str, Dataset]]:
    """Issue 14's shapes (the seed's NFS guide) at this machine's scale."""
    n = s.count(100_000, 300)
    dirs = s.count(2_000, 6)
    nlarge = s.count(500, 10)
    return [
        (
            "flat",
            files_dataset(
                "nfs-flat",
                f"{n:,} files of 0–32 KiB in one directory",
                n,
                lambda r: r.randint(0, 32 * KiB),
                per_dir=n,
                seed=51,
            ),
        ),
        (
            "tree",
            files_dataset(
                "nfs-tree",
                f"{n:,} files of 0–32 KiB in {dirs:,} directories",
                n,
                lambda r: r.randint(0, 32 * KiB),
                per_dir=n // dirs,
                seed=52,
            ),
        ),
        (
            "10MiB",
            files_dataset(
                "nfs-10MiB",
                f"{nlarge} files of 10 MiB in one directory",
                nlarge,
                lambda r: 10 * MiB,
                per_dir=nlarge,
                seed=53,
            ),
        ),
    ]


def latencyfs_has_handles(backing: Path) -> bool:
    """Whether latencyfs over `backing` reopens inodes by file handle (which takes
    CAP_DAC_READ_SEARCH and a filesystem that gives handles) rather than hold a descriptor for each:
    mounted once to see, since it says so in its log when it cannot."""
    backing.mkdir(parents=True, exist_ok=True)
    fs = LatencyFS(backing, backing.parent / "handle-probe")
    fs.log.unlink(missing_ok=True)
    try:
        with fs:
            pass
        return "no file handles" not in fs.log.read_text(errors="replace")
    finally:
        fs.log.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            fs.mountpoint.rmdir()


def check_open_files(ds: Dataset, backing: Path) -> None:
    """The shapes need no more open files than the machine allows, if latencyfs can use file
    handles: it then keeps descriptors open for half its limit on open files only, and reopens the
    other inodes by handle (tools/latencyfs/README.md). The tools under test keep few files open
    each, and ferry raises its soft limit to the hard one and bounds its own use by it. Without
    handles latencyfs holds a descriptor for every inode the kernel knows, and a shape past the
    hard limit would fail every row of its groups with EMFILE: refused up front, then."""
    need = ds.files + ds.files // 20 + 1024  # its files, its directories (≤ 1 in 50), slack
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard == resource.RLIM_INFINITY or hard >= need or latencyfs_has_handles(backing):
        return
    raise SystemExit(
        f"nfs: {ds.name} needs about {need:,} open files in latencyfs, which cannot reopen inodes by "
        f"file handle here (that takes CAP_DAC_READ_SEARCH and a backing filesystem with handles) "
        f"and so holds one for each, and the hard limit is {hard:,}: raise it (ulimit -Hn, which "
        f"takes CAP_SYS_RESOURCE), run as root, or pass a smaller --fraction"
    )


def check_disk(s: Settings, gid: str, ds: Dataset, rows: int) -> None:
    """Every row's destination of a group stays until the group is verified, after its last round:
    a shape of big files needs its size once a row (500 × 10 MiB: 4.9 GiB, ten rows). Refused up
    front if the disk has not that much free: filling it stops every process on the machine."""
    need = rows * ds.bytes * 11 // 10
    free = shutil.disk_usage(s.work).free
    if free < need:
        raise SystemExit(
            f"nfs: {gid} needs about {need / GiB:.1f} GiB free under {rel(s.work)} ({rows} rows × "
            f"{ds.bytes / GiB:.1f} GiB, each row's destination kept until the group is verified) and "
            f"{free / GiB:.1f} GiB are: free some, or pass a smaller --fraction"
        )


def make_seed(src: Path, seed: Path, phase: str, ds: Dataset) -> None:
    """The destination a re-run starts from: a copy of the source, every 100th file an mtime a
    day older for changed-1pct; made once and reused while its stamp matches."""
    stamp = seed.parent / f"{seed.name}.stamp"
    if stamp.exists() and stamp.read_text() == ds.stamp_text():
        return
    rmtree(seed)
    seed.parent.mkdir(parents=True, exist_ok=True)
    if phase == "changed-1pct":
        stale_seed(src, seed, 100)
    else:
        subprocess.run(["cp", "-a", rel(src), rel(seed)], check=True)
    stamp.write_text(ds.stamp_text())


def scenario_nfs(s: Settings, host: LatencyHost) -> list[Group]:
    build_latencyfs()
    mfu = stage(s, "mpifileutils", ("dcp", "dsync"), s.mpifileutils)
    seeds = s.work / "nfs" / "seeds"
    env = bench_env()
    groups = []
    for key, ds in shapes(s):
        wanted = [
            (p, d)
            for p in (*PHASES, "list")
            for d in NFS_DELAYS_MS
            if s.selected(f"{p}-{key}-{d}ms") and not (p == "list" and key == "10MiB")
        ]
        if not wanted:
            continue
        check_open_files(ds, host.backing)
        src = ds.materialize(s.data / "nfs")
        for phase, delay in wanted:
            seed = (
                None
                if phase == "baseline"
                else seeds / f"{ds.name}-{'1pct' if phase == 'changed-1pct' else 'same'}"
            )
            if seed is not None:
                make_seed(src, seed, phase, ds)
            gid = f"{phase}-{key}-{delay}ms"
            g = (
                list_group(s, host, gid, ds, src, seed, delay, env)
                if phase == "list"
                else nfs_group(s, host, gid, phase, ds, src, seed, delay, mfu, env)
            )
            check_disk(s, gid, ds, len(g.rows))
            if not s.quick and not s.rounds:
                # One round a group at full scale (whole rotations would take days: see
                # docs/benchmarks.md); the first row moves on from group to group instead.
                g.rounds, g.first = 1, len(groups)
                g.notes.append(
                    f"Scale {s.scale}: one round (one run per row) in this group, to keep the "
                    "campaign within hours; the row that goes first rotates from group to group."
                )
            groups.append(g)
    return groups


PHASES = ("baseline", "unchanged", "changed-1pct")
NO_DELAY = "ferry --no-fsync, no delay"


def nfs_group(
    s: Settings,
    host: LatencyHost,
    gid: str,
    phase: str,
    ds: Dataset,
    src: Path,
    seed: Path | None,
    delay: int,
    mfu: Path | None,
    env: dict,
) -> Group:
    work = host.backing.parent / f"fpsync-{gid}"
    no_fsync = f"{s.ferry} copy -r --no-fsync {q(src)}/ {{dst}}"
    # (name, command with {dst}, role, depth, durable); no depth: adaptive, its peak is used
    specs = [
        ("ferry", f"{s.ferry} copy -r {q(src)}/ {{dst}}", "ferry", None, True),
        ("ferry --no-fsync", no_fsync, "ferry", None, False),
        (
            PRESERVE_BEFORE,
            f"{s.ferry} copy -r --no-fsync --preserve mode,owner,times {q(src)}/ {{dst}}",
            "ferry",
            None,
            False,
        ),
        (
            "ferry --no-fsync --parallel-files 64",
            f"{s.ferry} copy -r --no-fsync --parallel-files 64 {q(src)}/ {{dst}}",
            "ferry",
            64,
            False,
        ),
    ]
    tools = ("cpio", "rsync") if phase == "baseline" else ("rsync",)
    specs += [
        (
            f"fpsync -n {n} {tool}",
            fpsync(src, "{dst}", n, tool, ds.files, work / f"{tool}-{n}"),
            "peer",
            n,
            False,
        )
        for tool in tools
        for n in (16, 64)
    ]
    serial = s.quick or (
        delay == min(NFS_DELAYS_MS) and (ds.files <= SERIAL_MAX_FILES or ds.bytes / ds.files > MiB)
    )
    if serial:
        specs.append(("rsync -a", f"rsync -a {q(src)}/ {{dst}}/", "peer", 1, False))
        if phase == "baseline":
            specs.append(("cp -a", f"cp -a {q(src)}/. {{dst}}/", "peer", 1, False))
    if mfu is not None:
        # dcp copies SRC to TARGET, or into it when it exists: the empty destination goes first.
        # Both call sync() once the data is written (mfu_flist_copy.c): the durable class.
        specs.append(
            (
                "dcp -n 16",
                f"rmdir {{dst}} && {mpirun(mfu, 16, f'dcp -q -p {q(src)} {{dst}}')}",
                "peer",
                16,
                True,
            )
            if phase == "baseline"
            else ("dsync -n 16", mpirun(mfu, 16, f"dsync -q {q(src)} {{dst}}"), "peer", 16, True)
        )
    if phase == "baseline":
        specs.append((NO_DELAY, no_fsync, "reference", None, False))
    rows = []
    for name, cmd, role, depth, durable in specs:
        delay_ms = 0 if name == NO_DELAY else None
        slot = host.add_slot(f"{gid}-{slug(name)}", seed, ds.files >= MANY_FILES, delay_ms)
        dst = host.dest(slot)
        row = Row(
            name,
            cmd.format(dst=rel(dst)),
            role,
            host.prepare_cmd(slot),
            slot,
            depth,
            durable=durable,
            src=src,
            dst=dst,
            json=role != "peer",
            delay_ms=delay_ms,
        )
        if name in SERIAL and not s.quick:
            row.note = "A serial peer: at 1 ms only (at 5 ms a run of this shape takes hours)."
        if name == NO_DELAY:
            row.note = (
                "`ferry --no-fsync` on the same mount with no delay at all, in no ratio: what serving its "
                "requests costs this machine's two cores (ferry, latencyfs and the kernel's FUSE path), a "
                "floor under the row at any delay that no depth gets below."
            )
        rows.append(row)

    def setup():
        host.delay_ms = delay

    def verify():
        res = {}
        for row in rows:
            d = host.backing / row.slot
            same = diff_trees(src, d)
            # Re-runs must leave every mtime equal to the source's (fpsync's cpio keeps seconds only).
            stale = 0
            if phase != "baseline" or "cpio" not in row.name:
                for p in src.rglob("*"):
                    if (
                        p.is_file()
                        and p.stat().st_mtime_ns // 10**9
                        != (d / p.relative_to(src)).stat().st_mtime_ns // 10**9
                    ):
                        stale += 1
            res[row.name] = {
                "ok": same["ok"] and stale == 0,
                "diff": same["diff"],
                "mtime_differs": stale,
            }
        if not s.keep:
            host.drop([r.slot for r in rows])
        return {
            "ok": all(r["ok"] for r in res.values()),
            "compared": "the last run's destination (underneath the mount) with the source: diff -rq, mtimes",
            **res,
        }

    what = {
        "baseline": "baseline copy",
        "unchanged": "unchanged re-run",
        "changed-1pct": "re-run with 1% of the files changed",
    }[phase]
    notes = [
        f"Destination on latencyfs, {delay} ms per request, remounted before every run "
        f"(nothing cached from the run before); "
        + (
            "empty before every run."
            if seed is None
            else "restored underneath before every run from a copy of the source"
            + (
                " in which every 100th file has an mtime a day older."
                if phase == "changed-1pct"
                else "."
            )
        )
        + " Latency limit = requests × delay ÷ depth: the wall time a tool keeping `depth` requests "
        "in flight all the time would need (depth: ferry's --parallel-files, fpsync's -n, 1 for "
        "rsync and cp); requests counted by latencyfs in each run (medians)."
    ]
    if not serial:
        notes.append(
            f"No rsync -a{' or cp -a' if phase == 'baseline' else ''} in this group: the serial peers "
            f"run at {min(NFS_DELAYS_MS)} ms only, on at most {SERIAL_MAX_FILES:,} small files (the same "
            "phase at a smaller --fraction has them); each ratio is against the fastest peer measured here."
        )
    return Group(
        gid,
        f"{what} to an NFS-like mount ({delay} ms a request), {ds.desc}",
        ds.desc,
        ds.bytes if phase == "baseline" else 0,
        ds.files,
        rows,
        env,
        notes=notes,
        warm=[src],
        verify=verify,
        setup=setup,
        teardown=host.stop,
        run_stats=lambda slot: host.counts.get(slot, []),
        delay_ms=delay,
        best_peer_only=True,
    )


LIST_TARGET = 0.25  # issue: ferry ls ≤ ¼ of fpart's wall time on an NFS-class mount


def list_group(
    s: Settings,
    host: LatencyHost,
    gid: str,
    ds: Dataset,
    src: Path,
    seed: Path,
    delay: int,
    env: dict,
) -> Group:
    """Listing the tree where it lies on the NFS-like mount: `ferry ls -r` against fpart crawling it
    (sorted, and live as fpsync runs it), output to local files."""
    out = s.work / "nfs" / f"list-{gid}"
    specs = [
        ("ferry ls -r", "ferry", "{ferry} ls -r {tree} > {out}/list.tsv"),
        ("fpart -f 100000", "peer", "fpart -f 100000 -o {out}/part {tree}"),
        ("fpart -L -f 100000", "peer", "fpart -L -f 100000 -o {out}/part {tree}"),
    ]
    rows = []
    for name, role, cmd in specs:
        slot = host.add_slot(f"{gid}-{slug(name)}", seed, ds.files >= MANY_FILES)
        tree, o = host.dest(slot), out / slug(name)
        rows.append(
            Row(
                name,
                cmd.format(ferry=s.ferry, tree=q(tree), out=q(o)),
                role,
                f"rm -rf {q(o)} && mkdir -p {q(o)} && {host.prepare_cmd(slot)}",
                slot,
                src=tree,
                dst=o,
            )
        )

    def setup():
        host.delay_ms = delay

    def verify():
        with open(out / "ferry-ls-r" / "list.tsv") as f:
            files = sum(
                1 for line in f if not line.startswith("#") and line.split("\t")[1:2] == ["f"]
            )
        fp, fpl = count_fpart(out / "fpart-f-100000"), count_fpart(out / "fpart-l-f-100000")
        if not s.keep:
            host.drop([r.slot for r in rows])
        return {
            "ok": files == ds.files and fp == ds.files and fpl == ds.files,
            "ferry_files": files,
            "fpart_entries": fp,
            "fpart_live_entries": fpl,
        }

    return Group(
        gid,
        f"list a tree on an NFS-like mount ({delay} ms a request), {ds.desc}",
        ds.desc,
        0,
        ds.files,
        rows,
        env,
        setup=setup,
        verify=verify,
        teardown=host.stop,
        delay_ms=delay,
        run_stats=lambda slot: host.counts.get(slot, []),
        targets={
            "ferry ls -r": [
                (f"wall/{p}", "<=", LIST_TARGET, f"≤ {LIST_TARGET:g}× {p}")
                for p in ("fpart -f 100000", "fpart -L -f 100000")
            ]
        },
        notes=[
            f"The tree restored underneath and the mount remounted before every run (cold "
            f"client caches), {delay} ms a request; listings written to local files."
        ],
    )
