"""What the user of ``dtune get`` sees: NDJSON events (``--json``), a live bar on a TTY, the summary.

Only this module draws; it reads ``Snapshot``s and the transfer's events
(``dtune.transfer.events``), the summary last.
"""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, TextIO

from dtune.accounting import Snapshot
from dtune.engine.result import TransferResult
from dtune.transfer.dryrun import listing
from dtune.transfer.events import progress_event
from dtune.units import human_bytes

if TYPE_CHECKING:
    from rich.progress import Progress


class JsonReporter:
    """One JSON object per line on stdout (on stderr when stdout carries the file of ``-o -``).

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
            where = "stderr" if self.out is sys.stderr else "stdout"  # (stderr: -o - holds stdout)
            print(f"dtune: {where} {why}: the --json events stop here; the transfer goes on",
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

    def finish(self, result: TransferResult) -> None:
        """Nothing more: the summary was the last event."""


class ConsoleReporter:
    """Progress bar on a TTY (plain lines otherwise) and one-line warnings on stderr."""

    def __init__(self, *, show_bar: bool, out: TextIO | None = None) -> None:
        self.out = out  # where the summary goes (None: stdout; stderr when stdout carries a stream)
        self.bar: Progress | None = None
        self._task = None
        if show_bar:  # rich (~30 ms to import) only for a bar on a terminal
            from rich.console import Console  # (rich: ~30 ms, only for a bar)
            from rich.progress import (  # (rich: ~30 ms, only for a bar)
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

    def finish(self, result: TransferResult) -> None:
        """The summary line (the dry run's listing), from the result's summary event."""
        self.close()
        if result.dry_run:  # the listing, on stdout: it is what the command was asked for
            print("\n".join(listing(result.files)), flush=True)
            return
        s = result.summary
        in_place = s["files_skipped"] - s.get("files_kept", 0)
        line = (f"{s['files_verified']} of {s['files_total']} files verified"
                + (f" ({in_place} already in place, checksum matched)" if in_place else "")
                + (f", {s['files_kept']} kept unread (already in place, not verified)" if s.get("files_kept") else "")
                + f", {human_bytes(s['bytes'])} in {s['seconds']:.2f} s = {s['mbps']:.1f} Mbit/s, "
                f"{s['retries']} retries")
        if s["files_verified"]:
            line += f"; {s['files_by_checksum']} checked by checksum, {s['files_by_size']} by size only"
        print(line, file=self.out or sys.stdout, flush=True)
        if len(s["origins"]) > 1:
            for origin, v in s["origins"].items():
                print(f"  {origin}: {human_bytes(v['bytes'])} ({v['share'] * 100:.1f} %) in "
                      f"{v['requests']} requests of {human_bytes(v['mean_request'])} on average",
                      file=self.out or sys.stdout)
            print(f"  replica utilisation: {s['replica_utilisation'] * 100:.0f} % of replicas served "
                  f"≥ 1 % of the bytes", file=self.out or sys.stdout, flush=True)
        if s.get("links_renewed"):
            print(f"  {s['links_renewed']} expired links renewed from the original URLs",
                  file=self.out or sys.stdout, flush=True)
        for d in s.get("replicas_dropped", ()):
            self._line(f"dtune: replica dropped for {d['file']}: {d['url']}: {d['reason']}")
        for f in result.failed:
            self._line(f"dtune: failed: {f.error or f.relpath}")
