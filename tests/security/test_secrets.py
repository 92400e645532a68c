"""A planted account key, SAS signature and bearer token never appear in anything a run writes:
worker stdout, stderr, --json, progress lines, prune logs, the pipeline's results and logs.

The secrets are real ones, used for real: the key is Azurite's (ferry signs with it), the SAS is
generated for the container with the Python SDK (ferry sends it), the bearer token comes from a
loopback IMDS stand-in (ferry presents it). Each run's output is collected and searched for every
form a secret could take (as given, percent-encoded, percent-decoded)."""

from __future__ import annotations

import base64
import datetime
import re
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import pytest
from azure.storage.blob import ContainerSasPermissions, generate_container_sas
from support.azurite import ACCOUNT, KEY
from support.ferry import ferry_env
from support.pipeline import REPO, base_config
from support.slurm import slurm_up
from support.standin import StandIn, token_env
from support.trees import File, make_tree

MiB = 1 << 20
TOKEN = "tok-imds"  # what the stand-in's IMDS hands out


def forms(secret: str) -> set[bytes]:
    out = {secret, urllib.parse.quote(secret, safe=""), urllib.parse.unquote(secret)}
    return {s.encode() for s in out if len(s) >= 8}


class Collected:
    """Everything the runs of one test wrote, to be searched at the end."""

    def __init__(self):
        self.blobs: list[tuple[str, bytes]] = []

    def add(self, what: str, data: bytes | str):
        self.blobs.append((what, data.encode() if isinstance(data, str) else data))

    def run(self, run_ferry, *args, **kw):
        out = run_ferry(*args, **kw)
        self.add(f"ferry {args[0]} stdout", out.stdout_bytes)
        self.add(f"ferry {args[0]} stderr", out.stderr)
        return out

    def tree(self, root: Path):
        for p in sorted(root.rglob("*")):
            if p.is_file() and not p.is_symlink():
                self.add(str(p), p.read_bytes())

    def assert_clean(self, secrets: dict[str, str]):
        assert len(self.blobs) > 10, "too little output collected to mean anything"
        leaks = [
            (name, what)
            for name, secret in secrets.items()
            for f in forms(secret)
            for what, data in self.blobs
            if f in data
        ]
        assert not leaks, f"secrets found in output: {leaks}"


@pytest.fixture
def sas(container) -> str:
    expiry = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
    return generate_container_sas(
        ACCOUNT,
        container.name,
        account_key=KEY,
        permission=ContainerSasPermissions(read=True, write=True, delete=True, list=True),
        expiry=expiry,
    )


def sig_of(sas: str) -> str:
    return urllib.parse.parse_qs(sas)["sig"][0]


