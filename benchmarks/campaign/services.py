"""The servers the measured commands talk to, each reset between runs through hyperfine's
--prepare: Azurite, the discard server, latencyfs."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from support.latencyfs import LatencyFS
from support.toxiproxy import start_toxiproxy

from .common import (
    AZ_ACCOUNT,
    AZ_KEY,
    CONTAINER,
    REPO,
    Settings,
    bench_env,
    free_port,
    log,
    q,
    rel,
    rmtree,
    set_aside,
    trash_dir,
)
from .datasets import Dataset

# azcp takes only https://ACCOUNT.blob.core.windows.net URLs; its measured build sends every request
# to AZCP_BLOB_ENDPOINT instead (docs/benchmarks.md), set to the loopback Azurite in tools_env.
AZCP_ACCOUNT_URL = f"https://{AZ_ACCOUNT}.blob.core.windows.net"


class ControlledHost:
    """Something hyperfine's --prepare resets between runs (`campaign.py _ctl SOCK reset SLOT`):
    a Unix socket in the campaign process takes one request a connection, under one lock. The
    subclass says what `reset` puts back for a slot and what `stop` ends."""

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


def azurite_answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/{AZ_ACCOUNT}?comp=list", timeout=1):
            return True
    except urllib.error.HTTPError:
        return True  # 403 without a signature still means it is up
    except OSError:
        return False


def end_process(proc: subprocess.Popen) -> None:
    """Terminate, and kill what does not end within 20 s."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def spawn_azurite(
    port: int, location: Path, log: Path, answers, binary: Path | None = None
) -> subprocess.Popen:
    """Azurite's blob service on a loopback port, its own process group, once `answers()` says
    it is up; the project's locked Azurite unless `binary` names another's `azurite-blob`."""
    binary = binary or REPO / "node_modules" / ".bin" / "azurite-blob"
    if not binary.exists():
        raise RuntimeError("node_modules/.bin/azurite-blob is missing: run `make setup`")
    env = {k: v for k, v in os.environ.items() if k != "AZURITE_ACCOUNTS"}
    with open(log, "ab") as logf:
        proc = subprocess.Popen(
            [
                str(binary),
                "--blobHost",
                "127.0.0.1",
                "--blobPort",
                str(port),
                "--location",
                rel(location),
                "--skipApiVersionCheck",
                "--loose",
                "--disableTelemetry",
                "--silent",
            ],
            stdin=subprocess.DEVNULL,
            stdout=logf,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    deadline = time.monotonic() + 60
    while not answers():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"Azurite did not start on port {port}; see {rel(log)}")
        time.sleep(0.05)
    return proc


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

    def url(self, prefix: str, port: int | None = None) -> str:
        """A blob URL, straight to Azurite or through another loopback port (a proxy in front)."""
        return f"http://127.0.0.1:{port or self.port}/{AZ_ACCOUNT}/{CONTAINER}/{prefix}"

    # -- process ------------------------------------------------------------------------------
    def _answers(self) -> bool:
        return azurite_answers(self.port)

    def start(self, location: Path, slot: str | None = None) -> None:
        self.stop()
        self.proc = spawn_azurite(self.port, location, self.root / "azurite.log", self._answers)
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
            self.server_cpu.setdefault(self.current, []).append(
                round(self._cpu() - self.cpu_at_ready, 3)
            )
        end_process(self.proc)
        self.proc = None
        self.current = None

    # -- workspaces -----------------------------------------------------------------------------
    @staticmethod
    def restore(seed: Path, run: Path) -> None:
        rmtree(run)
        for dirpath, _dirnames, filenames in os.walk(seed):
            d = Path(dirpath)
            target = run / d.relative_to(seed)
            target.mkdir(parents=True, exist_ok=True)
            for n in filenames:
                if d.name == "__blobstorage__":
                    os.link(d / n, target / n)
                else:
                    shutil.copy2(d / n, target / n)

    def add_slot(
        self, name: str, seed: Path, clear: list[Path] = (), many_files: bool = False
    ) -> str:
        self.slots[name] = {
            "seed": seed,
            "run": self.root / "run" / name,
            "clear": list(clear),
            "many_files": many_files,
        }
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
            subprocess.run(
                [self.s.ferry, "mk", self.url("").rstrip("/")],
                env=self.ferry_env(),
                check=True,
                capture_output=True,
            )
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
            proc = subprocess.run(
                [
                    self.s.ferry,
                    "copy",
                    "-r",
                    rel(src) + "/",
                    self.url(f"data/{ds.name}/"),
                    "--json",
                ],
                env=self.ferry_env(),
                capture_output=True,
                text=True,
            )
            summary = json.loads(proc.stdout or "{}")
            if proc.returncode != 0 or summary.get("files", {}).get("copied") != ds.files:
                raise RuntimeError(
                    f"seeding {ds.name} failed: {proc.stderr[-2000:]} {proc.stdout[-2000:]}"
                )
        finally:
            self.stop()
        stamp.write_text(ds.stamp_text())
        return seed

    def ferry_env(self) -> dict:
        return bench_env(
            {"AZURE_STORAGE_ACCOUNT": AZ_ACCOUNT, "AZURE_STORAGE_KEY": AZ_KEY, "FERRY_AUTH": "key"}
        )

    def tools_env(self) -> dict:
        conf = self.s.scratch / "rclone.conf"
        conf.touch()
        env = self.ferry_env()
        env.update(
            {
                # An empty config file of our own: rclone then reads the remote from the environment
                # only, and never a user's ~/.config/rclone.
                "RCLONE_CONFIG": rel(conf),
                "RCLONE_CONFIG_AZ_TYPE": "azureblob",
                "RCLONE_CONFIG_AZ_ACCOUNT": AZ_ACCOUNT,
                "RCLONE_CONFIG_AZ_KEY": AZ_KEY,
                "RCLONE_CONFIG_AZ_ENDPOINT": self.endpoint,
                "AZCP_BLOB_ENDPOINT": f"http://127.0.0.1:{self.port}",
                # Should an azcp without that change be given, its https requests go to a closed
                # loopback port (the proxy) and fail, rather than anywhere else.
                "HTTPS_PROXY": "http://127.0.0.1:9",
                "https_proxy": "http://127.0.0.1:9",
            }
        )
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


