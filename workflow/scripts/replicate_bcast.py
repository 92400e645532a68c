"""The broadcast stage of replicate (docs/replicate.md): every file that some rank lacks goes from
the one rank chosen as its root to all others.

The files of one root are laid end to end as one stream and cut into chunks of at most
`chunk_size` bytes, so many small files share a chunk and a large file spans many. Every rank
walks the same chunk sequence, so no headers travel: a chunk's segments (file, offset, length)
are known everywhere. Up to `depth` chunks are in flight (`Ibcast` on numpy buffers, never
pickled objects). One I/O thread reads (root) or writes (receivers) while the main thread waits
inside MPI, so disk and transfer overlap and Open MPI keeps progressing. Memory: depth buffers of
chunk_size, allocated untouched, so a small run costs what it uses.

Receivers write like the worker: into the temp name it would use for the file (given by `ferry
names`, so listings skip it and a re-run, by either, takes it over), mode and mtime set on the
open file, then renamed into place; a file that is cut short by a failure never appears under its
name.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from mpi4py import MPI


@dataclass
class Chunk:
    root: int
    nbytes: int
    segments: list  # (file index, offset in file, length, offset in chunk)


def chunk_schedule(order, sizes, roots, chunk_size: int):
    """The chunks of the broadcast, identical on every rank. `order`: the non-empty files to send,
    grouped by root. A chunk never mixes two roots."""
    segments, fill, current = [], 0, None
    for i in order:
        root, size = int(roots[i]), int(sizes[i])
        if root != current and segments:
            yield Chunk(current, fill, segments)
            segments, fill = [], 0
        current = root
        offset = 0
        while offset < size:
            n = min(size - offset, chunk_size - fill)
            segments.append((i, offset, n, fill))
            fill += n
            offset += n
            if fill == chunk_size:
                yield Chunk(root, fill, segments)
                segments, fill = [], 0
    if segments:
        yield Chunk(current, fill, segments)


class Reader:
    """Fills a chunk buffer from the root's own copies (keeps the file a chunk ends in open)."""

    def __init__(self, paths: list):
        self.paths = paths
        self.current = None  # (file index, fd)

    def _fd(self, i: int) -> int:
        if self.current and self.current[0] == i:
            return self.current[1]
        self.close()
        self.current = (i, os.open(self.paths[i], os.O_RDONLY | os.O_CLOEXEC))
        return self.current[1]

    def read(self, buf: np.ndarray, chunk: Chunk) -> None:
        view = memoryview(buf)
        for i, offset, n, at in chunk.segments:
            fd = self._fd(i)
            done = 0
            while done < n:
                got = os.preadv(fd, [view[at + done : at + n]], offset + done)
                if got == 0:
                    raise OSError(
                        f"{os.fsdecode(self.paths[i])}: shorter than listed "
                        f"(ended at {offset + done} bytes); did it change during the run?"
                    )
                done += got

    def close(self) -> None:
        if self.current:
            os.close(self.current[1])
            self.current = None


class Writer:
    """Writes the segments a rank wants into temp files and renames each file once complete.
    `temps`, `journals`: the names the worker gives, beside each file, to its temp file and to
    a download's journal (`ferry names`)."""

    def __init__(self, paths: list, temps, journals, sizes, modes, mtimes, wanted):
        self.paths, self.temps, self.journals, self.wanted = paths, temps, journals, wanted
        self.sizes, self.modes, self.mtimes = sizes, modes, mtimes
        self.open = {}  # file index -> (fd, temp path)
        self.made_dirs = set()
        self.files = 0
        self.bytes = 0

    def _start(self, i: int):
        final = self.paths[i]
        parent = os.path.dirname(final)
        if parent not in self.made_dirs:
            os.makedirs(parent, exist_ok=True)
            self.made_dirs.add(parent)
        tmp = os.path.join(parent, bytes(self.temps[i]))
        # With the sticky bit, the mark that makes a temp name's file the worker's own (listings
        # skip it, a later pass removes it if left): cleared by the final chmod.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o1600)
        self.open[i] = (fd, tmp)
        return fd

    def _finish(self, i: int) -> None:
        fd, tmp = self.open.pop(i)
        try:
            os.fchmod(fd, int(self.modes[i]))
            os.utime(fd, ns=(time.time_ns(), int(self.mtimes[i])))
        finally:
            os.close(fd)
        os.rename(tmp, self.paths[i])
        # A download of the same file that a killed worker left behind is moot now.
        try:
            os.unlink(os.path.join(os.path.dirname(self.paths[i]), bytes(self.journals[i])))
        except FileNotFoundError:
            pass
        self.files += 1

    def write(self, buf: np.ndarray, chunk: Chunk) -> None:
        view = memoryview(buf)
        for i, offset, n, at in chunk.segments:
            if not self.wanted[i]:
                continue
            fd = self.open[i][0] if i in self.open else self._start(i)
            done = 0
            while done < n:
                done += os.pwrite(fd, view[at + done : at + n], offset + done)
            self.bytes += n
            if offset + n == self.sizes[i]:
                self._finish(i)

    def write_empty(self, i: int) -> None:
        self._start(i)
        self._finish(i)

    def discard(self) -> None:
        """After a failure: remove what was half written; nothing incomplete keeps a final name."""
        for fd, tmp in self.open.values():
            os.close(fd)
            try:
                os.unlink(tmp)
            except OSError:
                pass
        self.open.clear()


