"""Network faults between ferry and Azurite: HTTP status faults from the test proxy, TCP faults from
a real toxiproxy, at rates from 1% to 30%.

The chain is ferry → toxiproxy → FaultProxy (tests/support/proxy.py) → Azurite. toxiproxy does the
TCP damage; FaultProxy, behind it, injects the status faults and logs every request that reached
it (with its Put Block ID, and whether the exchange was cut), so the tests can compare what ferry
says it retried with what was done to it. Every copy is then checked byte for byte with the
Python SDK or plain reads, never with ferry alone.

What can be asserted, honestly:
- status faults (FaultProxy answers instead of forwarding): ferry's retry counts by status equal
  the faults injected, exactly, and no block is staged twice;
- TCP faults: toxiproxy rolls its toxicity per connection and reports nothing, so the count is a
  lower bound: ferry's retries are at least the exchanges FaultProxy saw cut; a block may be
  staged twice only when a retry explains it (a 201 lost on the way back must be re-sent).
"""

from __future__ import annotations

from collections import Counter

import pytest
from support import faults as fault_ledger
from support.faults import random_files, upload_with_sdk, write_files
from support.proxy import ABSENT, FaultProxy

KiB = 1024
MiB = 1 << 20
CI_RATES = (0.01, 0.3)
DEEP_RATES = (0.01, 0.05, 0.1, 0.3)


def pytest_generate_tests(metafunc):
    if "rate" in metafunc.fixturenames:
        deep = fault_ledger.ledger().deep
        metafunc.parametrize("rate", DEEP_RATES if deep else CI_RATES, ids=lambda r: f"{r:.0%}")


def payload(faults, rng):
    """CI: a dozen small files and two files of six 256 KiB blocks; deep: more small files and
    two of 17 MiB, so uploads take 17 blocks and downloads three 8 MiB ranges."""
    if faults.deep:
        return random_files(rng, small=30, big=2, big_size=17 * MiB), "1MiB"
    return random_files(rng, small=12, big=2, big_size=1536 * KiB), "256KiB"


def ferry_args(block_size: str) -> list:
    return [
        "--recursive",
        "--block-size",
        block_size,
        "--concurrency",
        "4",
        "--max-retries",
        "30",
        "--json",
    ]


# Injected on whatever request the test proxy sees, each with a share of the rate.
STATUS_FAULTS = (503, 500, 429)


@pytest.mark.parametrize("direction", ["upload", "download"])
def test_http_status_faults_are_retried_and_counted_exactly(
    direction, rate, tmp_path, azurite, container, run_ferry, faults
):
    rng = faults.test_rng
    files, block_size = payload(faults, rng)
    src, dst = tmp_path / "src", tmp_path / "dst"
    with FaultProxy(azurite.port) as proxy:
        rules = {
            status: proxy.add(
                "status",
                status=status,
                probability=rate / len(STATUS_FAULTS),
                seed=rng.randrange(1 << 30),
                count=10_000,
                headers={"Retry-After": "0"} if status != 500 else {},
            )
            for status in STATUS_FAULTS
        }
        if direction == "upload":
            write_files(src, files)
            run = run_ferry("copy", src, container.via(proxy.port), *ferry_args(block_size))
        else:
            upload_with_sdk(container, files)
            # Bodies cut short, where a download meets them: blob GETs (listings have a comp=).
            proxy.add(
                "truncate",
                method="GET",
                query={"comp": ABSENT},
                probability=rate / 2,
                seed=rng.randrange(1 << 30),
                count=10_000,
                body_bytes=rng.randrange(0, 60_000),
            )
            run = run_ferry("copy", container.via(proxy.port), dst, *ferry_args(block_size))
        faults.ran()
        injected = {str(s): r.fired for s, r in rules.items() if r.fired}
        for s, r in rules.items():
            faults.fault(f"http {s}", r.fired)
        puts = proxy.requests("PUT", comp="block")
        # A cut that fell past the end of a shorter body is no fault at all. A cut data body is
        # retried as "truncated"; a cut error body (the 416 the SDK meets first on an empty
        # blob) fails before any data, as a connection error.
        cut = [r for r in proxy.requests("GET") if r.cut]
        for label, n in (
            ("truncated", sum(1 for r in cut if 200 <= r.status < 300)),
            ("connection", sum(1 for r in cut if not 200 <= r.status < 300)),
        ):
            if n:
                injected[label] = n
        faults.fault("http body cut short", len(cut))

    by_status = run.json["retries"]["by_status"]
    assert by_status == injected, f"ferry retried {by_status}, the proxy injected {injected}"
    assert run.json["retries"]["total"] == sum(injected.values()), run.json["retries"]
    # Every 201 reached ferry, so no block may have been staged twice.
    staged = Counter((r.path, r.block_id) for r in puts if r.status == 201)
    assert not [k for k, n in staged.items() if n > 1], "a block was staged twice"

    source, dest = (src, container) if direction == "upload" else (container, dst)
    assert not faults.check(dest, files, complete=True)
    run_ferry("verify", "--checksum", source, dest)


