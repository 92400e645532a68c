"""Running the Snakemake pipeline as users do, and the trees and snapshots its end-to-end tests
(tests/pipeline/, and the pipeline runs of other suites) compare: a source tree with odd names,
the same tree changed between passes, md5s of files and of blobs read with the Azure SDK."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.azurite import KEY
from support.ferry import REPO_ROOT, ferry_env
from support.trees import Link, make_tree

REPO = REPO_ROOT  # the name the pipeline tests use


def write_file(root: Path, rel: str, data: bytes, mtime: float | None = None) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    if mtime is not None:
        os.utime(path, (mtime, mtime))


def blob_of(rel: str, size: int) -> bytes:
    """Deterministic, path-dependent content: equal sizes still mean different bytes."""
    seed = hashlib.sha256(rel.encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def migration_tree(root: Path, files: int = 120, big: int = 2) -> dict[str, bytes]:
    """A source tree with nested dirs, odd names, empty files and a few multi-block files, made
    by support.trees.make_tree. Returns {relative path: content} of its files."""
    content: dict[str, bytes] = {}
    dirs = ["docs", "data/sub", "names with spaces", "ünïcødé", "gone"]
    for i in range(files):
        d = dirs[i % len(dirs)]
        rel = f"{d}/f{i:03d}.txt"
        content[rel] = blob_of(rel, (i * 137) % 4096)  # includes empty files (i = 0)
    for i in range(big):
        rel = f"data/big{i}.bin"
        content[rel] = blob_of(rel, 2 * 1024 * 1024 + 12345 * (i + 1))
    content["top.txt"] = b"top level\n"
    # fpart trims leading blanks from names it is given; the plan must not lose this one.
    content["names with spaces/ leading blank.txt"] = b"blank first\n"
    # Kept out of `content`: a link, not a file, in either kind of destination.
    make_tree(root, {**content, "docs/link-to-top": Link("../top.txt")})
    return content


def local_snapshot(root: Path) -> dict[str, str]:
    """{relative path: md5} of every regular file under root."""
    snap = {}
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            path = Path(dirpath) / name
            if path.is_file() and not path.is_symlink():
                snap[path.relative_to(root).as_posix()] = hashlib.md5(path.read_bytes()).hexdigest()
    return snap


def blob_snapshot(container, prefix: str = "") -> dict[str, str]:
    """{blob name relative to prefix: md5 of the downloaded bytes} of the files' blobs, through
    the Azure SDK (not the folder stubs and symlink blobs besides them)."""
    snap = {}
    for name, props in container.blobs(prefix or None).items():
        if (
            props.metadata.get("hdi_isfolder") == "true"
            or props.metadata.get("is_symlink") == "true"
        ):
            continue
        data = container.client.download_blob(name).readall()
        snap[name[len(prefix) :]] = hashlib.md5(data).hexdigest()
    return snap


def pipeline(
    *config: str,
    profile: str = "profiles/local",
    extra_args: tuple[str, ...] = (),
    env: dict | None = None,
    expect: int | None = 0,
    timeout: float = 280,
) -> subprocess.CompletedProcess:
    """Run snakemake from the repository root, as users do; output captured for assertions."""
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "--profile",
        profile,
        *extra_args,
        "--config",
        *config,
    ]
    proc = subprocess.run(
        cmd,
        cwd=REPO,
        env=ferry_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    if expect is not None and proc.returncode != expect:
        pytest.fail(
            f"snakemake exited {proc.returncode}, expected {expect}\n  {' '.join(cmd)}\n"
            f"--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-8000:]}",
            pytrace=False,
        )
    return proc


def base_config(
    ferry_bin, outdir: Path, source, dest, phase: str, run_name: str = "t"
) -> list[str]:
    return [
        f"source={source}",
        f"dest={dest}",
        f"phase={phase}",
        f"outdir={outdir}",
        f"run_name={run_name}",
        f"ferry_bin={ferry_bin}",
        # Small blocks so the two big files take several blocks each.
        "copy={block_size: 1MiB, concurrency: 4, parallel_files: 4}",
    ]


def run_dir(outdir: Path, phase: str, run_name: str = "t") -> Path:
    return outdir / run_name / phase


def report(outdir: Path, phase: str, run_name: str = "t", name: str = "report.json") -> dict:
    return json.loads((run_dir(outdir, phase, run_name) / name).read_text())


def jobs_per_step(rep: dict) -> dict[str, int]:
    return {rule: stats["jobs"] for rule, stats in rep["time"]["per_step"].items()}


def plan_files(run: Path) -> dict:
    """{path: contents} of a run's plan directory (JSON parsed; engines' own marker files left
    out): two plans are the same plan when these are equal."""
    files = {}
    for path in sorted((run / "plan").rglob("*")):
        if path.is_file() and not path.name.startswith("."):
            text = path.read_text()
            # A parallel listing has no fixed order, and a part keeps its listing's order: compare
            # what each part holds.
            files[path.relative_to(run).as_posix()] = (
                json.loads(text) if path.suffix == ".json" else sorted(text.splitlines())
            )
    return files


def modify_tree(src: Path, content: dict[str, bytes]) -> tuple[set[str], set[str], set[str]]:
    """Add, change and delete files the way users do between passes; keeps `content` in step.
    Returns (added, changed, deleted)."""
    added = {"new/one.txt", "new/deeper/two.bin", "docs/added.txt"}
    for rel in added:
        content[rel] = blob_of(rel + "new", 3000)
        write_file(src, rel, content[rel])
    changed = {"docs/f005.txt", "data/sub/f006.txt"}
    # f005: grows. f006: same size, different bytes, newer mtime (size alone cannot see it).
    content["docs/f005.txt"] = content["docs/f005.txt"] + b"appended"
    write_file(src, "docs/f005.txt", content["docs/f005.txt"])
    old = content["data/sub/f006.txt"]
    content["data/sub/f006.txt"] = bytes(b ^ 0xFF for b in old)
    write_file(src, "data/sub/f006.txt", content["data/sub/f006.txt"], mtime=time.time() + 120)
    deleted = {"docs/f010.txt", "gone/f004.txt", "gone/f009.txt", "data/big1.bin"}
    for rel in deleted:
        (src / rel).unlink()
        del content[rel]
    return added, changed, deleted


def md5s(content: dict[str, bytes]) -> dict[str, str]:
    return {rel: hashlib.md5(data).hexdigest() for rel, data in content.items()}


def assert_no_secret(*roots: Path) -> None:
    for root in roots:
        for dirpath, _dirs, names in os.walk(root):
            for name in names:
                data = (Path(dirpath) / name).read_bytes()
                assert KEY.encode() not in data, f"storage key leaked into {Path(dirpath) / name}"


@contextlib.contextmanager
def held_lock(run_root: Path, pass_: str):
    """The migration's lock held by a running stand-in engine on this host, as a pass still
    running would hold it (workflow/scripts/ferry_lock.py); the stand-in ends with the block."""
    import ferry_lock

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    try:
        holder = {"run_id": f"held-{proc.pid}", "pass": pass_, "pid": proc.pid}
        holder |= {"host": socket.gethostname(), "pid_start": ferry_lock.process_start(proc.pid)}
        ferry_lock.take(str(run_root), holder)
        yield proc
    finally:
        proc.kill()
        proc.wait()
