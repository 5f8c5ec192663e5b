"""Files split by byte range across shards: their part file, their journals, their commit.

Every piece of a file writes into the file's one part file on the shared file system
(``DIR/.dtune/parts/<key>.part``, ``dtune.statedir``) with pwrite, at its own offsets, and
journals its ranges in its own ``<key>.journal.TAG`` next to it (``TAG`` = ``START-END``;
``engine.files.FileState`` with a ``Piece``). Only the parent
creates the part file (at the file's size, before any shard starts: no worker truncates it)
and only the parent commits it, once every piece's journal covers its range: the whole file's
size and checksum are verified, it is made durable, renamed into place, and the piece journals
go. A rerun with the same pieces resumes each from its journal; a journal of other pieces
(another number of nodes) is dropped, and its bytes are fetched again.
"""

from __future__ import annotations

import glob
import os

from dtune import checksums
from dtune.dataset import FileSpec
from dtune.engine.journal import read_journal
from dtune.engine.ranges import RangeSet
from dtune.engine.result import FileResult
from dtune.fileio import digest_fd, open_nofollow
from dtune.statedir import Place, ensure


def tag(start: int, end: int) -> str:
    return f"{start}-{end}"


def prepare(place: Place, size: int, ranges: list[tuple[int, int]]) -> None:
    """Make the part file of a split file (kept when there: a rerun resumes into it) at ``size``
    bytes, and drop journals of pieces other than ``ranges``. Blocking; raises OSError, DiskError."""
    ensure(place.root)
    fd = open_nofollow(place.part, os.O_RDWR | os.O_CREAT)
    try:
        if os.fstat(fd).st_size != size:
            os.ftruncate(fd, size)
    finally:
        os.close(fd)
    keep = {place.piece_journal(tag(s, e)) for s, e in ranges}
    for path in glob.glob(glob.escape(place.journal) + ".*"):
        if path not in keep:
            os.unlink(path)


def missing(place: Place, ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The pieces whose journal does not cover their range (yet). Blocking."""
    out = []
    for s, e in ranges:
        state = read_journal(place.piece_journal(tag(s, e)))
        done = RangeSet(state.done) if state is not None and state.header.get("piece") == [s, e] else RangeSet()
        if not done.covers(s, e):
            out.append((s, e))
    return out


def commit(spec: FileSpec, place: Place, ranges: list[tuple[int, int]]) -> FileResult:
    """Verify, make durable and rename a split file whose pieces are all in. Blocking."""
    relpath, size = spec.relpath, spec.size
    gaps = missing(place, ranges)
    if gaps:
        s, e = gaps[0]
        return FileResult(relpath, "failed", size, f"{relpath}: bytes {s}-{e} not fetched (of {len(gaps)} "
                                                   f"unfinished piece(s)); the same command resumes them")
    part, final_path = place.part, place.final
    try:
        fd = open_nofollow(part, os.O_RDWR)
    except OSError as exc:
        return FileResult(relpath, "failed", size, f"{relpath}: {part}: {exc.strerror or exc}")
    try:
        actual = os.fstat(fd).st_size
        if actual != size:
            return _reject(spec, place, ranges, f"size mismatch: expected {size} bytes, have {actual}")
        if spec.checksum is not None:
            try:
                got = digest_fd(fd, spec.checksum.algo)
            except ImportError:
                return FileResult(relpath, "failed", size, f"{relpath}: {checksums.MISSING_CRC32C}; the bytes "
                                                           f"stay in {part}")
            if got != spec.checksum.hex:
                name = checksums.spelled(spec.checksum.algo)
                return _reject(spec, place, ranges, f"{name} mismatch: expected {spec.checksum.hex} "
                                                         f"(from {spec.checksum.source}), got {got}")
        os.fsync(fd)
    finally:
        os.close(fd)
    os.makedirs(os.path.dirname(final_path), exist_ok=True)
    os.replace(part, final_path)
    if spec.mtime:
        os.utime(final_path, (spec.mtime, spec.mtime))
    for s, e in ranges:
        try:
            os.unlink(place.piece_journal(tag(s, e)))
        except FileNotFoundError:
            pass
    return FileResult(relpath, "done", size, None, spec.checksum.label() if spec.checksum else None)


def _reject(spec: FileSpec, place: Place, ranges: list[tuple[int, int]], reason: str) -> FileResult:
    """Wrong bytes: the part file and every piece journal go (the rerun starts the file over)."""
    for path in [place.part] + [place.piece_journal(tag(s, e)) for s, e in ranges]:
        try:
            os.unlink(path)
        except OSError:
            pass
    return FileResult(spec.relpath, "failed", spec.size, f"{spec.relpath}: {reason}")