# Each kind of TCP fault as toxiproxy toxics: (type, stream, attributes, toxicity). The stream
# "body" is the direction the file's bytes flow (upstream for an upload, downstream for a
# download), "both" adds the toxic in each direction; a toxicity of None takes the test's rate.
def toxics_of(kind: str, rng) -> list:
    return {
        "latency": [("latency", "both", {"latency": 40, "jitter": 40}, None)],
        "bandwidth": [("bandwidth", "body", {"rate": 1500}, None)],
        # Capped so that bodies are still on the wire when the reset comes.
        "reset_peer": [
            ("bandwidth", "body", {"rate": 4000}, 1.0),
            ("reset_peer", "body", {"timeout": rng.randrange(30, 300)}, None),
        ],
        # Half-open: bytes vanish, nothing closes; only ferry's --io-timeout gets it out.
        "timeout": [("timeout", "body", {"timeout": 0}, None)],
        "slow_close": [("slow_close", "both", {"delay": 300}, None)],
        "limit_data": [("limit_data", "body", {"bytes": rng.randrange(10_000, 400_000)}, None)],
    }[kind]


@pytest.mark.parametrize(
    "kind", ["latency", "bandwidth", "reset_peer", "timeout", "slow_close", "limit_data"]
)
@pytest.mark.parametrize("direction", ["upload", "download"])
def test_tcp_faults_end_byte_identical(
    kind, direction, rate, tmp_path, azurite, container, toxiproxy, run_ferry, faults
):
    rng = faults.test_rng
    files, block_size = payload(faults, rng)
    src, dst = tmp_path / "src", tmp_path / "dst"
    body = "upstream" if direction == "upload" else "downstream"
    if direction == "upload":
        write_files(src, files)
    else:
        upload_with_sdk(container, files)
    with FaultProxy(azurite.port) as inner:
        tcp = toxiproxy.proxy(inner.port)
        try:
            for toxic, stream, attrs, toxicity in toxics_of(kind, rng):
                for s in (
                    ("upstream", "downstream")
                    if stream == "both"
                    else (body,)
                    if stream == "body"
                    else (stream,)
                ):
                    tcp.toxic(
                        toxic, stream=s, toxicity=rate if toxicity is None else toxicity, **attrs
                    )
            via = container.via(tcp.port)
            env = {"FERRY_IO_TIMEOUT": "2"}
            if direction == "upload":
                run = run_ferry(
                    "copy",
                    src,
                    via,
                    *ferry_args(block_size),
                    env=env,
                    timeout=600 if faults.deep else 110,
                )
            else:
                run = run_ferry(
                    "copy",
                    via,
                    dst,
                    *ferry_args(block_size),
                    env=env,
                    timeout=600 if faults.deep else 110,
                )
        finally:
            tcp.delete()
        inner.wait_idle(30)
        faults.ran()
        cut = [r for r in inner.requests() if r.error]
        staged = Counter(
            (r.path, r.block_id) for r in inner.requests("PUT", comp="block") if r.status == 201
        )
    retries = run.json["retries"]["total"]
    faults.tcp(kind, len(cut), retries)
    assert retries >= len(cut), (
        f"the proxy behind toxiproxy saw {len(cut)} exchanges cut, ferry retried "
        f"{run.json['retries']}: {[r.error for r in cut][:5]}"
    )
    # A 201 lost on the way back is re-sent: only a retry can explain a block staged twice.
    twice = sum(n - 1 for n in staged.values())
    assert twice <= retries, f"{twice} blocks staged again with only {retries} retries"
    source, dest = (src, container) if direction == "upload" else (container, dst)
    assert not faults.check(dest, files, complete=True)
    run_ferry("verify", "--checksum", source, dest)


@pytest.mark.parametrize("direction", ["upload", "download"])
def test_a_stalled_exchange_is_cut_by_the_io_timeout_and_retried_once(
    direction, tmp_path, azurite, container, run_ferry, faults
):
    """A peer that stops reading a request body (upload) or stops sending a response body midway
    (download), and never closes: only ferry's own timer gets it out. Exactly one timeout retry."""
    rng = faults.test_rng
    files = {"big.bin": rng.randbytes(4 * MiB + 17), "small.txt": b"small\n"}
    src, dst = tmp_path / "src", tmp_path / "dst"
    with FaultProxy(azurite.port) as proxy:
        if direction == "upload":
            write_files(src, files)
            # Held before its body is read: 1 MiB does not fit the socket buffers, so the write stalls.
            proxy.add(
                "stall",
                method="PUT",
                query={"comp": "block"},
                count=1,
                stall_timeout=60,
                after_stall="drop",
            )
            run = run_ferry(
                "copy",
                src,
                container.via(proxy.port),
                "--recursive",
                "--block-size",
                "1MiB",
                "--json",
                env={"FERRY_IO_TIMEOUT": "2"},
            )
        else:
            upload_with_sdk(container, files)
            proxy.add(
                "stall_body",
                method="GET",
                path="big.bin",
                body_bytes=rng.randrange(1, 4 * MiB),
                stall_timeout=60,
            )
            run = run_ferry(
                "copy",
                container.via(proxy.port),
                dst,
                "--recursive",
                "--block-size",
                "1MiB",
                "--json",
                env={"FERRY_IO_TIMEOUT": "2"},
            )
        proxy.release()
        faults.ran()
        faults.fault("stall", 1)
    assert run.json["retries"] == {"total": 1, "by_status": {"timeout": 1}}, run.json["retries"]
    assert not faults.check(container if direction == "upload" else dst, files, complete=True)
