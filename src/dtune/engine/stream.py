"""One file written to a descriptor in order while its ranges arrive out of order (``dtune get -o -``).

Theory of operation
-------------------
The engine fetches the file as it fetches any other: ranges on several
connections, each written with ``pwrite`` into a part file (here in a private
temporary directory). Two things differ:

* **The window.** The scheduler hands out ranges only within
  ``[delivered, delivered + stream_window)`` (``Scheduler.horizon``), each at
  most ``stream_window / (2 · lanes · range_pipeline)``, so that every lane
  keeps two ranges in flight inside it. Connections run ahead of the reader by
  at most the window; a slow reader (``| tar x`` onto a slow disk) holds the
  transfer back, as a pipe should.
* **The writer.** A thread of its own (``Stream``) writes the contiguous
  prefix of what is on disk (``prefix``: the first done range, from byte 0) to
  the descriptor as it grows, hashes it when a checksum is published, and
  punches the bytes it wrote out of the part file (``fileio.punch_hole``), so
  the temporary file holds about a window, not the file. Each step moves the
  window (the lanes are woken).

The file is verified by what was written: its size, and its checksum when one
is published (``StreamedFile.verify`` waits for the writer's last byte). Bytes
already written cannot be taken back: a failed verification fails the file
and says how many bytes went out. The reader going away (EPIPE) stops the
transfer (``StreamClosed``). A server that ignores Range sends the whole file
on one connection: that one is not held by the window.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from dtune import checksums
from dtune.engine.files import FileState
from dtune.engine.ranges import RangeSet
from dtune.fileio import disk_error, open_nofollow, punch_hole
from dtune.statedir import ensure

CHUNK = 4 << 20   # bytes the writer reads and writes at a time: a pipe takes them in 64 KiB steps anyway


class StreamClosed(Exception):
    """The stream's reader went away (EPIPE): the transfer stops; nothing is wrong with the file."""


class _WriteFailed(Exception):
    """Writing to the stream's descriptor failed (not EPIPE): a full disk behind ``>``, a bad fd."""


# ---- pure: what may be written, what may be asked for ------------------------------------------
def prefix(done: RangeSet, size: int | None) -> int:
    """Bytes from 0 that are on disk without a gap (all of a file of ``size`` 0)."""
    if size == 0:
        return 0
    first = done.first()
    return first[1] if first is not None and first[0] == 0 else 0


def window_range(start: int, size: int, horizon: int | None) -> int:
    """The size of the range at ``start`` that the window allows: ``size`` cut at ``horizon``
    (0: none may start there now)."""
    if horizon is None:
        return size
    return max(0, min(size, horizon - start))