@pytest.mark.timeout(240)
def test_no_secret_in_any_worker_output(tmp_path, run_ferry, container, proxy, sas, tls):  # noqa: F811
    got = Collected()
    src, dst = tmp_path / "src", tmp_path / "dst"
    make_tree(src, {"a.txt": b"a", "big.bin": File(size=3 * MiB), "dir/b.txt": b"b"})
    sas_url = f"{container}?{sas}"
    progress = ["--json", "--progress"]
    sas_env = {"AZURE_STORAGE_KEY": None, "FERRY_AUTH": None}

    # Key: upload, with injected 503s so the retry paths print what they print.
    proxy.add("status", status=503, method="PUT", count=3)
    got.run(
        run_ferry, "copy", "-r", src, container.via(proxy.port), "--block-size", "1MiB", *progress
    )
    # SAS in the URL: download, verify, prune, ls, rm, mk, env — successes and failures.
    got.run(run_ferry, "copy", "-r", sas_url, dst, *progress, env=sas_env)
    got.run(run_ferry, "verify", sas_url, dst, "--checksum", "--json", env=sas_env)
    got.run(run_ferry, "verify", src, sas_url, "--checksum", "--all", env=sas_env)
    (dst / "extra.txt").write_bytes(b"x")
    got.run(
        run_ferry,
        "prune",
        "--yes",
        sas_url,
        dst,
        "--dry-run",
        "--log",
        tmp_path / "prune.tsv",
        "--json",
        env=sas_env,
    )
    got.run(run_ferry, "ls", "-r", sas_url, env=sas_env)
    got.run(
        run_ferry,
        "env",
        sas_url,
        env={**sas_env, "AZURE_STORAGE_KEY": KEY, "AZURE_STORAGE_SAS_TOKEN": sas},
    )
    wrong = re.sub(
        r"sig=[^&]*",
        "sig=" + urllib.parse.quote(base64.b64encode(b"w" * 32).decode(), safe=""),
        sas,
    )
    assert wrong != sas
    got.run(run_ferry, "ls", f"{container}?{wrong}", env=sas_env, check=2)
    got.run(
        run_ferry,
        "copy",
        "-r",
        src,
        f"{container.at('sub')}?{wrong}",
        "--json",
        env=sas_env,
        check=False,
    )
    bad_name = sas_url.replace(container.name, "Bad_Name")
    got.run(run_ferry, "ls", bad_name, env=sas_env, check=2)
    got.run(
        run_ferry,
        "rm",
        "-r",
        f"{container.at('nothing-here')}?{sas}",
        "--dry-run",
        "--json",
        env=sas_env,
        check=2,  # a missing source, named: the URL in the message without its SAS
    )
    # SAS from the environment, with the key planted too (forced to SAS, so both are present).
    got.run(
        run_ferry,
        "copy",
        "-r",
        container,
        tmp_path / "dst2",
        "--json",
        env={"FERRY_AUTH": "sas", "AZURE_STORAGE_SAS_TOKEN": "?" + sas},
    )
    got.run(
        run_ferry,
        "copy",
        "-r",
        container.via(proxy.port),
        tmp_path / "dst3",
        "--json",
        "--max-retries",
        "0",
        env={"FERRY_AUTH": "sas", "AZURE_STORAGE_SAS_TOKEN": wrong},
        check=False,
    )
    # A bearer token from the IMDS stand-in: listed, then every GET answers 404 (an error path).
    standin = StandIn(tls)
    try:
        env = token_env(
            {
                "FERRY_AUTH": "managed",
                "FERRY_IMDS_ENDPOINT": standin.url,
                "SSL_CERT_FILE": str(standin.ca_file),
            }
        )
        got.run(
            run_ferry,
            "copy",
            "-r",
            f"{standin.tls_url}/acct/ctr",
            tmp_path / "dst4",
            *progress,
            env=env,
            check=1,
        )
        assert any(s["headers"].get("authorization") == f"Bearer {TOKEN}" for s in standin.seen), (
            "the token was not used"
        )
    finally:
        standin.close()
    got.tree(tmp_path)  # prune logs, downloaded trees, ferry's stdout/stderr files
    got.tree(run_ferry.workdir)
    got.assert_clean(
        {
            "account key": KEY,
            "SAS signature": sig_of(sas),
            "SAS (whole)": sas,
            "bearer token": f"Bearer {TOKEN}",
        }
    )


def run_pipeline(got: Collected, profile: str, ferry_bin, outdir, src, dest, sas, phase, *config):
    """Snakemake with the SAS used for real and the account key planted beside it."""
    env = ferry_env({"FERRY_AUTH": "sas", "AZURE_STORAGE_SAS_TOKEN": sas, "AZURE_STORAGE_KEY": KEY})
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "--profile",
        profile,
        "--config",
        *base_config(ferry_bin, outdir, src, dest, phase),
        *config,
    ]
    proc = subprocess.run(
        cmd, cwd=REPO, env=env, capture_output=True, timeout=400, stdin=subprocess.DEVNULL
    )
    got.add("snakemake stdout", proc.stdout)
    got.add("snakemake stderr", proc.stderr)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-4000:]


