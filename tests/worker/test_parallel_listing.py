"""A container listed in key ranges, many List Blobs requests in flight (`--list-concurrency`),
gives the listing of one sequential stream byte for byte, for every layout; the requests are
counted as the proxy saw them, and the ranges cost a bounded number of pages beyond the stream's.
Pages are shrunk (`--list-page-size`) so that a container of a few thousand blobs is cut as one of
millions would be."""

from __future__ import annotations

import hashlib
import json
import math

import pytest
from support.ferry import new_container
from support.proxy import FaultProxy
from support.trees import ODD_NAMES, make_tree

PAGE = 40


def hashed(n: int) -> dict:
    """A flat container of content-addressed names: no '/' to cut at."""
    return {hashlib.sha1(b"%d" % i).hexdigest(): b"" for i in range(n)}


def deep(n: int) -> dict:
    return {f"proj{i % 3}/d{i // 40:03d}/sub{i % 5}/f{i:05d}.dat": b"" for i in range(n)}


def tiny_dirs(n: int) -> dict:
    """azcopy #1131's trap: a directory for every file or two."""
    return {f"t/{i // 2:05d}/f{i % 2}": b"" for i in range(n)}


def odd(n: int) -> dict:
    # Names beside each other in UTF-8 but not in UTF-16 order (U+FFxx against U+1Fxxx), spaces,
    # percent signs, and every odd name the other suites use.
    spec = {f"odd/{name}": b"" for name in ODD_NAMES}
    marks = ["\ufb01", "\uff21", "😀", "\ue000", "é", "~", " ", "%20", "a"]
    for i in range(n):
        spec[f"odd/{marks[i % len(marks)]}{i:04d}{marks[(i * 7) % len(marks)]}"] = b""
    return spec


def mixed(n: int) -> dict:
    """A few directories, each of a few, and blobs at the top level between them: `b.txt` and `b0`
    around `b/` (`.` < `/` < `0`), `a.txt` after `a/`'s stub `a`; a directory in `é`."""
    dirs = ["a", "b", "b.d", "c", "é"]
    spec = {f"{dirs[i % 5]}/d{i % 3}/f{i:05d}": b"" for i in range(n)}
    spec.update({name: b"" for name in ["a.txt", "b.txt", "b0", "zz"]})
    return spec


LAYOUTS = {
    "hashed": hashed(1200),
    "deep": deep(1200),
    "tiny-dirs": tiny_dirs(1200),
    "odd": odd(900),
}
# Cut by its levels alone: no range of it is listed from a key.
BY_LEVEL = {"mixed": mixed(1200)}


@pytest.fixture(scope="module")
def listed(azurite, tmp_path_factory, run_ferry, request):
    """Each layout uploaded once, to a container of its own."""
    containers = {}
    for name, spec in (LAYOUTS | BY_LEVEL).items():
        src = tmp_path_factory.mktemp(f"src-{name}")
        make_tree(src, spec)
        c = new_container(azurite, request)
        run_ferry("copy", "--recursive", src, c, "--concurrency", "32")
        containers[name] = c
    return containers


def entry_bytes(body: bytes) -> int:
    return sum(int(line.split(b"\t")[2]) for line in body.splitlines())


def ls(run_ferry, url, tmp_path, *flags):
    summary = tmp_path / f"summary-{'-'.join(flags) or 'default'}.json"
    out = run_ferry(
        "ls", "--recursive", url, "--list-page-size", str(PAGE), "--summary", summary, *flags
    )
    return out.stdout_bytes, json.loads(summary.read_text())


