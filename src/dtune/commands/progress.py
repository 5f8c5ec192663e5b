"""What the user sees: NDJSON events (``--json``), a live bar on a TTY, the summary.

Only this module draws; it reads ``Snapshot``s and engine events.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import TYPE_CHECKING, TextIO

from dtune.accounting import Snapshot
from dtune.engine.result import TransferResult

if TYPE_CHECKING:
    from rich.progress import Progress


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


class JsonReporter:
    """One JSON object per line on stdout.

    When the reader goes away (``dtune get --json | head``) or stdout fails, the
    events stop, one line on stderr says so, and the transfer goes on to its end
    and its own exit status: the events describe the transfer, they are not its data.
    """

    def __init__(self, out: TextIO = sys.stdout) -> None:
        self.out = out
        self.closed = False

    def event(self, event: dict) -> None:
        if self.closed:
            return
        try:
            self.out.write(json.dumps(event, default=str) + "\n")
            self.out.flush()
        except (OSError, ValueError) as exc:  # EPIPE, a full disk; ValueError: a closed file
            self.closed = True
            why = "was closed" if isinstance(exc, (BrokenPipeError, ValueError)) else f"failed ({exc})"
            print(f"dtune: stdout {why}: the --json events stop here; the transfer goes on",
                  file=sys.stderr)
            self._silence()

    def _silence(self) -> None:
        """Point stdout at /dev/null, so that nothing buffered fails again at exit."""
        try:
            fd = self.out.fileno()
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, fd)
            os.close(null)
        except (OSError, ValueError):
            pass

    def progress(self, snap: Snapshot) -> None:
        self.event(progress_event(snap))

    def summary(self, result: TransferResult, seconds: float) -> None:
        self.event(summary_event(result, seconds))

    def dry_run(self, result: TransferResult) -> None:
        """--dry-run's last event (each file had its ``dry_run`` event): the totals."""
        from dtune.dryrun import totals
        self.event({"event": "summary", "dry_run": True, **totals(result.files),
                    "failed": [{"file": f.relpath, "reason": f.error} for f in result.failed]})


class ConsoleReporter:
    """Progress bar on a TTY (plain lines otherwise) and one-line warnings on stderr."""

    def __init__(self, *, show_bar: bool) -> None:
        self.bar: Progress | None = None
        self._task = None
        if show_bar:  # rich (~30 ms to import) only for a bar on a terminal
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
                TransferSpeedColumn,
            )
            self.bar = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(), DownloadColumn(binary_units=True),
                TransferSpeedColumn(), TimeRemainingColumn(), TextColumn("{task.fields[files]}"),
                console=Console(stderr=True, highlight=False), transient=True, refresh_per_second=4)
            self.bar.start()
            self._task = self.bar.add_task("dtune", total=None, files="")

    def event(self, event: dict) -> None:
        # Failed files are listed once, at the end; warnings and notes as they happen.
        # Plain print, not rich: a line must never be wrapped (logs are grepped).
        kind = event.get("event")
        if kind == "warning":
            self._line(f"dtune: {event.get('reason')}")
        elif kind == "retry" and event.get("attempt", 0) == 0:
            self._line(f"dtune: note: {event.get('reason')}")
        elif kind == "knob" and not event.get("applied"):
            self._line(f"dtune: note: {event.get('knob')} not applied: {event.get('reason')}")

    def _line(self, text: str) -> None:
        text = " ".join(str(text).split())  # one line, whatever the reason contained
        if self.bar is not None:
            self.bar.console.print(text, markup=False, highlight=False, soft_wrap=True)
        else:
            print(text, file=sys.stderr, flush=True)

    def progress(self, snap: Snapshot) -> None:
        if self.bar is None:
            return
        done = snap.bytes + snap.bytes_resumed
        files = f"{snap.files_done + snap.files_skipped}/{snap.files_total} files"
        self.bar.update(self._task, completed=done, total=snap.bytes_total, files=files)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None

    def summary(self, result: TransferResult, seconds: float) -> None:
        self.close()
        s = summary_fields(result, seconds)
        line = (f"{s['files_verified']} of {s['files_total']} files verified "
                f"({s['files_skipped']} already complete), {human_bytes(s['bytes'])} in "
                f"{s['seconds']:.2f} s = {s['mbps']:.1f} Mbit/s, {s['retries']} retries")
        if s["files_verified"]:
            line += f"; {s['files_by_checksum']} checked by checksum, {s['files_by_size']} by size only"
        print(line, flush=True)
        if len(s["origins"]) > 1:
            for origin, v in s["origins"].items():
                print(f"  {origin}: {human_bytes(v['bytes'])} ({v['share'] * 100:.1f} %) in "
                      f"{v['requests']} requests of {human_bytes(v['mean_request'])} on average")
            print(f"  replica utilisation: {s['replica_utilisation'] * 100:.0f} % of replicas served "
                  f"≥ 1 % of the bytes", flush=True)
        for f in result.failed:
            self._line(f"dtune: failed: {f.error or f.relpath}")

    def dry_run(self, result: TransferResult) -> None:
        """--dry-run's listing, on stdout: it is what the command was asked for."""
        from dtune.dryrun import listing
        self.close()
        print("\n".join(listing(result.files)), flush=True)


def summary_fields(result: TransferResult, seconds: float) -> dict:
    snap = result.snapshot
    moved = snap.bytes if snap else 0
    done = sum(1 for f in result.files if f.status == "done")
    skipped = sum(1 for f in result.files if f.status == "skipped")
    origins = {}
    if snap is not None:
        for origin, view in snap.origins.items():
            origins[origin] = {"bytes": view.bytes, "requests": view.requests,
                               "mean_request": round(view.bytes / view.requests) if view.requests else 0,
                               "share": round(view.bytes / moved, 4) if moved else 0.0}
    used = sum(1 for v in origins.values() if v["share"] >= 0.01)
    by_checksum: dict[str, int] = {}
    for f in result.files:
        if f.status != "failed" and f.checksum is not None:
            by_checksum[f.checksum] = by_checksum.get(f.checksum, 0) + 1
    checked = sum(by_checksum.values())
    return {"origins": origins,
            "replica_utilisation": round(used / len(origins), 3) if origins else None,
            "files_total": len(result.files), "files_verified": done + skipped,
            "files_skipped": skipped, "files_failed": len(result.failed), "bytes": moved,
            # of the verified files: how many a published checksum verified (and which), how many
            # only their size
            "files_by_checksum": checked, "files_by_size": done + skipped - checked,
            "checksums": dict(sorted(by_checksum.items())),
            "bytes_resumed": snap.bytes_resumed if snap else 0, "seconds": round(seconds, 3),
            "mbps": round(moved * 8 / 1e6 / seconds, 3) if seconds > 0 else 0.0,
            "retries": snap.retries if snap else 0,
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
    def __init__(self) -> None:
        self.start = time.monotonic()
        self.started_at = time.time()

    def elapsed(self) -> float:
        return time.monotonic() - self.start
