"""The projection of a migration's final pass from its history (ferry_history.py's records;
docs/pipeline.md, "Projection").

project(records, now=None, phase="final", checksum=None, settings=None) -> dict: the pass
`phase` started at `now` (epoch seconds; default the current time), from the complete records'
measured rates and delta trend (checksum: that pass verifies by MD5; default as the last final
pass did; settings: the config's prune.max_delete/force, dest_listing and state, Settings):

    {"phase": str, "at": ISO str, "records": int, "passes": int (the complete ones used),
     "ok": bool, "why_not": str|None, "line": str,        # ok False (no complete pass): no more keys
     "checksum": bool,
     "seconds": float,
     "steps": {"listing", "plan", "copy", "verify", "prune", "final_check", "overhead": float},
     "delta": {"files": int, "bytes": int, "deleted": int},          # expected to copy / delete
     "per_hour": {"files_per_hour", "bytes_per_hour", "deleted_per_hour": float},
     "requests": int, "requests_by_kind": {kind: int},
     "rates": {"list_source_files_per_s", "list_dest_files_per_s", "plan_entries_per_s",
               "copy_files_per_s", "copy_bytes_per_s", "verify_files_per_s",
               "verify_md5_bytes_per_s", "prune_entries_per_s", "final_check_entries_per_s":
               float|None (None: never measured), "overhead_seconds": float},
     "trend": [{"run_id", "pass", "phase", "started", "hours_since_previous", "files", "bytes",
                "deleted", "files_per_hour", "bytes_per_hour", "deleted_per_hour"}],
     "converging": "converging"|"steady"|"diverging"|"unknown", "why": str,
     "assumptions": [str],
     "backtest": [{"run_id", "pass", "phase", "from_passes", "projected_seconds", "actual_seconds",
                   "error_seconds", "error_pct", "projected_requests", "actual_requests"}],
     "final_pass": {"goes_through": bool, "refused": str|None, "said": str, "problems": [str],
                    "deletions": {"entries", "of", "files": int, "limit": str},
                    "needed_max_delete": str|None, "force": bool,
                    "dest_listing": {"carried": bool, "why": str}, "source_loss": dict|None}}

`line` (line(p)) is the one-line summary the engines print at the end ("a final pass started
now would take ≈ 14 min (listing 6 min + …), with ≈ 12,400 Blob requests; passes converging;
the final pass would go through (…)").
"""

from __future__ import annotations

import dataclasses
import math
import os
import time

from ferry_docs import REQUEST_KINDS as KINDS
from ferry_run_dir import DELETIONS
from ferrylib import epoch, fmt_bytes, iso, load_json

# How many of the latest passes the rates and the delta trend are taken over: recent enough to
# follow a change of load, several so one odd pass does not decide.
RECENT = 3


# --- the projection ------------------------------------------------------------------------------


def span(rec: dict, step: str) -> float:
    """The step's span in the pass; 0 for a step the pass did not run."""
    return float(rec["steps"][step]["span"]) if step in rec["steps"] else 0.0


def files_of(rec: dict, side: str) -> int:
    """The files the pass's plan counted on a side; 0 where it made no plan."""
    return rec[side]["files"] or 0


def pooled(passes: list[dict], units, seconds) -> float | None:
    """Units per second over the passes that did some of it: total units / total seconds, so a
    big pass weighs more than a small one. None: never measured."""
    return fitted(passes, units, seconds)[1]


def fitted(passes: list[dict], units, seconds) -> tuple[float, float | None]:
    """A step's time as `fixed + units / rate`, fitted by least squares over the passes that did
    some of it: the fixed part is what its jobs cost whatever their work (scheduled, started,
    gathered), which a pass with a small delta pays in full. From passes of one size (or a fit
    the noise turns upside down) all of it is rate: total units / total seconds. (0, None): never
    measured."""
    pairs = [(units(r), seconds(r)) for r in passes]
    pairs = [(u, s) for u, s in pairs if u > 0 and s > 0]
    if not pairs:
        return 0.0, None
    proportional = (0.0, sum(u for u, _ in pairs) / sum(s for _, s in pairs))
    mean_u = sum(u for u, _ in pairs) / len(pairs)
    mean_s = sum(s for _, s in pairs) / len(pairs)
    spread = sum((u - mean_u) ** 2 for u, _ in pairs)
    if spread <= 0:
        return proportional
    slope = sum((u - mean_u) * (s - mean_s) for u, s in pairs) / spread
    fixed = mean_s - slope * mean_u
    if slope <= 0 or fixed < 0:
        return proportional
    return fixed, 1 / slope


