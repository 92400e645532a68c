#!/usr/bin/env python3
"""ferry's benchmark campaigns.

Each campaign times ferry and its peers (cp, rsync, md5sum, rclone, fpart, curl) with hyperfine
on the same generated data, on the same machine, in the same sitting, and reports ratios
(ferry ÷ peer). Absolute numbers on a shared two-core VM say little; ratios taken minutes apart
say more, and the load average is recorded next to them so a reader can judge the noise.

    .venv/bin/python benchmarks/campaign.py local|azurite|discard|partition|all [--runs N] [--quick]
    .venv/bin/python benchmarks/campaign.py report   # redo tables, charts and the docs from results/*.json
    .venv/bin/python benchmarks/campaign.py clean    # delete the campaigns' datasets and workspaces

docs/benchmarks.md says what every scenario measures and how to read the results.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime as dt
import fnmatch
import hashlib
import json
import os
import platform
import random
import re
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from support.latencyfs import LatencyFS, build as build_latencyfs  # noqa: E402  (tests/support)

REPO = Path(__file__).resolve().parent.parent
os.chdir(REPO)  # every path written into commands and results is relative to the repo root

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
SCENARIOS = ("local", "azurite", "discard", "partition", "nfs")
AZ_ACCOUNT = "devstoreaccount1"
# Azurite's published development key, the same in every Azurite install; not a secret.
AZ_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
CONTAINER = "bench"
# Bumped whenever the generators change, so stale datasets are rebuilt rather than reused.
GENERATOR_VERSION = 1
RCLONE = ".venv/bin/rclone"
TIME = "/usr/bin/time"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def rel(p: Path | str) -> str:
    """A path as it should appear in commands and results: relative to the repo when inside it."""
    # abspath, not resolve(): .venv/bin/python must stay itself, not become the interpreter it links to.
    p = Path(os.path.abspath(p))
    try:
        return str(p.relative_to(REPO))
    except ValueError:
        return str(p)


def q(p: Path | str) -> str:
    return shlex.quote(rel(p) if isinstance(p, Path) else p)


def human_bytes(n: float) -> str:
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= size:
            v = n / size
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.1f} {unit}"
    return f"{int(n)} B"


def rmtree(p: Path) -> None:
    shutil.rmtree(p, ignore_errors=True)


# Trees of at least this many files are moved aside between runs instead of deleted; see set_aside.
MANY_FILES = 1000


def trash_dir(s: "Settings") -> Path:
    return s.scratch / "trash"


def set_aside(p: Path, trash: Path) -> None:
    """Move a finished run's output out of the way; purge_trash deletes it after the scenario.

    Deleting many files right before a run slows the next run's file creation: this machine's
    root ext4 has no journal, and without one ext4 won't reuse an inode freed in the last minute
    or more and scans past each one (`recently_deleted` in `find_inode_bit`, seen with perf).
    After an `rm -rf` of 20,000 files, `cp -a` of 20,000 files took 10 s of system time instead
    of 0.7 s, and by how much depended on which tool happened to create files next.
    """
    if p.exists():
        trash.mkdir(parents=True, exist_ok=True)
        os.rename(p, trash / f"{p.name}-{time.monotonic_ns()}")


def set_aside_cmd(p: Path, trash: Path) -> str:
    """set_aside as a shell command for hyperfine's --prepare; it leaves an empty p behind."""
    return (f"mkdir -p {q(trash)} && {{ [ ! -e {q(p)} ] || mv {q(p)} {q(trash)}/{p.name}-$(date +%s%N); }} "
            f"&& mkdir -p {q(p)}")


def purge_trash(s: "Settings") -> None:
    t = trash_dir(s)
    if t.exists():
        log(f"deleting the outputs set aside during the runs ({rel(t)})")
        rmtree(t)


def free_port() -> int:
    # Below the kernel's ephemeral range (32768+) so that other processes binding port 0 can't
    # take it from under an Azurite that is restarted on the same port before every run.
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(20000, 30000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    raise RuntimeError("no free loopback port in 20000-29999")


def bench_env(extra: dict | None = None) -> dict:
    """The environment the measured commands see: nothing inherited that names Azure, ferry or
    rclone, no proxies, and loopback excluded from proxying in any case."""
    drop = ("AZURE_", "FERRY_", "RCLONE_", "AZCOPY_")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(drop) and k.lower() not in ("http_proxy", "https_proxy", "all_proxy")}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    # If ferry ever fell through to managed identity it would hit a closed port, not a real IMDS.
    env["FERRY_IMDS_ENDPOINT"] = "http://127.0.0.1:9"
    env.update(extra or {})
    return env


# ----------------------------------------------------------------------------------------------
# Settings and the scratch layout
# ----------------------------------------------------------------------------------------------

@dataclass
class Settings:
    scratch: Path
    results: Path
    runs: int
    quick: bool
    only: list[str]
    keep: bool
    update_docs: bool
    ferry_source: Path
    ferry_sha256: str = ""
    mpifileutils: Path | None = None  # a build of mpifileutils (dcp, dsync) made elsewhere, or None

    @property
    def data(self) -> Path:
        # Quick datasets share names with the full ones; apart, neither evicts the other.
        return self.scratch / ("data-quick" if self.quick else "data")

    @property
    def work(self) -> Path:
        return self.scratch / "work"

    @property
    def bin(self) -> Path:
        return self.scratch / "bin"

    @property
    def ferry(self) -> str:
        return rel(self.bin / "ferry")

    def size(self, full, quick):
        return quick if self.quick else full

    def selected(self, group_id: str) -> bool:
        return not self.only or any(fnmatch.fnmatch(group_id, pat) for pat in self.only)


def snapshot_ferry(s: Settings) -> dict:
    """Copy the worker binary aside: other engineers rebuild it while a campaign runs, and every
    run of a campaign must time the same bytes."""
    src = s.ferry_source
    if not src.exists():
        sys.exit(f"campaign: {rel(src)} is missing; build it first: "
                 "cargo build --release --manifest-path worker/Cargo.toml")
    s.bin.mkdir(parents=True, exist_ok=True)
    dst = s.bin / "ferry"
    tmp = s.bin / "ferry.tmp"
    shutil.copy2(src, tmp)
    os.replace(tmp, dst)
    digest = hashlib.sha256(dst.read_bytes()).hexdigest()
    version = subprocess.run([str(dst), "--version"], capture_output=True, text=True).stdout.strip()
    head = subprocess.run(["git", "log", "-1", "--format=%h %s", "--", "worker"], capture_output=True,
                          text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "worker/src", "worker/Cargo.toml"],
                           capture_output=True, text=True).stdout.strip()
    return {"version": version, "sha256": digest[:16], "worker_commit": head,
            "worker_tree_modified": bool(dirty), "snapshot": rel(dst)}


# ----------------------------------------------------------------------------------------------
# Deterministic datasets
# ----------------------------------------------------------------------------------------------

