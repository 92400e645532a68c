"""The cut-over benchmark: how well the migration history projects the final pass.

    .venv/bin/python benchmarks/cutover.py [--files 1500] [--rate 60] [--interval 30] [--passes 3]
                                           [--targets local,azurite] [--engines snakemake,nextflow]
                                           [--parts 2] [--name cutover] [--no-docs] [--render]

For each destination (a local directory, and a container in a local Azurite) and each engine
(`--engines`: the Snakemake pipeline, profiles/local, and the Nextflow one, `-profile local`) it
migrates one generated tree as a user would: a baseline, then
`--passes` incremental passes while a background thread changes the source at a known rate
(`--rate` files a minute: nine in ten rewritten with new bytes and a new size, one in ten added;
one in twenty of the rewrites deletes instead; changes due while a pass runs are made when it
ends), each pass starting `--interval` seconds after the one before. After the last incremental pass the churn stops (the cut-over: the source is frozen),
the projection is taken from the history the passes recorded (`ferry_projection.project`, "a final
pass started now would take ≈ T"), and the final pass runs. Recorded per destination: each
pass's delta and wall time (the history's own `wall_seconds`, from the engine's start to the
report), the projected and the measured final pass, and the error, (projected − measured) ÷
measured; the projection's own backtest of the earlier passes too.

The default scale runs in a few minutes on two cores; `--files`, `--rate` and `--interval` make
it bigger (the delta per pass is about rate × interval). Results: benchmarks/results/cutover.json
and .md, the table in docs/benchmarks.md, and a screenshot of the last final pass's report.html
(docs/img/cutover-report.png) shown in docs/pipeline.md; `--no-docs` writes the results only
(each target's history too, from which `--render` redoes the table).
Scratch: benchmarks/.data/cutover/ (git-ignored), removed at the start of each run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "workflow" / "scripts"))

import ferry_history  # noqa: E402
import ferry_markdown  # noqa: E402
import ferry_projection  # noqa: E402
from campaign.common import AZ_ACCOUNT, AZ_KEY, bench_env, free_port, log, rel  # noqa: E402
from campaign.oneshot import REPO, measured_on, publish, record  # noqa: E402
from campaign.services import azurite_answers, end_process, spawn_azurite  # noqa: E402

SCRATCH = REPO / "benchmarks" / ".data" / "cutover"
SCREENSHOT = REPO / "docs" / "img" / "cutover-report.png"
RUN_NAME = "cutover"
SEED = 28


# ---------------------------------------------------------------------------------------------
# the tree and its churn


def make_tree(root: Path, files: int, rng: random.Random, max_kib: int = 64) -> int:
    """Files of 1–`max_kib` KiB in 20 directories, and one in 200 of 1–4 MiB; returns the bytes."""
    total = 0
    for i in range(files):
        size = rng.randint(1, 4) << 20 if i % 200 == 0 else rng.randint(1, max_kib) << 10
        total += write(root / f"d{i % 20:02d}" / f"f{i:06d}.dat", size, rng)
    return total


def write(path: Path, size: int, rng: random.Random) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(rng.randbytes(size))
    return size


class Churn(threading.Thread):
    """Changes the source at `rate` files a minute until stopped: a user's share in use.

    While a pass runs the changes are held back and made at once when it ends, so the rate over
    wall time stays the same: a file rewritten between its copy and its verify would fail the
    pass's verify (rightly), and what is measured here is the projection, not that race."""

    def __init__(self, root: Path, rate: float, seed: int, max_kib: int = 64):
        super().__init__(daemon=True)
        self.root, self.every, self.rng = root, 60.0 / rate, random.Random(seed)
        self.max_kib = max_kib
        self.counts = {"changed": 0, "added": 0, "deleted": 0}
        self.halt = threading.Event()
        self.lock = threading.Lock()
        self.paused = False
        self.owed = 0
        self.files: list[Path] = []

    def run(self) -> None:
        self.files = sorted(self.root.rglob("*.dat"))
        while not self.halt.wait(self.every):
            with self.lock:
                self.owed += 1
                if not self.paused:
                    self.settle()

    def settle(self) -> None:
        """Makes the changes owed so far (the caller holds the lock)."""
        for _ in range(self.owed):
            self.change()
        self.owed = 0

    def change(self) -> None:
        roll = self.rng.random()
        if roll < 0.1:
            path = (
                self.root / f"d{self.rng.randrange(20):02d}" / f"new-{self.counts['added']:06d}.dat"
            )
            write(path, self.rng.randint(1, self.max_kib) << 10, self.rng)
            self.files.append(path)
            self.counts["added"] += 1
            return
        path = self.files.pop(self.rng.randrange(len(self.files)))
        if roll < 0.1 + 0.9 / 20:
            path.unlink()
            self.counts["deleted"] += 1
            return
        write(path, self.rng.randint(1, self.max_kib) << 10, self.rng)
        self.files.append(path)
        self.counts["changed"] += 1

    def pause(self) -> None:
        with self.lock:
            self.paused = True

    def resume(self) -> None:
        with self.lock:
            self.paused = False
            self.settle()

    def stop(self) -> dict:
        """Stops the churn for good (the cut-over); changes still owed are made first."""
        self.halt.set()
        self.join()
        with self.lock:
            self.settle()
        return dict(self.counts)