def overhead(rec: dict) -> float:
    """What a pass's wall time holds beyond its steps' spans: engine start-up, scheduling between
    steps, the report; less where steps ran side by side (one part's verify with another's
    copy), so it can be below zero. Measured per pass so the projection of a pass like the last
    one is its wall time, not just its steps'."""
    steps = max(span(rec, "list_source"), span(rec, "list_dest")) + sum(
        span(rec, s) for s in ("plan", "copy", "verify", "prune", "final_check")
    )
    return float(rec["wall_seconds"] or 0.0) - steps


# The jobs a pass runs one after another beyond its steps' (the carry step, the report): each
# one more the engine schedules, starts and waits for. Prune is two (its parts, then the
# directories').
FIXED_HOPS = 2
HOPS = {"listing": 1, "plan": 1, "copy": 1, "verify": 1, "prune": 2, "final_check": 1}


def hops(rec: dict) -> int:
    """How many jobs the pass ran one after another (a step's jobs side by side count once)."""
    done = set(rec["steps"])
    steps = {"listing" if s in ("list_source", "list_dest") else s for s in done}
    return FIXED_HOPS + sum(HOPS.get(s, 1) for s in steps)


def delta_of(rec: dict) -> tuple[int, int]:
    return rec["planned"]["files"], rec["planned"]["bytes"]


def trend(passes: list[dict]) -> list[dict]:
    """The delta each pass found, per hour since the pass before it started (what changed at the
    source in that time, as far as a pass can see it). A baseline's delta is the whole tree."""
    out = []
    for prev, rec in zip(passes, passes[1:]):
        hours = ((epoch(rec["started"]) or 0) - (epoch(prev["started"]) or 0)) / 3600
        if rec["phase"] == "baseline" or hours <= 0:
            continue
        files, byts = delta_of(rec)
        # Incremental passes never delete: extra_on_dest grows from pass to pass, and only what
        # is new since the previous pass is this interval's share.
        before = 0 if prev["phase"] == "final" else prev["planned"]["deleted"]
        deleted = max(0, rec["planned"]["deleted"] - before)
        out.append(
            {
                "run_id": rec["run_id"],
                "pass": rec["pass"],
                "phase": rec["phase"],
                "started": rec["started"],
                "hours_since_previous": round(hours, 4),
                "files": files,
                "bytes": byts,
                "deleted": deleted,
                "files_per_hour": files / hours,
                "bytes_per_hour": byts / hours,
                "deleted_per_hour": deleted / hours,
            }
        )
    return out


def verified_most(rec: dict) -> bool:
    return rec["verified"]["files"] * 2 >= files_of(rec, "source") > 0


# The steps priced by their work, and the work each measured pass did in it.
WORK = {
    "list_source": lambda r: files_of(r, "source"),
    "list_dest": lambda r: files_of(r, "dest"),
    "plan": lambda r: files_of(r, "source") + files_of(r, "dest"),
    "copy_files": lambda r: r["copied"]["files"],
    "copy_bytes": lambda r: r["copied"]["bytes"],
    "verify_files": lambda r: r["verified"]["files"],
    "verify_md5_bytes": lambda r: r["copied"]["bytes"],
    "prune": lambda r: r["planned"]["deleted"],
    "final_check": lambda r: files_of(r, "source") + files_of(r, "dest"),
}
# Where rates() reports each fit's rate, as the report has always named them.
RATE_NAMES = {
    "list_source": "list_source_files_per_s",
    "list_dest": "list_dest_files_per_s",
    "plan": "plan_entries_per_s",
    "copy_files": "copy_files_per_s",
    "copy_bytes": "copy_bytes_per_s",
    "verify_files": "verify_files_per_s",
    "verify_md5_bytes": "verify_md5_bytes_per_s",
    "prune": "prune_entries_per_s",
    "final_check": "final_check_entries_per_s",
}