class DiscardServer:
    def __init__(self, s: Settings):
        self.s = s
        self.proc: subprocess.Popen | None = None
        self.port = 0

    def build(self) -> Path:
        out = self.s.bin / "discard"
        # GOPROXY=off and GOTOOLCHAIN=local: the server uses the standard library only, and a
        # build must never reach for the network.
        env = dict(
            os.environ, GOPROXY="off", GOTOOLCHAIN="local", GOFLAGS="-mod=mod", CGO_ENABLED="0"
        )
        subprocess.run(
            ["go", "build", "-o", str(out.resolve()), "."],
            cwd=REPO / "benchmarks" / "discard",
            env=env,
            check=True,
        )
        return out

    def serve(self) -> None:
        """Nothing until the scenario starts it (only if it has groups to run)."""

    def close(self) -> None:
        self.stop()

    def start(self) -> None:
        binary = self.build()
        self.port = free_port()
        self.proc = subprocess.Popen(
            [rel(binary), "-addr", f"127.0.0.1:{self.port}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
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
        self.many_files: dict[str, bool] = {}
        self.counts: dict[str, list] = {}
        self.delays: dict[str, float] = {}  # slots mounted with a delay of their own

    def add_slot(
        self, name: str, seed: Path | None, many_files: bool, delay_ms: float | None = None
    ) -> str:
        self.seeds[name] = seed
        self.many_files[name] = many_files
        self.counts.pop(name, None)
        if delay_ms is not None:
            self.delays[name] = delay_ms
        return name

    def clear(self, slot: str) -> None:
        """A tree of many files is set aside (see set_aside); one of a few big files is deleted
        at once, or every run's output would stay on the disk until the scenario ends."""
        d = self.backing / slot
        if self.many_files[slot]:
            set_aside(d, trash_dir(self.s))
        elif d.exists():
            rmtree(d)

    def dest(self, slot: str) -> Path:
        return self.mnt / slot

    def reset(self, slot: str) -> None:
        self.stop()
        d = self.backing / slot
        self.clear(slot)
        seed = self.seeds[slot]
        if seed is None:
            d.mkdir(parents=True)
        else:
            self.backing.mkdir(parents=True, exist_ok=True)
            subprocess.run(["cp", "-a", rel(seed), rel(d)], check=True)
        self.fs = LatencyFS(
            self.backing, self.mnt, delay_ms=self.delays.get(slot, self.delay_ms)
        ).mount()
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
            self.clear(slot)


class DelayedAzuriteHost(AzuriteHost):
    """Azurite, and toxiproxy in front of it adding a fixed delay to every response: an account
    `delay_ms` further away. The proxy outlives Azurite's restarts (it connects per connection)."""

    def __init__(self, s: Settings, delay_ms: int = 20):
        super().__init__(s)
        self.delay_ms = delay_ms
        self.toxiproxy = None
        self.delayed_port: int | None = None

    def serve(self) -> None:
        super().serve()
        self.toxiproxy = start_toxiproxy(REPO, self.root)
        proxy = self.toxiproxy.proxy(self.port, "azurite")
        proxy.toxic("latency", stream="downstream", latency=self.delay_ms)
        self.delayed_port = proxy.port

    def close(self) -> None:
        if self.toxiproxy:
            self.toxiproxy.stop()
            self.toxiproxy = None
        super().close()
