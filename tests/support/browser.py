"""A real headless browser (Debian's `chromium`) for the HTML report's checks: a screenshot of a
page, the page's DOM once it has loaded (where the page's own checks leave their verdict in
`data-checks`), and whatever it wrote to the console. No WebDriver: two runs of chromium's own
headless mode say all the tests need."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

# Headless as root needs --no-sandbox; no GPU here. The window is about a laptop's.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--window-size=1400,1000",
    "--hide-scrollbars",
]
# What chromium's --enable-logging writes for every console message of the page (console.log,
# console.error, uncaught exceptions alike): "[pid:tid:date:INFO:CONSOLE(line)] "text", source: …"
CONSOLE = re.compile(r":CONSOLE[:(]\d+\)?\]\s*(.*)")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def chromium() -> str:
    path = shutil.which("chromium")
    if not path:
        pytest.fail(
            "chromium is not installed: `make setup` installs it (scripts/apt-packages.txt)",
            pytrace=False,
        )
    return path


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        [chromium(), *FLAGS, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def screenshot(page: Path, png: Path, height: int = 1000, timeout: float = 90) -> bytes:
    """The page as a PNG, `height` pixels tall (the window's width); returns the PNG's bytes."""
    proc = _run(
        [f"--window-size=1400,{height}", f"--screenshot={png}", page.resolve().as_uri()], timeout
    )
    if not png.is_file():
        pytest.fail(
            f"chromium wrote no screenshot of {page}:\n{proc.stderr[-3000:]}", pytrace=False
        )
    return png.read_bytes()


def load(page: Path, timeout: float = 90) -> tuple[str, list[str]]:
    """(the DOM after the page's load event, the console messages it printed)."""
    proc = _run(
        ["--enable-logging=stderr", "--v=0", "--dump-dom", page.resolve().as_uri()], timeout
    )
    if "<body" not in proc.stdout:
        pytest.fail(
            f"chromium dumped no DOM of {page} (exit {proc.returncode}):\n{proc.stderr[-3000:]}",
            pytrace=False,
        )
    return proc.stdout, [m.group(1) for m in CONSOLE.finditer(proc.stderr)]


def body_data(dom: str) -> dict[str, str]:
    """The data-* attributes of the dumped page's <body>."""
    body = re.search(r"<body([^>]*)>", dom).group(1)
    return {
        k: v.replace("&quot;", '"').replace("&amp;", "&")
        for k, v in re.findall(r'data-([a-z-]+)="([^"]*)"', body)
    }