def rates(passes: list[dict]) -> dict:
    """The measured rates, over the latest passes that ran each step (None: never measured), and
    each step's fixed seconds (`fixed_seconds`, fitted()): the step then takes fixed + work/rate."""
    recent = passes[-RECENT:]
    # The steps whose work differs most between passes are fitted over them all: the baseline's
    # large copy fixes the rate, the incremental passes' small ones the fixed part.
    with_copies = [r for r in passes if r["copied"]["files"]]
    # A verify by MD5 reads what the pass copied; by size, it looks the files up.
    size_verifies = [r for r in passes if not r["checksum"]]
    md5_verifies = [r for r in passes if r["checksum"]]
    over = {
        "list_source": (recent, "list_source"),
        "list_dest": (recent, "list_dest"),
        "plan": (recent, "plan"),
        "copy_files": (with_copies, "copy"),
        "copy_bytes": (with_copies, "copy"),
        "verify_files": (size_verifies, "verify"),
        "verify_md5_bytes": (md5_verifies, "verify"),
        "prune": (passes, "prune"),
        "final_check": (recent, "final_check"),
    }
    out, fixed, points = {}, {}, {}
    for name, (among, step) in over.items():
        fixed[name], out[RATE_NAMES[name]] = fitted(
            among, WORK[name], lambda r, step=step: span(r, step)
        )
        points[name] = [
            [u, s] for r in among if (u := WORK[name](r)) > 0 and (s := span(r, step)) > 0
        ]
    out["fixed_seconds"] = {k: round(v, 3) for k, v in fixed.items()}
    out["points"] = points
    # Per job the engine ran in turn: from the passes most like the one projected (an
    # incremental or a final, not the baseline, whose copy outlasts its other jobs' gaps).
    like = [r for r in passes if r["phase"] != "baseline"][-RECENT:] or recent
    out["overhead_per_hop"] = sum(overhead(r) / hops(r) for r in like) / len(like)
    out["overhead_seconds"] = sum(overhead(r) for r in like) / len(like)
    return out


def requests_per_unit(passes: list[dict], step: str, units) -> dict[str, float]:
    """A step's Blob requests of each kind per unit of its work (entry listed, file copied, ...)."""
    recent = [r for r in passes if step in r["requests"]["by_step"] and units(r) > 0][-RECENT:]
    total_units = sum(units(r) for r in recent)
    if not total_units:
        return {}
    return {k: sum(r["requests"]["by_step"][step][k] for r in recent) / total_units for k in KINDS}


def seconds_for(units: float, rate: float | None) -> float:
    return units / rate if units and rate else 0.0


def priced(r: dict, name: str, units: float) -> float:
    """What `units` of step `name`'s work take: the measured passes nearest in size to it, moved
    by the step's marginal rate (rates()) for the difference. A small pass pays its jobs' fixed
    costs (start-up, scheduling, gathering) as the small passes measured them, whatever a fit
    through a baseline ten thousand times larger says of them."""
    rate = r[RATE_NAMES[name]]
    if not units or not rate:
        return 0.0
    near = nearest(r["points"][name], units)
    if not near:
        return r["fixed_seconds"][name] + units / rate
    fixed = sum(s - u / rate for u, s in near) / len(near)
    return max(0.0, fixed) + units / rate


def nearest(points: list[list[float]], units: float) -> list[list[float]]:
    """The measured (units, seconds) nearest `units` in ratio, and those within half again of it."""
    if not points:
        return []

    def far(p) -> float:
        return abs(math.log(p[0] / units))

    best = min(far(p) for p in points)
    return [p for p in points if far(p) <= best + math.log(1.5)]


def change_rate(moves: list[dict], assumptions: list[str]) -> dict:
    """What changes at the source per hour, as the latest passes found it (none before an
    incremental pass); the assumption said."""
    recent_moves = moves[-RECENT:]
    if recent_moves:
        per_hour = {
            k: sum(m[k] for m in recent_moves) / len(recent_moves)
            for k in ("files_per_hour", "bytes_per_hour", "deleted_per_hour")
        }
        assumptions.append(
            f"the source changes at the rate the last {len(recent_moves)} passes found: "
            f"{per_hour['files_per_hour']:,.0f} files and {fmt_bytes(per_hour['bytes_per_hour'])} per hour"
        )
    else:
        per_hour = {"files_per_hour": 0.0, "bytes_per_hour": 0.0, "deleted_per_hour": 0.0}
        assumptions.append(
            "no incremental pass yet: the rate of change is unknown and taken as none"
        )
    return per_hour


def verify_seconds(
    r: dict, verified: float, delta_bytes: float, listing: float, md5: bool, assumptions: list[str]
) -> float:
    """The verify of `verified` files (and, by MD5, of `delta_bytes`), at the measured rates or,
    unmeasured, as the steps it reads like."""
    verify = priced(r, "verify_files", verified)
    if verified and not r["verify_files_per_s"]:
        # A verify by size reads what a listing of both sides reads.
        verify = listing
        assumptions.append(
            "verifying takes as long as listing both sides (no verify of most of the tree measured)"
        )
    if md5:
        verify = max(
            verify,
            priced(r, "verify_md5_bytes", delta_bytes)
            if r["verify_md5_bytes_per_s"]
            else seconds_for(delta_bytes, r["copy_bytes_per_s"]),
        )
        if not r["verify_md5_bytes_per_s"]:
            assumptions.append(
                "verifying by MD5 reads every byte at the copy's measured bytes/s (no MD5 verify measured)"
            )
    return verify


