"""``--dry-run``: what a transfer would do with each file, and its listing.

Per file, one word:

    fetch   not in the output directory (or there but not the server's): fetched whole
    skip    complete in the output directory: nothing is fetched
    resume  a part file and its journal are there: only the missing bytes are fetched
    check   in the output directory, but the listing cannot tell (no size; with --update no
            mtime): a conditional GET decides (skip on 304)

The decision is the engine's own (``FileState.resume_state``), made on the disk
read-only. ``listing`` and ``totals`` are pure: the result's rows in, lines out.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from dtune.dataset import FileSpec
from dtune.engine.files import FileState
from dtune.engine.result import FileResult, TransferResult
from dtune.transfer.events import EventSink
from dtune.transfer.listing import list_sources, place, refuse_collisions
from dtune.transfer.request import TransferRequest
from dtune.units import human_bytes

STATES = ("fetch", "skip", "resume", "check")


def disk_states(specs: list[FileSpec], paths: list[Path], update: bool, verify: bool = False) -> list[str]:
    """The word for each file (see the module docstring). Blocking: reads the output directory
    (and hashes a file in place against its published checksum under ``verify``)."""
    states = []
    for i, (spec, path) in enumerate(zip(specs, paths, strict=True)):
        f = FileState(i, spec, path, "all")
        state = f.resume_state(update, verify, move=False)
        if state == "fresh":
            state = "check" if f.if_modified_since is not None else "fetch"
        states.append(state)
    return states


def totals(rows: list[FileResult]) -> dict:
    """Counts and bytes per word; ``bytes`` adds the known sizes, ``unknown`` counts the rest.
    ``to_fetch`` is what would move (fetch, resume and check: a resume's part already on disk
    is not subtracted)."""
    out = {state: {"files": 0, "bytes": 0, "unknown": 0} for state in STATES}
    failed = 0
    for row in rows:
        if row.status not in out:
            failed += 1
            continue
        t = out[row.status]
        t["files"] += 1
        if row.size is None:
            t["unknown"] += 1
        else:
            t["bytes"] += row.size
    moving = [out[s] for s in ("fetch", "resume", "check")]
    return {"files": sum(t["files"] for t in out.values()),
            "to_fetch": {"files": sum(t["files"] for t in moving), "bytes": sum(t["bytes"] for t in moving),
                         "unknown": sum(t["unknown"] for t in moving)},
            "states": out, "failed": failed}


def _amount(t: dict) -> str:
    files, nbytes = t["files"], t["bytes"]
    text = f"{files} file{'s' if files != 1 else ''}, {nbytes} bytes ({human_bytes(nbytes)})"
    if t["unknown"]:
        text += f", {t['unknown']} of unknown size"
    return text


def listing(rows: list[FileResult]) -> list[str]:
    """One line per file, ``STATE  SIZE  PATH`` (SIZE ``?`` when unknown; the path last, as it
    may hold spaces), then the totals."""
    lines = []
    for row in rows:
        if row.status in STATES:
            size = "?" if row.size is None else str(row.size)
            lines.append(f"{row.status:<6} {size:>14}  {row.relpath}")
    t = totals(rows)
    skip = t["states"]["skip"]
    lines.append(f"dry run: {t['files']} file{'s' if t['files'] != 1 else ''} selected; would fetch "
                 f"{_amount(t['to_fetch'])}; {skip['files']} already complete (skip)")
    for row in rows:
        if row.status not in STATES:
            lines.append(f"dry run: failed: {row.error or row.relpath}")
    return lines


async def dry_run(request: TransferRequest, emit: EventSink) -> TransferResult:
    """``--dry-run``: discover and select as a transfer would, say per file what it would do
    (``disk_states``) in a ``dry_run`` event, and return that as the result
    (``TransferResult.dry_run``). Nothing is created or written: no output directory, lock,
    part file or history row."""
    dataset = (await list_sources(request)).dataset
    for warning in dataset.warnings:
        emit({"event": "warning", "reason": warning})
    refuse_collisions(dataset, request.outdir)
    specs, paths = place(dataset, request.outdir, lambda msg: emit({"event": "warning", "reason": msg}))
    states = await asyncio.to_thread(disk_states, specs, paths, request.options.update,
                                    request.options.verify_existing)
    result = TransferResult(dry_run=True)
    for spec, state in zip(specs, states, strict=True):
        result.files.append(FileResult(spec.relpath, state, spec.size))
        emit({"event": "dry_run", "file": spec.relpath, "size": spec.size, "state": state})
    for relpath, reason in dataset.unlisted:  # as in a transfer: a hole in the tree fails the run
        result.files.append(FileResult(relpath, "failed", None, reason))
    return result


def summary_event(result: TransferResult) -> dict:
    """--dry-run's last event (each file had its ``dry_run`` event): the totals."""
    return {"event": "summary", "dry_run": True, **totals(result.files),
            "failed": [{"file": f.relpath, "reason": f.error} for f in result.failed]}