@pytest.mark.timeout(300)
@pytest.mark.pipeline
def test_no_secret_in_the_pipelines_results_and_logs(tmp_path, ferry_bin, container, sas):
    got = Collected()
    src, outdir = tmp_path / "src", tmp_path / "results"
    make_tree(src, {f"f{i}.txt": b"data %d" % i for i in range(6)})
    logs = REPO / ".snakemake" / "log"
    before = set(logs.glob("*.log")) if logs.exists() else set()
    started = time.time()
    run_pipeline(
        got,
        "profiles/local",
        ferry_bin,
        outdir,
        src,
        container.at("share"),
        sas,
        "final",
        "checksum=true",
    )
    assert sorted(container.blobs("share/")) == [f"share/f{i}.txt" for i in range(6)]
    got.tree(outdir)
    for log in set(logs.glob("*.log")) - before:
        if log.stat().st_mtime >= started - 1:
            got.add(str(log), log.read_bytes())
    got.assert_clean({"account key": KEY, "SAS signature": sig_of(sas), "SAS (whole)": sas})


@pytest.mark.timeout(420)
@pytest.mark.pipeline
def test_no_secret_in_slurm_job_output(slurm, tmp_path, ferry_bin, container, sas):  # noqa: F811
    """The same through `--profile profiles/slurm`: every sbatch job's output file is searched."""
    slurm_up(accounting=False)
    got = Collected()
    src, outdir = tmp_path / "src", tmp_path / "results"
    make_tree(src, {f"f{i}.txt": b"data %d" % i for i in range(6)})
    slurm_logs = REPO / ".snakemake" / "slurm_logs"
    started = time.time()
    run_pipeline(
        got,
        "profiles/slurm",
        ferry_bin,
        outdir,
        src,
        container.at("viaslurm"),
        sas,
        "baseline",
        "plan={mode: parts, parts: 2}",
    )
    assert len(container.blobs("viaslurm/")) == 6
    job_outputs = [
        p for p in slurm_logs.rglob("*") if p.is_file() and p.stat().st_mtime >= started - 1
    ]
    assert job_outputs, "no Slurm job output files were written"
    for p in job_outputs:
        got.add(str(p), p.read_bytes())
    got.tree(outdir)
    got.assert_clean({"account key": KEY, "SAS signature": sig_of(sas), "SAS (whole)": sas})


@pytest.mark.timeout(300)
@pytest.mark.pipeline
def test_no_secret_in_nextflow_work_trace_and_results(tmp_path, ferry_bin, container, sas):
    """The same final phase through Nextflow: its task scripts and logs (.command.*), trace,
    timeline, report and .nextflow.log, and the run directory, hold no secret."""
    from support.nextflow import nextflow, params_for

    got = Collected()
    src, outdir, launch = tmp_path / "src", tmp_path / "results", tmp_path / "launch"
    make_tree(src, {f"f{i}.txt": b"data %d" % i for i in range(6)})
    proc = nextflow(
        launch,
        params=params_for(ferry_bin, outdir, src, container.at("share"), "final", checksum=True),
        env={"FERRY_AUTH": "sas", "AZURE_STORAGE_SAS_TOKEN": sas, "AZURE_STORAGE_KEY": KEY},
    )
    got.add("nextflow stdout", proc.stdout)
    got.add("nextflow stderr", proc.stderr)
    assert sorted(container.blobs("share/")) == [f"share/f{i}.txt" for i in range(6)]
    commands = [p for p in launch.rglob(".command.*") if p.is_file()]
    assert commands, "no task files to search"
    for p in commands:
        got.add(str(p), p.read_bytes())
    got.tree(outdir)
    for p in launch.glob(".nextflow.log*"):
        got.add(str(p), p.read_bytes())
    got.assert_clean({"account key": KEY, "SAS signature": sig_of(sas), "SAS (whole)": sas})
