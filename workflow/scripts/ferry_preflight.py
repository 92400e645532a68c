"""The pre-flight (issue 42): before a pass lists anything, and before it takes the migration's
lock, the worker's `ferry check` looks at the source, the destination and the carried state's
location without listing them. A failure ends the pass here, in seconds, naming the config key
to change, with nothing listed or created: a missing source found after the crawl (hours at
scale) would have cost the window, and its destination container made for nothing.

    ferry_preflight.check(spec)   # spec: ferry_config.py's run.check, {argv, env, keys}
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import ferry_docs

REPO_BUILD = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    "worker",
    "target",
    "release",
    "ferry",
)
# The worker's exit status when a check failed (the checks are in its document); any other
# non-zero status means it could not run them.
FAILED = 1


def failures(doc: dict, keys: dict[str, str]) -> list[str]:
    """One line per failed check, in the config's terms: the key to change, and what was found."""
    lines = []
    for c in doc["checks"]:
        if c["problem"] is None:
            continue
        key = f"config field '{keys[c['subject']]}'"
        if c["problem"] == "credentials":
            key += " (or 'auth', or the credentials in the environment)"
        lines.append(f"{key}: {c['message']}")
    return lines


def refuse(lines: list[str]) -> None:
    said = "\n".join(f"  {line}" for line in lines)
    print(
        "ferry: pre-flight: the pass cannot begin (nothing was listed, created or locked):\n"
        f"{said}\nChange what it names and start the pass again.",
        file=sys.stderr,
    )
    raise SystemExit(2)


def here(ferry: str) -> str | None:
    """The worker on this machine: `ferry_bin`, else the repository's build, else `ferry` on the
    PATH. Where the tasks run in containers (Azure Batch), `ferry_bin` is the image's path and
    the head may have none."""
    for candidate in (ferry, REPO_BUILD, shutil.which("ferry")):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def check(spec: dict) -> None:
    """Returns when every check passed, or when no worker is on this machine to run them (said
    on stderr); otherwise says why and exits with status 2."""
    ferry = here(spec["argv"][0])
    if ferry is None:
        print(
            f"ferry: pre-flight skipped: no ferry on this machine ('ferry_bin' {spec['argv'][0]} "
            "is the tasks'); build it here (make build) to have the ends checked before the pass",
            file=sys.stderr,
        )
        return
    try:
        proc = subprocess.run(
            [ferry, *spec["argv"][1:]],
            env={**os.environ, **spec["env"]},
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
        )
    except OSError as err:
        refuse([f"config field 'ferry_bin': {ferry} cannot be run: {err}"])
    if proc.returncode not in (0, FAILED):
        said = proc.stderr.strip() or f"exit status {proc.returncode}"
        refuse([f"the pre-flight checks could not run: {said}"])
    problems = failures(ferry_docs.parse("check", proc.stdout, "ferry check --json"), spec["keys"])
    if problems:
        refuse(problems)