@pytest.mark.parametrize("layout", LAYOUTS)
def test_parallel_listing_equals_one_stream_byte_for_byte(
    layout, listed, azurite, run_ferry, tmp_path
):
    url = listed[layout]
    with FaultProxy(azurite.port) as proxy:
        via = url.via(proxy.port)
        one, one_summary = ls(run_ferry, via, tmp_path, "--list-concurrency", "1")
        sequential = proxy.requests("GET", comp="list")
        proxy.clear_log()
        many, many_summary = ls(run_ferry, via, tmp_path, "--list-concurrency", "8")
        parallel = proxy.requests("GET", comp="list")

    lines = one.splitlines()
    # A header line and the end record around the entries.
    assert len(lines) - 2 == one_summary["entries"] >= len(LAYOUTS[layout]), one_summary
    assert lines[-1] == b"#ferry-end\tentries=%d\tbytes=%d" % (
        one_summary["entries"],
        entry_bytes(b"\n".join(lines[1:-1])),
    )
    assert many == one, "the parallel listing differs from the sequential one"
    assert many_summary["entries"] == one_summary["entries"]

    # Counted as sent; one stream is one page after another, never from a key.
    pages = math.ceil(one_summary["entries"] / PAGE)
    assert one_summary["requests"]["list_pages"] == len(sequential)
    # (A last page that is exactly full may or may not come with a marker.)
    assert pages <= len(sequential) <= pages + 1, (pages, len(sequential))
    assert not any("startFrom" in r.query for r in sequential)
    assert many_summary["requests"]["list_pages"] == len(parallel)
    # Cut into ranges indeed, and at a bounded cost: a page per range beyond the stream's pages.
    ranges = [r for r in parallel if "startFrom" in r.query]
    assert len(ranges) >= 4, f"{layout}: only {len(ranges)} ranges were listed from a key"
    assert len(parallel) <= len(sequential) + len(ranges) + 1, (
        len(parallel),
        len(sequential),
        len(ranges),
    )


@pytest.mark.parametrize("layout", ["hashed", "deep", "tiny-dirs"])
@pytest.mark.parametrize("probe", ["probe-ignored", "probe-honoured"])
def test_a_service_that_ignores_start_from_is_listed_as_one_stream(
    layout, probe, listed, azurite, run_ferry, tmp_path
):
    """An older service version (Azurite 3.35, Azure Stack Hub) lists from the container's start
    whatever `startFrom` says; the proxy drops the parameter as such a service does. The probe
    sent beside the first page finds it out, and the listing is one stream and the probe. When
    the probe cannot tell (here: its own `startFrom` passes), the first range listed from a key
    finds it out: every range stops and one stream goes on from the furthest marker read, at
    the cost of the round of ranges already sent. Either way, the one stream's listing byte for
    byte."""
    url = listed[layout]
    with FaultProxy(azurite.port) as proxy:
        signed = url.signed(port=proxy.port)
        sas_only = {"AZURE_STORAGE_KEY": None, "AZURE_STORAGE_ACCOUNT": None, "FERRY_AUTH": None}
        one = run_ferry(
            "ls",
            "--recursive",
            signed,
            "--list-page-size",
            str(PAGE),
            "--list-concurrency",
            "1",
            env=sas_only,
        )
        stream = len(proxy.requests("GET", comp="list"))
        proxy.clear_log()
        proxy.add(
            "drop_query",
            method="GET",
            query={"comp": "list", "startFrom": None},
            drop=("startFrom",),
            skip=1 if probe == "probe-honoured" else 0,
            count=10_000,
        )
        many = run_ferry(
            "ls",
            "--recursive",
            signed,
            "--list-page-size",
            str(PAGE),
            "--list-concurrency",
            "8",
            env=sas_only,
        )
        sent = proxy.requests("GET", comp="list")
    assert many.stdout_bytes == one.stdout_bytes
    from_a_key = [r for r in sent if "startFrom" in r.query]
    levels = [r for r in sent if "delimiter" in r.query]
    by_prefix = [r for r in sent if "prefix" in r.query]
    # A page for each range listed by prefix that one stream would have spared, at most.
    pages = len(sent) - len(levels)
    if probe == "probe-ignored":
        # The probe is the only request from a key; one stream's pages beside it, the levels,
        # and (a tree: its directories listed by prefix at once) a page a directory.
        assert len(from_a_key) == 1, len(from_a_key)
        assert pages <= stream + 1 + len(by_prefix), (len(sent), stream, len(by_prefix))
        if layout != "deep":
            assert len(sent) <= stream + 2, (len(sent), stream)
    else:
        # One round of ranges (at most twice the concurrency live) wasted, no more.
        assert 1 < len(from_a_key) <= 1 + 2 * 8, len(from_a_key)
        assert pages <= stream + 1 + 2 * 8 + 1 + len(by_prefix), (len(sent), stream)