class Pool:
    """64 MiB of seeded pseudo-random bytes that every file is cut from.

    Generating gigabytes with `random` runs at ~120 MiB/s here; slicing a fixed pool at seeded
    offsets writes at disk speed and is still incompressible and identical on every machine.
    No tool under test deduplicates, so repeats across files don't flatter anyone.
    """

    SIZE = 64 * MiB

    def __init__(self, seed: int = 0xFE22):
        rng = random.Random(seed)
        self.data = memoryview(b"".join(rng.randbytes(MiB) for _ in range(self.SIZE // MiB)))

    def write(self, f, size: int, rng: random.Random) -> None:
        left = size
        while left:
            n = min(left, MiB)
            off = rng.randrange(self.SIZE - n + 1)
            f.write(self.data[off:off + n])
            left -= n


_pool: Pool | None = None


def pool() -> Pool:
    global _pool
    if _pool is None:
        _pool = Pool()
    return _pool


@dataclass
class Dataset:
    """A tree of files described by (relative path, size); materialised once and reused while its
    stamp matches."""

    name: str
    desc: str
    entries: list[tuple[str, int]]
    seed: int = 1

    @property
    def bytes(self) -> int:
        return sum(sz for _, sz in self.entries)

    @property
    def files(self) -> int:
        return len(self.entries)

    def stamp_text(self) -> str:
        h = hashlib.sha256(json.dumps([GENERATOR_VERSION, self.seed, self.entries]).encode()).hexdigest()
        return f"{self.name} {h}\n"

    def materialize(self, root: Path) -> Path:
        path = root / self.name
        # The stamp sits beside the tree, never inside it, so no tool copies or uploads it.
        stamp = root / f"{self.name}.stamp"
        if stamp.exists() and stamp.read_text() == self.stamp_text() and path.is_dir():
            return path
        log(f"generating dataset {self.name}: {self.files:,} files, {human_bytes(self.bytes)}")
        rmtree(path)
        stamp.unlink(missing_ok=True)
        rng = random.Random(self.seed)
        made = set()
        for relpath, size in self.entries:
            p = path / relpath
            if p.parent not in made:
                p.parent.mkdir(parents=True, exist_ok=True)
                made.add(p.parent)
            with open(p, "wb") as f:
                pool().write(f, size, rng)
        stamp.write_text(self.stamp_text())
        return path


def files_dataset(name: str, desc: str, count: int, size_of: Callable[[random.Random], int],
                  per_dir: int = 200, seed: int = 1) -> Dataset:
    rng = random.Random(seed * 7919 + count)
    entries = [(f"d{i // per_dir:03d}/f{i:06d}.bin", size_of(rng)) for i in range(count)]
    return Dataset(name, desc, entries, seed)


def one_file_dataset(name: str, size: int) -> Dataset:
    return Dataset(name, f"1 file of {human_bytes(size)}", [(f"{name}.bin", size)])


def md5_tree(root: Path) -> dict[str, str]:
    """Relative path → MD5 hex of every file under root, cached beside the tree's stamp."""
    cache = root.parent / f"{root.name}.md5.json"
    stamp = root.parent / f"{root.name}.stamp"
    if cache.exists() and stamp.exists() and cache.stat().st_mtime >= stamp.stat().st_mtime:
        return json.loads(cache.read_text())
    out = {}
    for dirpath, _, names in os.walk(root):
        for n in names:
            p = Path(dirpath) / n
            h = hashlib.md5()
            with open(p, "rb") as f:
                while chunk := f.read(4 * MiB):
                    h.update(chunk)
            out[str(p.relative_to(root))] = h.hexdigest()
    cache.write_text(json.dumps(out))
    return out


def warm(paths: list[Path]) -> None:
    """Read every file once so that no row pays for the first trip to disk."""
    for root in paths:
        for dirpath, _, names in os.walk(root):
            for n in names:
                with open(os.path.join(dirpath, n), "rb") as f:
                    while f.read(4 * MiB):
                        pass


# ----------------------------------------------------------------------------------------------
# Timing: hyperfine, one run per command per round, order rotated between rounds
# ----------------------------------------------------------------------------------------------

@dataclass
class Row:
    name: str
    cmd: str
    role: str                 # "ferry" (the subject) or "peer"
    prepare: str = ":"
    slot: str | None = None   # Azurite workspace (or latencyfs destination) this row runs against
    depth: int | None = None  # requests the row keeps in flight at most, for its latency limit


@dataclass
class Group:
    id: str
    title: str
    dataset: str
    bytes: int
    files: int
    rows: list[Row]
    env: dict
    notes: list[str] = field(default_factory=list)
    warm: list[Path] = field(default_factory=list)
    verify: Callable[[], dict] | None = None
    # row name → [(metric, ">=" or "<", limit, text)], reported as met/missed; never an assertion
    targets: dict = field(default_factory=dict)
    setup: Callable[[], None] | None = None
    teardown: Callable[[], None] | None = None
    server_cpu: Callable[[str], list] | None = None  # slot → CPU seconds of the server, per run
    run_stats: Callable[[str], list] | None = None   # slot → the filesystem's counters, per run
    delay_ms: float | None = None                    # latency added to every filesystem request
    best_peer_only: bool = False                     # ratios against the fastest peer only
    throughput_unit: str = "MiB/s"


def wrap(cmd: str, rss_file: Path) -> str:
    """Measure peak RSS with GNU time around the command. A shell is added only when the command
    needs one; then %M is the largest single process of the pipeline, not their sum."""
    needs_shell = any(c in cmd for c in "|;&<>$*?`") or cmd.startswith("cd ")
    inner = f"sh -c {shlex.quote(cmd)}" if needs_shell else cmd
    return f"{TIME} -f %M -o {q(rss_file)} {inner}"


def read_rss_kib(path: Path) -> int | None:
    try:
        lines = path.read_text().split()
        return int(lines[-1])
    except (OSError, ValueError, IndexError):
        return None


def run_group(s: Settings, scenario: str, g: Group) -> dict:
    log(f"{scenario}/{g.id}: {g.title} — {len(g.rows)} rows × {s.runs} runs")
    gdir = s.scratch / "runs" / scenario / g.id
    rmtree(gdir)
    gdir.mkdir(parents=True)
    if g.setup:
        g.setup()
    if g.warm:
        warm(g.warm)
    runs: dict[str, list] = {r.name: [] for r in g.rows}
    loads = []
    started = time.monotonic()
    try:
        for rnd in range(s.runs):
            # Rotating, not just reversing, so that with three rows each one goes first once.
            k = rnd % len(g.rows)
            order = g.rows[k:] + g.rows[:k]
            export = gdir / f"round-{rnd}.json"
            args = ["hyperfine", "--runs", "1", "--style", "none", "--ignore-failure",
                    "--export-json", rel(export)]
            rss_files = []
            for i, row in enumerate(order):
                rss = gdir / f"round-{rnd}-{i}.rss"
                rss_files.append(rss)
                args += ["--prepare", row.prepare, "--command-name", row.name, wrap(row.cmd, rss)]
            load = os.getloadavg()[0]
            loads.append(load)
            proc = subprocess.run(args, env=g.env, capture_output=True, text=True)
            if proc.returncode != 0:
                raise RuntimeError(f"hyperfine failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
            results = json.loads(export.read_text())["results"]
            line = []
            for pos, (row, res, rss) in enumerate(zip(order, results, rss_files)):
                rec = {"round": rnd, "position": pos, "wall": res["times"][0], "user": res["user"],
                       "system": res["system"], "exit": res["exit_codes"][0],
                       "rss_kib": read_rss_kib(rss), "load1": round(load, 2)}
                runs[row.name].append(rec)
                line.append(f"{row.name} {rec['wall']:.2f}s" + ("" if rec["exit"] == 0 else f" (exit {rec['exit']})"))
            log(f"  round {rnd + 1}/{s.runs}: " + ", ".join(line))
    finally:
        if g.teardown:
            g.teardown()
    if g.server_cpu:
        for row in g.rows:
            for rec, cpu in zip(runs[row.name], g.server_cpu(row.slot) if row.slot else []):
                rec["server_cpu"] = cpu
    if g.run_stats:
        for row in g.rows:
            for rec, st in zip(runs[row.name], g.run_stats(row.slot) if row.slot else []):
                rec["requests"] = st["total"]
                rec["inflight_avg"] = round(st["inflight_avg_busy"], 2)
                rec["inflight_max"] = st["inflight_max"]
    verification = {}
    if g.verify:
        log(f"  verifying {g.id} outside the timed runs")
        try:
            verification = g.verify()
        except Exception as e:  # a failed check is a result worth recording, not a crash
            verification = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        log(f"  verification: {'ok' if verification.get('ok') else 'FAILED'}"
            + ("" if verification.get("ok") else f" {json.dumps(verification)[:600]}"))
    rows = [summarize_row(r, runs[r.name], g) for r in g.rows]
    return {
        "id": g.id, "title": g.title, "dataset": g.dataset, "bytes": g.bytes, "files": g.files,
        "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "load1": {"min": round(min(loads), 2), "max": round(max(loads), 2)} if loads else None,
        "seconds": round(time.monotonic() - started, 1), "notes": g.notes, "ferry_sha256": s.ferry_sha256,
        "throughput_unit": g.throughput_unit, "delay_ms": g.delay_ms,
        "rows": rows, "ratios": ratios(rows, g.best_peer_only), "verification": verification,
    }


def summarize_row(row: Row, runs: list, g: Group) -> dict:
    ok = [r for r in runs if r["exit"] == 0]
    out = {"name": row.name, "role": row.role, "command": row.cmd, "runs": runs, "ok_runs": len(ok)}
    if not ok:
        return out
    wall = statistics.median(r["wall"] for r in ok)
    cpu = statistics.median(r["user"] + r["system"] for r in ok)
    rss = [r["rss_kib"] for r in ok if r["rss_kib"] is not None]
    out.update({
        "wall_median": wall, "wall_min": min(r["wall"] for r in ok), "wall_max": max(r["wall"] for r in ok),
        "cpu_median": cpu,
        "user_median": statistics.median(r["user"] for r in ok),
        "system_median": statistics.median(r["system"] for r in ok),
        "rss_mib_median": statistics.median(rss) / 1024 if rss else None,
        "rss_mib_max": max(rss) / 1024 if rss else None,
    })
    if g.bytes:
        out["mib_per_s"] = g.bytes / MiB / wall
        out["gb_per_s"] = g.bytes / 1e9 / wall
        out["cpu_s_per_gib"] = cpu / (g.bytes / GiB)
    server = [r["server_cpu"] for r in ok if r.get("server_cpu") is not None]
    if server:
        out["server_cpu_median"] = statistics.median(server)
    requests = [r["requests"] for r in ok if r.get("requests") is not None]
    if requests:
        out["requests_median"] = statistics.median(requests)
        out["inflight_avg_median"] = statistics.median(r["inflight_avg"] for r in ok if "inflight_avg" in r)
        if g.delay_ms and row.depth:
            # The floor for a tool that keeps `depth` requests in flight all the time.
            out["depth"] = row.depth
            out["latency_limit_s"] = out["requests_median"] * g.delay_ms / 1000 / row.depth
            out["wall_over_limit"] = wall / out["latency_limit_s"] if out["latency_limit_s"] else None
    met = []
    for metric, op, limit, text in g.targets.get(row.name, []):
        value = out.get(metric)
        ok = value is not None and (value >= limit if op == ">=" else value < limit)
        met.append({"target": text, "metric": metric, "value": value, "met": ok})
    if met:
        out["targets"] = met
    return out


def ratios(rows: list[dict], best_peer_only: bool = False) -> list[dict]:
    out = []
    peers = [b for b in rows if b["role"] == "peer" and "wall_median" in b]
    if best_peer_only and peers:
        peers = [min(peers, key=lambda b: b["wall_median"])]
    for a in rows:
        if a["role"] != "ferry" or "wall_median" not in a:
            continue
        for b in peers:
            r = {"ferry": a["name"], "peer": b["name"], "wall": a["wall_median"] / b["wall_median"]}
            r["cpu"] = a["cpu_median"] / b["cpu_median"] if b["cpu_median"] > 0 else None
            ra, rb = a.get("rss_mib_median"), b.get("rss_mib_median")
            r["rss"] = ra / rb if ra and rb else None
            out.append(r)
    return out


# ----------------------------------------------------------------------------------------------
# Azurite: restarted fresh from a seeded workspace before every measured run
# ----------------------------------------------------------------------------------------------

class ControlledHost:
    """Something hyperfine's --prepare resets between runs (`campaign.py _ctl SOCK reset SLOT`):
    a Unix socket in the campaign process takes one request a connection, under one lock, and
    `handle` (of the subclass) acts on it; `stop` ends whatever the host runs."""

    def __init__(self, sock_path: Path):
        self.sock_path = sock_path
        self._server: socket.socket | None = None
        self.lock = threading.Lock()

    def handle(self, words: list[str]) -> None:
        if words[:1] == ["reset"] and len(words) == 2:
            self.reset(words[1])
        elif words == ["stop"]:
            self.stop()
        else:
            raise ValueError(f"unknown request {words}")

    def reset(self, slot: str) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def prepare_cmd(self, slot: str) -> str:
        return f"{q(Path(sys.executable))} benchmarks/campaign.py _ctl {q(self.sock_path)} reset {slot}"

    def serve(self) -> None:
        self.sock_path.unlink(missing_ok=True)
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(rel(self.sock_path))
        srv.listen(4)
        self._server = srv
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            with conn:
                words = conn.makefile("r").readline().split()
                try:
                    with self.lock:
                        self.handle(words)
                    conn.sendall(b"ok\n")
                except Exception as e:
                    conn.sendall(f"error {type(e).__name__}: {e}\n".encode())

    def close(self) -> None:
        if self._server:
            self._server.close()
            self._server = None
        self.sock_path.unlink(missing_ok=True)
        with self.lock:
            self.stop()


class AzuriteHost(ControlledHost):
    """Runs Azurite as a child of this process and restarts it on request from hyperfine's
    --prepare (through a Unix socket), so that every measured run meets a fresh emulator with
    exactly the seeded contents and no process outlives the campaign.

    Each slot is a workspace: a seed directory, the run directory restored from it, and local
    paths to empty before the run (download destinations). Blob extents are hard-linked from
    the seed: Azurite only ever appends to extents it creates itself, so seeds stay intact and
    a 1 GiB seed costs nothing to restore and adds no writeback during the next run.
    """

    def __init__(self, s: Settings):
        super().__init__(s.scratch / "azurite-ctl.sock")
        self.s = s
        self.root = s.scratch / ("azurite-quick" if s.quick else "azurite")
        self.root.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.current: str | None = None
        self.cpu_at_ready = 0.0
        self.slots: dict[str, dict] = {}
        self.server_cpu: dict[str, list] = {}

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}/{AZ_ACCOUNT}"

    def url(self, prefix: str) -> str:
        return f"{self.endpoint}/{CONTAINER}/{prefix}"

    # -- process ------------------------------------------------------------------------------
    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.endpoint}?comp=list", timeout=1):
                return True
        except urllib.error.HTTPError:
            return True  # 403 without a signature still means it is up
        except OSError:
            return False

    def start(self, location: Path, slot: str | None = None) -> None:
        self.stop()
        binary = REPO / "node_modules" / ".bin" / "azurite-blob"
        if not binary.exists():
            raise RuntimeError("node_modules/.bin/azurite-blob is missing: run `make setup`")
        logf = open(self.root / "azurite.log", "ab")
        env = {k: v for k, v in os.environ.items() if k != "AZURITE_ACCOUNTS"}
        self.proc = subprocess.Popen(
            [str(binary), "--blobHost", "127.0.0.1", "--blobPort", str(self.port), "--location", rel(location),
             "--skipApiVersionCheck", "--loose", "--disableTelemetry", "--silent"],
            stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        logf.close()
        deadline = time.monotonic() + 60
        while not self._answers():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"Azurite did not start on port {self.port}; see {rel(self.root / 'azurite.log')}")
            time.sleep(0.05)
        self.current = slot
        self.cpu_at_ready = self._cpu()

    def _cpu(self) -> float:
        """User+system seconds of the Azurite process so far (all its threads)."""
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, AttributeError, IndexError, ValueError):
            return 0.0

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.current is not None and self.proc.poll() is None:
            # What this instance spent serving its one measured run (start-up excluded).
            self.server_cpu.setdefault(self.current, []).append(round(self._cpu() - self.cpu_at_ready, 3))
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        self.current = None

    # -- workspaces -----------------------------------------------------------------------------
    @staticmethod
    def restore(seed: Path, run: Path) -> None:
        rmtree(run)
        for dirpath, dirnames, filenames in os.walk(seed):
            d = Path(dirpath)
            target = run / d.relative_to(seed)
            target.mkdir(parents=True, exist_ok=True)
            for n in filenames:
                if d.name == "__blobstorage__":
                    os.link(d / n, target / n)
                else:
                    shutil.copy2(d / n, target / n)

    def add_slot(self, name: str, seed: Path, clear: list[Path] = (), many_files: bool = False) -> str:
        self.slots[name] = {"seed": seed, "run": self.root / "run" / name, "clear": list(clear),
                            "many_files": many_files}
        self.server_cpu.pop(name, None)
        return name

    def reset(self, name: str) -> None:
        slot = self.slots[name]
        self.stop()
        self.restore(slot["seed"], slot["run"])
        # Deleting the previous run's output also drops its dirty pages, so little of our own
        # writeback spills into the next run. No sync(): on this shared machine it waits for
        # everybody's writes and once stalled a prepare for a minute and a half.
        for p in slot["clear"]:
            if slot["many_files"]:
                set_aside(p, trash_dir(self.s))
            else:
                rmtree(p)
        self.start(slot["run"], name)

    def open_slot(self, name: str) -> None:
        """Start Azurite on a slot's workspace as the last run left it (for verification)."""
        self.stop()
        self.start(self.slots[name]["run"])

    def drop_slot(self, name: str) -> None:
        rmtree(self.slots[name]["run"])

    # -- seeds ----------------------------------------------------------------------------------
    def seed_empty(self) -> Path:
        seed = self.root / "seed-empty"
        stamp = self.root / "seed-empty.stamp"
        if stamp.exists() and seed.is_dir():
            return seed
        rmtree(seed)
        self.start(seed)
        try:
            subprocess.run([self.s.ferry, "mk", self.url("").rstrip("/")], env=self.ferry_env(),
                           check=True, capture_output=True)
        finally:
            self.stop()
        stamp.write_text("container bench\n")
        return seed

    def seed_with(self, ds: Dataset, src: Path) -> Path:
        """A workspace holding the dataset under data/<name>/, uploaded once by ferry (with
        Content-MD5, which both ferry and rclone check on download)."""
        seed = self.root / f"seed-{ds.name}"
        stamp = self.root / f"seed-{ds.name}.stamp"
        if stamp.exists() and stamp.read_text() == ds.stamp_text() and seed.is_dir():
            return seed
        log(f"seeding Azurite with {ds.name}")
        empty = self.seed_empty()
        rmtree(seed)
        # A real copy: run workspaces hard-link a seed's extents, so no two seeds may share one.
        shutil.copytree(empty, seed)
        self.start(seed)
        try:
            proc = subprocess.run([self.s.ferry, "copy", "-r", rel(src) + "/", self.url(f"data/{ds.name}/"), "--json"],
                                  env=self.ferry_env(), capture_output=True, text=True)
            summary = json.loads(proc.stdout or "{}")
            if proc.returncode != 0 or summary.get("files", {}).get("copied") != ds.files:
                raise RuntimeError(f"seeding {ds.name} failed: {proc.stderr[-2000:]} {proc.stdout[-2000:]}")
        finally:
            self.stop()
        stamp.write_text(ds.stamp_text())
        return seed

    def ferry_env(self) -> dict:
        return bench_env({"AZURE_STORAGE_ACCOUNT": AZ_ACCOUNT, "AZURE_STORAGE_KEY": AZ_KEY, "FERRY_AUTH": "key"})

    def tools_env(self) -> dict:
        conf = self.s.scratch / "rclone.conf"
        conf.touch()
        env = self.ferry_env()
        env.update({
            # An empty config file of our own: rclone then reads the remote from the environment
            # only, and never a user's ~/.config/rclone.
            "RCLONE_CONFIG": rel(conf),
            "RCLONE_CONFIG_AZ_TYPE": "azureblob",
            "RCLONE_CONFIG_AZ_ACCOUNT": AZ_ACCOUNT,
            "RCLONE_CONFIG_AZ_KEY": AZ_KEY,
            "RCLONE_CONFIG_AZ_ENDPOINT": self.endpoint,
        })
        return env


def ctl_client(sock: str, words: list[str]) -> int:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
        c.connect(sock)
        c.sendall((" ".join(words) + "\n").encode())
        reply = c.makefile("r").readline().strip()
    if reply != "ok":
        print(f"campaign _ctl: {reply}", file=sys.stderr)
        return 1
    return 0


READ_BACK_SAMPLE = 300


def verify_blobs(endpoint: str, prefix: str, src: Path) -> dict:
    """Independent check of an upload with the Python SDK: every file present with the same
    size and a Content-MD5 equal to the file's MD5; then the bytes read back and hashed, for
    every blob of 1 MiB or more (those were assembled from blocks) and a seeded sample of
    READ_BACK_SAMPLE smaller ones (a single Put Blob whose Content-MD5 Azurite checked on arrival;
    reading back ten thousand of them through one emulator would take minutes)."""
    from azure.storage.blob import BlobServiceClient  # only the azurite scenario needs the SDK

    expected = md5_tree(src)
    svc = BlobServiceClient(endpoint, credential={"account_name": AZ_ACCOUNT, "account_key": AZ_KEY})
    cc = svc.get_container_client(CONTAINER)
    sizes = {str(p.relative_to(src)): p.stat().st_size for p in src.rglob("*") if p.is_file()}
    seen, problems, missing_md5 = {}, [], 0
    for b in cc.list_blobs(name_starts_with=prefix):
        name = b.name[len(prefix):]
        seen[name] = b.size
        if name in sizes and b.size != sizes[name]:
            problems.append(f"{name}: size {b.size} != {sizes[name]}")
        md5 = b.content_settings.content_md5
        if not md5:
            missing_md5 += 1
        elif bytes(md5).hex() != expected.get(name):
            problems.append(f"{name}: Content-MD5 {bytes(md5).hex()} != {expected.get(name)}")

    def readback(name: str) -> str | None:
        h = hashlib.md5()
        for chunk in cc.download_blob(prefix + name, max_concurrency=2).chunks():
            h.update(chunk)
        return None if h.hexdigest() == expected[name] else f"{name}: bytes read back differ"

    present = sorted(n for n in seen if n in expected)
    big = [n for n in present if seen[n] >= MiB]
    small = [n for n in present if seen[n] < MiB]
    if len(small) > READ_BACK_SAMPLE:
        small = random.Random(5).sample(small, READ_BACK_SAMPLE)
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        problems += [p for p in ex.map(readback, big + small) if p]
    missing = sorted(set(expected) - set(seen))
    extra = sorted(set(seen) - set(expected))
    ok = not problems and not missing and not extra and missing_md5 == 0
    return {"ok": ok, "blobs": len(seen), "missing": missing[:5], "extra": extra[:5],
            "without_content_md5": missing_md5, "problems": problems[:5], "read_back": len(big) + len(small)}


def diff_trees(a: Path, b: Path) -> dict:
    proc = subprocess.run(["diff", "-rq", "--no-dereference", rel(a), rel(b)], capture_output=True, text=True)
    return {"ok": proc.returncode == 0, "diff": (proc.stdout + proc.stderr)[:800]}


# ----------------------------------------------------------------------------------------------
# Scenario: local → local
# ----------------------------------------------------------------------------------------------

def scenario_local(s: Settings) -> list[Group]:
    base = s.data / "local"
    small = files_dataset("small-files", "", s.size(20_000, 4_000), lambda r: r.randint(0, 32 * KiB), seed=11)
    small.desc = f"{small.files:,} files of 0–32 KiB in {small.files // 200} directories"
    nlarge = s.size(200, 40)
    large = files_dataset("10MiB-files", f"{nlarge} files of 10 MiB", nlarge, lambda r: 10 * MiB, per_dir=100, seed=12)
    out = s.work / "local"
    env = bench_env()
    groups = []
    for ds in (small, large):
        if not (s.selected(f"copy-{ds.name}") or s.selected(f"md5-{ds.name}")):
            continue
        src = ds.materialize(base)
        if s.selected(f"copy-{ds.name}"):
            dests = {n: out / ds.name / n for n in ("ferry", "cp", "rsync")}
            rows = [
                Row("ferry", f"{s.ferry} copy -r {q(src)}/ {q(dests['ferry'])}", "ferry"),
                Row("cp -a", f"cp -a {q(src)} {q(dests['cp'])}", "peer"),
                Row("rsync -a", f"rsync -a {q(src)}/ {q(dests['rsync'])}/", "peer"),
            ]
            # Every row's output goes before every run, not just its own: deleting a tree drops its
            # dirty pages, so one row's writeback never lands in the next row's timing. Many small
            # files are moved aside instead (see set_aside); they are little dirty data anyway.
            for row in rows:
                if ds.files >= MANY_FILES:
                    row.prepare = set_aside_cmd(out / ds.name, trash_dir(s))
                else:
                    row.prepare = f"rm -rf {q(out / ds.name)} && mkdir -p {q(out / ds.name)}"

            def verify(src=src, dests=dests, rows=rows, ds=ds):
                res = {}
                for row, d in zip(rows, dests.values()):
                    set_aside(out / ds.name, trash_dir(s))
                    (out / ds.name).mkdir(parents=True)
                    subprocess.run(row.cmd, shell=True, env=env, check=True,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    res[row.name] = diff_trees(src, d)
                if not s.keep:
                    set_aside(out / ds.name, trash_dir(s))
                return {"ok": all(r["ok"] for r in res.values()),
                        "compared": "each command run once more, then diff -rq source destination", **res}

            groups.append(Group(
                f"copy-{ds.name}", f"local → local copy, {ds.desc}", ds.desc, ds.bytes, ds.files, rows, env,
                warm=[src], verify=verify,
                notes=["All destinations removed before every run; source in the page cache."]))
        if s.selected(f"md5-{ds.name}"):
            twin = out / f"{ds.name}-twin"
            stamp = out / f"{ds.name}-twin.stamp"
            if not (stamp.exists() and stamp.read_text() == ds.stamp_text()):
                rmtree(twin)
                twin.parent.mkdir(parents=True, exist_ok=True)
                subprocess.run(["cp", "-a", rel(src), rel(twin)], check=True)
                stamp.write_text(ds.stamp_text())
            batch = max(1, -(-2 * ds.files // 64))  # ~64 md5sum processes: both cores stay busy
            rows = [
                Row("ferry --compare md5", f"{s.ferry} copy -r --compare md5 {q(src)}/ {q(twin)}", "ferry"),
                Row("md5sum ×2 procs", f"find {q(src)} {q(twin)} -type f -print0 | xargs -0 -P2 -n {batch} md5sum > /dev/null", "peer"),
                Row("rsync -a --checksum (md5)", f"rsync -a --checksum --checksum-choice=md5 {q(src)}/ {q(twin)}/", "peer"),
            ]

            def verify(src=src, twin=twin, ds=ds):
                proc = subprocess.run([s.ferry, "copy", "-r", "--compare", "md5", "--json", rel(src) + "/", rel(twin)],
                                      capture_output=True, text=True, env=env)
                summary = json.loads(proc.stdout or "{}")
                files = summary.get("files", {})
                same = diff_trees(src, twin)
                return {"ok": proc.returncode == 0 and files.get("copied") == 0 and files.get("skipped") == ds.files
                        and same["ok"], "ferry_files": files, "twin_identical": same["ok"]}

            groups.append(Group(
                f"md5-{ds.name}", f"compare by MD5 against an identical copy, {ds.desc}", ds.desc,
                2 * ds.bytes, 2 * ds.files, rows, env, warm=[src, twin], verify=verify,
                notes=["Every row reads and hashes both trees (source and its identical twin): "
                       f"{human_bytes(2 * ds.bytes)}. ferry hashes both sides of each pair and copies "
                       "nothing; md5sum is the hashing floor on two cores; rsync --checksum "
                       "(forced to MD5) is the tool that does the same job."]))
    return groups


# ----------------------------------------------------------------------------------------------
# Scenario: local ↔ Azurite
# ----------------------------------------------------------------------------------------------

def scenario_azurite(s: Settings, host: AzuriteHost) -> list[Group]:
    base = s.data / "azurite"
    datasets = [
        ("medium-file", one_file_dataset("medium-file", s.size(300 * MiB, 64 * MiB))),
        ("large-file", one_file_dataset("large-file", s.size(GiB, 256 * MiB))),
        ("16KiB-files", files_dataset("16KiB-files", "", s.size(2_000, 500), lambda r: 16 * KiB, seed=21)),
        ("small-files", files_dataset("small-files", "", s.size(10_000, 2_000), lambda r: r.randint(0, 8 * KiB), seed=22)),
    ]
    datasets[2][1].desc = f"{datasets[2][1].files:,} files of 16 KiB"
    datasets[3][1].desc = f"{datasets[3][1].files:,} files of 0–8 KiB"
    env = host.tools_env()
    out = s.work / "azurite"
    groups = []
    for key, ds in datasets:
        if not (s.selected(f"up-{key}") or s.selected(f"down-{key}")):
            continue
        src = ds.materialize(base)
        if s.selected(f"up-{key}"):
            prefix = f"up/{ds.name}/"
            specs = [("ferry", f"{s.ferry} copy -r {q(src)}/ {host.url(prefix)}", "ferry")]
            notes = ["A fresh Azurite, restored from a seed holding only the empty container, before every run."]
            # The flag only changes staged blocks; files up to the 4 MiB block size go up in one
            # Put Blob either way, so the row would time the same requests twice.
            if max(sz for _, sz in ds.entries) > 4 * MiB:
                specs.append(("ferry --no-block-md5",
                              f"{s.ferry} copy -r --no-block-md5 {q(src)}/ {host.url(prefix)}", "ferry"))
            else:
                notes.append("No `--no-block-md5` row: every file fits in one Put Blob (≤ 4 MiB block "
                             "size), so the flag changes no request.")
            specs.append(("rclone", f"{RCLONE} copy {q(src)} az:{CONTAINER}/{prefix.rstrip('/')}", "peer"))
            rows = []
            for name, cmd, role in specs:
                slot = host.add_slot(f"up-{key}-{slug(name)}", host.seed_empty())
                rows.append(Row(name, cmd, role, host.prepare_cmd(slot), slot))

            def verify(rows=rows, prefix=prefix, src=src):
                res = {}
                for row in rows:
                    host.open_slot(row.slot)
                    try:
                        res[row.name] = verify_blobs(host.endpoint, prefix, src)
                    finally:
                        host.stop()
                    if not s.keep:
                        host.drop_slot(row.slot)
                return {"ok": all(r["ok"] for r in res.values()), **res}

            groups.append(Group(
                f"up-{key}", f"upload to Azurite, {ds.desc}", ds.desc, ds.bytes, ds.files, rows, env,
                warm=[src], verify=verify, teardown=host.stop, server_cpu=lambda slot: host.server_cpu.get(slot, []),
                notes=notes))
        if s.selected(f"down-{key}"):
            seed = host.seed_with(ds, src)
            prefix = f"data/{ds.name}/"
            dests = {"ferry": out / ds.name / "ferry", "rclone": out / ds.name / "rclone"}
            specs = [
                ("ferry", f"{s.ferry} copy -r {host.url(prefix)} {q(dests['ferry'])}", "ferry"),
                ("rclone", f"{RCLONE} copy az:{CONTAINER}/{prefix.rstrip('/')} {q(dests['rclone'])}", "peer"),
            ]
            rows = []
            for name, cmd, role in specs:
                # All downloads are cleared before each run (dirty pages dropped, as for local).
                slot = host.add_slot(f"down-{key}-{slug(name)}", seed, list(dests.values()),
                                     many_files=ds.files >= MANY_FILES)
                rows.append(Row(name, cmd, role, host.prepare_cmd(slot), slot))

            def verify(rows=rows, src=src, dests=dests):
                res = {}
                for row in rows:
                    host.reset(row.slot)
                    host.server_cpu.pop(row.slot, None)
                    try:
                        subprocess.run(row.cmd, shell=True, env=env, check=True, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL)
                    finally:
                        host.current = None
                        host.stop()
                    res[row.name] = diff_trees(src, dests[row.name])
                if not s.keep:
                    for row in rows:
                        host.drop_slot(row.slot)
                    for d in dests.values():
                        set_aside(d, trash_dir(s))
                return {"ok": all(r["ok"] for r in res.values()),
                        "compared": "each command run once more on a fresh Azurite, then diff -rq source download", **res}

            groups.append(Group(
                f"down-{key}", f"download from Azurite, {ds.desc}", ds.desc, ds.bytes, ds.files, rows, env,
                verify=verify, teardown=host.stop, server_cpu=lambda slot: host.server_cpu.get(slot, []),
                notes=["A fresh Azurite restored from a seed holding the dataset (uploaded once by ferry, "
                       "with Content-MD5) before every run; the local destination removed too."]))
    return groups


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


# ----------------------------------------------------------------------------------------------
# Scenario: upload ceiling against a server that discards
# ----------------------------------------------------------------------------------------------

class DiscardServer:
    def __init__(self, s: Settings):
        self.s = s
        self.proc: subprocess.Popen | None = None
        self.port = 0

    def build(self) -> Path:
        out = self.s.bin / "discard"
        # GOPROXY=off and GOTOOLCHAIN=local: the server uses the standard library only, and a
        # build must never reach for the network.
        env = dict(os.environ, GOPROXY="off", GOTOOLCHAIN="local", GOFLAGS="-mod=mod", CGO_ENABLED="0")
        subprocess.run(["go", "build", "-o", str(out.resolve()), "."], cwd=REPO / "benchmarks" / "discard",
                       env=env, check=True)
        return out

    def start(self) -> None:
        binary = self.build()
        self.port = free_port()
        self.proc = subprocess.Popen([rel(binary), "-addr", f"127.0.0.1:{self.port}"], stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, start_new_session=True)
        first = self.proc.stdout.readline()
        if not first.startswith("listening"):
            raise RuntimeError(f"discard server did not start: {first!r}")

    def stats(self) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/__stats", timeout=5) as r:
            return json.loads(r.read())

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
        self.proc = None


def scenario_discard(s: Settings, server: DiscardServer) -> list[Group]:
    if not s.selected("upload-ceiling"):
        return []
    size = s.size(2 * GiB, 512 * MiB)
    ds = one_file_dataset("ceiling-file", size)
    src = ds.materialize(s.data / "discard")
    server.start()
    account = f"http://127.0.0.1:{server.port}/{AZ_ACCOUNT}"
    env = bench_env({
        "FERRY_AUTH": "anonymous",
        "RCLONE_CONFIG": rel(s.scratch / "rclone.conf"),
        "RCLONE_CONFIG_AZ_TYPE": "azureblob", "RCLONE_CONFIG_AZ_ACCOUNT": AZ_ACCOUNT,
        "RCLONE_CONFIG_AZ_KEY": AZ_KEY, "RCLONE_CONFIG_AZ_ENDPOINT": account,
    })
    (s.scratch / "rclone.conf").touch()
    file = q(src / f"{ds.name}.bin")
    specs = [
        ("ferry, no MD5", f"{s.ferry} copy {file} {account}/{CONTAINER}/f1/ --no-put-md5 --no-block-md5", "ferry"),
        ("ferry, blob MD5", f"{s.ferry} copy {file} {account}/{CONTAINER}/f2/ --no-block-md5", "ferry"),
        ("ferry, blob + block MD5 (default)", f"{s.ferry} copy {file} {account}/{CONTAINER}/f3/", "ferry"),
        ("rclone", f"{RCLONE} copy {file} az:{CONTAINER}/r/", "peer"),
        ("curl -T (one PUT)", f"curl -sf -o /dev/null -T {file} {account}/{CONTAINER}/c/{ds.name}.bin", "peer"),
    ]
    # The server remembers committed sizes (rclone reads them back); forget them before each run.
    reset = f"curl -sf -X POST http://127.0.0.1:{server.port}/__reset"
    rows = [Row(n, c, r, reset) for n, c, r in specs]

    def verify():
        res = {}
        for row in rows:
            subprocess.run(shlex.split(reset), check=True)
            before = server.stats()
            proc = subprocess.run(row.cmd, shell=True, env=env, capture_output=True, text=True)
            after = server.stats()
            got = after["body_bytes"] - before["body_bytes"]
            res[row.name] = {"ok": proc.returncode == 0 and got == size, "bytes_received": got,
                             "requests": after["requests"] - before["requests"],
                             "blocks": after["blocks"] - before["blocks"]}
        return {"ok": all(r["ok"] for r in res.values()), "expected_bytes": size, **res}

    return [Group(
        "upload-ceiling", f"upload of {human_bytes(size)} to a loopback server that discards", ds.desc,
        size, 1, rows, env, warm=[src], verify=verify, teardown=None, throughput_unit="GB/s",
        targets={"ferry, no MD5": [("gb_per_s", ">=", 3.0, "≥ 3 GB/s")]},
        notes=["ferry runs with FERRY_AUTH=anonymous; rclone signs with the dev key (ignored). "
               "GB/s = 10^9 bytes per second of wall time, process start included."])]


# ----------------------------------------------------------------------------------------------
# Scenario: partition and listing
# ----------------------------------------------------------------------------------------------

def make_manifest(s: Settings, lines: int) -> tuple[Path, Path, int]:
    """A ferry manifest of `lines` files and the same entries as fpart -a input ("size path")."""
    root = s.data / "partition"
    root.mkdir(parents=True, exist_ok=True)
    man, sizes = root / f"manifest-{lines}.tsv", root / f"sizes-{lines}.txt"
    stamp = root / f"manifest-{lines}.stamp"
    want = [str(GENERATOR_VERSION), str(lines)]
    if stamp.exists() and stamp.read_text().split()[:2] == want and man.exists() and sizes.exists():
        return man, sizes, int(stamp.read_text().split()[-1])
    log(f"generating a {lines:,}-line manifest")
    rng = random.Random(31)
    total = 0
    with open(man, "w") as fm, open(sizes, "w") as fs:
        fm.write("#ferry-manifest v1\tpath\ttype\tsize\tmtime\tmd5\n")
        for i in range(lines):
            # Log-normal sizes (median ~60 KiB, a tail into GiBs) like a research share.
            size = min(int(rng.lognormvariate(11, 2.5)), 50 * GiB)
            total += size
            path = f"proj{i % 37:02d}/d{(i // 1000):04d}/file-{i:07d}.dat"
            fm.write(f"{path}\tf\t{size}\t{1_700_000_000 + rng.randrange(10**8)}.{rng.randrange(10**9):09d}\t-\n")
            fs.write(f"{size} {path}\n")
    stamp.write_text(f"{' '.join(want)} {total}\n")
    return man, sizes, total


def make_tree(s: Settings, dirs: int, per_dir: int) -> Path:
    root = s.data / f"tree-{dirs}x{per_dir}"
    stamp = s.data / f"tree-{dirs}x{per_dir}.stamp"
    if stamp.exists() and root.is_dir():
        return root
    log(f"creating {dirs * per_dir:,} empty files in {dirs} directories: {dirs * per_dir:,} inodes "
        "(see `df -i`); kept for later campaigns, `campaign.py clean` removes it")
    rmtree(root)
    for d in range(dirs):
        dp = root / f"d{d:04d}"
        dp.mkdir(parents=True)
        dfd = os.open(dp, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for f in range(per_dir):
                os.close(os.open(f"f{f:05d}", os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644, dir_fd=dfd))
        finally:
            os.close(dfd)
    stamp.write_text(f"{dirs} {per_dir}\n")
    return root


def check_partition(out: Path, fpart_out: Path, lines: int, total: int, mode: str, limit: int) -> dict:
    """ferry's parts against the documented rules (docs/worker.md): all entries and bytes, N
    parts for --parts; for the input-order modes fpart's live-mode rule — a part closes as soon as
    it holds F entries or S bytes — so the same parts as `fpart -L` on the same input."""
    summary = json.loads((out / "summary.json").read_text())
    parts = summary["partitions"]
    ok = summary["files"] == lines and summary["bytes"] == total
    counted, rule_broken = 0, 0
    for p in parts:
        sizes = []
        with open(out / p["file"]) as f:
            for line in f:
                if line.strip() and not line.startswith("#"):
                    sizes.append(int(line.split("\t")[2]))
        counted += len(sizes)
        if mode == "max-files" and len(sizes) > limit:
            rule_broken += 1
        # Only the entry that tipped a part over S may take it past S.
        if mode == "max-bytes" and sizes and sum(sizes) - sizes[-1] >= limit:
            rule_broken += 1
    if mode == "parts":
        ok &= len(parts) == limit
    ok &= counted == lines and rule_broken == 0
    theirs = fpart_part_counts(fpart_out)
    same = [p["files"] for p in parts] == theirs
    if mode != "parts":
        ok &= same
    return {"ok": ok, "parts": len(parts), "files": summary["files"], "lines_in_parts": counted,
            "parts_breaking_the_rule": rule_broken, "fpart_parts": len(theirs), "fpart_lines": sum(theirs),
            "same_parts_as_fpart": same, "imbalance_pct": summary.get("imbalance_pct")}


def fpart_part_counts(out: Path) -> list[int]:
    """Lines per fpart output file, in partition order (part.0 first if fpart made one)."""
    counts = []
    for p in sorted(out.glob("part.*"), key=lambda p: int(p.suffix[1:])):
        with open(p, "rb") as f:
            counts.append(sum(1 for _ in f))
    return counts


def count_fpart(out: Path) -> int:
    return sum(fpart_part_counts(out))


def scenario_partition(s: Settings) -> list[Group]:
    big = s.size(1_000_000, 100_000)
    small = big // 10
    out = s.work / "partition"
    env = bench_env()
    groups = []
    modes = [
        ("parts", "--parts 16", "-n 16", 16, "16 parts balanced by size (LPT)"),
        ("max-files", "--max-files 10000", "-L -f 10000", 10000, "at most 10,000 files a part, input order"),
        ("max-bytes", "--max-bytes 10GiB", f"-L -s {10 * GiB}", 10 * GiB, "parts closed on reaching 10 GiB, input order"),
    ]
    for lines, suffix in ((big, ""), (small, "-tenth")):
        for mode, fflag, pflag, limit, desc in modes:
            gid = f"{mode}{suffix}"
            if not s.selected(gid):
                continue
            man, sizes, total = make_manifest(s, lines)
            fo, po = out / gid / "ferry", out / gid / "fpart"
            rows = [
                Row("ferry partition", f"{s.ferry} partition {q(man)} --out {q(fo)} {fflag}", "ferry",
                    f"rm -rf {q(fo)}"),
                Row(f"fpart -a {pflag}", f"fpart -a {pflag} -i {q(sizes)} -o {q(po)}/part", "peer",
                    f"rm -rf {q(po)} && mkdir -p {q(po)}"),
            ]
            if mode == "parts":
                targets = {"ferry partition": [("wall_median", "<", 1.0, "wall < 1 s"),
                                               ("rss_mib_median", "<", 300, "peak RSS < 300 MiB")]}
            else:
                targets = {"ferry partition": [("rss_mib_median", "<", 50, "peak RSS < 50 MiB")]}

            def verify(fo=fo, po=po, lines=lines, total=total, mode=mode, limit=limit):
                res = check_partition(fo, po, lines, total, mode, limit)
                res["ok"] = res["ok"] and res["fpart_lines"] == lines
                return res

            groups.append(Group(
                gid, f"partition a {lines:,}-line manifest: {desc}", f"manifest of {lines:,} files "
                f"({human_bytes(total)} in total)", 0, lines, rows, env, warm=[man.parent], verify=verify,
                targets=targets,
                notes=["fpart reads the same entries as `size path` lines (-a: no crawling). "
                       "For the input-order modes fpart runs live (-L), the streaming equivalent; "
                       "-n cannot be combined with -L."]))
    if s.selected("list-tree"):
        dirs = s.size(1000, 100)
        tree = make_tree(s, dirs, 1000)
        files = dirs * 1000
        base = out / "list-tree"
        outs = {n: base / n for n in ("ferry", "fpart", "fpart-live", "find")}
        rows = [
            Row("ferry ls -r", f"{s.ferry} ls -r {q(tree)} > {q(outs['ferry'])}/list.tsv", "ferry"),
            Row("fpart -f 100000", f"fpart -f 100000 -o {q(outs['fpart'])}/part {q(tree)}", "peer"),
            Row("fpart -L -f 100000", f"fpart -L -f 100000 -o {q(outs['fpart-live'])}/part {q(tree)}", "peer"),
            Row("find -printf", f"find {q(tree)} -printf '%P\\t%y\\t%s\\t%T@\\n' > {q(outs['find'])}/list.tsv", "peer"),
        ]
        for row, d in zip(rows, outs.values()):
            row.prepare = f"rm -rf {q(d)} && mkdir -p {q(d)}"

        def warm_tree():
            subprocess.run(["find", rel(tree), "-printf", ""], check=True)

        def verify():
            with open(outs["ferry"] / "list.tsv") as f:
                kinds = [line.split("\t")[1] for line in f if not line.startswith("#")]
            fp, fpl = count_fpart(outs["fpart"]), count_fpart(outs["fpart-live"])
            ok = kinds.count("f") == files and kinds.count("d") == dirs and fp == files and fpl == files
            return {"ok": ok, "ferry_files": kinds.count("f"), "ferry_dirs": kinds.count("d"),
                    "fpart_entries": fp, "fpart_live_entries": fpl}

        groups.append(Group(
            "list-tree", f"list a tree of {files:,} empty files in {dirs:,} directories", f"{files:,} files",
            0, files, rows, env, setup=warm_tree, verify=verify,
            notes=["Output written to a file by every row; the tree's inodes are in cache (one "
                   "untimed `find` first)."]))
    return groups


# ----------------------------------------------------------------------------------------------
# Scenario: an NFS-class destination (every request a round trip), emulated by tools/latencyfs
# ----------------------------------------------------------------------------------------------

NFS_DELAYS_MS = (1, 5)


class LatencyHost(ControlledHost):
    """A latencyfs mount over one backing directory, remounted before every measured run (a new
    client: nothing cached from the run before) once the run's destination has been put back
    underneath, uncounted, in its starting state: empty, or a copy of a seed tree. The
    filesystem's counters of each run are kept per slot."""

    def __init__(self, s: Settings):
        super().__init__(s.scratch / "latencyfs-ctl.sock")
        self.s = s
        self.backing = s.work / "nfs" / "backing"
        self.mnt = s.work / "nfs" / "mnt"
        self.delay_ms = 0.0
        self.fs: LatencyFS | None = None
        self.current: str | None = None
        self.seeds: dict[str, Path | None] = {}
        self.counts: dict[str, list] = {}

    def add_slot(self, name: str, seed: Path | None) -> str:
        self.seeds[name] = seed
        self.counts.pop(name, None)
        return name

    def dest(self, slot: str) -> Path:
        return self.mnt / slot

    def reset(self, slot: str) -> None:
        self.stop()
        d = self.backing / slot
        set_aside(d, trash_dir(self.s))
        seed = self.seeds[slot]
        if seed is None:
            d.mkdir(parents=True)
        else:
            subprocess.run(["cp", "-a", rel(seed), rel(d)], check=True)
        self.fs = LatencyFS(self.backing, self.mnt, delay_ms=self.delay_ms).mount()
        self.current = slot

    def stop(self) -> None:
        if self.fs is None:
            return
        if self.current is not None:
            time.sleep(0.1)  # releases trail the last close() by a moment
            self.counts.setdefault(self.current, []).append(self.fs.stats())
        self.fs.unmount()
        self.fs = None
        self.current = None

    def drop(self, slots: list[str]) -> None:
        for slot in slots:
            set_aside(self.backing / slot, trash_dir(self.s))


def stale_seed(src: Path, seed: Path, every: int) -> None:
    """A copy of src where every `every`-th file (in sorted order) has an mtime a day older, so a
    size+mtime re-run finds 1/every of the files changed."""
    subprocess.run(["cp", "-a", rel(src), rel(seed)], check=True)
    files = sorted(p for p in seed.rglob("*") if p.is_file())
    for p in files[::every]:
        st = p.stat()
        os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns - 86_400 * 10**9))


def stage_mpifileutils(s: Settings) -> Path | None:
    """dcp and dsync copied next to the ferry snapshot with the libraries they load from outside
    the system's directories, so the commands in the results name no path of this machine."""
    if s.mpifileutils is None:
        return None
    out = s.bin / "mpifileutils"
    rmtree(out)
    out.mkdir(parents=True)
    for tool in ("dcp", "dsync"):
        found = [p for p in s.mpifileutils.rglob(tool) if p.is_file() and os.access(p, os.X_OK)]
        if not found:
            sys.exit(f"campaign: no {tool} under {s.mpifileutils}")
        shutil.copy2(found[0], out / tool)
        for line in subprocess.run(["ldd", str(found[0])], capture_output=True, text=True).stdout.splitlines():
            parts = line.split("=>")
            lib = parts[1].split("(")[0].strip() if len(parts) == 2 else ""
            if lib.startswith("/") and not lib.startswith(("/lib", "/usr")):
                shutil.copy2(lib, out / Path(parts[0].strip()).name)
    return out


def mpirun(mfu: Path, n: int, tool_args: str) -> str:
    root = " --allow-run-as-root" if os.geteuid() == 0 else ""
    return (f"env LD_LIBRARY_PATH={q(mfu)} mpirun{root} --oversubscribe -n {n} {q(mfu)}/{tool_args}")


def scenario_nfs(s: Settings, host: LatencyHost) -> list[Group]:
    build_latencyfs()
    base = s.data / "nfs"
    n = s.size(2_000, 300)
    flat = files_dataset("nfs-flat", f"{n:,} files of 0–32 KiB in one directory", n,
                         lambda r: r.randint(0, 32 * KiB), per_dir=n, seed=51)
    tree = files_dataset("nfs-tree", f"{n:,} files of 0–32 KiB in {n // 50} directories", n,
                         lambda r: r.randint(0, 32 * KiB), per_dir=50, seed=52)
    nlarge = s.size(50, 10)
    large = files_dataset("nfs-10MiB", f"{nlarge} files of 10 MiB in one directory", nlarge,
                          lambda r: 10 * MiB, per_dir=nlarge, seed=53)
    ferry_depth = 2 * min(max(os.cpu_count() or 8, 8), 96)  # --parallel-files' default
    mfu = stage_mpifileutils(s)
    seeds = s.work / "nfs" / "seeds"
    env = bench_env()
    groups = []
    for key, ds in (("flat", flat), ("tree", tree), ("10MiB", large)):
        phases = [p for p in ("baseline", "unchanged", "changed-1pct")
                  if any(s.selected(f"{p}-{key}-{d}ms") for d in NFS_DELAYS_MS)]
        if not phases:
            continue
        src = ds.materialize(base)
        seed_of = {"baseline": None}
        if "unchanged" in phases:
            seed_of["unchanged"] = seeds / f"{ds.name}-same"
        if "changed-1pct" in phases:
            seed_of["changed-1pct"] = seeds / f"{ds.name}-1pct"
        for phase in phases:
            seed = seed_of[phase]
            stamp = seeds / f"{ds.name}-{phase}.stamp"
            if seed is not None and not (stamp.exists() and stamp.read_text() == ds.stamp_text()):
                rmtree(seed)
                seed.parent.mkdir(parents=True, exist_ok=True)
                if phase == "unchanged":
                    subprocess.run(["cp", "-a", rel(src), rel(seed)], check=True)
                else:
                    stale_seed(src, seed, 100)
                stamp.write_text(ds.stamp_text())
            for delay in NFS_DELAYS_MS:
                gid = f"{phase}-{key}-{delay}ms"
                if s.selected(gid):
                    groups.append(nfs_group(s, host, gid, phase, ds, src, seed, delay, ferry_depth, mfu, env))
    return groups


def nfs_group(s: Settings, host: LatencyHost, gid: str, phase: str, ds: Dataset, src: Path, seed: Path | None,
              delay: int, ferry_depth: int, mfu: Path | None, env: dict) -> Group:
    def fpsync(n: int, tool: str) -> str:
        per_job = max(1, -(-ds.files // n))  # at least n jobs, whatever the tree's size
        mode = "-m cpio " if tool == "cpio" else ""
        return (f'fpsync -n {n} -f {per_job} -t "$PWD/{rel(host.backing.parent)}/fpsync-{gid}" {mode}'
                f'"$PWD/{rel(src)}/" "$PWD/{{dst}}/"')

    specs = [
        ("ferry", f"{s.ferry} copy -r {q(src)}/ {{dst}}", "ferry", ferry_depth),
        ("ferry --parallel-files 64", f"{s.ferry} copy -r --parallel-files 64 {q(src)}/ {{dst}}", "ferry", 64),
    ]
    if phase == "baseline":
        specs += [(f"fpsync -n {n} cpio", fpsync(n, "cpio"), "peer", n) for n in (16, 64)]
    specs += [(f"fpsync -n {n} rsync", fpsync(n, "rsync"), "peer", n) for n in (16, 64)]
    specs.append(("rsync -a", f"rsync -a {q(src)}/ {{dst}}/", "peer", 1))
    if phase == "baseline":
        specs.append(("cp -a", f"cp -a {q(src)}/. {{dst}}/", "peer", 1))
    if mfu is not None:
        # dcp copies SRC to TARGET, or into it when it exists: the empty destination goes first.
        specs.append(("dcp -n 16", f"rmdir {{dst}} && {mpirun(mfu, 16, f'dcp -q -p {q(src)} {{dst}}')}", "peer", 16)
                     if phase == "baseline" else
                     ("dsync -n 16", mpirun(mfu, 16, f"dsync -q {q(src)} {{dst}}"), "peer", 16))
    rows = []
    for name, cmd, role, depth in specs:
        slot = host.add_slot(f"{gid}-{slug(name)}", seed)
        rows.append(Row(name, cmd.format(dst=rel(host.dest(slot))), role, host.prepare_cmd(slot), slot, depth))

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
                    if p.is_file() and p.stat().st_mtime_ns // 10**9 != (d / p.relative_to(src)).stat().st_mtime_ns // 10**9:
                        stale += 1
            res[row.name] = {"ok": same["ok"] and stale == 0, "diff": same["diff"], "mtime_differs": stale}
        if not s.keep:
            host.drop([r.slot for r in rows])
        return {"ok": all(r["ok"] for r in res.values()),
                "compared": "the last run's destination (underneath the mount) with the source: diff -rq, mtimes", **res}

    what = {"baseline": "baseline copy", "unchanged": "unchanged re-run",
            "changed-1pct": "re-run with 1% of the files changed"}[phase]
    notes = [f"Destination on latencyfs, {delay} ms per request, remounted before every run "
             f"(nothing cached from the run before); "
             + ("empty before every run." if seed is None else
                "restored underneath before every run from a copy of the source"
                + (" in which every 100th file has an mtime a day older." if phase == "changed-1pct" else "."))
             + " Latency limit = requests × delay ÷ depth: the wall time a tool keeping `depth` requests "
               "in flight all the time would need (depth: ferry's --parallel-files, fpsync's -n, 1 for "
               "rsync and cp); requests counted by latencyfs in each run (medians)."]
    return Group(gid, f"{what} to an NFS-like mount ({delay} ms a request), {ds.desc}", ds.desc,
                 ds.bytes if phase == "baseline" else 0, ds.files, rows, env, notes=notes, warm=[src],
                 verify=verify, setup=setup, teardown=host.stop, run_stats=lambda slot: host.counts.get(slot, []),
                 delay_ms=delay, best_peer_only=True)


# ----------------------------------------------------------------------------------------------
# Machine description and results
# ----------------------------------------------------------------------------------------------

def first_line(cmd: list[str]) -> str:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
        return (p.stdout or p.stderr).strip().splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return "unavailable"


def machine() -> dict:
    cpu = "unknown"
    for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
        if line.startswith("Model name:"):
            cpu = line.split(":", 1)[1].strip()
    mem = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem = int(line.split()[1]) * KiB
    osname = "Linux"
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                osname = line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return {"nproc": int(first_line(["nproc"]) or 0), "cpu": cpu, "memory_gib": round(mem / GiB, 1),
            "os": osname, "kernel": platform.release()}


def versions(scenario: str) -> dict:
    v = {"hyperfine": first_line(["hyperfine", "--version"])}
    if scenario == "local":
        v |= {"cp": first_line(["cp", "--version"]), "rsync": first_line(["rsync", "--version"]),
              "md5sum": first_line(["md5sum", "--version"])}
    if scenario in ("azurite", "discard"):
        v["rclone"] = first_line([RCLONE, "version"])
    if scenario == "azurite":
        try:
            v["azurite"] = "azurite " + json.loads((REPO / "node_modules/azurite/package.json").read_text())["version"]
        except OSError:
            v["azurite"] = "azurite unavailable"
        v["node"] = "node " + first_line(["node", "--version"])
    if scenario == "discard":
        v["go"] = first_line(["go", "version"])
        v["curl"] = " ".join(first_line(["curl", "--version"]).split()[:2])
    if scenario == "nfs":
        v |= {"fpart": first_line(["fpart", "-V"]), "rsync": first_line(["rsync", "--version"]),
              "cp": first_line(["cp", "--version"]), "cpio": first_line(["cpio", "--version"]),
              "libfuse": "libfuse " + first_line(["pkg-config", "--modversion", "fuse3"])}
    if scenario == "partition":
        v["fpart"] = first_line(["fpart", "-V"])
        v["find"] = first_line(["find", "--version"])
    return v


def fmt(x, digits=2, none="–"):
    if x is None:
        return none
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.{digits}f}"


def compact(v):
    """A verification record without its empty fields, for one line of markdown."""
    if isinstance(v, dict):
        return {k: compact(x) for k, x in v.items() if x not in ([], "", None, {})}
    return v


def render_markdown(res: dict, heading: int = 1) -> str:
    h = "#" * heading
    m = res["machine"]
    for g in res["groups"]:  # results written before groups named their binary
        g.setdefault("ferry_sha256", res["ferry"]["sha256"])
    lines = [
        f"{h} Benchmark campaign: {res['scenario']}{' (quick)' if res['quick'] else ''}", "",
        f"- Measured {res['date']} on {m['nproc']} × {m['cpu']}, {m['memory_gib']} GiB RAM, {m['os']}, kernel {m['kernel']}.",
        (f"- Groups were measured at different times with different ferry binaries: "
         f"{', '.join(sorted({g.get('ferry_sha256', '?') for g in res['groups']}))} (sha256 prefixes; "
         f"each group names its own). Latest: " if len({g.get('ferry_sha256') for g in res['groups']}) > 1 else "- ")
        + f"{res['ferry']['version']} (snapshot of the worker binary, sha256 {res['ferry']['sha256']}…, "
        f"worker commit {res['ferry']['worker_commit']}{', with uncommitted changes' if res['ferry'].get('worker_tree_modified') else ''}).",
        f"- {res['runs']} run(s) per row, one fresh `--prepare` before each, row order rotated between rounds; "
        "wall and CPU are medians; CPU = user + system of the measured command (hyperfine); "
        "peak RSS from GNU time `%M`.",
        f"- Load average (1 min) when the rounds started: {res['load1']['min']}–{res['load1']['max']} "
        f"(the machine is shared; {m['nproc']} cores).",
        f"- Reproduce: `{res['command']}`"
        + (f" (last refreshed in part with `{res['partial_command']}`)" if res.get("partial_command") else ""),
        "- Tools: " + "; ".join(" ".join(v.split()) for v in res["versions"].values()) + ".",
        "",
        f"{h}# Ratios: ferry ÷ peer (below 1: ferry takes less)", "",
        "| group | ferry | peer | wall | CPU | peak RSS |",
        "|---|---|---|---:|---:|---:|",
    ]
    for g in res["groups"]:
        for r in g["ratios"]:
            lines.append(f"| {g['id']} | {r['ferry']} | {r['peer']} | {fmt(r['wall'])} | {fmt(r['cpu'])} | {fmt(r['rss'])} |")
    for g in res["groups"]:
        unit = g.get("throughput_unit", "MiB/s")
        has_server = any("server_cpu_median" in r for r in g["rows"])
        has_tp = bool(g["bytes"])
        lines += ["", f"{h}# {g['id']}: {g['title']}", "",
                  f"Dataset: {g['dataset']}. Measured {g['date']}, load {g['load1']['min']}–{g['load1']['max']}, "
                  f"{g['seconds']} s for the group"
                  + (f", ferry sha256 {g['ferry_sha256']}…"
                     if len({x.get("ferry_sha256") for x in res["groups"]}) > 1 else "") + ".", ""]
        head = ["row", "wall s (median)", "min–max"]
        if has_tp:
            head += [unit, "CPU s", "CPU s/GiB"]
        else:
            head += ["CPU s"]
        head += ["peak RSS MiB"]
        if has_server:
            head += ["Azurite CPU s"]
        has_requests = any("requests_median" in r for r in g["rows"])
        if has_requests:
            head += ["requests", "in flight (avg)", "depth", "latency limit s", "wall ÷ limit"]
        head += ["ok runs"]
        lines += ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
        for r in g["rows"]:
            if "wall_median" not in r:
                lines.append("| " + " | ".join([r["name"], "failed"] + [""] * (len(head) - 3) + [f"0/{len(r['runs'])}"]) + " |")
                continue
            cells = [r["name"], fmt(r["wall_median"]), f"{fmt(r['wall_min'])}–{fmt(r['wall_max'])}"]
            if has_tp:
                tp = r["gb_per_s"] if unit == "GB/s" else r["mib_per_s"]
                cells += [fmt(tp), fmt(r["cpu_median"]), fmt(r["cpu_s_per_gib"])]
            else:
                cells += [fmt(r["cpu_median"])]
            cells += [fmt(r.get("rss_mib_median"), 1)]
            if has_server:
                cells += [fmt(r.get("server_cpu_median"))]
            if has_requests:
                cells += [f"{r['requests_median']:,.0f}" if "requests_median" in r else "–",
                          fmt(r.get("inflight_avg_median"), 1), str(r.get("depth", "–")),
                          fmt(r.get("latency_limit_s")), fmt(r.get("wall_over_limit"), 1)]
            cells += [f"{r['ok_runs']}/{len(r['runs'])}"]
            lines.append("| " + " | ".join(cells) + " |")
        targets = [(r["name"], t) for r in g["rows"] for t in r.get("targets", [])]
        if targets:
            lines.append("")
            for name, t in targets:
                lines.append(f"- Target for {name}: {t['target']} — {'met' if t['met'] else 'missed'} "
                             f"(measured {fmt(t['value'], 3)}).")
        lines += ["", "Commands (run from the repo root):", ""]
        lines += [f"- {r['name']}: `{r['command']}`" for r in g["rows"]]
        v = g.get("verification") or {}
        if v:
            status = "passed" if v.get("ok") else "FAILED"
            detail = compact({k: val for k, val in v.items() if k != "ok"})
            text = json.dumps(detail, ensure_ascii=False).replace('"ok": true, ', "").replace(', "ok": true', "")
            lines += ["", f"Verification outside the timed runs: **{status}** — `{text[:900]}`"]
        for n in g.get("notes", []):
            lines += ["", n]
    return "\n".join(lines) + "\n"


def render_chart(res: dict, path: Path) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter
    except ImportError:
        log("matplotlib is not installed (make setup installs it); no chart")
        return False
    labels, data = [], {"wall": [], "cpu": [], "rss": []}
    for g in res["groups"]:
        for r in g["ratios"]:
            labels.append(f"{g['id']}: {r['ferry']} ÷ {r['peer']}")
            for k in data:
                data[k].append(r[k] if r[k] else float("nan"))
    if not labels:
        return False
    height = 0.27
    fig, ax = plt.subplots(figsize=(10, 0.55 * len(labels) + 1.6))
    ys = range(len(labels))
    colors = {"wall": "#1f77b4", "cpu": "#ff7f0e", "rss": "#2ca02c"}
    names = {"wall": "wall time", "cpu": "CPU seconds", "rss": "peak RSS"}
    for i, k in enumerate(("wall", "cpu", "rss")):
        pos = [y + (i - 1) * height for y in ys]
        ax.barh(pos, data[k], height=height, color=colors[k], label=names[k])
        for y, v in zip(pos, data[k]):
            if v == v:  # not NaN
                ax.annotate(f"{v:.2f}", (v, y), xytext=(3, 0), textcoords="offset points",
                            va="center", fontsize=6.5)
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_xscale("log")
    values = [v for k in data for v in data[k] if v == v]
    lo, hi = min(values + [1.0]) / 1.3, max(values + [1.0]) * 1.5
    ax.set_xlim(lo, hi)
    # Plain numbers on the log axis: 0.5 and 2 read better than 5×10⁻¹ and 2×10⁰.
    ticks = [t for t in (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1, 1.5, 2, 3, 5, 10, 20, 50) if lo <= t <= hi]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_yticks(list(ys))
    ax.set_yticklabels(labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("ferry ÷ peer (log scale; left of 1 = ferry uses less)")
    ax.set_title(f"ferry benchmark campaign '{res['scenario']}', {res['date'][:10]}, "
                 f"load {res['load1']['min']}–{res['load1']['max']}", fontsize=10, pad=22)
    ax.legend(fontsize=8, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, frameon=False)
    ax.grid(axis="x", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def write_results(s: Settings, res: dict) -> None:
    s.results.mkdir(parents=True, exist_ok=True)
    base = s.results / res["scenario"]
    base.with_suffix(".json").write_text(json.dumps(res, indent=1, ensure_ascii=False) + "\n")
    base.with_suffix(".md").write_text(render_markdown(res))
    render_chart(res, base.with_suffix(".png"))


DOCS = REPO / "docs" / "benchmarks.md"


def update_docs(results_dir: Path) -> None:
    """Replace each scenario's block between its markers with the latest results, so the docs
    never quote a number that no run produced."""
    if not DOCS.exists():
        return
    text = DOCS.read_text()
    for sc in SCENARIOS:
        f = results_dir / f"{sc}.json"
        begin, end = f"<!-- results:{sc}:begin -->", f"<!-- results:{sc}:end -->"
        if not f.exists() or begin not in text or end not in text:
            continue
        res = json.loads(f.read_text())
        body = render_markdown(res, heading=3).split("\n", 2)[2]  # the doc has its own heading
        chart = f"![{sc} ratios](../{rel(results_dir)}/{sc}.png)\n\n" if (results_dir / f"{sc}.png").exists() else ""
        pre, rest = text.split(begin, 1)
        _, post = rest.split(end, 1)
        text = f"{pre}{begin}\n{chart}{body}{end}{post}"
    DOCS.write_text(text)


# ----------------------------------------------------------------------------------------------
# Driver
# ----------------------------------------------------------------------------------------------

def run_scenario(s: Settings, scenario: str, command: str, partial: str | None = None) -> dict:
    started = time.monotonic()
    ferry = snapshot_ferry(s)
    s.ferry_sha256 = ferry["sha256"]
    purge_trash(s)  # left by an interrupted campaign
    host = server = None
    groups_out = []
    loads = [os.getloadavg()[0]]
    try:
        if scenario == "local":
            groups = scenario_local(s)
        elif scenario == "azurite":
            host = AzuriteHost(s)
            host.serve()
            groups = scenario_azurite(s, host)
        elif scenario == "discard":
            server = DiscardServer(s)
            groups = scenario_discard(s, server)
        elif scenario == "partition":
            groups = scenario_partition(s)
        elif scenario == "nfs":
            host = LatencyHost(s)
            host.serve()
            groups = scenario_nfs(s, host)
        else:
            raise ValueError(scenario)
        for g in groups:
            groups_out.append(run_group(s, scenario, g))
    finally:
        if host:
            host.close()
        if server:
            server.stop()
        purge_trash(s)
    loads.append(os.getloadavg()[0])
    for g in groups_out:
        if g["load1"]:
            loads += [g["load1"]["min"], g["load1"]["max"]]
    res = {
        "scenario": scenario, "quick": s.quick, "runs": s.runs, "command": command,
        "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": machine(), "ferry": ferry, "versions": versions(scenario),
        "load1": {"min": round(min(loads), 2), "max": round(max(loads), 2)},
        "seconds": round(time.monotonic() - started, 1), "groups": groups_out,
    }
    # A partial campaign (--only) refreshes its groups and keeps the others from the last run.
    prev_file = s.results / f"{scenario}.json"
    if s.only and prev_file.exists():
        prev = json.loads(prev_file.read_text())
        if prev.get("quick") == s.quick:
            res["partial_command"] = partial
            for g in prev["groups"]:
                g.setdefault("ferry_sha256", prev["ferry"]["sha256"])
            fresh = {g["id"] for g in groups_out}
            order = [g["id"] for g in prev["groups"]] + [g["id"] for g in groups_out if g["id"] not in
                                                        {p["id"] for p in prev["groups"]}]
            merged = {g["id"]: g for g in prev["groups"] if g["id"] not in fresh} | {g["id"]: g for g in groups_out}
            res["groups"] = [merged[i] for i in order]
            res["load1"] = {"min": min(res["load1"]["min"], prev["load1"]["min"]),
                            "max": max(res["load1"]["max"], prev["load1"]["max"])}
    write_results(s, res)
    failed = [g["id"] for g in groups_out if not (g.get("verification") or {}).get("ok", True)]
    log(f"{scenario}: done in {res['seconds']:.0f} s; results in {rel(s.results)}/{scenario}.md"
        + (f"; VERIFICATION FAILED for {failed}" if failed else ""))
    return res


def main(argv: list[str]) -> int:
    if argv[:1] == ["_ctl"]:  # hyperfine's --prepare talks to the running campaign through this
        return ctl_client(argv[1], argv[2:])
    ap = argparse.ArgumentParser(prog="benchmarks/campaign.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("scenario", choices=[*SCENARIOS, "all", "report", "clean"])
    ap.add_argument("--runs", type=int, help="measured runs per row (default 3; 1 with --quick)")
    ap.add_argument("--quick", action="store_true", help="one run, smaller datasets; results go to the scratch dir")
    ap.add_argument("--only", action="append", default=[], metavar="GLOB",
                    help="only groups whose id matches (repeatable), e.g. --only 'up-*'")
    ap.add_argument("--scratch", default="benchmarks/.data", help="datasets and workspaces (default: %(default)s)")
    ap.add_argument("--results", help="where results go (default benchmarks/results; <scratch>/results-quick with --quick)")
    ap.add_argument("--ferry", default="worker/target/release/ferry", help="worker binary to snapshot and time")
    ap.add_argument("--mpifileutils", metavar="DIR",
                    help="nfs: also time dcp and dsync from this build directory (never part of the repo)")
    ap.add_argument("--keep", action="store_true", help="keep destinations and Azurite workspaces after verifying")
    ap.add_argument("--no-docs", action="store_true", help="don't refresh the results blocks in docs/benchmarks.md")
    ap.add_argument("--docs", action="store_true",
                    help="refresh them even with --quick or --results (a small-scale campaign on purpose)")
    a = ap.parse_args(argv)
    scratch = Path(a.scratch)
    results = Path(a.results) if a.results else (scratch / "results-quick" if a.quick else Path("benchmarks/results"))
    s = Settings(scratch=scratch, results=results, runs=a.runs or (1 if a.quick else 3), quick=a.quick,
                 only=a.only, keep=a.keep,
                 update_docs=not a.no_docs and (a.docs or (not a.quick and not a.results)),
                 ferry_source=Path(a.ferry), mpifileutils=Path(a.mpifileutils) if a.mpifileutils else None)
    if a.scenario == "clean":
        # Only what the campaigns make: other benchmarks (benchmarks/pipeline.sh) share the dir.
        for name in ("data", "data-quick", "work", "azurite", "azurite-quick", "bin", "runs", "trash",
                     "results-quick", "rclone.conf", "azurite-ctl.sock", "latencyfs-ctl.sock"):
            p = scratch / name
            if p.exists():
                log(f"removing {rel(p)}")
                rmtree(p) if p.is_dir() else p.unlink()
        return 0
    if a.scenario == "report":
        for sc in SCENARIOS:
            f = results / f"{sc}.json"
            if f.exists():
                write_results(s, json.loads(f.read_text()))
        if s.update_docs:
            update_docs(results)
        return 0
    missing = [t for t in ("hyperfine", TIME) if not shutil.which(t)]
    if missing:
        sys.exit(f"campaign: missing {missing}: run `make setup` (scripts/apt-packages.txt)")
    scratch.mkdir(parents=True, exist_ok=True)
    todo = SCENARIOS if a.scenario == "all" else (a.scenario,)
    failed = False
    for sc in todo:
        # The command that redoes the whole scenario; a partial run (--only) is recorded apart.
        # A build outside the repo is named by its role, not by where it sits on this machine.
        shown = ["--mpifileutils=DIR" if x.startswith("--mpifileutils=") else x for x in argv[1:]]
        shown = ["DIR" if i and shown[i - 1] == "--mpifileutils" else x for i, x in enumerate(shown)]
        opts, skip = [], False
        for arg in shown:
            if skip or arg.startswith("--only"):
                skip = arg == "--only"
                continue
            opts.append(arg)
        cmd = " ".join([".venv/bin/python benchmarks/campaign.py", sc, *opts])
        partial = " ".join([".venv/bin/python benchmarks/campaign.py", sc, *shown]) if a.only else None
        res = run_scenario(s, sc, cmd, partial)
        failed |= any(not (g.get("verification") or {}).get("ok", True) for g in res["groups"])
        if s.update_docs:
            update_docs(results)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
