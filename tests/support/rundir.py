"""A pipeline run directory made by hand, as the steps leave it (docs/pipeline.md), for the unit
tests of the report builder (workflow/scripts/ferry_report.py): plan/plan.json, the worker's JSON
of each copy and verify partition, what a failed job saved under failed/, logs/, and one timing
TSV per job under benchmarks/. Every folder and file name of the run directory is written here
and nowhere else in the tests, so renaming a step touches this module only."""

from __future__ import annotations

import json
import os
from pathlib import Path

# The copy step's folder under logs/ and benchmarks/; the report names the rule after it.
COPY_STEP = "copy"
VERIFY_STEP = "verify"
# The folders of the worker's JSON per partition (copy/part-*.json, verify/part-*.json); the
# name of a failed job's JSON under failed/ starts with the same word.
COPY_RESULTS = "copy"
VERIFY_RESULTS = "verify"


class RunDir:
    """``RunDir(tmp_path / "run")``: write the pieces of a run; ``path`` is what the report reads."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)

    def _write(self, rel: str, text: str) -> Path:
        target = self.path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        return target

    # plan -------------------------------------------------------------------------------------

    def plan(self, copy=(), verify=(), **extra) -> dict:
        """plan/plan.json with copy and verify partitions given as (id, files, bytes)."""
        files, size = sum(f for _, f, _ in copy), sum(b for _, _, b in copy)
        doc = {
            "version": 1,
            "phase": "incremental",
            "compare": "size-mtime",
            "source": {
                "files": files,
                "bytes": size,
                "dirs": 0,
                "symlinks": 0,
                "symlinks_not_migrated": 0,
                "specials": 0,
            },
            "dest": {"files": 0, "bytes": 0},
            "dest_dirs": 0,
            "to_copy": {
                "files": files,
                "bytes": size,
                "new": files,
                "changed": 0,
                "undecided": 0,
                "metadata_only": 0,
                "type_changed": 0,
                "deferred": 0,
                "dirs": 0,
                "linked": 0,
            },
            "unchanged": 0,
            "extra_on_dest": {"files": 0, "bytes": 0},
            "partitioning": {
                "tool": "ferry",
                "mode": "max-files",
                "parts": None,
                "max_files": 1000,
                "max_bytes": None,
            },
            "copy_partitions": [{"id": i, "files": f, "bytes": b} for i, f, b in copy],
            "verify_partitions": [{"id": i, "files": f, "bytes": b} for i, f, b in verify],
            "verify_scope": "copied",
            "prune_partitions": [],
            "prune_dirs": 0,
            "newer_at_dest": {"count": 0, "examples": []},
            "newer_deletions": {"count": 0, "examples": []},
            **extra,
        }
        self._json(self.path / "plan" / "plan.json", doc)
        return doc

    # the worker's JSON per partition ----------------------------------------------------------

    @staticmethod
    def requests(**counts) -> dict:
        kinds = ("list_pages", "puts", "blocks", "block_lists", "gets", "heads", "deletes")
        return dict.fromkeys((*kinds, "batches", "copies", "others"), 0) | counts

    @staticmethod
    def copy_doc(
        copied=0,
        skipped=0,
        failed=0,
        bytes_copied=0,
        bytes_skipped=0,
        retries=None,
        seconds=1.0,
        failures=(),
        ignored=(),
        requests=None,
        **files,
    ) -> dict:
        """A `ferry copy --json` document, whole (docs/worker.md)."""
        retries = retries or {}
        return {
            "version": 1,
            "command": "copy",
            "source": "/src",
            "dest": "/dst",
            "dry_run": False,
            "files": {
                "total": copied + skipped + failed,
                "copied": copied,
                "skipped": skipped,
                "failed": failed,
                "ignored": len(ignored),
                "server_copied": 0,
                "metadata_only": 0,
                "replaced": 0,
                "removed": 0,
                "newer_at_dest": 0,
                **files,
            },
            "bytes": {
                "total": bytes_copied + bytes_skipped,
                "copied": bytes_copied,
                "skipped": bytes_skipped,
                "server_copied": 0,
            },
            "blocks": {"sent": 0, "reused": 0},
            "retries": {"total": sum(retries.values()), "by_status": retries},
            "requests": RunDir.requests(**(requests or {})),
            "concurrency": {
                "mode": "fixed",
                "initial": 16,
                "final": 16,
                "peak": 16,
                "min": 16,
                "max": 16,
                "throttled": 0,
                "trace": [],
            },
            "failures": list(failures),
            "ignored": list(ignored),
            "ignored_by_reason": {},
            "not_kept": {},
            "replacements": [],
            "dest_entries": 0,
            "refused": None,
            "warning": None,
            "log": None,
            "leftovers_removed": 0,
            "leftovers": [],
            "seconds": seconds,
        }

    @staticmethod
    def verify_doc(
        same=0,
        differ=0,
        missing_on_dst=0,
        missing_on_src=0,
        error=0,
        seconds=0.5,
        entries=(),
        **fields,
    ) -> dict:
        """A `ferry verify --json` document, whole (docs/worker.md)."""
        return {
            "version": 1,
            "passed": not (differ or missing_on_dst or missing_on_src or error),
            "checksum": False,
            "compared": ["size"],
            "command": "verify",
            "dest": "/dst",
            "differ": differ,
            "entries": list(entries),
            "error": error,
            "missing_on_dst": missing_on_dst,
            "missing_on_src": missing_on_src,
            "requests": RunDir.requests(),
            "same": same,
            "seconds": seconds,
            "source": "/src",
            **fields,
        }

    @staticmethod
    def prune_doc(**fields) -> dict:
        """A `ferry prune --json` document, whole (docs/worker.md)."""
        return {
            "version": 1,
            "command": "prune",
            "dry_run": False,
            "deleted": 0,
            "would_delete": 0,
            "dirs": 0,
            "dirs_deleted": 0,
            "dest_entries": 0,
            "failed": 0,
            "failures": [],
            "refused": None,
            "warning": None,
            "log": "/scratch/prune-deleted.log",
            "leftovers_removed": 0,
            "leftovers": [],
            "requests": RunDir.requests(),
            **fields,
        }

    # where each result lies ------------------------------------------------------------------

    def result(self, step: str, part: str) -> Path:
        """The worker's JSON of one copy or verify partition."""
        return self.path / self._results(step) / f"part-{part}.json"

    def failed_result(self, step: str, part: str) -> Path:
        """What a failed copy or verify job of a partition saved."""
        return self.path / "failed" / f"{self._results(step)}-part-{part}.json"

    def prune_json(self, failed: bool = False, part: str | None = None) -> Path:
        """A prune job's document: of one part of the files to delete, or (part None) the
        directories' job after them."""
        if part is None:
            return self.path / ("failed/prune-dirs.json" if failed else "prune/dirs.json")
        return self.path / (
            f"failed/prune-part-{part}.json" if failed else f"prune/part-{part}.json"
        )

    def final_check_json(self, failed: bool = False) -> Path:
        return self.path / (
            "failed/final-check.json" if failed else f"{VERIFY_RESULTS}/final-check.json"
        )

    @staticmethod
    def _results(step: str) -> str:
        return {"copy": COPY_RESULTS, "verify": VERIFY_RESULTS}[step]

    def _json(self, path: Path, doc) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(doc if isinstance(doc, str) else json.dumps(doc), encoding="utf-8")

    # writing them ------------------------------------------------------------------------------

    def copied(self, part: str, **counts) -> dict:
        doc = self.copy_doc(**counts)
        self._json(self.result("copy", part), doc)
        return doc

    def verified(self, part: str, **counts) -> dict:
        doc = self.verify_doc(**counts)
        self._json(self.result("verify", part), doc)
        return doc

    def copy_failed(self, part: str, doc: dict | str = "") -> None:
        """What a failed copy job saved: the worker's JSON, or an empty file when it said nothing."""
        self._json(self.failed_result("copy", part), doc)

    def verify_failed(self, part: str, doc: dict | str = "") -> None:
        self._json(self.failed_result("verify", part), doc)

    def pruned(self, fields: dict, failed: bool = False, part: str | None = None) -> None:
        """A prune job's whole document with `fields` as given (see prune_json)."""
        self._json(self.prune_json(failed, part), self.prune_doc(**fields))

    def deletion_list(self, part: str | None = None, paths=("gone.txt",)) -> str:
        """A prune job's list of what it deleted (its --log), of a part or (None) the
        directories' job; its path relative to the run directory."""
        rel = "prune/dirs.deleted.tsv" if part is None else f"prune/part-{part}.deleted.tsv"
        self._write(rel, "".join(f"{p}\n" for p in paths))
        return rel

    def final_check(self, counts: dict, failed: bool = False) -> None:
        """The final check's verify document with these counts."""
        self._json(self.final_check_json(failed), self.verify_doc(**counts))

    # listings ----------------------------------------------------------------------------------

    @staticmethod
    def ls_summary(entries=0, seconds=0.1, carried=None, shard=None, **requests) -> dict:
        """A `ferry ls --summary` document, whole (docs/worker.md); shard: (index, of)."""
        return {
            "version": 1,
            "command": "ls",
            "entries": entries,
            "seconds": seconds,
            "requests": RunDir.requests(**requests),
            "carried": carried,
            "shard": {"index": shard[0], "of": shard[1]} if shard else None,
        }

    def listed(self, side: str, doc: dict, shard: int | None = None) -> None:
        """listing/<side>-summary.json, or listing/<side>-<shard>-summary.json of one list job."""
        name = f"{side}-summary.json" if shard is None else f"{side}-{shard}-summary.json"
        self._json(self.path / "listing" / name, doc)

    def listing(self, side: str, shard: int | None = None, running: bool = False) -> Path:
        """listing/<side>.tsv, or listing/<side>-<shard>.tsv of one list job, as a list job that
        ended well leaves it; running: the temporary name it writes under until then."""
        name = f"{side}.tsv" if shard is None else f"{side}-{shard}.tsv"
        return self._write(f"listing/{name}{'.tmp' if running else ''}", "")

    def sharded(self, jobs: int, basis: str = "scan", carried=None) -> dict:
        """listing/shards.json: how `ferry shard` cut the key space among the list jobs."""
        doc = {
            "version": 1,
            "jobs": jobs,
            "cuts": [f"k{i}" for i in range(1, jobs)],
            "basis": basis,
            "carried": carried,
        }
        self._json(self.path / "listing" / "shards.json", doc)
        return doc

    # the engine: its marker, the migration's lock, the report -----------------------------------

    def started(self, pid: int, host: str, pid_start: str | None, at: str) -> dict:
        """run_started.json, the marker the engines' start hook leaves (ferry_history.start)."""
        marker = {
            "run_id": f"{at}-{host}-{pid}",
            "engine": "snakemake",
            "host": host,
            "pid": pid,
            "pid_start": pid_start,
            "started": at,
            "report_args": [],
        }
        self._json(self.path / "run_started.json", marker)
        return marker

    def locked(self, marker: dict, heartbeat: float) -> None:
        """The run root's lock.json (ferry_lock.py), held for this pass by the marker's engine."""
        keys = ("run_id", "host", "pid", "pid_start")
        doc = {"version": 1, **{k: marker[k] for k in keys}, "pass": self.path.name}
        doc |= {"since": marker["started"], "heartbeat": heartbeat}
        self._json(self.path.parent / "lock.json", doc)

    def migration_files(self) -> None:
        """The run root's migration.json and history.jsonl, as a pass's start leaves them."""
        self._json(self.path.parent / "migration.json", {"version": 1})
        (self.path.parent / "history.jsonl").touch()

    def reported(self, status: str = "complete") -> None:
        name = "report.json" if status == "complete" else "report-incomplete.json"
        self._json(self.path / name, {"status": status})

    # logs and timings --------------------------------------------------------------------------

    @staticmethod
    def _step(step: str) -> str:
        return {"copy": COPY_STEP, "verify": VERIFY_STEP}.get(step, step)

    def log(self, step: str, text: str, part: str | None = None) -> None:
        """logs/<step>.log, or logs/<step>/part-<part>.log for a partition's job."""
        step = self._step(step)
        self._write(f"logs/{step}.log" if part is None else f"logs/{step}/part-{part}.log", text)

    def progress_lost(self, step: str, part: str, node: str, done: int, attempt: int = 1) -> None:
        """progress/<step>-part-<part>.lost-<attempt>.json: the last progress of an attempt
        that never finished, as bin/ferry-task keeps it for the retry."""
        doc = {
            "version": 1,
            "command": step,
            "pid": 1,
            "host": node,
            "node": node,
            "started": 0.0,
            "updated": 1.0,
            "finished": False,
            "files": {"done": 0, "failed": 0, "total": None},
            "bytes": {"done": done, "total": None},
            "bytes_per_second": done,
            "requests": self.requests(),
        }
        self._json(self.path / f"progress/{step}-part-{part}.lost-{attempt}.json", doc)

    def benchmark(
        self,
        step: str,
        seconds: float,
        end: float,
        part: str | None = None,
        cpu="NA",
        rss="NA",
        text: str | None = None,
        shard: int | None = None,
        node: str | None = None,
    ) -> None:
        """benchmarks/<step>.tsv (or <step>/part-<part>.tsv, or a list job's
        <step>/shard-<shard>.tsv): the columns Snakemake's benchmark files and bin/ferry-task
        have (bin/ferry-task's `node` too, when given); its modification time is the job's end."""
        step = self._step(step)
        rel = f"benchmarks/{step}.tsv" if part is None else f"benchmarks/{step}/part-{part}.tsv"
        if shard is not None:
            rel = f"benchmarks/{step}/shard-{shard}.tsv"
        if text is None:
            text = f"s\th:m:s\tmax_rss\tcpu_time\n{seconds}\t0:00:01\t{rss}\t{cpu}\n"
            if node is not None:
                head, row = text.splitlines()
                text = f"{head}\tnode\n{row}\t{node}\n"
        path = self._write(rel, text)
        os.utime(path, (end, end))

    @staticmethod
    def rule(step: str) -> str:
        """The report's per-step key for a step."""
        return RunDir._step(step)