def prune_seconds(r: dict, deletes: float, assumptions: list[str]) -> float:
    """A final pass's prune of `deletes` entries."""
    prune = 0.0
    if r["prune_entries_per_s"]:
        prune = priced(r, "prune", deletes)
    elif deletes:
        # Never measured (before the first final pass): its jobs, one per part, a request per
        # entry, are priced as the verify's of as many files — a deletion is no cheaper a
        # request than a lookup, and the jobs start as the verify's do.
        prune = (
            priced(r, "verify_files", deletes)
            if r["verify_files_per_s"]
            else seconds_for(deletes, r["copy_files_per_s"])
        )
        assumptions.append(
            "deleting a file takes as long as verifying one, in as many jobs (no prune measured)"
        )
    return prune


# The work each step's requests are counted per: the work its time is priced by.
MEASURED_UNITS = {
    "list_source": WORK["list_source"],
    "list_dest": WORK["list_dest"],
    "copy": WORK["copy_files"],
    "verify": WORK["verify_files"],
    "prune": WORK["prune"],
    "final_check": WORK["final_check"],
}


def requests_by_kind(passes: list[dict], units: dict) -> dict[str, float]:
    """The Blob requests of each kind a pass doing `units` of each step's work sends, at the
    measured passes' requests per unit."""
    by_kind = dict.fromkeys(KINDS, 0.0)
    for step, n in units.items():
        for kind, per in requests_per_unit(passes, step, MEASURED_UNITS[step]).items():
            by_kind[kind] += per * n
    return by_kind


def listing_seconds(
    r: dict, source: int, dest: int, carried: bool, known: dict, phase: str, assumptions: list[str]
) -> tuple[float, float]:
    """(this pass's listing, a listing of both sides): a pass that carries the destination's
    state lists only the source."""
    full_listing = max(
        priced(r, "list_source", source),
        priced(r, "list_dest" if r["list_dest_files_per_s"] else "list_source", dest),
    )
    listing = priced(r, "list_source", source) if carried else full_listing
    if carried:
        assumptions.append(f"the destination is not listed: its state is carried ({known['why']})")
    elif phase != "audit":
        assumptions.append(f"the destination is listed fresh: {known['why']}")
    if not r["list_dest_files_per_s"]:
        assumptions.append(
            "the destination lists as fast as the source (no destination listing measured)"
        )
    return listing, full_listing


def audit_seconds(
    r: dict, source: int, dest: int, full_listing: float, last: dict, checksum: bool
) -> dict:
    """The whole-tree check after the cut-over, step by step: both sides listed afresh, every
    file verified."""
    return {
        "listing": full_listing,
        "plan": priced(r, "plan", source + dest),
        "verify": max(
            priced(r, "verify_files", source) if r["verify_files_per_s"] else full_listing,
            priced(r, "verify_md5_bytes", last["source"]["bytes"] or 0) if checksum else 0.0,
        ),
    }


def expected_delta(
    last: dict, per_hour: dict, hours: float, work: dict | None
) -> tuple[float, float, float]:
    """(files, bytes, deletions) the pass will find `hours` after the last one: `work` where
    known, else the change rate's, and what the last pass left to delete."""
    if work is not None:
        return work["files"], work["bytes"], work["deleted"]
    delta_files = per_hour["files_per_hour"] * hours
    delta_bytes = per_hour["bytes_per_hour"] * hours
    pending_deletes = 0 if last["phase"] == "final" else last["planned"]["deleted"]
    deletes = pending_deletes + per_hour["deleted_per_hour"] * hours
    return delta_files, delta_bytes, deletes


