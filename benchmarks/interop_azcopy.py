#!/usr/bin/env python3
"""What ferry and azcopy restore of each other's blob trees (docs/worker.md, "Interop").

    .venv/bin/python benchmarks/interop_azcopy.py --azcopy PATH [--out benchmarks/results]

azcopy is not in any registry: build it from its public source outside this repository and
name the binary. One local Azurite on a free loopback port serves both tools. A source tree with
every kind of entry is uploaded by each tool (azcopy in its standard and its AMLFS style,
ferry in its default and AMLFS style) and downloaded by the other; every entry of every
download is compared with the source: its type, bytes, mode, owner, mtime, symlink target.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from support.azurite import start_azurite  # noqa: E402

MTIME_NS = 1_700_000_000_123_456_789
ATTRS = ("type", "bytes", "mode", "owner", "mtime", "target")


def make_source(root: Path) -> None:
    """Files of several modes (one set-uid), an owner other than root's, a nanosecond mtime, a
    symlink, an empty directory with its own mode, nested directories."""
    (root / "dir" / "deeper").mkdir(parents=True)
    (root / "empty").mkdir()
    files = {"plain.txt": (b"plain\n", 0o644), "private.txt": (b"private\n", 0o600),
             "dir/tool.sh": (b"#!/bin/sh\necho hi\n", 0o755), "dir/deeper/setuid": (b"s" * 4000, 0o4755)}
    for rel, (data, mode) in files.items():
        p = root / rel
        p.write_bytes(data)
        p.chmod(mode)
    os.chown(root / "private.txt", 1234, 5678)
    (root / "link-to-plain").symlink_to("plain.txt")
    (root / "empty").chmod(0o700)
    for p in sorted(root.rglob("*"), key=lambda p: -len(p.parts)):
        os.utime(p, ns=(MTIME_NS, MTIME_NS), follow_symlinks=False)


def describe(root: Path) -> dict[str, dict]:
    out = {}
    for p in sorted(root.rglob("*")):
        st = os.lstat(p)
        kind = "symlink" if stat.S_ISLNK(st.st_mode) else "dir" if stat.S_ISDIR(st.st_mode) else "file"
        out[p.relative_to(root).as_posix()] = {
            "type": kind,
            "bytes": hashlib.md5(p.read_bytes()).hexdigest() if kind == "file" else None,
            "mode": f"{stat.S_IMODE(st.st_mode):04o}" if kind != "symlink" else None,
            "owner": f"{st.st_uid}:{st.st_gid}",
            "mtime": st.st_mtime_ns if kind != "dir" else None,
            "target": os.readlink(p) if kind == "symlink" else None,
        }
    return out


def restored(src: dict, got: dict) -> dict[str, dict[str, bool | None]]:
    """For each source entry and attribute: kept (True), lost (False), not applicable (None), or
    for an mtime, "s" where it is kept to the second only (AMLFS's layout has no fraction)."""
    rows = {}
    for path, want in src.items():
        have = got.get(path)
        row = {}
        for a in ATTRS:
            if want[a] is None:
                row[a] = None
            elif have is None or have["type"] != want["type"] and a != "type":
                row[a] = False
            elif a == "mtime":
                off = abs(have[a] - want[a]) if have[a] is not None else None
                row[a] = off is not None and (off < 1000 or ("s" if have[a] == want[a] // 10**9 * 10**9 else False))
            else:
                row[a] = have[a] == want[a]
        rows[path] = row
    return rows


def run(cmd: list, env: dict) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], env=env, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, cmd[:3]))} … failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--azcopy", required=True, type=Path, help="an azcopy binary built from its public source")
    ap.add_argument("--ferry", type=Path, default=REPO / "worker" / "target" / "release" / "ferry")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    a = ap.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("run as root: the tree has an owner other than the caller's, and downloads restore owners")
    from azure.storage.blob import BlobServiceClient, ContainerSasPermissions, generate_container_sas

    work = Path(tempfile.mkdtemp(prefix="ferry-interop-"))
    az = start_azurite(REPO)
    try:
        service = BlobServiceClient(az.endpoint, credential={"account_name": az.account, "account_key": az.key})
        service.create_container("interop")
        sas = generate_container_sas(az.account, "interop", account_key=az.key,
                                     permission=ContainerSasPermissions(read=True, list=True, add=True, create=True,
                                                                        write=True, delete=True),
                                     expiry=dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1))
        url = az.url("interop")
        env = {**os.environ, "AZURE_STORAGE_ACCOUNT": az.account, "AZURE_STORAGE_KEY": az.key,
               "AZCOPY_LOG_LOCATION": str(work / "azlogs"), "AZCOPY_JOB_PLAN_LOCATION": str(work / "azplans")}
        src = work / "src"
        make_source(src)
        want = describe(src)
        version = run([a.azcopy, "--version"], env).stdout.strip()
        posix = ["--preserve-posix-properties", "--preserve-symlinks"]
        routes, written = {}, {}
        container = service.get_container_client("interop")

        def metadata_of(prefix: str) -> dict:
            return dict(container.get_blob_client(f"{prefix}/dir/deeper/setuid").get_blob_properties().metadata)
        for style in ("standard", "amlfs"):
            prefix = f"azcopy-{style}"
            run([a.azcopy, "copy", f"{src}/*", f"{url}/{prefix}?{sas}", "--recursive", "--from-to=LocalBlob",
                 *posix, f"--posix-properties-style={style}"], env)
            written[prefix] = metadata_of(prefix)
            dst = work / f"ferry-from-{prefix}"
            run([a.ferry, "copy", "-r", f"{url}/{prefix}", dst], env)
            routes[f"azcopy ({style}) → Blob → ferry"] = restored(want, describe(dst))
        for style, flags in (("default", []), ("amlfs", ["--posix-style", "amlfs"])):
            prefix = f"ferry-{style}"
            run([a.ferry, "copy", "-r", f"{src}/", f"{url}/{prefix}", *flags], env)
            written[prefix] = metadata_of(prefix)
            dst = work / f"azcopy-from-{prefix}"
            dst.mkdir()
            azstyle = "amlfs" if style == "amlfs" else "standard"
            run([a.azcopy, "copy", f"{url}/{prefix}/*?{sas}", str(dst), "--recursive", "--from-to=BlobLocal", *posix,
                 f"--posix-properties-style={azstyle}"], env)
            routes[f"ferry ({style}) → Blob → azcopy"] = restored(want, describe(dst))
        result = {"measured": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "azcopy": version,
                  "source": want, "routes": routes, "metadata_of_setuid_file": written}
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "interop-azcopy.json").write_text(json.dumps(result, indent=2) + "\n")
        (a.out / "interop-azcopy.md").write_text(markdown(result))
        print(markdown(result))
    finally:
        az.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


def markdown(result: dict) -> str:
    mark = {True: "kept", False: "**lost**", None: "–", "s": "to the second"}
    lines = [
        "# Interop: what azcopy and ferry restore of each other's blob trees", "",
        f"- Measured {result['measured']} with {result['azcopy']} (built from its public source) and ferry at this "
        "commit, against one local Azurite.",
        "- Reproduce: `.venv/bin/python benchmarks/interop_azcopy.py --azcopy PATH` (as root).",
        "- azcopy flags both ways: `--preserve-posix-properties --preserve-symlinks --posix-properties-style=STYLE`.", "",
    ]
    for route, rows in result["routes"].items():
        lines += [f"## {route}", "", "| entry | " + " | ".join(ATTRS) + " |", "|---|" + "---|" * len(ATTRS)]
        for path, row in rows.items():
            lines.append(f"| `{path}` | " + " | ".join(mark[row[a]] for a in ATTRS) + " |")
        lines.append("")
    lines += ["## What each writes (the blob metadata of `dir/deeper/setuid`, mode 4755)", ""]
    for prefix, meta in result["metadata_of_setuid_file"].items():
        lines.append(f"- {prefix}: " + ", ".join(f"`{k}={v}`" for k, v in sorted(meta.items())))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
