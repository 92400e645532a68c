"""Sizes and rates, read by the one implementation of the unit rules (worker/src/units.rs)
through `ferry units`, the reading the replication asks for and the pipeline's options get; and
the config schema's patterns, the parse-time shape check, accepting what the worker reads."""

from __future__ import annotations

import re

import ferry_config
import ferry_docs
import pytest

SIZES = [
    ("0", 0),
    ("123", 123),
    (" 42 ", 42),
    ("8B", 8),
    ("8K", 8 << 10),
    ("8KiB", 8 << 10),
    ("8Ki", 8 << 10),
    ("8M", 8 << 20),
    ("8MiB", 8 << 20),
    ("8 MiB", 8 << 20),
    ("8mib", 8 << 20),
    ("2G", 2 << 30),
    ("1T", 1 << 40),
    ("1.5GiB", 3 << 29),
    ("8KB", 8000),
    ("8MB", 8_000_000),
    ("1.5GB", 1_500_000_000),
    ("2TB", 2 * 10**12),
    ("8kb", 8000),
]
NOT_SIZES = ["", "MiB", "-1", "1,5M", "8 MiBs", "8 mbit", "8PiB", "0x10", "1e3"]
RATES = [
    ("1000", 1000),
    ("1000B", 1000),
    ("1000B/s", 1000),
    ("500Mbps", 62_500_000),
    ("1Gbps", 125_000_000),
    ("8bps", 1),
    ("100kbps", 12_500),
    ("100Kbps", 12_500),
    ("100MB/s", 100_000_000),
    ("100 MB/s", 100_000_000),
    ("1kB/s", 1000),
    ("2TB", 2 * 10**12),
    ("64MiB/s", 64 << 20),
    ("1KiB", 1024),
    ("1.5GiB/s", 3 << 29),
]
NOT_RATES = ["fast", "100mb/s", "100 MBps", "100MB/h", "-5MB/s", "10M", "100MiBps"]
BELOW_ONE = ["0", "0MB/s", "4bps", "0.5"]


def units(run_ferry, option, value, check=True):
    return run_ferry("units", f"--{option}={value}", check=check)


@pytest.mark.parametrize("value,size", SIZES)
def test_sizes_bare_units_binary_b_units_decimal(run_ferry, value, size):
    doc = ferry_docs.parse("units", units(run_ferry, "size", value).stdout, "ferry units")
    assert doc["sizes"] == [size] and doc["rates"] == []


@pytest.mark.parametrize("value", NOT_SIZES)
def test_a_size_refused_is_a_usage_error_naming_it(run_ferry, value):
    proc = units(run_ferry, "size", value, check=2)
    assert f"invalid value '{value}' for '--size <SIZE>'" in proc.stderr and not proc.stdout


@pytest.mark.parametrize("value,rate", RATES)
def test_rates_bits_decimal_bytes_as_sizes(run_ferry, value, rate):
    doc = ferry_docs.parse("units", units(run_ferry, "rate", value).stdout, "ferry units")
    assert doc["rates"] == [rate] and doc["sizes"] == []


@pytest.mark.parametrize("value", NOT_RATES)
def test_a_rate_refused_names_an_example(run_ferry, value):
    proc = units(run_ferry, "rate", value, check=2)
    assert "(e.g. 500Mbps, 100MB/s, 64MiB/s)" in proc.stderr or "not a number" in proc.stderr
    assert f"invalid value '{value}' for '--rate <RATE>'" in proc.stderr


@pytest.mark.parametrize("value", BELOW_ONE)
def test_a_rate_below_one_byte_per_second_is_refused(run_ferry, value):
    assert "below one byte per second" in units(run_ferry, "rate", value, check=2).stderr


def test_values_come_back_in_the_order_given(run_ferry):
    proc = run_ferry("units", "--size", "1K", "--rate", "8bps", "--size", "2", "--rate", "1KiB")
    doc = ferry_docs.parse("units", proc.stdout, "ferry units")
    assert (doc["sizes"], doc["rates"]) == ([1024, 2], [1, 1024])


def schema_pattern(*path) -> re.Pattern:
    node = ferry_config.load_yaml(ferry_config.SCHEMA)
    for key in path:
        node = node["properties"][key]
    return re.compile(node["pattern"])


@pytest.mark.parametrize(
    "path,kind,good,bad",
    [
        (("copy", "block_size"), "size", [v for v, _ in SIZES], NOT_SIZES),
        (("plan", "max_bytes"), "size", [v for v, _ in SIZES], NOT_SIZES),
        (("replicate", "chunk_size"), "size", [v for v, _ in SIZES], NOT_SIZES),
        (("copy", "max_bandwidth"), "rate", [v for v, _ in RATES], NOT_RATES),
        (("replicate", "max_bandwidth"), "rate", [v for v, _ in RATES], NOT_RATES),
    ],
)
def test_the_config_schema_checks_the_shape_the_worker_reads(run_ferry, path, kind, good, bad):
    """The schema refuses a malformed size or rate before any job; the worker does the reading.
    Its patterns may only be looser than the worker in what it refuses for value (a rate below
    one byte a second, a block size out of range), never in the units."""
    pattern = schema_pattern(*path)
    for value in good:
        assert pattern.search(value.strip()), f"{path}: the schema refuses {value!r}"
    for value in bad:
        assert not pattern.search(value), f"{path}: the schema takes {value!r}"
        assert units(run_ferry, kind, value, check=False).returncode == 2