def estimate(
    passes: list[dict],
    at: float,
    phase: str,
    checksum: bool,
    work: dict | None = None,
    known: dict | None = None,
) -> dict:
    """The pass `phase` started at `at`, from the complete passes before it (oldest first).
    `work`: the delta it will find ({"files", "bytes", "deleted"}) when known, instead of the
    one the trend forecasts. `known`: how it will know the destination (next_listing());
    default: carried where the last pass left a state."""
    assumptions = []
    last = passes[-1]
    r = rates(passes)
    moves = trend(passes)
    hours = max(0.0, (at - (epoch(last["started"]) or at)) / 3600)
    per_hour = change_rate(moves, assumptions)
    delta_files, delta_bytes, deletes = expected_delta(last, per_hour, hours, work)
    source = files_of(last, "source")
    dest = files_of(last, "dest") or source  # after the baseline the destination holds the source
    assumptions.append(
        f"the trees are as large as the last pass listed them ({source:,} files at the source)"
    )

    # A pass that carries the destination's state lists only the source.
    if known is None:
        known = {"carried": last["carried"], "why": f"left by {last['run_dir']}"}
    carried = known["carried"] and phase != "audit"
    listing, full_listing = listing_seconds(r, source, dest, carried, known, phase, assumptions)
    plan = priced(r, "plan", source + dest)
    copy = max(priced(r, "copy_files", delta_files), priced(r, "copy_bytes", delta_bytes))
    if (delta_files or delta_bytes) and not r["copy_files_per_s"]:
        assumptions.append("no copy measured yet: the copy's time is unknown")
    final = phase == "final"
    # Every pass verifies what it copied; the whole tree is the audit's (projected apart).
    verified = delta_files
    verify = verify_seconds(r, verified, delta_bytes, listing, final and checksum, assumptions)
    if final:
        assumptions.append(
            f"the final pass verifies what it copies ({'by MD5' if checksum else 'by size'}); "
            "the whole tree is checked by the audit, after the downtime"
        )
    prune = prune_seconds(r, deletes, assumptions) if final else 0.0
    # The in-window whole-tree check only where the last final pass ran one (final_check: true).
    final_check = priced(r, "final_check", source + dest) if final else 0.0
    steps = {
        "listing": listing,
        "plan": plan,
        "copy": copy,
        "verify": verify,
        "prune": prune,
        "final_check": final_check,
    }
    # The engine's own time per job it runs in turn, as the passes most like this one paid it:
    # a final pass runs prune's two more.
    ran = [k for k, v in steps.items() if v or k in ("listing", "plan") or (k == "prune" and final)]
    extra = r["overhead_per_hop"] * (FIXED_HOPS + sum(HOPS[k] for k in ran))
    steps["overhead"] = max(0.0, extra)
    assumptions.append(
        "each step takes the time the measured passes nearest it in size took, moved by its "
        "rate for the difference; the engine's time between and around the steps (start-up, "
        "scheduling, the report) is what the passes most like this one paid per job, for each "
        "job this pass runs in turn"
    )

    units = {
        "list_source": source,
        "list_dest": 0 if carried else dest,
        "copy": delta_files,
        "verify": verified,
        "prune": deletes if final else 0,
        "final_check": (source + dest) if final and r["final_check_entries_per_s"] else 0,
    }
    by_kind = requests_by_kind(passes, units)
    audit = audit_seconds(r, source, dest, full_listing, last, checksum)
    return {
        # Below zero, the engine's time is steps run side by side (one part's verify with
        # another's copy): the pass is shorter than its steps one after another.
        "seconds": round(max(max(steps.values()), sum(steps.values()) + min(0.0, extra)), 3),
        "steps": {k: round(v, 3) for k, v in steps.items()},
        # The whole-tree check after the cut-over: both sides listed afresh, every file verified.
        "audit": {
            "seconds": round(sum(audit.values()) + r["overhead_seconds"], 3),
            "steps": {k: round(v, 3) for k, v in audit.items()},
        },
        "delta": {
            "files": round(delta_files),
            "bytes": round(delta_bytes),
            "deleted": round(deletes),
        },
        "requests": round(sum(by_kind.values())),
        "requests_by_kind": {k: round(v) for k, v in by_kind.items()},
        "rates": r,
        "trend": moves,
        "per_hour": per_hour,
        "assumptions": assumptions,
    }


def convergence(moves: list[dict], r: dict) -> tuple[str, str]:
    """Are the passes' deltas shrinking, and can a pass keep up with the change at all?"""
    if len(moves) < 2:
        return "unknown", "two incremental passes are needed to see a trend"
    recent = moves[-RECENT:]
    # The latest pass's change rate against the copy's: the present, not the mean of the past.
    copy_bph = (r["copy_bytes_per_s"] or 0) * 3600
    copy_fph = (r["copy_files_per_s"] or 0) * 3600
    bph = recent[-1]["bytes_per_hour"]
    fph = recent[-1]["files_per_hour"]
    if (copy_bph and bph > copy_bph) or (copy_fph and fph > copy_fph):
        return "diverging", (
            f"the delta grows faster than a pass can copy it: {fmt_bytes(bph)} and {fph:,.0f} files "
            f"change per hour, a pass copies {fmt_bytes(copy_bph)} and {copy_fph:,.0f} files per hour"
        )
    files = [m["files"] for m in recent]
    byts = [m["bytes"] for m in recent]
    said = f"{', '.join(f'{f:,}' for f in files)} files, {', '.join(fmt_bytes(b) for b in byts)}"
    # Converging only where both shrink: fewer files of many more bytes is a pass no shorter.
    if shrinking(files) and shrinking(byts):
        return (
            "converging",
            f"each of the last {len(files)} passes found a smaller delta, in files and in bytes ({said})",
        )
    grew = [what for what, xs in (("files", files), ("bytes", byts)) if xs[-1] > xs[-2] * 1.1]
    if grew:
        return "diverging", (
            f"the passes' deltas are not decreasing: the last grew in {' and '.join(grew)} ({said}); "
            "the source changes faster between passes than the passes get shorter"
        )
    return "steady", (
        f"the passes' deltas no longer shrink in both files and bytes ({said}): more "
        "incremental passes will not make the final pass shorter; what remains is listing and verifying"
    )