def window_share(window: int, lanes: int, range_pipeline: int, least: int) -> int:
    """The largest range inside a window of ``window`` bytes that lets ``lanes`` lanes each keep
    ``range_pipeline`` ranges in flight (at least ``least``)."""
    return max(least, window // (2 * max(1, lanes) * max(1, range_pipeline)))


# ---- the writer --------------------------------------------------------------------------------
class Stream:
    """Writes a file's bytes to ``out`` (a descriptor) in order from a thread of its own.

    The loop side says how far the file is on disk (``offer``); the writer writes up to there
    and calls ``advanced()`` (from its thread) each time it wrote. ``window`` is the most the
    engine may fetch ahead of what was written (``horizon``).
    """

    def __init__(self, out: int, window: int) -> None:
        self.out = out
        self.window = window
        self.delivered = 0                 # bytes written to ``out`` (read anywhere; set by the writer)
        self.error: str | None = None      # why the stream stopped short (a write error)
        self.closed = False                # the reader went away (EPIPE)
        self.advanced: Callable[[], None] = lambda: None
        self._cond = threading.Condition()
        self._ready = 0                    # bytes on disk from 0 (``offer``)
        self._size: int | None = None
        self._path: str | None = None
        self._hash = None
        self._stop = False
        self._finished = threading.Event()  # the writer ended: every byte written, or it stopped
        self._thread: threading.Thread | None = None

    @property
    def horizon(self) -> int:
        """The first byte the engine may not ask for yet."""
        return self.delivered + self.window

    def start(self, f: FileState) -> None:
        """Start writing ``f`` (its part file, its checksum's algorithm when it has one)."""
        self._path = f.part_path
        if f.checksum is not None and checksums.available(f.checksum.algo):
            self._hash = checksums.hasher(f.checksum.algo)
        self._thread = threading.Thread(target=self._run, name="dtune-stream", daemon=True)
        self._thread.start()

    def offer(self, ready: int, size: int | None) -> None:
        """``ready`` bytes from 0 are on disk; the file has ``size`` bytes (None: not known yet)."""
        with self._cond:
            if ready > self._ready or size != self._size:
                self._ready = max(self._ready, ready)
                self._size = size
                self._cond.notify()

    def stop(self, why: str | None = None) -> None:
        """Stop writing (the transfer ends or the file changed); ``why`` is kept as the error."""
        with self._cond:
            if why is not None and self.error is None:
                self.error = why
            self._stop = True
            self._cond.notify()
        # (a writer blocked on a reader that does not read may never see the stop: nobody waits for it)
        self._finished.set()

    @property
    def ended(self) -> bool:
        """The writer ended: every byte written, or it stopped (``error``, ``closed``)."""
        return self._finished.is_set()

    def digest(self) -> str | None:
        """The hex digest of what was written (when the file has a checksum dtune can compute)."""
        return self._hash.hexdigest() if self._hash is not None else None

    def wait(self) -> None:
        """Until the writer ended. Blocking (the commit's worker thread)."""
        self._finished.wait()

    def verdict(self, f: FileState) -> str | None:
        """None when every byte of ``f`` was written and is right, else why not. Blocking."""
        self.wait()
        written = f"{self.delivered} bytes were already written to standard output"
        if self.closed:
            return f"standard output was closed by its reader after {self.delivered} bytes"
        if self.error is not None:
            return f"{self.error} ({written})"
        if f.size is not None and self.delivered != f.size:
            return f"size mismatch: expected {f.size} bytes, wrote {self.delivered}"
        want = f.checksum
        if want is not None:
            name = checksums.spelled(want.algo)
            got = self.digest()
            if got is None:
                return (f"{name} checksum from {want.source} cannot be checked: {checksums.MISSING_CRC32C} "
                        f"({written})")
            if got != want.hex:
                return f"{name} mismatch: expected {want.hex} (from {want.source}), got {got} ({written})"
        return None

    # ---- the writer's thread -------------------------------------------------------------
    def _run(self) -> None:
        fd = -1
        try:
            while True:
                with self._cond:
                    while not self._stop and self._ready <= self.delivered and not self._done():
                        self._cond.wait()
                    if self._stop or self._done():
                        return
                    start, end = self.delivered, min(self._ready, self.delivered + CHUNK)
                if fd < 0:  # (read and write: punching a hole is a write)
                    fd = open_nofollow(self._path, os.O_RDWR)
                self._write(fd, start, end)
        except StreamClosed:
            self.closed = True
        except _WriteFailed as exc:
            self.error = f"standard output: {exc.args[0]}"
        except OSError as exc:  # reading the part file
            self.error = str(disk_error(self._path or "", exc))
        finally:
            if fd >= 0:
                os.close(fd)
            self._finished.set()
            self._tell()

    def _tell(self) -> None:
        """``advanced()``, unless the loop it wakes has ended (a writer that was blocked on its reader
        while the transfer was stopped)."""
        try:
            self.advanced()
        except RuntimeError:  # (the event loop is closed)
            pass

    def _done(self) -> bool:
        return self._size is not None and self.delivered >= self._size

    def _write(self, fd: int, start: int, end: int) -> None:
        data = os.pread(fd, end - start, start)
        if len(data) != end - start:
            raise OSError(0, f"the part file is short at byte {start + len(data)}")
        view = memoryview(data)
        while view:
            try:
                n = os.write(self.out, view)
            except BrokenPipeError:
                raise StreamClosed() from None
            except OSError as exc:
                raise _WriteFailed(exc.strerror or str(exc)) from None
            view = view[n:]
        if self._hash is not None:
            self._hash.update(data)
        punch_hole(fd, start, end - start)  # (where it cannot: the temporary file keeps them)
        self.delivered = end
        self._tell()


class StreamedFile(FileState):
    """The file of a stream: a part file without journal or preallocation (the run cannot be resumed:
    what was written is gone), verified by what ``stream`` wrote, removed rather than renamed."""

    stream: Stream

    def open_for_write(self) -> None:
        if self.fd >= 0:
            return
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | (os.O_TRUNC if not self.done else 0)
        try:
            ensure(self.place.root)
            self.fd = open_nofollow(self.part_path, flags)
        except OSError as exc:
            raise disk_error(self.part_path, exc) from None

    def verify(self) -> str | None:
        if self.fd < 0:
            self.open_for_write()  # (the fsync that follows wants a descriptor)
        return self.stream.verdict(self)

    def finish(self) -> str | None:
        self.remove_working_files()
        return None
