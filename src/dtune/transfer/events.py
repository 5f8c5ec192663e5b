"""The events a transfer emits, as plain dicts: what ``dtune get --json`` prints and what
``dtune.get(progress=...)`` receives. Built here once for every front end.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from dtune.accounting import Snapshot
from dtune.engine.result import TransferResult

EventSink = Callable[[dict], None]


def summary_fields(result: TransferResult, seconds: float) -> dict:
    snap = result.snapshot
    moved = snap.bytes if snap else 0
    done = sum(1 for f in result.files if f.status == "done")
    skipped = sum(1 for f in result.files if f.status == "skipped")  # in place, its checksum hashed
    kept = sum(1 for f in result.files if f.status == "kept")  # in place, its size (and mtime) only
    origins = {}
    if snap is not None:
        for origin, view in snap.origins.items():
            origins[origin] = {"bytes": view.bytes, "requests": view.requests,
                               "mean_request": round(view.bytes / view.requests) if view.requests else 0,
                               "share": round(view.bytes / moved, 4) if moved else 0.0}
    used = sum(1 for v in origins.values() if v["share"] >= 0.01)
    by_checksum: dict[str, int] = {}
    for f in result.files:
        if f.status in ("done", "skipped") and f.checksum is not None:
            by_checksum[f.checksum] = by_checksum.get(f.checksum, 0) + 1
    checked = sum(by_checksum.values())
    return {"origins": origins,
            "replica_utilisation": round(used / len(origins), 3) if origins else None,
            # verified: fetched and checked now, or in place and hashed against a published
            # checksum (--verify-existing); kept: in place, judged by size (and mtime) unread;
            # skipped: nothing fetched (verified in place, or kept)
            "files_total": len(result.files), "files_verified": done + skipped, "files_kept": kept,
            "files_skipped": skipped + kept, "files_failed": len(result.failed), "bytes": moved,
            # of the verified files: how many a published checksum verified (and which), how many
            # only their size
            "files_by_checksum": checked, "files_by_size": done + skipped - checked,
            "checksums": dict(sorted(by_checksum.items())),
            "bytes_resumed": snap.bytes_resumed if snap else 0, "seconds": round(seconds, 3),
            "mbps": round(moved * 8 / 1e6 / seconds, 3) if seconds > 0 else 0.0,
            "retries": snap.retries if snap else 0,
            # each replica a file stopped using, and why (the file came whole from the others, or
            # failed when none was left); expired links renewed from the original URLs
            "replicas_dropped": [{"file": f.relpath, **d} for f in result.files for d in f.dropped],
            "links_renewed": sum(f.renewed for f in result.files),
            "energy": result.energy,
            **({"nodes": result.nodes} if result.nodes is not None else {})}


def progress_event(snap: Snapshot) -> dict:
    """The ``progress`` event of ``--json`` (and of ``dtune.get(progress=...)``), from a snapshot."""
    return {"event": "progress", "t": round(snap.elapsed, 3), "bytes": snap.bytes,
            "bytes_resumed": snap.bytes_resumed, "bytes_total": snap.bytes_total,
            "rate_mbps": round(snap.mbps, 3), "eta": None if snap.eta is None else round(snap.eta, 1),
            "files_done": snap.files_done + snap.files_skipped, "files_total": snap.files_total,
            "files_failed": snap.files_failed, "retries": snap.retries,
            "connections": snap.connections,
            "rtt_ms": None if snap.rtt is None else round(snap.rtt * 1000, 2),
            "partitions": {k: {"bytes": v.bytes, "rate_mbps": round(v.rate * 8 / 1e6, 3),
                               "eta": v.eta, "lanes": v.lanes, "params": v.params.as_dict()}
                           for k, v in snap.partitions.items()},
            "origins": {k: {"bytes": v.bytes, "requests": v.requests,
                            "rate_mbps": round(v.rate * 8 / 1e6, 3)}
                        for k, v in snap.origins.items()}}


def summary_event(result: TransferResult, seconds: float) -> dict:
    """The last event of a transfer: ``summary_fields`` and the failed files with their reasons."""
    return {"event": "summary", **summary_fields(result, seconds),
            "failed": [{"file": f.relpath, "reason": f.error} for f in result.failed]}


class Clock:
    """When a transfer started (wall clock, for the history) and how long it has run (monotonic)."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.started_at = time.time()

    def elapsed(self) -> float:
        return time.monotonic() - self.start