def shrinking(xs: list[int]) -> bool:
    return all(b < a for a, b in zip(xs, xs[1:]))


def actual_requests(rec: dict) -> int:
    return sum(rec["requests"]["total"].values())


def backtest(passes: list[dict]) -> list[dict]:
    """Each pass that had a predecessor, projected from the passes before it, against what it took."""
    out = []
    for i in range(1, len(passes)):
        rec = passes[i]
        at = epoch(rec["started"])
        if at is None or rec["phase"] == "baseline" or not rec["wall_seconds"]:
            continue
        # How it knew the destination, as the state said when it started (the records'
        # "carried" of older histories, where it is not recorded).
        known = (
            {"carried": rec["dest_listed"] == "carried", "why": rec["dest_listed_why"] or ""}
            if rec["dest_listed"]
            else None
        )
        est = estimate(passes[:i], at, rec["phase"], rec["checksum"], known=known)
        # The same pass priced with the delta it found: the model's error apart from the
        # forecast's.
        files, byts = delta_of(rec)
        work = {
            "files": files,
            "bytes": byts,
            "deleted": rec["planned"]["deleted"],
        }
        priced_ = estimate(passes[:i], at, rec["phase"], rec["checksum"], work, known)["seconds"]
        actual = float(rec["wall_seconds"])
        out.append(
            {
                "run_id": rec["run_id"],
                "pass": rec["pass"],
                "phase": rec["phase"],
                # The passes it was projected from: after the baseline alone, no small pass was
                # measured yet, nor any change rate.
                "from_passes": i,
                "projected_seconds": est["seconds"],
                "actual_seconds": round(actual, 3),
                "error_seconds": round(est["seconds"] - actual, 3),
                "error_pct": round(100 * (est["seconds"] - actual) / actual, 1) if actual else None,
                "priced_seconds": priced_,
                "priced_error_pct": round(100 * (priced_ - actual) / actual, 1) if actual else None,
                "projected_requests": est["requests"],
                "actual_requests": actual_requests(rec),
            }
        )
    return out


def project(
    records: list[dict],
    now: float | None = None,
    phase: str = "final",
    checksum: bool | None = None,
    settings: Settings | None = None,
) -> dict:
    """The pass `phase` (a final one unless said) started at `now`, from the complete passes of
    records (load()'s list; failed, stopped and running ones are not measures of a pass).
    checksum: whether that pass verifies by MD5 (default: as the last final pass did, else not)."""
    now = time.time() if now is None else now
    # An audit copies nothing and finds no change: it is no measure of a migration pass.
    passes = sorted(
        (
            r
            for r in records
            if r["status"] == "complete" and epoch(r["started"]) and r["phase"] != "audit"
        ),
        key=lambda r: epoch(r["started"]),
    )
    base = {"phase": phase, "at": iso(now), "records": len(records), "passes": len(passes)}
    if not passes:
        return {
            **base,
            "ok": False,
            "why_not": "no complete pass recorded yet",
            "line": "no projection: no complete pass recorded yet",
        }
    if checksum is None:
        checksum = next((r["checksum"] for r in reversed(passes) if r["phase"] == "final"), False)
    settings = settings or Settings()
    listing = next_listing(records, settings)
    est = estimate(passes, now, phase, checksum, known=listing)
    state, why = convergence(est["trend"], est["rates"])
    result = {
        **base,
        "ok": True,
        "why_not": None,
        "checksum": checksum,
        **est,
        "converging": state,
        "why": why,
        "backtest": backtest(passes),
        "final_pass": verdict(passes, est["trend"], listing, settings),
    }
    result["final_pass"]["said"] = verdict_words(result["final_pass"])
    result["line"] = line(result)
    return result


# --- will the final pass go through ---------------------------------------------------------------

