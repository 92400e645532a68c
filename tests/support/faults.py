"""The fault suite's ledger: what the fault tests injected and checked, summed over a pytest run.

Hooked into pytest by tests/conftest.py: ``--deep`` (or ``FERRY_FAULTS_DEEP=1``) selects the slow
mode, ``FERRY_FAULT_SEED`` fixes the seed (else one is drawn and printed), and the terminal
summary ends with one line of figures. ``FERRY_FAULTS_REPORT=FILE`` also writes them as JSON.

Every check goes through ``Ledger.check_blobs`` / ``Ledger.check_local``, which compare what the
destination holds with what the source had, byte for byte (the Python SDK for blobs, plain reads
for files), and count what they compared, so the summary's figures are what was really checked.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import subprocess
import zlib
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from support.blobs import file_blobs

PARTIAL_PREFIX = ".ferry-"  # ferry's temp and journal names (docs/worker.md); never a final name
SDK_THREADS = 8


@dataclass
class Ledger:
    seed: int
    deep: bool
    injected: Counter = field(default_factory=Counter)
    # toxiproxy decides per connection whether a toxic acts, and tells no one: what is known is
    # how many runs went through each toxic, how many exchanges the proxy behind it saw cut, and
    # how many retries ferry needed.
    tcp_runs: Counter = field(default_factory=Counter)
    tcp_cuts: Counter = field(default_factory=Counter)
    tcp_retries: Counter = field(default_factory=Counter)
    kills: Counter = field(default_factory=Counter)
    runs: int = 0
    files_checked: int = 0
    bytes_checked: int = 0
    divergent: list = field(default_factory=list)
    tests: int = 0
    test_rng: random.Random | None = None

    def rng(self, name: str) -> random.Random:
        """A generator for one test, from the session seed and the test's name: a failure
        reproduces with the same FERRY_FAULT_SEED whichever tests run alongside."""
        return random.Random(self.seed * 1_000_003 + zlib.crc32(name.encode()))

    def fault(self, kind: str, n: int = 1) -> None:
        if n:
            self.injected[kind] += n

    def tcp(self, kind: str, cuts: int, retries: int) -> None:
        self.tcp_runs[kind] += 1
        self.tcp_cuts[kind] += cuts
        self.tcp_retries[kind] += retries

    def kill(self, what: str) -> None:
        self.kills[what] += 1

    def ran(self, n: int = 1) -> None:
        self.runs += n

    def _divergence(self, where: str, what: str) -> None:
        self.divergent.append(f"{where}: {what}")

    def check_blobs(
        self,
        container,
        expected: dict[str, bytes],
        complete: bool,
        prefix: str = "",
        where: str = "",
    ) -> list[str]:
        """Every blob under ``prefix`` must hold exactly ``expected[name]`` (and carry the MD5 of
        it when it carries one); with ``complete`` every expected name must be there too.
        Returns the problems found (each also counted as divergent). Folder stubs, which stand
        for the directories, are not files and are left out."""
        problems = []
        present = file_blobs(container, prefix or None)
        with ThreadPoolExecutor(SDK_THREADS) as pool:
            datas = pool.map(lambda name: container.client.download_blob(name).readall(), present)
        for (name, props), data in zip(present.items(), datas):
            rel = name[len(prefix) :]
            self.files_checked += 1
            self.bytes_checked += len(data)
            if rel not in expected:
                problems.append(f"unexpected blob {rel!r} ({len(data)} bytes)")
                continue
            if data != expected[rel]:
                problems.append(
                    f"blob {rel!r} holds {len(data)} bytes md5 {md5(data)}, source has "
                    f"{len(expected[rel])} bytes md5 {md5(expected[rel])}"
                )
                continue
            stored = props.content_settings.content_md5
            if stored and bytes(stored) != hashlib.md5(data).digest():
                problems.append(
                    f"blob {rel!r}: Content-MD5 {bytes(stored).hex()} is not the MD5 of its bytes"
                )
        if complete:
            problems += [f"blob {rel!r} missing" for rel in expected if prefix + rel not in present]
        for p in problems:
            self._divergence(where or container.name, p)
        return problems

    def check_local(
        self, root: Path, expected: dict[str, bytes], complete: bool, where: str = ""
    ) -> list[str]:
        """Every file under ``root`` with a final name (not ferry's ``.ferry-*`` temp names) must
        hold exactly ``expected[rel]``; with ``complete`` every expected file must be there."""
        problems = []
        seen = set()
        for dirpath, _dirs, names in os.walk(root):
            for n in names:
                path = Path(dirpath) / n
                rel = path.relative_to(root).as_posix()
                if n.startswith(PARTIAL_PREFIX) or path.is_symlink():
                    continue
                data = path.read_bytes()
                self.files_checked += 1
                self.bytes_checked += len(data)
                seen.add(rel)
                if rel not in expected:
                    problems.append(f"unexpected file {rel!r} ({len(data)} bytes)")
                elif data != expected[rel]:
                    problems.append(
                        f"file {rel!r} holds {len(data)} bytes md5 {md5(data)}, source has "
                        f"{len(expected[rel])} bytes md5 {md5(expected[rel])}"
                    )
        if complete:
            problems += [f"file {rel!r} missing" for rel in expected if rel not in seen]
        for p in problems:
            self._divergence(where or str(root), p)
        return problems

    def check_version(self, where: str, got: bytes, versions: tuple) -> bool:
        """Whether ``got`` is exactly one of the source's ``versions``; counted either way."""
        self.files_checked += 1
        self.bytes_checked += len(got)
        if got in versions:
            return True
        self._divergence(
            where, f"{len(got)} bytes md5 {md5(got)} match none of the source's versions"
        )
        return False

    def check(self, dest, expected: dict[str, bytes], complete: bool) -> list[str]:
        """``check_local`` for a Path, ``check_blobs`` for a container."""
        if isinstance(dest, Path):
            return self.check_local(dest, expected, complete)
        return self.check_blobs(dest, expected, complete)

    def figures(self) -> dict:
        return {
            "mode": "deep" if self.deep else "ci",
            "seed": self.seed,
            "tests": self.tests,
            "faults_injected": dict(sorted(self.injected.items())),
            "tcp_toxics": {
                k: {
                    "runs": self.tcp_runs[k],
                    "exchanges_cut_seen": self.tcp_cuts[k],
                    "ferry_retries": self.tcp_retries[k],
                }
                for k in sorted(self.tcp_runs)
            },
            "kills": dict(sorted(self.kills.items())),
            "kills_total": sum(self.kills.values()),
            "runs": self.runs,
            "files_checked": self.files_checked,
            "bytes_checked": self.bytes_checked,
            "divergent": len(self.divergent),
        }

    def line(self) -> str:
        f = self.figures()
        kinds = ", ".join(f"{k} {v}" for k, v in f["faults_injected"].items()) or "none"
        tcp = ", ".join(
            f"{k} {v['runs']}/{v['exchanges_cut_seen']}/{v['ferry_retries']}"
            for k, v in f["tcp_toxics"].items()
        )
        if tcp:
            kinds += f"; tcp toxics (runs/exchanges cut seen/ferry retries): {tcp}"
        kills = ", ".join(f"{k} {v}" for k, v in f["kills"].items())
        return (
            f"fault suite ({f['mode']}, seed {f['seed']}): faults injected by kind: {kinds}; "
            f"kills {f['kills_total']}"
            + (f" ({kills})" if kills else "")
            + f"; runs {f['runs']}; files checked {f['files_checked']}; "
            f"bytes checked {f['bytes_checked']}; divergent {f['divergent']}"
        )


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


_ledger: Ledger | None = None


def ledger() -> Ledger | None:
    return _ledger


# -- pytest hooks (imported into tests/conftest.py) ------------------------------------------


def pytest_addoption(parser):
    parser.addoption(
        "--deep",
        action="store_true",
        default=False,
        help="fault suite: more seeds, higher fault rates, more kills, bigger files (minutes)",
    )


def pytest_configure(config):
    global _ledger
    deep = config.getoption("--deep") or os.environ.get("FERRY_FAULTS_DEEP", "") not in ("", "0")
    seed_env = os.environ.get("FERRY_FAULT_SEED", "").strip()
    seed = int(seed_env) if seed_env else random.SystemRandom().randrange(1, 10**9)
    _ledger = Ledger(seed=seed, deep=deep)


def pytest_report_header(config):
    if _ledger is None:
        return None
    mode = "deep" if _ledger.deep else "ci"
    return f"fault suite: seed {_ledger.seed} (FERRY_FAULT_SEED={_ledger.seed} reproduces), mode {mode}"


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if _ledger is None or not _ledger.tests:
        return
    terminalreporter.section("fault suite")
    terminalreporter.write_line(_ledger.line())
    for d in _ledger.divergent[:20]:
        terminalreporter.write_line(f"  divergent: {d}")
    report = os.environ.get("FERRY_FAULTS_REPORT")
    if report:
        Path(report).write_text(json.dumps(_ledger.figures(), indent=2) + "\n")


# -- trees the fault tests copy ----------------------------------------------------------------


def random_files(
    rng: random.Random, small: int, big: int, big_size: int, prefix: str = ""
) -> dict[str, bytes]:
    """``small`` files of 0-40 KiB (one empty) and ``big`` multi-block files of about ``big_size``,
    in a few directories; contents from ``rng``, so a seed gives the same tree."""
    files = {}
    for i in range(small):
        files[f"{prefix}d{i % 3}/small-{i:03d}.txt"] = rng.randbytes(
            0 if i == 0 else rng.randrange(1, 40_000)
        )
    for i in range(big):
        files[f"{prefix}big/big-{i}.bin"] = rng.randbytes(big_size + rng.randrange(0, 100_000))
    return files


def write_files(root: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def upload_with_sdk(container, files: dict[str, bytes], prefix: str = "") -> None:
    """Put ``files`` as blobs with their Content-MD5, through the Python SDK (not ferry)."""
    from azure.storage.blob import ContentSettings

    def put(item):
        rel, data = item
        container.client.upload_blob(
            prefix + rel,
            data,
            overwrite=True,
            content_settings=ContentSettings(content_md5=bytearray(hashlib.md5(data).digest())),
        )

    with ThreadPoolExecutor(SDK_THREADS) as pool:
        list(pool.map(put, files.items()))


@contextlib.contextmanager
def small_disk(path: Path, size_mib: int):
    """A tmpfs of ``size_mib`` at ``path`` (needs root, as the test machines run)."""
    path.mkdir(parents=True)
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mib}m", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        pytest.fail(
            f"cannot mount a tmpfs for the disk-full test (run the suite as root): {r.stderr.strip()}"
        )
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)
