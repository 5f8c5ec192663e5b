"""Hashing a large file's bytes while later ones still arrive (docs/algorithms.md §4.6).

A file with a published checksum is verified once all of it is on disk. Read back from byte 0
at that moment, 1 GiB costs about 0.7 s of hashing after the last byte came, while the
connections are already idle. ``HashAhead`` hashes the contiguous prefix of what is on disk (the
first done range, from byte 0) on a thread of its own as that prefix grows, so the verification
at the end reads only what came since the last step.

Bytes are hashed only once they are settled: written and journalled (``FileState.record``), in
a range no other request writes again (a range cut for a helper stops at the cut). A file that
starts over (``FileState.forget``) drops its ``HashAhead``; one fetched as a single stream from a
server that ignores Range (whose retry writes from byte 0 again) never has one. The job reads a
duplicate of the part file's descriptor, so a file closed meanwhile costs the job only.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

from dtune import checksums
from dtune.engine.ranges import RangeSet
from dtune.fileio import HASH_BLOCK

STEP = 8 << 20        # new prefix bytes that make a job worth its thread hop
JOB_MOST = 256 << 20  # the most one job hashes, so that exit never waits long for one

_pool: ThreadPoolExecutor | None = None


def _executor() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dtune-hash")
    return _pool


class HashAhead:
    """The running digest of one part file's first ``offset`` bytes."""

    __slots__ = ("algo", "offset", "asked", "_hash", "_lock")

    def __init__(self, algo: str) -> None:
        self.algo = algo
        self.offset = 0       # bytes hashed
        self.asked = 0        # bytes a job was asked to reach
        self._hash = checksums.hasher(algo)
        self._lock = threading.Lock()

    def poke(self, fd: int, done: RangeSet) -> None:
        """``done`` grew: hash its prefix from byte 0 on the pool once that grew by ``STEP``. Cheap."""
        first = done.first()
        prefix = first[1] if first is not None and first[0] == 0 else 0
        if prefix - self.asked < STEP or fd < 0:
            return
        upto = min(prefix, self.asked + JOB_MOST)
        self.asked = upto
        try:
            dup = os.dup(fd)
        except OSError:
            return
        _executor().submit(self._job, dup, upto)

    def _job(self, fd: int, upto: int) -> None:
        try:
            self.advance(fd, upto)
        except OSError:
            pass  # (the final verification reads what is missing itself)
        finally:
            os.close(fd)

    def advance(self, fd: int, upto: int | None) -> None:
        """Hash from ``offset`` to ``upto`` (None: the end of the file). Blocking."""
        with self._lock:
            offset = self.offset
            while upto is None or offset < upto:
                want = HASH_BLOCK if upto is None else min(HASH_BLOCK, upto - offset)
                block = os.pread(fd, want, offset)
                if not block:
                    break
                self._hash.update(block)
                offset += len(block)
                self.offset = offset

    def digest(self, fd: int) -> str:
        """The hex digest of the whole part file: what is left is read now (after any job). Blocking."""
        self.advance(fd, None)
        return self._hash.hexdigest()