# prune.max_delete's default (config/config.yaml), the worker's --max-delete's too.
DEFAULT_MAX_DELETE = "10%"
# The carried state's document at a local state location (worker/src/carried.rs) and its layout.
STATE_DOC = "dest.json"
STATE_VERSION = 1
# A pass's source lost "more than it usually does" past this many times the most an earlier
# interval lost at its rate, and past this many files (a handful is noise, not a sign).
LOSS_FACTOR = 3.0
LOSS_FLOOR = 10


@dataclasses.dataclass(frozen=True)
class Settings:
    """What the next pass runs with, as the config says (ferry_config.report_args): its prune's
    limit and force, and how it knows the destination (dest_listing, and the state location)."""

    max_delete: str = DEFAULT_MAX_DELETE
    force: bool = False
    dest_listing: str = "carried"
    state: str | None = None


def limit_allows(limit: str, n: int, of: int) -> bool:
    """prune's rule (worker/src/commands/prune.rs, Limit::allows): a count, or a share of the
    destination's entries."""
    text = str(limit).strip()
    if text.endswith("%"):
        return of == 0 or n <= of * float(text[:-1]) / 100.0
    return n <= int(text)


def needed_limit(n: int, of: int) -> str:
    """The smallest whole percentage prune.max_delete must be for `n` of `of` to go."""
    return f"{max(1, math.ceil(100.0 * n / of))}%" if of else str(n)


def state_doc(state: str | None) -> tuple[bool, dict | None]:
    """(readable here, the carried state's document or None): a local state location only; a
    Blob prefix is judged from the records instead."""
    if not state or "://" in state or not os.path.isdir(state):
        return (bool(state) and "://" not in state and not os.path.exists(state)), None
    doc = load_json(os.path.join(state, STATE_DOC))
    return True, doc if isinstance(doc, dict) else None


def next_listing(records: list[dict], settings: Settings) -> dict:
    """How the next pass will know the destination: {"carried": bool, "why": str}. From the
    state itself where this machine sees it (what the worker's decide() reads first), else from
    the records: the last pass that touched the state either left one or took it and left none."""
    if settings.dest_listing == "fresh":
        return {"carried": False, "why": "dest_listing is fresh: every pass lists the destination"}
    seen, doc = state_doc(settings.state)
    if seen:
        if doc is None:
            return {"carried": False, "why": f"there is no carried state at {settings.state}"}
        if doc.get("version") != STATE_VERSION:
            return {"carried": False, "why": "the carried state is of another version of ferry"}
        if doc["taken_by"]:
            return {
                "carried": False,
                "why": f"the carried state was taken by {doc['taken_by']}, which did not leave a "
                "new one (it failed or was stopped)",
            }
        return {
            "carried": True,
            "why": f"left by {doc['written_by']}, {doc['entries']:,} entries",
        }
    for rec in sorted(records, key=lambda r: epoch(r["started"]) or 0.0, reverse=True):
        if rec["carried"]:
            return {"carried": True, "why": f"left by {rec['run_dir']}"}
        if took_state(rec):
            return {
                "carried": False,
                "why": f"{rec['run_dir']} ({rec['status']}) left no carried state",
            }
    return {"carried": False, "why": "no pass has left a carried state"}


def took_state(rec: dict) -> bool:
    """Did the pass decide on the carried state (and, not carrying it on, leave the next pass to
    list fresh)? A pass that decided how to know the destination did; so did a baseline that
    wrote."""
    if rec["dest_listed"]:
        return True
    return rec["phase"] == "baseline" and bool(rec["copied"]["files"])


def source_loss(moves: list[dict], source: int) -> dict | None:
    """The last interval's loss at the source against the earlier ones': a source that lost much
    more than it usually does (an unmounted share, the wrong path, someone's rm) is named before
    the final pass makes the destination lose it too. None: nothing unusual, or nothing to
    compare with."""
    if len(moves) < 2:
        return None
    last, earlier = moves[-1], moves[:-1]
    usual = max(m["deleted_per_hour"] for m in earlier)
    expected = usual * last["hours_since_previous"]
    if last["deleted"] <= max(LOSS_FACTOR * expected, LOSS_FLOOR):
        return None
    most = max(m["deleted"] for m in earlier)
    return {
        "files": last["deleted"],
        "usual": most,
        "why": f"the source lost {last['deleted']:,} files since the pass before "
        f"(earlier passes: at most {most:,}"
        + (f", of {source:,}" if source else "")
        + "): check it is the right source, whole, before the window",
    }