def test_a_tree_of_few_directories_is_cut_by_its_levels(listed, azurite, run_ferry, tmp_path):
    """The top level, listed with the delimiter beside the first page, and the level below each
    of its few directories, beside that directory's first page, cut the listing: every
    directory a range listed by `prefix=` (no key), the blobs between them in their place. The
    same listing as one stream byte for byte, on a service that honours `startFrom` and on one
    that drops it."""
    url = listed["mixed"]
    one, summary = ls(run_ferry, url, tmp_path, "--list-concurrency", "1")
    assert summary["entries"] >= len(BY_LEVEL["mixed"])
    # SharedKey signs the query: the proxy drops `startFrom` from a SAS-signed request.
    sas_only = {"AZURE_STORAGE_KEY": None, "AZURE_STORAGE_ACCOUNT": None, "FERRY_AUTH": None}
    for drop in (False, True):
        with FaultProxy(azurite.port) as proxy:
            if drop:
                proxy.add(
                    "drop_query",
                    method="GET",
                    query={"comp": "list", "startFrom": None},
                    drop=("startFrom",),
                    count=10_000,
                )
            many = run_ferry(
                "ls",
                "--recursive",
                url.signed(port=proxy.port),
                "--list-page-size",
                str(PAGE),
                "--list-concurrency",
                "8",
                env=sas_only,
            ).stdout_bytes
            sent = proxy.requests("GET", comp="list")
        assert many == one, f"the listing cut by levels differs (startFrom dropped: {drop})"
        levels = {r.query.get("prefix", "") for r in sent if "delimiter" in r.query}
        # The top level, and the level below each top-level directory listed on its own.
        assert "" in levels and {"b/", "c/", "é/"} <= levels, levels
        by_prefix = {
            r.query["prefix"] for r in sent if "delimiter" not in r.query and "prefix" in r.query
        }
        assert {"b/", "b.d/", "c/", "é/"} <= by_prefix, by_prefix
        # Past the probe, a key cuts a directory of more than a page, within its prefix; a
        # service found to ignore keys gets none.
        from_a_key = [r for r in sent if "startFrom" in r.query]
        assert all("prefix" in r.query for r in from_a_key[1:]), from_a_key
        assert len(from_a_key) == 1 if drop else len(from_a_key) > 1, len(from_a_key)


def test_a_listing_of_fewer_entries_than_a_page_is_one_round_trip(
    container, tmp_path, run_ferry, azurite
):
    """One page, and beside it (in flight at once) the probe of `startFrom` and the listing of
    the top level that a longer listing would be cut by; one stream is the page alone."""
    src = tmp_path / "src"
    make_tree(src, {f"f{i}": b"" for i in range(PAGE - 5)})
    run_ferry("copy", "--recursive", src, container)
    with FaultProxy(azurite.port) as proxy:
        out, summary = ls(run_ferry, container.via(proxy.port), tmp_path)
        sent = proxy.requests("GET", comp="list")
        proxy.clear_log()
        ls(run_ferry, container.via(proxy.port), tmp_path, "--list-concurrency", "1")
        assert len(proxy.requests("GET", comp="list")) == 1
    assert summary["requests"]["list_pages"] == len(sent) <= 3
    pages = [r for r in sent if "startFrom" not in r.query and "delimiter" not in r.query]
    assert len(pages) == 1, [r.query for r in sent]
    assert summary["entries"] == PAGE - 5


