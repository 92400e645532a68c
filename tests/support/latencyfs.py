"""Mount, query and unmount tools/latencyfs (the latency-injecting passthrough) from Python.

Used by tests/nfs/ and by the benchmark campaigns (benchmarks/campaign.py,
benchmarks/opcount.py). Needs root (or fusermount3 rights) and /dev/fuse.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SOURCE_DIR = REPO_ROOT / "tools" / "latencyfs"
BINARY = SOURCE_DIR / "latencyfs"
# Request kinds latencyfs counts that are no round trip on NFS: never delayed, not in `total`
# (tools/latencyfs/README.md).
NO_ROUND_TRIP = ("forget", "ctime_flush")


def build() -> Path:
    """Build the binary if it is missing or older than its source (make is a no-op otherwise)."""
    proc = subprocess.run(["make", "-s", "-C", str(SOURCE_DIR)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(
            f"building latencyfs failed (needs libfuse3-dev; run scripts/setup.sh):\n"
            f"{proc.stdout}{proc.stderr}"
        )
    return BINARY


def _unescape(field: str) -> str:
    # /proc/self/mountinfo writes space, tab, newline and backslash as \ooo.
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and len(field[i + 1 : i + 4]) == 3 and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def mounted_here(mountpoint: Path) -> bool:
    """Whether a latencyfs is mounted exactly at mountpoint."""
    target = os.path.realpath(mountpoint)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields = left.split()
            if (
                len(fields) > 4
                and _unescape(fields[4]) == target
                and right.startswith("fuse.latencyfs ")
            ):
                return True
    return False


class LatencyFS:
    """One latencyfs mount: ``with LatencyFS(src, mnt, delay_ms=1) as fs: ... fs.stats()``.

    Every option of the binary is a keyword here (delay_ms, jitter_ms, delay_ops={"lookup": 2},
    attr_timeout, entry_timeout, negative_timeout, writeback_cache, readdirplus, threads);
    `binary` runs another build (benchmarks compare one with an older one). The control socket
    and the log sit beside the mount point, named after it.
    """

    def __init__(
        self,
        source: Path,
        mountpoint: Path,
        *,
        delay_ms: float = 0,
        jitter_ms: float = 0,
        delay_ops: dict[str, float] | None = None,
        attr_timeout: float | None = None,
        entry_timeout: float | None = None,
        negative_timeout: float | None = None,
        writeback_cache: bool = True,
        readdirplus: bool = True,
        threads: int | None = None,
        stats_file: Path | None = None,
        binary: Path | None = None,
    ):
        self.source = Path(source)
        self.mountpoint = Path(mountpoint)
        self.control = self.mountpoint.parent / f".{self.mountpoint.name}.latencyfs.sock"
        self.log = self.mountpoint.parent / f".{self.mountpoint.name}.latencyfs.log"
        self.stats_file = stats_file
        self.binary = Path(binary) if binary else BINARY
        args = [
            str(self.binary),
            "--delay",
            str(delay_ms),
            "--jitter",
            str(jitter_ms),
            "--control",
            str(self.control),
        ]
        if delay_ops:
            args += ["--delay-op", ",".join(f"{k}={v}" for k, v in delay_ops.items())]
        for flag, value in (
            ("--attr-timeout", attr_timeout),
            ("--entry-timeout", entry_timeout),
            ("--negative-timeout", negative_timeout),
            ("--threads", threads),
        ):
            if value is not None:
                args += [flag, str(value)]
        if not writeback_cache:
            args.append("--no-writeback-cache")
        if not readdirplus:
            args.append("--no-readdirplus")
        if stats_file:
            args += ["--stats", str(stats_file)]
        self.args = args + [str(self.source), str(self.mountpoint)]
        self.proc: subprocess.Popen | None = None

    def mount(self, timeout: float = 15) -> LatencyFS:
        if self.binary == BINARY and not BINARY.exists():
            build()
        if not os.path.exists("/dev/fuse"):
            raise RuntimeError("/dev/fuse is missing: latencyfs needs FUSE (modprobe fuse)")
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                self.args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while not (mounted_here(self.mountpoint) and self._answers()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.unmount()
                raise RuntimeError(
                    f"latencyfs did not mount {self.mountpoint}: "
                    f"{self.log.read_text(errors='replace')[-2000:]}"
                )
            time.sleep(0.02)
        return self

    def _answers(self) -> bool:
        try:
            self._ask("stats")
            return True
        except OSError:
            return False

    def _ask(self, command: str) -> dict:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
            c.settimeout(10)
            c.connect(str(self.control))
            c.sendall(command.encode() + b"\n")
            c.shutdown(socket.SHUT_WR)
            data = b""
            while chunk := c.recv(65536):
                data += chunk
        return json.loads(data)

    def stats(self) -> dict:
        """Counters since the last reset: ops by kind, total, inflight_max, inflight_avg(_busy)."""
        return self._ask("stats")

    def reset(self) -> None:
        self._ask("reset")

    def snapshot(self) -> dict:
        """The counters, reset in the same step."""
        return self._ask("snapshot")

    def unmount(self, timeout: float = 20) -> None:
        """Unmount (lazily if still busy) and wait for the daemon; safe to call twice."""
        if mounted_here(self.mountpoint):
            if (
                subprocess.run(
                    ["fusermount3", "-u", str(self.mountpoint)], capture_output=True
                ).returncode
                != 0
            ):
                subprocess.run(["umount", "-l", str(self.mountpoint)], capture_output=True)
        if self.proc is not None:
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    def __enter__(self) -> LatencyFS:
        return self.mount()

    def __exit__(self, *exc) -> None:
        self.unmount()
