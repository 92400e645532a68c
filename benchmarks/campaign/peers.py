"""The peers' commands, and the peers built outside the repository (azcp, mpifileutils) staged
beside the ferry snapshot, so that no recorded command names a path of this machine."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from .common import CONTAINER, RCLONE, Settings, q, rel, rmtree

# ferry's defaults on this machine: --concurrency clamp(CPUs, 8, 96) requests in flight,
# --parallel-files twice that (docs/worker.md). Tuned peers are given the same depth.
FERRY_CONCURRENCY = min(max(os.cpu_count() or 8, 8), 96)
FERRY_PARALLEL_FILES = 2 * FERRY_CONCURRENCY
PYSDK = "benchmarks/peers/pysdk.py"

RCLONE_TUNED = (
    f"--transfers {FERRY_CONCURRENCY} --checkers {FERRY_CONCURRENCY} "
    f"--azureblob-upload-concurrency {FERRY_CONCURRENCY} --azureblob-chunk-size 4Mi "
    f"--multi-thread-streams {FERRY_CONCURRENCY} --multi-thread-cutoff 4Mi "
    f"--multi-thread-chunk-size 4Mi"
)
RCLONE_TUNED_NOTE = (
    f"Tuned to ferry's depth ({FERRY_CONCURRENCY} requests in flight, 4 MiB blocks): "
    f"--transfers {FERRY_CONCURRENCY} (small files: one request each), "
    f"--azureblob-upload-concurrency {FERRY_CONCURRENCY} (blocks of one file), "
    f"--multi-thread-streams {FERRY_CONCURRENCY} with a 4 MiB cutoff and chunk (ranges of "
    f"one download), --checkers {FERRY_CONCURRENCY}. Each dataset is one large file or many "
    "small ones, so the per-file and per-block limits never multiply."
)
RCLONE_DEFAULT_NOTE = (
    "rclone's defaults: --transfers 4, --checkers 8, 4 MiB chunks with upload concurrency 16, "
    "downloads over 256 MiB in 4 streams; MD5 computed before upload and set as Content-MD5, "
    "checked after download."
)
PYSDK_NOTE = (
    "The SDK's defaults: one file at a time, one request per file up to 64 MiB, then 4 MiB blocks "
    "one at a time. Content-MD5 set on upload (computed first), checked after download."
)
PYSDK_TUNED_NOTE = (
    f"{FERRY_CONCURRENCY} files at once, 4 MiB blocks/ranges, {FERRY_CONCURRENCY} in flight for "
    "a large file: ferry's depth. Content-MD5 set on upload, checked after download."
)


def rclone(src: str, dst: str, tuned: bool = False) -> str:
    return f"{RCLONE} copy {src} {dst}" + (f" {RCLONE_TUNED}" if tuned else "")


def pysdk(
    direction: str, local: Path, account_url: str, prefix: str, concurrency: int | None = None
) -> str:
    return (
        f"{q(Path(sys.executable))} {PYSDK} {direction} {q(local)} --account-url {account_url} "
        f"--container {CONTAINER} --prefix {prefix}"
        + (f" --concurrency {concurrency}" if concurrency else "")
    )


def fpsync(src: Path, dst: Path | str, n: int, tool: str, files: int, workdir: Path) -> str:
    """fpsync with n workers and at least n jobs whatever the tree's size (-f ⌈files ÷ n⌉; its
    default of 2,000 files a job gives a 20,000-file tree 10 jobs whatever -n says). Absolute
    paths, as fpsync requires."""
    per_job = max(1, -(-files // n))
    mode = "-m cpio " if tool == "cpio" else ""
    return (
        f'fpsync -n {n} -f {per_job} -t "$PWD/{rel(workdir)}" {mode}'
        f'"$PWD/{rel(src)}/" "$PWD/{dst if isinstance(dst, str) else rel(dst)}/"'
    )


def copy_with_libraries(binary: Path, out: Path) -> None:
    """A binary and the shared libraries it loads from outside the system's directories."""
    shutil.copy2(binary, out / binary.name)
    for line in subprocess.run(
        ["ldd", str(binary)], capture_output=True, text=True
    ).stdout.splitlines():
        parts = line.split("=>")
        lib = parts[1].split("(")[0].strip() if len(parts) == 2 else ""
        if lib.startswith("/") and not lib.startswith(("/lib", "/usr")):
            shutil.copy2(lib, out / Path(parts[0].strip()).name)


def stage(s: Settings, name: str, tools: tuple[str, ...], where: Path | None) -> Path | None:
    """Tools found under `where` (a build made elsewhere, or the binary itself) copied into
    <scratch>/bin/<name>/; None when the build was not given."""
    if where is None:
        return None
    out = s.bin / name
    rmtree(out)
    out.mkdir(parents=True)
    for tool in tools:
        found = (
            [where]
            if where.is_file()
            else [p for p in where.rglob(tool) if p.is_file() and os.access(p, os.X_OK)]
        )
        if not found:
            sys.exit(f"campaign: no {tool} under {where}")
        copy_with_libraries(found[0], out)
        if found[0].name != tool:
            os.replace(out / found[0].name, out / tool)
    return out


def mpirun(mfu: Path, n: int, tool_args: str) -> str:
    root = " --allow-run-as-root" if os.geteuid() == 0 else ""
    return f"env LD_LIBRARY_PATH={q(mfu)} mpirun{root} --oversubscribe -n {n} {q(mfu)}/{tool_args}"
