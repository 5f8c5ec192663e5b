"""Small files held in memory until their commit: the event loop never touches their part file.

A file fetched in one request (not journaled: at most ``split_threshold``
bytes) and no larger than ``HOLD_FILE`` keeps its body in memory, as the
chunks arrived, until it is complete. The commit (a worker thread,
``commit.commit_batch``) then creates the part file, writes the chunks,
verifies, makes the batch durable and renames it into place.

Why: creating a file takes the directory's lock in the kernel, and the
worker renames and unlinks in the same directory while the loop creates;
on a loaded 2-core machine the loop waited there for the better part of its
time (the profile of ``scenarios/wan1g-small.toml`` in docs/benchmarks.md).
Nothing is lost that was not lost before: such a file has no journal, so a
transfer that stops starts it over either way.

All held bytes together stay under a budget (``HOLD_TOTAL``): a file that
would exceed it is written as it arrives, as a large file is.
"""

from __future__ import annotations

import threading
from typing import Protocol

from dtune.errors import DiskError
from dtune.fileio import disk_error, write_all


class FileState(Protocol):
    """What this module reads and sets of ``engine.files.FileState`` (not imported: it imports this)."""

    held: list[tuple[int, bytes]] | None
    held_size: int
    size: int | None
    journaled: bool
    piece: object
    fd: int
    done: object
    part_path: str

    def open_for_write(self) -> None: ...
    def close_files(self) -> None: ...

HOLD_FILE = 1 << 20      # files up to this size are held (they are fetched in one request)
HOLD_TOTAL = 64 << 20    # every held file's size together, in this process
HELD = -2                # a RangeJob's ``fd`` while its file is held (-1: none open yet)


class Budget:
    """The bytes reserved by held files (the loop takes, the commit's worker thread gives back)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._lock = threading.Lock()

    def take(self, n: int) -> bool:
        with self._lock:
            if self.used + n > self.limit:
                return False
            self.used += n
            return True

    def give(self, n: int) -> None:
        with self._lock:
            self.used = max(0, self.used - n)


BUDGET = Budget(HOLD_TOTAL)


def hold(f: FileState, budget: Budget | None = None) -> bool:
    """Start holding ``f``'s body in memory if it qualifies and fits; True when it is held."""
    if f.held is not None:
        return True
    size = f.size
    if (f.journaled or f.piece is not None or size is None or not 0 < size <= HOLD_FILE
            or f.fd >= 0 or f.done or not (budget or BUDGET).take(size)):
        return False
    f.held = []
    f.held_size = size
    return True


def drop(f: FileState, budget: Budget | None = None) -> None:
    """Forget ``f``'s held bytes (the file failed, restarted or is skipped) and free its budget."""
    if f.held is not None:
        f.held = None
        (budget or BUDGET).give(f.held_size)


def flush(f: FileState, budget: Budget | None = None) -> str | None:
    """Create ``f``'s part file and write its held chunks (blocking: the commit's worker thread).
    None when done (or nothing was held), else the reason."""
    chunks = f.held
    if chunks is None:
        return None
    drop(f, budget)
    try:
        f.open_for_write()
        for pos, data in chunks:
            write_all(f.fd, data, pos)
        return None
    except DiskError as exc:
        return str(exc)
    except OSError as exc:
        f.close_files()
        return str(disk_error(f.part_path, exc))
    finally:
        del chunks
