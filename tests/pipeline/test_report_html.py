"""The HTML report (report.html, workflow/scripts/ferry_html.py) of a real Snakemake migration,
opened in a real headless browser (tests/support/browser.py): a baseline and an incremental pass of
a small local tree, then the incremental's page is loaded and photographed. The page's own
checks (no errors, nothing fetched, every plot drew visible marks) must say "ok", chromium's
console must stay silent, and the screenshot must be a real picture. A broken page is shown to
fail the same checks, so an "ok" means something."""

from __future__ import annotations

import pytest
from support import browser
from support.pipeline import base_config, migration_tree, modify_tree, pipeline, run_dir


@pytest.fixture(scope="module")
def migrated(tmp_path_factory, ferry_bin):
    """Run directory of an incremental pass that followed a baseline, local to local."""
    root = tmp_path_factory.mktemp("html")
    src, dest, outdir = root / "src", root / "dest", root / "results"
    content = migration_tree(src, files=30, big=2)
    parts = "plan={mode: parts, parts: 2}"
    pipeline(*base_config(ferry_bin, outdir, src, dest, "baseline"), parts)
    modify_tree(src, content)
    pipeline(*base_config(ferry_bin, outdir, src, dest, "incremental"), parts)
    return run_dir(outdir, "incremental")


@pytest.mark.timeout(400)
def test_the_report_page_passes_its_own_checks_in_chromium(migrated, tmp_path):
    for name in ("report.json", "report.md", "report.html"):
        assert (migrated / name).is_file(), f"{name} missing"
    page = migrated / "report.html"
    dom, console = browser.load(page)
    data = browser.body_data(dom)
    assert data.get("checks") == "ok", data
    assert int(data["plots"]) >= 4, (
        f"only {data['plots']} plots: delta, time per step, timeline, throughput"
    )
    assert console == [], f"the page wrote to the console: {console}"

    png = browser.screenshot(page, tmp_path / "report.png", height=2400)
    assert png.startswith(browser.PNG_MAGIC) and len(png) > 20_000, (
        f"{len(png)} bytes of screenshot"
    )


@pytest.mark.timeout(200)
def test_a_broken_page_fails_the_same_checks(migrated, tmp_path):
    """The negative control: a script error, a console.error and an empty plot are all reported."""
    broken = tmp_path / "broken.html"
    broken.write_text(
        (migrated / "report.html")
        .read_text(encoding="utf-8")
        .replace(
            "</body>",
            '<svg class="plot" id="plot-empty" width="10" height="10"></svg>'
            '<script>console.error("deliberate"); notDefined();</script></body>',
        ),
        encoding="utf-8",
    )
    dom, console = browser.load(broken)
    checks = browser.body_data(dom)["checks"]
    assert (
        "console.error: deliberate" in checks
        and "notDefined" in checks
        and "plot-empty drew nothing" in checks
    )
    assert any("deliberate" in line for line in console) and any(
        "notDefined" in line for line in console
    )