# ---------------------------------------------------------------------------------------------
# destinations


class Azurite:
    """A throwaway Azurite on a free loopback port, a child of this process."""

    def __init__(self, where: Path):
        self.where, self.port = where, free_port()
        where.mkdir(parents=True, exist_ok=True)
        self.proc = spawn_azurite(self.port, where, where / "azurite.log", self.answers)

    def answers(self) -> bool:
        return azurite_answers(self.port)

    def url(self, container: str) -> str:
        return f"http://127.0.0.1:{self.port}/{AZ_ACCOUNT}/{container}/share"

    def stop(self) -> None:
        end_process(self.proc)


# ---------------------------------------------------------------------------------------------
# the passes


def run_pass(
    src: Path,
    dest: str,
    outdir: Path,
    phase: str,
    number: int,
    parts: int,
    env: dict,
    engine: str = "snakemake",
) -> float:
    """One phase through `engine` (snakemake or nextflow), as a user runs it; returns the
    command's wall seconds."""
    config = {
        "source": rel(src),
        "dest": dest,
        "phase": phase,
        "pass": number,
        "outdir": rel(outdir),
        "run_name": RUN_NAME,
    }
    logf = outdir.parent / f"{engine}-{phase}-{number}.log"
    if engine == "nextflow":
        # From a launch directory of its own (its .nextflow/ and work/), with a params file, as
        # users run it; paths absolute, since its tasks run in their own directories.
        launch = outdir.parent / "nextflow"
        launch.mkdir(parents=True, exist_ok=True)
        params = {
            **config,
            "source": str(src.resolve()),
            "outdir": str(outdir.resolve()),
            "ferry_bin": str(REPO / "worker" / "target" / "release" / "ferry"),
            "plan": {"mode": "parts", "parts": parts},
        }
        if "://" not in dest:
            params["dest"] = str((REPO / dest).resolve())
        (launch / "params.json").write_text(json.dumps(params))
        cmd = [
            str(REPO / "scripts" / "nextflow"),
            "run",
            str(REPO / "main.nf"),
            "-profile",
            "local",
            "-w",
            str(launch / "work"),
            "-ansi-log",
            "false",
            "-params-file",
            str(launch / "params.json"),
        ]
        cwd = launch
    else:
        cmd = [
            ".venv/bin/snakemake",
            "--profile",
            "profiles/local",
            "--config",
            *(f"{k}={v}" for k, v in config.items()),
            f"plan={{mode: parts, parts: {parts}}}",
        ]
        cwd = REPO
    started = time.monotonic()
    with open(logf, "wb") as out:
        proc = subprocess.run(
            cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        raise RuntimeError(f"the {engine} {phase} pass {number} failed; see {rel(logf)}")
    log(f"  {engine} {phase} pass {number}: {seconds:.1f} s")
    return seconds


def summary(rec: dict) -> dict:
    planned = rec.get("planned") or {}
    return {
        "phase": rec.get("phase"),
        "pass": rec.get("pass"),
        "status": rec.get("status"),
        "wall_seconds": rec.get("wall_seconds"),
        "planned_files": planned.get("files"),
        "planned_bytes": planned.get("bytes"),
        # Only at the destination, as the pass's plan counted it; and what its prune deleted.
        "would_delete": planned.get("deleted"),
        "deleted": ferry_markdown.deleted_files(rec),
        "copied_files": (rec.get("copied") or {}).get("files"),
    }


def migrate(target: str, args, env: dict, azurite: Azurite | None, engine: str) -> dict:
    """Baseline, incremental passes under churn, the projection, the final pass, for one target
    through one engine."""
    work = SCRATCH / f"{target}-{engine}"
    src, outdir = work / "src", work / "results"
    rng = random.Random(SEED)
    source_bytes = make_tree(src, args.files, rng, args.max_kib)
    dest = azurite.url(f"cutover-{target}-{engine}") if azurite else rel(work / "dest")
    log(
        f"{target}, {engine}: {args.files} files ({source_bytes / 2**20:.0f} MiB) to {'Azurite' if azurite else 'a local directory'}"
    )
    churn = Churn(src, args.rate, SEED + 1, args.max_kib)
    command_seconds = {}
    churn.start()
    started = time.monotonic()
    for n in range(args.passes + 1):
        # Each pass starts --interval seconds after the previous one did: the delta it finds is
        # about rate × interval, whatever the pass itself took.
        time.sleep(max(0.0, started + n * args.interval - time.monotonic()))
        phase, label = ("baseline", "baseline") if n == 0 else ("incremental", f"incremental {n}")
        churn.pause()
        try:
            command_seconds[label] = run_pass(
                src, dest, outdir, phase, max(n, 1), args.parts, env, engine
            )
        finally:
            churn.resume()
    # The cut-over: what changed since the last pass started is now at the source, then it is frozen.
    time.sleep(max(0.0, started + (args.passes + 1) * args.interval - time.monotonic()))
    churned = churn.stop()
    root = outdir / RUN_NAME
    # As the engines' reports project it: the carried state read where it is.
    settings = ferry_projection.Settings(state=str(root / "state"))
    projection = ferry_projection.project(ferry_history.load(str(root)), settings=settings)
    log(f"  projected: {projection.get('line')}")
    command_seconds["final"] = run_pass(src, dest, outdir, "final", 1, args.parts, env, engine)
    history = ferry_history.load(str(root))
    final = next(r for r in reversed(history) if r.get("phase") == "final")
    measured = final.get("wall_seconds")
    projected = projection.get("seconds")
    error = (projected - measured) / measured if projected is not None and measured else None
    log(f"  final pass: projected {projected} s, measured {measured} s, error {error}")
    return {
        "target": target,
        "engine": engine,
        "dest": "azurite" if azurite else "local",
        "files": args.files,
        "bytes": source_bytes,
        "churn": churned,
        "passes": [summary(r) for r in history],
        # The records themselves: the projection and its backtest can be redone from them.
        "history": history,
        "command_seconds": command_seconds,
        "projection": {
            k: projection.get(k)
            for k in (
                "ok",
                "why_not",
                "seconds",
                "steps",
                "delta",
                "requests",
                "converging",
                "why",
                "assumptions",
                "line",
                "final_pass",
            )
        },
        "backtest": ferry_projection.project(history).get("backtest"),
        "final": {
            "projected_seconds": projected,
            "measured_seconds": measured,
            "error_pct": round(100 * error, 1) if error is not None else None,
        },
        "report_html": str(outdir / RUN_NAME / "final" / "report.html"),
    }


def screenshot(page: Path, png: Path) -> None:
    """The page as a reader sees it, by the same headless chromium as the report's tests."""
    png.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1400,2400",
            f"--screenshot={png}",
            page.resolve().as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    log(f"screenshot: {rel(png)}")


# ---------------------------------------------------------------------------------------------
# results


def fmt(v, digits=1) -> str:
    return (
        "-"
        if v is None
        else f"{v:.{digits}f}"
        if isinstance(v, float)
        else f"{v:,}"
        if isinstance(v, int)
        else str(v)
    )


def where(t: dict) -> str:
    """A target's destination and the engine that ran its passes."""
    return f"{t['dest']}, {t.get('engine', 'snakemake')}"


def render(res: dict) -> str:
    s = res["settings"]
    lines = [
        "| destination, engine | pass | delta (files planned) | would delete | deleted | wall s (history) |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for t in res["targets"]:
        for p in t["passes"]:
            label = p["phase"] if p["phase"] != "incremental" else f"incremental {p['pass']}"
            lines.append(
                f"| {where(t)} | {label} | {fmt(p['planned_files'])} | {fmt(p.get('would_delete'))} | "
                f"{fmt(p['deleted'])} | "
                f"{fmt(p['wall_seconds'])} |"
            )
    lines += [
        "",
        "| destination, engine | projected final pass s | measured final pass s | error | passes | churn "
        "(changed / added / deleted) |",
        "|---|---:|---:|---:|---|---|",
    ]
    for t in res["targets"]:
        f, c = t["final"], t["churn"]
        err = f"{f['error_pct']:+.1f} %" if f["error_pct"] is not None else "-"
        lines.append(
            f"| {where(t)} | {fmt(f['projected_seconds'])} | {fmt(f['measured_seconds'])} | {err} | "
            f"{t['projection'].get('converging') or '-'} | {c['changed']} / {c['added']} / {c['deleted']} |"
        )
    lines += [
        "",
        "Backtest (the history's projection of each earlier pass from the passes before it; "
        "priced: the same pass priced with the delta it found, the model's error apart from the "
        "forecast's):",
        "",
        "| destination, engine | pass | projected s | priced s | actual s | error | priced error |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]

    def pct(x) -> str:
        return f"{x:+.0f} %" if isinstance(x, (int, float)) else "-"

    for t in res["targets"]:
        for b in t.get("backtest") or []:
            lines.append(
                f"| {where(t)} | {b.get('phase')} {b.get('pass')} | {fmt(b.get('projected_seconds'))} | "
                f"{fmt(b.get('priced_seconds'))} | {fmt(b.get('actual_seconds'))} | "
                f"{pct(b.get('error_pct'))} | {pct(b.get('priced_error_pct'))} |"
            )
    lines += [
        "",
        f"{s['files']:,} files at the start, {s['rate']} files a minute changed, passes "
        f"{s['interval']} s apart, {s['parts']} partitions. "
        + measured_on(
            res,
            "; the error is (projected − measured) ÷ measured, on the history's wall time of the pass)",
        ),
    ]
    return "\n".join(lines)


def rerender(name: str) -> int:
    """results/NAME.md again from results/NAME.json, each target's passes summarised anew from
    the history it kept."""
    path = REPO / "benchmarks" / "results" / f"{name}.json"
    res = json.loads(path.read_text())
    for t in res["targets"]:
        if t.get("history"):
            t["passes"] = [summary(r) for r in t["history"]]
    print(publish(name, name, res, render, docs=False))
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--files", type=int, default=1500, help="files in the tree at the start")
    p.add_argument(
        "--rate", type=float, default=60, help="files changed a minute while the passes run"
    )
    p.add_argument(
        "--interval", type=float, default=30, help="seconds from one pass's start to the next's"
    )
    p.add_argument("--passes", type=int, default=3, help="incremental passes before the final one")
    p.add_argument("--parts", type=int, default=2, help="partitions of each pass")
    p.add_argument("--targets", default="local,azurite")
    p.add_argument(
        "--engines", default="snakemake", help="snakemake, nextflow or both (comma-separated)"
    )
    p.add_argument("--max-kib", type=int, default=64, help="the small files' largest size, KiB")
    p.add_argument(
        "--name",
        default="cutover",
        help="results/NAME.json and .md, and docs/benchmarks.md's block of that name",
    )
    p.add_argument(
        "--no-docs", action="store_true", help="results only: no docs block, no screenshot"
    )
    p.add_argument(
        "--render",
        action="store_true",
        help="only redo results/NAME.md from results/NAME.json (its passes from the histories kept)",
    )
    args = p.parse_args()
    if args.render:
        return rerender(args.name)
    targets = [t for t in args.targets.split(",") if t]
    shutil.rmtree(SCRATCH, ignore_errors=True)
    SCRATCH.mkdir(parents=True)
    load_start = os.getloadavg()[0]
    env = bench_env(
        {"AZURE_STORAGE_ACCOUNT": AZ_ACCOUNT, "AZURE_STORAGE_KEY": AZ_KEY, "FERRY_AUTH": "key"}
    )
    results = []
    for target in targets:
        azurite = Azurite(SCRATCH / "azurite") if target == "azurite" else None
        try:
            for engine in [e for e in args.engines.split(",") if e]:
                results.append(migrate(target, args, env, azurite, engine))
        finally:
            if azurite:
                azurite.stop()
    flags = " ".join(
        f"--{k} {v}"
        for k, v in (
            ("files", args.files),
            ("rate", args.rate),
            ("interval", args.interval),
            ("passes", args.passes),
            ("parts", args.parts),
            *((("max-kib", args.max_kib),) if args.max_kib != 64 else ()),
            *((("name", args.name),) if args.name != "cutover" else ()),
        )
    )
    res = record(
        f".venv/bin/python benchmarks/cutover.py {flags} --targets {args.targets} --engines {args.engines}",
        load_start,
        [],
    )
    del res["sizes"]
    res["settings"] = {
        "files": args.files,
        "rate": args.rate,
        "interval": args.interval,
        "passes": args.passes,
        "parts": args.parts,
    }
    res["targets"] = [{k: v for k, v in t.items() if k != "report_html"} for t in results]
    print(publish(args.name, args.name, res, render, docs=not args.no_docs))
    if not args.no_docs and results and args.name == "cutover":
        screenshot(Path(results[-1]["report_html"]), SCREENSHOT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
