"""What every part of the campaigns shares: paths, logging, the environment of the measured
commands, the settings and the ferry snapshot."""

from __future__ import annotations

import fnmatch
import hashlib
import os
import random
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
os.chdir(REPO)  # every path written into commands and results is relative to the repo root

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
SCENARIOS = ("local", "azurite", "discard", "partition", "nfs", "pipeline", "sweep")
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


def trash_dir(s: Settings) -> Path:
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
    return (
        f"mkdir -p {q(trash)} && {{ [ ! -e {q(p)} ] || mv {q(p)} {q(trash)}/{p.name}-$(date +%s%N); }} "
        f"&& mkdir -p {q(p)}"
    )


def purge_trash(s: Settings, settle: bool = False) -> None:
    """Delete what was set aside. With settle, then wait out the minute in which ext4 (without a
    journal) skips the freed inodes (see set_aside), so the next group's runs don't pay for it."""
    t = trash_dir(s)
    if t.exists():
        log(
            f"deleting the outputs set aside during the runs ({rel(t)})"
            + (", then a minute's wait" if settle else "")
        )
        rmtree(t)
        if settle:
            subprocess.run(["sync", "-f", rel(s.scratch)], check=False)
            time.sleep(61)


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
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(drop) and k.lower() not in ("http_proxy", "https_proxy", "all_proxy")
    }
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    # If ferry ever fell through to managed identity it would hit a closed port, not a real IMDS.
    env["FERRY_IMDS_ENDPOINT"] = "http://127.0.0.1:9"
    env.update(extra or {})
    return env


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
    azcp: Path | None = None  # an azcp binary built elsewhere (docs/benchmarks.md), or None
    fraction: float = (
        1.0  # of the full-scale file counts where a scenario allows it (nfs, pipeline)
    )
    rounds: int | None = None  # fewer rounds than whole rotations (--rounds), labelled in notes

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

    def count(self, full: int, quick: int) -> int:
        """A file or directory count: --fraction of the full one, for scenarios that run for
        hours at full scale."""
        return quick if self.quick else max(1, round(full * self.fraction))

    @property
    def scale(self) -> str:
        return "quick" if self.quick else "full" if self.fraction == 1 else f"×{self.fraction:g}"

    def selected(self, group_id: str) -> bool:
        return not self.only or any(fnmatch.fnmatch(group_id, pat) for pat in self.only)


def snapshot_ferry(s: Settings) -> dict:
    """Copy the worker binary aside: other engineers rebuild it while a campaign runs, and every
    run of a campaign must time the same bytes."""
    src = s.ferry_source
    if not src.exists():
        sys.exit(
            f"campaign: {rel(src)} is missing; build it first: "
            "cargo build --release --manifest-path worker/Cargo.toml"
        )
    s.bin.mkdir(parents=True, exist_ok=True)
    dst = s.bin / "ferry"
    tmp = s.bin / "ferry.tmp"
    shutil.copy2(src, tmp)
    os.replace(tmp, dst)
    digest = hashlib.sha256(dst.read_bytes()).hexdigest()
    version = subprocess.run([str(dst), "--version"], capture_output=True, text=True).stdout.strip()
    head = subprocess.run(
        ["git", "log", "-1", "--format=%h %s", "--", "worker"], capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--", "worker/src", "worker/Cargo.toml"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return {
        "version": version,
        "sha256": digest[:16],
        "worker_commit": head,
        "worker_tree_modified": bool(dirty),
        "snapshot": rel(dst),
    }


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def first_line(cmd: list[str]) -> str:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
        return (p.stdout or p.stderr).strip().splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return "unavailable"
