"""Listing at a distance: how long a whole container takes to list when every response comes back
late, as from a storage account across a region.

    .venv/bin/python benchmarks/listing.py [--blobs 50000] [--latency-ms 5000] [--runs 3]
                                           [--layouts deep,hashed,tiny,deep:20000] [--azcopy PATH] [--no-docs]

Each layout is seeded once into an Azurite of its own (Azurite is one Node thread and slows as a
container grows: a layout per instance keeps one from taxing another), with zero-byte blobs:
`deep` (projects / directories / subdirectories / files, 40 files a directory), `hashed` (a flat
container of SHA-1 names, no '/'), `tiny` (a directory for every two files: azcopy #1131's trap).
toxiproxy sits in front of each Azurite and holds every response for `--latency-ms` (a stand-in for
the service's ≈ 1.2 s a 5,000-entry page), so distance, not Azurite, dominates: Azurite spends
≈ 0.5 s of its one thread on a page, and the pieces of a parallel listing queue for that thread,
so at 1 s a response Azurite's time is as large as the distance and no lister can share it out.
At 5 s it is a tenth. 50,000 blobs are ten pages: at five, the first page and the rest at once,
the fewest round trips any lister that knows nothing of a container beforehand can make, are
already 0.4× one stream.

The tools, in an order rotated every round: ferry `ls -r` with `--list-concurrency 1` (one
sequential stream, as before key ranges) and with its default; ferry as the pipelines' `list.jobs:
4` run it (`ferry shard`, then four `ferry ls --shards` at once); rclone `lsf -R` with `--checkers 16`
(a listing per directory) and with `--fast-list` (one recursive stream); azcopy `copy --dry-run`
(its default parallel scan; `azcopy list` cannot read an emulator URL), when `--azcopy` names a
build of it (docs/benchmarks.md says how to build one). The two that list a directory at a time
(rclone `--checkers`, azcopy) run in the first round only, and are given up after
`--scan-limit` seconds (a round trip a directory takes minutes here), recorded as a lower bound. Every run's entry count is checked against
the seeded count; ferry's List Blobs requests come from its `--summary`.

Results: benchmarks/results/listing.json and .md (`--name` for another), and the table in
docs/benchmarks.md.
Scratch: benchmarks/.data/listing/ (git-ignored), removed at the start of each run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from campaign.common import AZ_ACCOUNT, AZ_KEY, bench_env, free_port, log  # noqa: E402
from campaign.oneshot import REPO, measured_on, publish, record  # noqa: E402
from campaign.services import azurite_answers, end_process, spawn_azurite  # noqa: E402
from support.toxiproxy import start_toxiproxy  # noqa: E402

SCRATCH = REPO / "benchmarks" / ".data" / "listing"
# The build measured, copied aside first: a rebuild during the campaign must not change it.
FERRY = SCRATCH / "bin" / "ferry"
RCLONE = REPO / ".venv" / "bin" / "rclone"
CONTAINER = "listing"
# The tools that list a directory at a time: a round trip each, minutes on a tree of thousands.
BY_DIRECTORY = ("rclone --checkers 16", "azcopy (default scan)")


def names(layout: str, n: int) -> list[str]:
    if layout == "deep":
        return [f"proj{i % 4}/d{i // 160:05d}/sub{(i // 40) % 4}/f{i:07d}.dat" for i in range(n)]
    if layout == "hashed":
        return [hashlib.sha1(b"%d" % i).hexdigest() for i in range(n)]
    if layout == "tiny":
        return [f"t/{i // 2:07d}/f{i % 2}" for i in range(n)]
    raise ValueError(layout)


LOCKED = "3.37.0 (lock)"


class Site:
    """One layout in its own Azurite, behind a toxiproxy that delays every response. With
    `seeded` (another site), a copy of that site's Azurite files served by the Azurite at
    `binary` (an older one: seeding 50,000 blobs takes it over 8 minutes)."""

    def __init__(
        self, layout: str, n: int, work: Path, toxi, latency_ms: int, seeded=None, binary=None
    ):
        self.layout, self.work, self.binary = layout, work, binary
        self.version = LOCKED if binary is None else azurite_version(binary)
        work.mkdir(parents=True)
        if seeded is not None:
            seeded.stop()
            shutil.copytree(seeded.work / "azurite", work / "azurite")
            seeded.start()
        else:
            (work / "azurite").mkdir()
        self.port = free_port()
        self.start()
        if seeded is None:
            self.seed(n)
        else:
            self.count = self.listed_count()
        self.proxy = toxi.proxy(self.port, name=f"az-{layout}-{n}-{self.version.split()[0]}")
        self.proxy.toxic("latency", latency=latency_ms)

    def start(self) -> None:
        self.azurite = spawn_azurite(
            self.port,
            self.work / "azurite",
            self.work / "azurite.log",
            lambda: azurite_answers(self.port),
            self.binary,
        )

    def url(self, port: int | None = None) -> str:
        return f"http://127.0.0.1:{port or self.port}/{AZ_ACCOUNT}/{CONTAINER}"

    def seed(self, n: int) -> None:
        # Blobs only, put straight through the SDK: no folder stubs, so every tool sees n files.
        from concurrent.futures import ThreadPoolExecutor

        from azure.storage.blob import BlobServiceClient

        started = time.monotonic()
        service = BlobServiceClient(
            f"http://127.0.0.1:{self.port}/{AZ_ACCOUNT}",
            credential={"account_name": AZ_ACCOUNT, "account_key": AZ_KEY},
        )
        container = service.get_container_client(CONTAINER)
        container.create_container()
        with ThreadPoolExecutor(64) as pool:
            for _ in pool.map(lambda name: container.upload_blob(name, b""), names(self.layout, n)):
                pass
        self.count = self.listed_count()
        log(
            f"{self.layout}: {n} blobs seeded in {time.monotonic() - started:.0f} s; the container holds {self.count}"
        )

    def listed_count(self) -> int:
        out = subprocess.run(
            [str(FERRY), "ls", "-r", self.url()], env=ferry_env(), check=True, capture_output=True
        )
        return len(out.stdout.splitlines()) - 1

    def stop(self) -> None:
        end_process(self.azurite)


def azurite_version(binary: Path) -> str:
    return subprocess.run(
        [str(binary), "--version"], capture_output=True, text=True, check=True
    ).stdout.strip()


def ferry_env() -> dict:
    return bench_env(
        {"AZURE_STORAGE_ACCOUNT": AZ_ACCOUNT, "AZURE_STORAGE_KEY": AZ_KEY, "FERRY_AUTH": "key"}
    )


def sas() -> str:
    import datetime

    from azure.storage.blob import ContainerSasPermissions, generate_container_sas

    return generate_container_sas(
        AZ_ACCOUNT,
        CONTAINER,
        account_key=AZ_KEY,
        permission=ContainerSasPermissions(read=True, list=True),
        expiry=datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=6),
    )


def tools(azcopy: Path | None) -> dict:
    """name → (argv for a container URL through the proxy, environment, how to count its output)."""

    def ferry(*flags):
        def argv(site, port, scratch):
            return [
                str(FERRY),
                "ls",
                "-r",
                site.url(port),
                "--summary",
                str(scratch / "summary.json"),
                *flags,
            ]

        return argv, ferry_env(), lambda out: len(out.splitlines()) - 1

    def rclone(*flags):
        def argv(site, port, scratch):
            return [str(RCLONE), "lsf", "-R", "--files-only", f"az:{CONTAINER}", *flags]

        env = {
            "RCLONE_CONFIG_AZ_TYPE": "azureblob",
            "RCLONE_CONFIG_AZ_ACCOUNT": AZ_ACCOUNT,
            "RCLONE_CONFIG_AZ_KEY": AZ_KEY,
        }
        return argv, env, lambda out: len(out.splitlines())

    def ferry_jobs(jobs: int):
        # `list.jobs` as the pipelines run it: `ferry shard` cuts the key space (on a first
        # pass, by a shallow scan), then one `ferry ls` a range, all at once.
        script = (
            f'"$0" shard "$1" --jobs {jobs} --out shards.json 2> shard.err || exit 1\n'
            'pids=""\n'
            f"for k in $(seq 1 {jobs}); do\n"
            '  "$0" ls -r "$1" --shards shards.json --shard $k --summary summary-$k.json'
            ' > out-$k & pids="$pids $!"\n'
            "done\n"
            "for p in $pids; do wait $p || exit 1; done\n"
            "cat out-*\n"
            "cat shard.err >&2\n"
        )

        def argv(site, port, scratch):
            return ["sh", "-c", script, str(FERRY), site.url(port)]

        return argv, ferry_env(), lambda out: len(out.splitlines()) - jobs

    table = {
        "ferry --list-concurrency 1": ferry("--list-concurrency", "1"),
        "ferry (default)": ferry(),
        "ferry, 4 list jobs": ferry_jobs(4),
        "rclone --checkers 16": rclone("--checkers", "16"),
        "rclone --fast-list": rclone("--fast-list"),
    }
    if azcopy is not None:

        def argv(site, port, scratch):
            return [
                str(azcopy),
                "copy",
                f"{site.url(port)}/*?{sas()}",
                str(scratch / "down"),
                "--recursive",
                "--dry-run",
                "--from-to=BlobLocal",
            ]

        table["azcopy (default scan)"] = (
            argv,
            {},
            lambda out: sum(1 for line in out.splitlines() if line.startswith("DRYRUN: copy")),
        )
    return table


def run_one(name: str, spec, site: Site, scratch: Path, limit: float | None = None) -> dict:
    argv_of, extra_env, count = spec
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    env = ferry_env() if name.startswith("ferry") else bench_env(extra_env)
    if name.startswith("rclone"):
        env["RCLONE_CONFIG_AZ_ENDPOINT"] = f"http://127.0.0.1:{site.proxy.port}/{AZ_ACCOUNT}"
    if name.startswith("azcopy"):
        env.update(
            {
                "AZCOPY_LOG_LOCATION": str(scratch / "logs"),
                "AZCOPY_JOB_PLAN_LOCATION": str(scratch / "plans"),
            }
        )
    argv = argv_of(site, site.proxy.port, scratch)
    started = time.monotonic()
    try:
        r = subprocess.run(
            argv, env=env, capture_output=True, text=True, cwd=scratch, timeout=limit
        )
    except subprocess.TimeoutExpired:
        return {"seconds": round(time.monotonic() - started, 2), "given_up": True}
    seconds = time.monotonic() - started
    if r.returncode != 0:
        raise RuntimeError(
            f"{name} on {site.layout} failed ({r.returncode}): {r.stderr[-2000:]}{r.stdout[-1000:]}"
        )
    listed = count(r.stdout)
    if listed != site.count:
        raise RuntimeError(f"{name} listed {listed} of the {site.count} blobs of {site.layout}")
    row = {"seconds": round(seconds, 2)}
    # ferry's own count: each listing's summary, and the shard step's scan where there is one.
    summaries = sorted(scratch.glob("summary*.json"))
    if summaries:
        scanned = re.search(r"\((\d+) List requests\)", r.stderr)
        row["list_requests"] = sum(
            json.loads(p.read_text())["requests"]["list_pages"] for p in summaries
        ) + (int(scanned.group(1)) if scanned else 0)
    return row


def measure(args) -> dict:
    shutil.rmtree(SCRATCH, ignore_errors=True)
    FERRY.parent.mkdir(parents=True)
    shutil.copy2(REPO / "worker" / "target" / "release" / "ferry", FERRY)
    load_start = os.getloadavg()[0]
    toxi = start_toxiproxy(REPO, SCRATCH)
    table = {name: spec for name, spec in tools(args.azcopy).items() if name in args.tools}
    results = []
    try:
        for layout, n in args.layouts:
            sites = [Site(layout, n, SCRATCH / f"{layout}-{n}", toxi, args.latency_ms)]
            if args.old_azurite:
                sites.append(
                    Site(
                        layout,
                        n,
                        SCRATCH / f"{layout}-{n}-old",
                        toxi,
                        args.latency_ms,
                        seeded=sites[0],
                        binary=args.old_azurite,
                    )
                )
            try:
                # Every (service, tool) pair once a round, in an order rotated every round.
                pairs = [(site, name) for site in sites for name in table]
                runs: dict = {(site.version, name): [] for site, name in pairs}
                for rnd in range(args.runs):
                    for site, name in pairs[rnd % len(pairs) :] + pairs[: rnd % len(pairs)]:
                        by_directory = name in BY_DIRECTORY
                        if by_directory and rnd > 0:
                            continue
                        row = run_one(
                            name,
                            table[name],
                            site,
                            SCRATCH / "run",
                            args.scan_limit if by_directory else None,
                        )
                        runs[(site.version, name)].append(row)
                        log(f"{layout} ({site.version}) round {rnd + 1}: {name}: {row}")
                for (version, name), rows in runs.items():
                    secs = [r["seconds"] for r in rows]
                    results.append(
                        {
                            "layout": layout,
                            "azurite": version,
                            "blobs": sites[0].count,
                            "tool": name,
                            "runs": len(rows),
                            "seconds": statistics.median(secs),
                            "seconds_range": [min(secs), max(secs)],
                            "given_up": any(r.get("given_up") for r in rows),
                            **(
                                {
                                    "list_requests": statistics.median(
                                        r["list_requests"] for r in rows
                                    )
                                }
                                if "list_requests" in rows[0]
                                else {}
                            ),
                        }
                    )
            finally:
                for site in sites:
                    site.stop()
    finally:
        toxi.stop()
    # A build's place on this machine is no part of how to redo it.
    builds = {str(args.azcopy), str(args.old_azurite)}
    argv = [("PATH" if a in builds else a) for a in sys.argv[1:]]
    command = "benchmarks/listing.py " + " ".join(argv)
    res = record(command.strip(), load_start, [])
    res.update({"latency_ms": args.latency_ms, "rows": results})
    return res


def render(res: dict) -> str:
    lines = [
        f"Listing a whole container, each response delayed {res['latency_ms']} ms (toxiproxy in front of Azurite); "
        "median of the rotated runs (range), and the ratio to ferry's one stream on the same layout.",
        "",
        "| layout | Azurite | blobs | tool | seconds | × one stream | List Blobs requests |",
        "|---|---|---:|---|---:|---:|---:|",
    ]

    def site(r):
        return r["layout"], r["blobs"], r.get("azurite", LOCKED)

    base = {site(r): r["seconds"] for r in res["rows"] if r["tool"] == "ferry --list-concurrency 1"}
    for r in res["rows"]:
        lo, hi = r["seconds_range"]
        more = "> " if r.get("given_up") else ""
        lines.append(
            f"| {r['layout']} | {site(r)[2]} | {r['blobs']:,} | {r['tool']} | "
            f"{more}{r['seconds']:.1f} ({lo:.1f}–{hi:.1f}) | "
            f"{more}{r['seconds'] / base[site(r)]:.2f} | {r.get('list_requests', '')} |"
        )
    lines += ["", measured_on(res, "; the ratios hold better than the seconds")]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--blobs", type=int, default=50000)
    p.add_argument("--latency-ms", type=int, default=5000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument(
        "--layouts",
        default="deep,hashed,tiny",
        help="comma-separated, each LAYOUT (of --blobs blobs) or LAYOUT:BLOBS (another size)",
    )
    p.add_argument("--azcopy", type=Path, help="an azcopy binary built from its public source")
    p.add_argument(
        "--old-azurite",
        type=Path,
        help="an older Azurite's azurite-blob (3.35.0 ignores startFrom), measured beside the lock",
    )
    p.add_argument(
        "--tools",
        default=",".join(tools(None)),
        type=lambda s: s.split(","),
        help="the tools to run, by their names in the table (comma-separated)",
    )
    p.add_argument(
        "--scan-limit",
        type=float,
        default=180,
        help="seconds after which a directory-at-a-time tool's run is given up",
    )
    p.add_argument("--no-docs", action="store_true")
    p.add_argument("--render", action="store_true", help="redo the table from the recorded results")
    p.add_argument(
        "--name",
        default="listing",
        help="results/NAME.json and .md, and the docs block of that name (a second size beside the first)",
    )
    args = p.parse_args()
    args.layouts = [
        (spec.split(":")[0], int(spec.split(":")[1]) if ":" in spec else args.blobs)
        for spec in args.layouts.split(",")
    ]
    res = None if args.render else measure(args)
    print(publish(args.name, args.name, res, render, not args.no_docs))


if __name__ == "__main__":
    main()