def verdict(passes: list[dict], moves: list[dict], listing: dict, settings: Settings) -> dict:
    """Would the final pass go through as the migration stands: its deletions (what the last
    pass's plan counted) against prune.max_delete, as `ferry plan` and prune judge them; how it
    will know the destination; the source's loss."""
    last = passes[-1]
    planned = last["planned"]
    # What the last plan counted, as `ferry plan` would judge it now; a final pass deleted it.
    files = 0 if last["phase"] == "final" else planned["deleted"]
    n = files + (0 if last["phase"] == "final" else planned["prune_dirs"])
    of = files_of(last, "dest") + planned["dest_dirs"] or files_of(last, "source")
    problems, refused = [], None
    if files_of(last, "source") == 0 and not settings.force:
        refused = (
            "the last pass found no entries at the source, and prune refuses to empty the "
            "destination: check the source is mounted; set prune.force: true only if it really is empty"
        )
    elif not settings.force and not limit_allows(settings.max_delete, n, of):
        share = 100.0 * n / of if of else 100.0
        refused = (
            f"{n:,} of {of:,} destination entries to delete ({share:.1f} %), more than "
            f"prune.max_delete {settings.max_delete} allows: review {last['run_dir']}/{DELETIONS}, "
            f'then set prune.max_delete: "{needed_limit(n, of)}" (or prune.force: true)'
        )
    newer = planned["newer"]
    if refused is None and newer["count"] and not settings.force:
        refused = (
            f"{newer['count']:,} files to delete are newer than everything at the source "
            f"(first: {', '.join(newer['examples'])}): something wrote at the destination, "
            f"or the source's newest files were deleted; review {last['run_dir']}/{DELETIONS}, "
            "then set prune.force: true if they are to go"
        )
    if refused:
        problems.append(f"its prune would be refused: {refused}")
    # After a final pass the loss was the cut-over's own, dealt with (deleted, or refused).
    loss = None if last["phase"] == "final" else source_loss(moves, files_of(last, "source"))
    if loss:
        problems.append(loss["why"])
    if not listing["carried"]:
        problems.append(f"it lists the destination fresh ({listing['why']})")
    return {
        "goes_through": refused is None,
        "refused": refused,
        "deletions": {"entries": n, "of": of, "files": files, "limit": settings.max_delete},
        "needed_max_delete": needed_limit(n, of) if refused and of else None,
        "force": settings.force,
        "dest_listing": listing,
        "source_loss": loss,
        "problems": problems,
    }


def verdict_words(v: dict) -> str:
    d = v["deletions"]
    if not v["goes_through"]:
        head = "the final pass would NOT go through: " + v["problems"][0]
        rest = v["problems"][1:]
    else:
        within = "prune.force is set" if v["force"] else f"within prune.max_delete {d['limit']}"
        head = (
            f"the final pass would go through ({d['entries']:,} of {d['of']:,} destination "
            f"entries to delete, {within}; the destination "
            + ("carried" if v["dest_listing"]["carried"] else "listed fresh")
            + ")"
        )
        rest = [p for p in v["problems"] if not p.startswith("it lists the destination fresh")]
        if not v["dest_listing"]["carried"]:
            rest.append(f"it lists the destination fresh: {v['dest_listing']['why']}")
    return "; ".join([head, *(f"but {p}" for p in rest)])


# --- words ---------------------------------------------------------------------------------------


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{int(seconds // 3600)} h {seconds % 3600 / 60:.0f} min"


STEP_WORDS = [
    ("listing", "listing"),
    ("plan", "plan"),
    ("copy", "copy"),
    ("verify", "verify"),
    ("prune", "prune"),
    ("final_check", "final check"),
    ("overhead", "overhead"),
]


def line(p: dict, verdict: bool = True) -> str:
    """'a final pass started now would take ≈ 14 min (listing 6 min + ...), with ≈ 12,400 Blob
    requests; ...; the final pass would go through (...)'; without its verdict where that is
    said on a line of its own."""
    if not p.get("ok"):
        return p.get("line") or f"no projection: {p.get('why_not')}"
    parts = " + ".join(
        f"{word} {duration(p['steps'][key])}"
        for key, word in STEP_WORDS
        if key in p["steps"] and (p["steps"][key] or key in ("listing", "copy", "verify"))
    )
    audit = p.get("audit")
    after = f"; the audit after it ≈ {duration(audit['seconds'])}" if audit else ""
    final = f"; {verdict_words(p['final_pass'])}" if verdict and p.get("final_pass") else ""
    return (
        f"a {p['phase']} pass started now would take ≈ {duration(p['seconds'])} ({parts}), "
        f"with ≈ {p['requests']:,} Blob requests{after}; passes {p.get('converging', 'unknown')}"
        f"{final}"
    )