def test_verbs_that_list_a_container_agree_with_one_stream(listed, run_ferry, tmp_path):
    """copy, verify and prune list through the same ranges: a verify of the deep layout against
    its own download passes, and a prune finds nothing to delete, at both settings."""
    url = listed["deep"]
    down = tmp_path / "down"
    run_ferry("copy", "--recursive", url, down, "--list-page-size", str(PAGE))
    for flags in (["--list-concurrency", "1"], ["--list-concurrency", "8"]):
        v = run_ferry("verify", down, url, "--list-page-size", str(PAGE), "--json", *flags)
        j = v.json
        assert (j["differ"], j["missing_on_dst"], j["missing_on_src"], j["error"]) == (
            0,
            0,
            0,
            0,
        ), j
        assert j["same"] >= len(LAYOUTS["deep"]), j
        p = run_ferry("prune", "--yes", down, url, "--list-page-size", str(PAGE), "--json", *flags)
        assert p.json["deleted"] == 0, p.json


@pytest.mark.parametrize("layout", LAYOUTS)
def test_list_jobs_ranges_put_back_together_are_one_listing_byte_for_byte(
    layout, listed, run_ferry, tmp_path
):
    """`list.jobs`: `ferry shard` cuts the container (a first pass: a shallow scan), each job lists
    its range, and the ranges one after another are the one stream's listing, byte for byte: the
    ranges are contiguous in the service's order, whatever the names encode to."""
    url = listed[layout]
    one, one_summary = ls(run_ferry, url, tmp_path, "--list-concurrency", "1")
    shards = tmp_path / "shards.json"
    run_ferry("shard", url, "--jobs", "3", "--out", shards)
    doc = json.loads(shards.read_text())
    assert doc["basis"] == "scan" and len(doc["cuts"]) == 2, doc
    parts, pages = [], 0
    for k in (1, 2, 3):
        summary = tmp_path / f"shard-{k}.json"
        out = run_ferry(
            "ls",
            "-r",
            url,
            "--shards",
            shards,
            "--shard",
            str(k),
            "--summary",
            summary,
            "--list-page-size",
            str(PAGE),
            "--list-concurrency",
            "1",
        ).stdout_bytes
        doc = json.loads(summary.read_text())
        assert doc["shard"] == {"index": k, "of": 3}
        pages += doc["requests"]["list_pages"]
        # Each range ends with its own end record, counting its own entries.
        body, end = out.split(b"\n", 1)[1].rsplit(b"#ferry-end", 1)
        assert end == b"\tentries=%d\tbytes=%d\n" % (doc["entries"], entry_bytes(body)), end
        parts.append(body)
    header = one.split(b"\n", 1)[0] + b"\n"
    assert header + b"".join(parts) == one.rsplit(b"#ferry-end", 1)[0]
    # Each range costs at most the page where it stops short, beyond the one stream's pages.
    assert pages <= one_summary["requests"]["list_pages"] + 3, pages
    # Balanced by the scan: no range holds everything.
    assert max(p.count(b"\n") for p in parts) < one.count(b"\n") * 0.8, [
        p.count(b"\n") for p in parts
    ]


def test_a_flat_container_past_its_first_page_is_cut_evenly(listed, run_ferry, tmp_path):
    """A first pass's scan reads one page of a flat container, its low end in the service's order
    (here 40 of 1,200 hashed names): the rest is weighed from how that page's names spread, so
    the cuts fall across the whole key space, not inside the page."""
    url = listed["hashed"]
    shards = tmp_path / "shards.json"
    run_ferry("shard", url, "--jobs", "3", "--out", shards, "--list-page-size", str(PAGE))
    doc = json.loads(shards.read_text())
    assert doc["basis"] == "scan", doc
    sizes = []
    for k in (1, 2, 3):
        out = run_ferry("ls", "-r", url, "--shards", shards, "--shard", str(k)).stdout_bytes
        sizes.append(out.count(b"\n") - 2)  # the header and the end record
    assert sum(sizes) == len(LAYOUTS["hashed"])
    # A third each, give or take what one page tells of the rest (426, 389, 385 when written;
    # 13, 13, 1,174 when only the page was weighed).
    assert all(250 <= n <= 550 for n in sizes), (sizes, doc["cuts"])
