"""Replicate one dataset to every rank of an MPI job: read it from the source once, broadcast the rest.

    mpirun -n N python -m mpi4py workflow/scripts/replicate.py SRC DEST [options]
    srun --mpi=pmix -K -n N python -m mpi4py workflow/scripts/replicate.py SRC DEST [options]

Rank 0 lists SRC (`ferry ls -r`, or takes --manifest) and sends the listing to every rank,
whose worker decodes it and says which of its files the rank already holds (`ferry names --held`:
raw paths, temp names, sizes, and the copy's own "same file?" rule). Files no rank holds are
split by bytes plus a per-file weight (`ferry partition --parts K --file-weight W`) over the
downloading ranks, each of which fetches its share with `ferry copy --files-from`; then every
file some rank lacks is broadcast from a rank that has it (replicate_bcast.py). Sizes and rates
on the command line are read by the worker's rules (`ferry units`). See docs/replicate.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import ferry_docs
import ferrylib
import numpy as np
from ferry_run_dir import part_file
from mpi4py import MPI
from replicate_bcast import Progress, Reader, Writer, broadcast, chunk_schedule, start_watchdog

MAX_COLLECTIVE = 1 << 30  # Open MPI 4.1 is MPI 3.1: counts are 32-bit; stay well inside them
HERE = os.path.dirname(os.path.abspath(__file__))


class UsageError(Exception):
    pass


class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def parse_args(argv):
    p = Parser(
        prog="replicate.py",
        description="Replicate SRC to DEST on every MPI rank, reading SRC once.",
    )
    p.add_argument("src", metavar="SRC", help="blob prefix URL or local/NFS directory")
    p.add_argument(
        "dest", metavar="DEST", help="each rank's local directory; {rank} is replaced by the rank"
    )
    p.add_argument(
        "--ferry", help="the worker binary (default: $FERRY_BIN, the repository's build, then PATH)"
    )
    p.add_argument(
        "--manifest", help="take this ferry manifest as the listing instead of listing SRC"
    )
    p.add_argument(
        "--chunk-size", default="64MiB", help="bytes per broadcast, at most 1GiB (default 64MiB)"
    )
    p.add_argument(
        "--depth",
        type=int,
        default=4,
        help="broadcasts in flight (default 4); memory ~ chunk x depth",
    )
    p.add_argument(
        "--verify",
        action="store_true",
        help="hash every copy and check it against the source's MD5",
    )
    p.add_argument(
        "--compare",
        choices=["size-mtime", "md5"],
        default="size-mtime",
        help="when a rank's file counts as already held, as `ferry copy --compare` (default size-mtime)",
    )
    p.add_argument(
        "--file-weight",
        default="256KiB",
        help="per-file cost added to each size when splitting the download (default 256KiB)",
    )
    p.add_argument(
        "--download-ranks",
        type=int,
        metavar="K",
        help="only ranks 0..K-1 read from SRC (default: all)",
    )
    p.add_argument(
        "--max-bandwidth",
        metavar="RATE",
        help="cap on reading SRC, split across the downloading ranks",
    )
    p.add_argument(
        "--max-broadcast-bandwidth", metavar="RATE", help="cap on the broadcast (shared fabric)"
    )
    p.add_argument(
        "--stall-timeout",
        type=float,
        default=300.0,
        help="abort when the broadcast makes no progress this long, in seconds (0: never; default 300)",
    )
    p.add_argument(
        "--json", metavar="REPORT", help="write the run report as JSON here ('-' for stdout)"
    )
    p.add_argument(
        "--dry-run", action="store_true", help="list and plan, print the plan, change nothing"
    )
    p.add_argument(
        "--progress-interval", type=float, default=5.0, help="seconds between progress lines"
    )
    args = p.parse_args(argv)
    try:
        args.ferry = find_ferry(args.ferry)
    except RuntimeError as err:
        p.error(str(err))
    read_units(p, args)
    if not 1 <= args.chunk_size <= MAX_COLLECTIVE:
        p.error("--chunk-size must be between 1 byte and 1GiB (each broadcast is one MPI call)")
    if args.depth < 1:
        p.error("--depth must be at least 1")
    if args.download_ranks is not None and args.download_ranks < 1:
        p.error("--download-ranks must be at least 1")
    return args


RATES = ("max_bandwidth", "max_broadcast_bandwidth")


def read_units(p: Parser, args) -> None:
    """The sizes and rates of the command line in bytes, read by the worker's rules (`ferry
    units`), in place; a value it refuses is a usage error with its message."""
    given = [name for name in RATES if getattr(args, name)]
    cmd = [args.ferry, "units", "--size", args.chunk_size, "--size", args.file_weight]
    for name in given:
        cmd += ["--rate", getattr(args, name)]
    proc = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        p.error(
            proc.stderr.strip().splitlines()[0] if proc.stderr.strip() else "ferry units failed"
        )
    doc = ferry_docs.parse("units", proc.stdout, "ferry units")
    args.chunk_size, args.file_weight = doc["sizes"]
    for name, rate in zip(given, doc["rates"]):
        setattr(args, name, rate)


# --- helpers -------------------------------------------------------------------------------------


class Job:
    """This rank's view of the run: communicator, stage (for error messages), timings."""

    def __init__(self, comm, args):
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.host = socket.gethostname()
        # The Slurm node, which differs from the machine when one host runs several slurmd.
        self.node = os.environ.get("SLURMD_NODENAME") or self.host
        self.args = args
        self.stage = "setup"
        self.times = {}
        self._t = time.monotonic()
        self.started = self._t

    def enter(self, stage: str) -> None:
        now = time.monotonic()
        self.times[self.stage] = round(self.times.get(self.stage, 0) + now - self._t, 3)
        self.stage, self._t = stage, now

    def say(self, msg: str) -> None:
        if self.rank == 0:
            print(f"replicate: {msg}", file=sys.stderr, flush=True)

    def fail_message(self, msg: str) -> str:
        return f"replicate: rank {self.rank} ({self.host}) failed in stage '{self.stage}': {msg}"


def bcast_bytes(comm, data: bytes | None, root: int = 0) -> bytes:
    """Broadcast a byte string of any length as buffers (length first, then ≤1 GiB pieces)."""
    n = np.array([len(data) if comm.Get_rank() == root else 0], dtype=np.int64)
    comm.Bcast(n, root=root)
    buf = (
        np.frombuffer(data, dtype=np.uint8).copy()
        if comm.Get_rank() == root
        else np.empty(int(n[0]), np.uint8)
    )
    for start in range(0, int(n[0]), MAX_COLLECTIVE):
        comm.Bcast(buf[start : start + MAX_COLLECTIVE], root=root)
    return buf.tobytes()


def idle_barrier(comm) -> None:
    """Wait for every rank without spinning: a rank that finished its download early must leave
    the CPU to the workers still downloading (a blocking MPI wait polls, even with yield)."""
    req = comm.Ibarrier()
    pause = 0.001
    while not req.Test():
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def find_ferry(explicit: str | None) -> str:
    for candidate in (
        explicit,
        os.environ.get("FERRY_BIN"),
        os.path.join(HERE, "..", "..", "worker", "target", "release", "ferry"),
    ):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return os.path.abspath(candidate)
    found = shutil.which("ferry")
    if found:
        return found
    raise RuntimeError(
        "ferry binary not found: pass --ferry, set FERRY_BIN, or build it (make build)"
    )


def run_ferry(
    job: Job, cmd: list, what: str, relay_stderr: bool = True, stdout=None
) -> subprocess.CompletedProcess:
    """Run the worker; its stderr goes to ours prefixed with the rank (unless told not to), and
    its tail into the error raised when it cannot work at all (exit 2). Its stdout is returned,
    or goes to the file `stdout` when given."""
    proc = subprocess.Popen(
        cmd, stdin=subprocess.DEVNULL, stdout=stdout or subprocess.PIPE, stderr=subprocess.PIPE
    )
    tail = []

    def relay():
        for raw in proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            tail.append(line)
            del tail[:-20]
            if relay_stderr:
                print(f"replicate: rank {job.rank}: {line}", file=sys.stderr, flush=True)

    t = threading.Thread(target=relay, daemon=True)
    t.start()
    out = proc.stdout.read() if stdout is None else None
    proc.wait()
    t.join()
    result = subprocess.CompletedProcess(cmd, proc.returncode, out, "\n".join(tail))
    if proc.returncode not in (0, 1):
        raise RuntimeError(
            f"{what} failed (exit {proc.returncode}): {result.stderr[-2000:] or 'no message'}"
        )
    return result


# Fields of a `ferry names` record (docs/worker.md, "names"), each ended by NUL.
NAMES_FIELDS = 8


def names_records(names: bytes):
    """The records of `ferry names` output: line, raw path, temp and journal names, type, size,
    MD5 and held, as bytes."""
    fields = names.split(b"\0")
    if len(fields) % NAMES_FIELDS != 1 or fields[-1]:
        raise ValueError("ferry names: output cut short")
    for at in range(0, len(fields) - 1, NAMES_FIELDS):
        yield fields[at : at + NAMES_FIELDS]


def shown(raw: bytes) -> str:
    """A raw path for messages and the report."""
    return raw.decode("utf-8", "backslashreplace")


class Listing:
    """The files of the manifest, in manifest order, the same on every rank but for `held`. Built
    from the output of `ferry names --held` (docs/worker.md): per entry its manifest line, raw
    path, the temp and journal names the worker writes beside it, its type, size and MD5, and
    whether this rank's DEST already holds it by the worker's rule; nothing read from the line."""

    def __init__(self, names: bytes):
        self.lines, self.paths, partials, journals, sizes, held, self.md5 = (
            [],
            [],
            [],
            [],
            [],
            [],
            [],
        )
        self.dirs, self.ignored = [], []
        seen = set()
        for line, raw, partial, journal, kind, size, md5, holds in names_records(names):
            # `ferry names` refuses '.' and '..'; an empty component is a legal blob name but
            # no local one.
            if b"" in raw.split(b"/"):
                raise ValueError(f"manifest path {shown(raw)!r} would leave the destination")
            if kind == b"dir":
                self.dirs.append(raw)
            elif kind != b"file":
                self.ignored.append(
                    {
                        "path": shown(raw),
                        "reason": f"{kind.decode()} (replicate copies files and directories)",
                    }
                )
            elif not size:
                raise ValueError(
                    f"manifest path {shown(raw)!r} has no size (replicate needs sizes; "
                    "bare path lists are not enough)"
                )
            elif raw in seen:
                raise ValueError(f"manifest path {shown(raw)!r} is listed twice")
            else:
                seen.add(raw)
                self.lines.append(line)
                self.paths.append(raw)
                partials.append(partial)
                journals.append(journal)
                sizes.append(int(size))
                held.append(holds == b"1")
                self.md5.append(md5.decode() or None)
        # Fixed-width arrays: two more Python objects a file would double the listing's memory.
        self.temps = np.array(partials, dtype=bytes)
        self.journals = np.array(journals, dtype=bytes)
        self.sizes = np.array(sizes, dtype=np.int64)
        self.held = np.array(held, dtype=bool)

    def __len__(self):
        return len(self.paths)


def write_manifest(path: str, lines) -> None:
    """A manifest of lines as the worker printed them (`ferry names`); no header: the worker
    reads headerless lines as its current version."""
    with open(path, "wb") as f:
        for line in lines:
            f.write(line + b"\n")


def md5_of(path: bytes) -> str:
    h = hashlib.md5()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def hash_files(paths: list, indices) -> dict:
    """MD5 of the given files, several at a time (hashlib drops the GIL on large updates)."""
    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        return dict(zip(indices, pool.map(lambda i: md5_of(paths[i]), indices)))


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


# --- stages --------------------------------------------------------------------------------------


def take_listing(job: Job, ferry: str, workdir: str, dest: str) -> Listing:
    """Rank 0's listing of SRC, sent to every rank, read by each rank's worker against its DEST."""
    text = None
    if job.rank == 0:
        manifest = job.args.manifest
        if not manifest:
            job.say(f"listing {ferrylib.redact(job.args.src)}")
            manifest = os.path.join(workdir, "listing.tsv")
            with open(manifest, "wb") as out:
                res = run_ferry(
                    job, [ferry, "ls", "-r", job.args.src], "listing the source", stdout=out
                )
            if res.returncode != 0:
                raise RuntimeError(f"listing the source failed: {res.stderr[-2000:]}")
        with open(manifest, "rb") as f:
            text = f.read()
    mine = os.path.join(workdir, "listing-here.tsv")
    with open(mine, "wb") as f:
        f.write(bcast_bytes(job.comm, text))
    res = run_ferry(
        job,
        [ferry, "names", mine, "--held", dest, "--compare", job.args.compare],
        "reading the listing",
    )
    if res.returncode != 0:
        raise RuntimeError(f"reading the listing failed: {res.stderr[-2000:]}")
    return Listing(res.stdout)


def holdings(job: Job, listing: Listing) -> np.ndarray:
    """Which listed files each rank already holds (each rank's worker said so of its own DEST):
    an (N ranks × files) boolean matrix."""
    packed = np.packbits(listing.held)
    everyone = np.empty((job.size, packed.size), dtype=np.uint8)
    job.comm.Allgather(packed, everyone)
    return np.unpackbits(everyone, axis=1, count=len(listing)).astype(bool)


def assign_roots(
    job: Job, listing: Listing, held: np.ndarray, workdir: str, ferry: str
) -> np.ndarray:
    """The root of every file: the rank it is downloaded by or broadcast from; -1 when every rank
    already has it. Files some rank holds come from the least-loaded holder, never the source."""
    roots = np.full(len(listing), -1, dtype=np.int32)
    load = np.zeros(job.size, dtype=np.int64)
    count = held.sum(axis=0)
    for i in np.flatnonzero((count > 0) & (count < job.size)):
        holders = np.flatnonzero(held[:, i])
        r = holders[np.argmin(load[holders])]
        roots[i] = r
        load[r] += listing.sizes[i]
    missing = np.flatnonzero(count == 0).tolist()
    downloaders = min(job.args.download_ranks or job.size, job.size)
    owner = np.full(len(missing), -1, dtype=np.int32)
    if missing and job.rank == 0:
        # The worker's LPT partitioner (ferry partition, over single files) splits the download.
        # Each file weighs its bytes plus a per-request cost, so that one rank does not get
        # a thousand small files while another gets one large file of the same bytes.
        manifest = os.path.join(workdir, "download.tsv")
        write_manifest(manifest, (listing.lines[i] for i in missing))
        parts = os.path.join(workdir, "parts")
        run = run_ferry(
            job,
            [
                ferry,
                "partition",
                manifest,
                "--out",
                parts,
                "--parts",
                str(downloaders),
                "--file-weight",
                str(job.args.file_weight),
            ],
            "partitioning the download",
            relay_stderr=False,
        )
        if run.returncode != 0:
            raise RuntimeError(f"ferry partition failed: {run.stderr[-2000:]}")
        position = {listing.paths[i]: k for k, i in enumerate(missing)}
        for part in range(downloaders):
            res = run_ferry(
                job,
                [ferry, "names", part_file(parts, part)],
                "reading the download's parts",
            )
            if res.returncode != 0:
                raise RuntimeError(f"reading the download's parts failed: {res.stderr[-2000:]}")
            for record in names_records(res.stdout):
                owner[position[record[1]]] = part
        if (owner < 0).any():
            raise RuntimeError("ferry partition left files out of every part")
    if missing:
        job.comm.Bcast(owner, root=0)
        roots[np.array(missing)] = owner
    return roots


def download(
    job: Job,
    listing: Listing,
    roots: np.ndarray,
    held: np.ndarray,
    dest: str,
    workdir: str,
    ferry: str,
) -> dict:
    mine = [i for i in np.flatnonzero(roots == job.rank) if not held[job.rank, i]]
    if not mine:
        return {"files": 0, "bytes": 0}
    part = os.path.join(workdir, f"download-rank{job.rank}.tsv")
    write_manifest(part, (listing.lines[i] for i in mine))
    cmd = [
        ferry,
        "copy",
        job.args.src,
        dest,
        "--files-from",
        part,
        "--compare",
        "none",
        "--json",
        "--progress",
    ]
    if job.args.max_bandwidth:
        cmd += ["--max-bandwidth", str(per_rank_bandwidth(job))]
    res = run_ferry(job, cmd, "ferry copy")
    try:
        summary = ferry_docs.parse("copy", res.stdout, "ferry copy --json")
    except ferry_docs.DocumentError as err:
        raise RuntimeError(f"{err}: {res.stderr[-2000:]}") from None
    if res.returncode != 0 or summary["files"]["failed"]:
        failures = "; ".join(f"{f['path']}: {f['error']}" for f in summary["failures"][:5])
        raise RuntimeError(
            f"ferry copy failed for {summary['files']['failed']} file(s): {failures}"
        )
    return {
        "files": summary["files"]["copied"],
        "bytes": summary["bytes"]["copied"],
        "seconds": summary["seconds"],
        "retries": summary["retries"]["total"],
    }


def per_rank_bandwidth(job: Job) -> int:
    """The source-read cap of one downloading rank: the total split evenly."""
    return max(1, job.args.max_bandwidth // min(job.args.download_ranks or job.size, job.size))


def root_metadata(job: Job, listing: Listing, roots: np.ndarray, dest: bytes):
    """Mode and mtime of every file to broadcast, as its root's copy has them (the worker set
    them from the source); the root also checks its copy is the listed size."""
    meta = np.zeros((len(listing), 2), dtype=np.int64)
    for i in np.flatnonzero(roots == job.rank):
        path = os.path.join(dest, listing.paths[i])
        st = os.stat(path)
        if st.st_size != listing.sizes[i]:
            raise RuntimeError(
                f"{os.fsdecode(path)} is {st.st_size} bytes, the listing says "
                f"{listing.sizes[i]}: the source changed during the run; run again"
            )
        meta[i] = (stat.S_IMODE(st.st_mode), st.st_mtime_ns)
    total = np.empty_like(meta)
    job.comm.Allreduce(meta, total, op=MPI.SUM)
    return total[:, 0], total[:, 1]


def run_broadcast(
    job: Job, listing: Listing, roots: np.ndarray, held: np.ndarray, dest: bytes
) -> dict:
    modes, mtimes = root_metadata(job, listing, roots, dest)
    paths = [os.path.join(dest, p) for p in listing.paths]
    wanted = (roots >= 0) & ~held[job.rank] & (roots != job.rank)
    writer = Writer(paths, listing.temps, listing.journals, listing.sizes, modes, mtimes, wanted)
    sending = np.flatnonzero(roots >= 0)
    empty = [i for i in sending if listing.sizes[i] == 0]
    order = sorted((i for i in sending if listing.sizes[i] > 0), key=lambda i: (roots[i], i))
    total = int(listing.sizes[order].sum()) if order else 0
    progress = Progress()
    args = job.args
    job.say(
        f"broadcasting {len(order) + len(empty)} files, {human(total)} "
        f"(chunks of {human(args.chunk_size)}, {args.depth} in flight)"
    )

    def describe(msg):
        print(job.fail_message(msg), file=sys.stderr, flush=True)

    stop = start_watchdog(job.comm, progress, args.stall_timeout, describe)
    reporter = threading.Event()
    if job.rank == 0 and total:

        def report():
            t0 = time.monotonic()
            while not reporter.wait(args.progress_interval):
                rate = progress.bytes / max(time.monotonic() - t0, 1e-9)
                job.say(
                    f"broadcast {human(progress.bytes)} / {human(total)} "
                    f"({100 * progress.bytes / total:.0f}%), {human(rate)}/s"
                )

        threading.Thread(target=report, daemon=True).start()
    try:
        for i in empty:
            if wanted[i]:
                writer.write_empty(i)
        stats = broadcast(
            job.comm,
            chunk_schedule(order, listing.sizes, roots, args.chunk_size),
            args.chunk_size,
            args.depth,
            Reader(paths),
            writer,
            progress,
            args.max_broadcast_bandwidth or 0,
            polite=job.oversubscribed,
        )
    except BaseException:
        writer.discard()
        raise
    finally:
        stop.set()
        reporter.set()
    stats["stream_bytes"] = total
    stats["files"] = len(order) + len(empty)
    return stats


def check_replicas(
    job: Job, listing: Listing, roots: np.ndarray, held: np.ndarray, dest: bytes
) -> dict:
    """Every rank hashes every listed file it has. Files with a source MD5 are checked against it;
    the others against the copy of the rank they came from (all copies must agree)."""
    digests = hash_files([os.path.join(dest, p) for p in listing.paths], range(len(listing)))
    mine = np.frombuffer(b"".join(bytes.fromhex(digests[i]) for i in range(len(listing))), np.uint8)
    mine = mine.reshape(len(listing), 16) if len(listing) else np.zeros((0, 16), np.uint8)
    reference_rank = np.where(roots >= 0, roots, np.argmax(held, axis=0)).astype(np.int32)
    contribution = np.where((reference_rank == job.rank)[:, None], mine, 0).astype(np.uint8)
    reference = np.empty_like(contribution)
    job.comm.Allreduce(contribution, reference, op=MPI.BOR)
    bad = []
    for i in range(len(listing)):
        expected = listing.md5[i] or reference[i].tobytes().hex()
        if digests[i] != expected:
            against = (
                "the source's Content-MD5" if listing.md5[i] else f"rank {reference_rank[i]}'s copy"
            )
            bad.append(
                {
                    "rank": job.rank,
                    "path": shown(listing.paths[i]),
                    "md5": digests[i],
                    "expected": expected,
                    "against": against,
                }
            )
    return {
        "checked": len(listing),
        "without_source_md5": sum(1 for m in listing.md5 if not m),
        "mismatches": bad,
    }


# --- main ----------------------------------------------------------------------------------------


def usage() -> dict:
    """This rank's CPU and memory, and its ferry processes'."""
    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return {
        "cpu_seconds": round(own.ru_utime + own.ru_stime, 3),
        "peak_rss_mib": round(own.ru_maxrss / 1024, 1),
        "worker_cpu_seconds": round(children.ru_utime + children.ru_stime, 3),
        "worker_peak_rss_mib": round(children.ru_maxrss / 1024, 1),
    }


def report_at_root(job: Job, listing, summary: dict, bstats: dict, gathered: list, verdict) -> bool:
    """Rank 0: the ranks' figures gathered into the report (written where --json says), and
    its last line; True when the verify found a copy that differs."""
    args = job.args
    failed = False
    ranks = [g[0] for g in gathered]
    read = sum(r.get("download", {}).get("bytes", 0) for r in ranks)
    elapsed = time.monotonic() - job.started
    report = {
        "command": "replicate",
        "source": ferrylib.redact(args.src),
        "dest": args.dest,
        "ranks": job.size,
        "download_ranks": min(args.download_ranks or job.size, job.size),
        "chunk_size": args.chunk_size,
        "depth": args.depth,
        "dry_run": args.dry_run,
        "max_bandwidth_per_download_rank": per_rank_bandwidth(job) if args.max_bandwidth else None,
        "plan": summary,
        "bytes": {
            "read_from_source": read,
            "broadcast": bstats["stream_bytes"],
            "written_by_receivers": sum(
                r.get("broadcast", {}).get("written_bytes", 0) for r in ranks
            ),
        },
        "broadcast_seconds": job.times.get("broadcast", 0),
        "ignored": listing.ignored,
        "per_rank": ranks,
        "seconds": round(elapsed, 3),
    }
    if args.verify and not args.dry_run:
        mismatches = [m for g in gathered for m in g[1]["mismatches"]]
        failed = bool(mismatches)
        report["verify"] = {
            "checked_per_rank": len(listing),
            "without_source_md5": gathered[0][1]["without_source_md5"],
            "mismatches": mismatches[:1000],
            "mismatch_count": len(mismatches),
        }
        for m in mismatches[:20]:
            print(
                f"replicate: verify: rank {m['rank']}: {m['path']}: md5 {m['md5']}, expected "
                f"{m['expected']} ({m['against']})",
                file=sys.stderr,
                flush=True,
            )
    if args.json == "-":
        json.dump(report, sys.stdout, indent=2)
        print()
    elif args.json:
        ferrylib.write_json(args.json, report)
    if failed:
        job.say(
            f"verify FAILED: {report['verify']['mismatch_count']} copies differ from the source"
        )
    else:
        job.say(
            f"done in {elapsed:.1f} s: read {human(read)} from the source, broadcast "
            f"{human(bstats['stream_bytes'])} to {job.size} ranks"
            + (f"; verified {len(listing)} files on every rank" if verdict else "")
        )
    return failed


def replicate(job: Job) -> int:
    args = job.args
    comm = job.comm
    dest = args.dest.replace("{rank}", str(job.rank))
    dest_b = os.fsencode(dest)
    ferry = args.ferry
    # Two ranks writing one directory would rename each other's temp files away.
    identities = comm.allgather((job.host, os.path.realpath(dest)))
    # Each rank runs two busy threads (MPI and I/O): more than that per core and waits must sleep.
    job.oversubscribed = 2 * sum(1 for h, _ in identities if h == job.host) > (os.cpu_count() or 1)
    for other, ident in enumerate(identities):
        if ident == identities[job.rank] and other != job.rank:
            raise RuntimeError(
                f"ranks {min(other, job.rank)} and {max(other, job.rank)} on {job.host} share DEST "
                f"{ident[1]!r}: put {{rank}} in DEST or run one rank per node"
            )
    if not args.dry_run:
        os.makedirs(dest_b, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="ferry-replicate-")
    try:
        job.enter("list")
        listing = take_listing(job, ferry, workdir, dest)
        job.say(
            f"{len(listing)} files, {human(int(listing.sizes.sum()))} in the listing; {job.size} ranks"
        )

        job.enter("plan")
        held = holdings(job, listing)
        roots = assign_roots(job, listing, held, workdir, ferry)
        to_download = (roots >= 0) & ~held.any(axis=0)
        summary = {
            "files": len(listing),
            "bytes": int(listing.sizes.sum()),
            "held_by_all": int((roots < 0).sum()),
            "download_files": int(to_download.sum()),
            "download_bytes": int(listing.sizes[to_download].sum()),
            "broadcast_files": int((roots >= 0).sum()),
            "broadcast_bytes": int(listing.sizes[roots >= 0].sum()),
        }
        job.say(
            f"plan: {summary['held_by_all']} files already on every rank; download "
            f"{summary['download_files']} files ({human(summary['download_bytes'])}); broadcast "
            f"{summary['broadcast_files']} files ({human(summary['broadcast_bytes'])})"
        )

        rank_stats = {"rank": job.rank, "host": job.host, "node": job.node, "dest": dest}
        bstats = {"stream_bytes": 0, "files": 0}
        verdict = None
        if args.dry_run:
            mine = (roots == job.rank) & to_download
            rank_stats["would_download"] = {
                "files": int(mine.sum()),
                "bytes": int(listing.sizes[mine].sum()),
            }
        else:
            job.enter("download")
            rank_stats["download"] = download(job, listing, roots, held, dest, workdir, ferry)
            idle_barrier(job.comm)
            job.enter("broadcast")
            bstats = run_broadcast(job, listing, roots, held, dest_b)
            for d in listing.dirs:  # empty ones included; their own mode and mtime are not copied
                os.makedirs(os.path.join(dest_b, d), exist_ok=True)
            rank_stats["broadcast"] = {
                k: bstats[k] for k in ("sent_bytes", "written_bytes", "received_files")
            }
            if args.verify:
                job.enter("verify")
                verdict = check_replicas(job, listing, roots, held, dest_b)
        job.enter("report")
        rank_stats.update({"seconds": job.times, **usage()})
        gathered = comm.gather((rank_stats, verdict), root=0)
        failed = False
        if job.rank == 0:
            failed = report_at_root(job, listing, summary, bstats, gathered, verdict)
        failed = comm.bcast(failed, root=0)
        return 1 if failed else 0
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def main(argv=None) -> int:
    comm = MPI.COMM_WORLD
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
    except UsageError as err:
        if comm.Get_rank() == 0:
            print(f"replicate.py: error: {err}", file=sys.stderr)
        return 2
    job = Job(comm, args)
    try:
        return replicate(job)
    except BaseException as err:  # noqa: BLE001 - every failure must end the whole job, loudly
        msg = str(err) or type(err).__name__
        if isinstance(err, OSError) and err.filename is not None:
            msg = f"{err.strerror}: {os.fsdecode(err.filename)}"
        print(job.fail_message(msg), file=sys.stderr, flush=True)
        comm.Abort(1)
        return 1


if __name__ == "__main__":
    sys.exit(main())