class Progress:
    """What the watchdog and the progress lines read; the main thread updates it."""

    def __init__(self):
        self.last = time.monotonic()
        self.chunks = 0
        self.bytes = 0

    def tick(self, nbytes: int) -> None:
        self.chunks += 1
        self.bytes += nbytes
        self.last = time.monotonic()


def wait(req, polite: bool) -> None:
    """Complete a request. Polite: poll with short sleeps instead of spinning inside MPI, for ranks
    that share their cores (oversubscribed), where a spinning main thread starves its own I/O
    thread and the other ranks. A rank with cores to itself waits inside MPI, which keeps a
    network transfer moving at full speed."""
    if not polite:
        req.Wait()
        return
    pause = 0.0001
    while not req.Test():
        time.sleep(pause)
        pause = min(pause * 2, 0.001)


def broadcast(
    comm,
    chunks,
    chunk_size: int,
    depth: int,
    reader: Reader,
    writer: Writer,
    progress: Progress,
    max_rate: int = 0,
    polite: bool = False,
) -> dict:
    """Run the chunk sequence through `depth` buffers. Returns this rank's byte counts."""
    me = comm.Get_rank()
    free = [np.empty(chunk_size, dtype=np.uint8) for _ in range(depth)]
    prepared = deque()  # (chunk, buffer, read future or None): buffer assigned, not yet posted
    inflight = deque()  # (chunk, buffer, request): posted, in this rank's posting order
    writing = deque()  # (future, buffer)
    sent = posted = 0
    started = time.monotonic()
    pending = iter(chunks)
    exhausted = False
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="replicate-io") as io:
        try:
            while True:
                while free and not exhausted:
                    chunk = next(pending, None)
                    if chunk is None:
                        exhausted = True
                        break
                    buf = free.pop()
                    fut = io.submit(reader.read, buf, chunk) if chunk.root == me else None
                    prepared.append((chunk, buf, fut))
                # Post strictly in schedule order: collectives on a communicator must match.
                while prepared and (prepared[0][2] is None or prepared[0][2].done()):
                    chunk, buf, fut = prepared.popleft()
                    if fut is not None:
                        fut.result()
                        if max_rate:
                            # Roots pace the whole stream (every rank counts the same bytes);
                            # the receivers follow.
                            ahead = started + (posted + chunk.nbytes) / max_rate - time.monotonic()
                            if ahead > 0:
                                time.sleep(ahead)
                        sent += chunk.nbytes
                    posted += chunk.nbytes
                    req = comm.Ibcast([buf[: chunk.nbytes], MPI.BYTE], root=chunk.root)
                    inflight.append((chunk, buf, req))
                if inflight:
                    # Waiting inside MPI keeps every posted transfer moving while the I/O thread works.
                    chunk, buf, req = inflight.popleft()
                    wait(req, polite)
                    progress.tick(chunk.nbytes)
                    if chunk.root != me and any(writer.wanted[s[0]] for s in chunk.segments):
                        writing.append((io.submit(writer.write, buf, chunk), buf))
                    else:
                        free.append(buf)
                elif prepared:
                    prepared[0][2].result()
                elif writing:
                    fut, buf = writing.popleft()
                    fut.result()
                    free.append(buf)
                elif exhausted:
                    break
                while writing and writing[0][0].done():
                    fut, buf = writing.popleft()
                    fut.result()
                    free.append(buf)
        finally:
            for fut, _ in writing:
                fut.exception()
            reader.close()
    return {"sent_bytes": sent, "written_bytes": writer.bytes, "received_files": writer.files}


def start_watchdog(comm, progress: Progress, timeout: float, describe) -> threading.Event:
    """Abort the whole job when the broadcast makes no progress for `timeout` seconds (a peer
    that died without its launcher noticing). Returns the event that stops the watchdog."""
    stop = threading.Event()

    def watch():
        while not stop.wait(1.0):
            idle = time.monotonic() - progress.last
            if idle > timeout:
                describe(
                    f"no chunk completed for {idle:.0f} s (after {progress.chunks} chunks); "
                    "a peer rank has probably died"
                )
                comm.Abort(3)

    if timeout > 0:
        threading.Thread(target=watch, name="replicate-watchdog", daemon=True).start()
    return stop
