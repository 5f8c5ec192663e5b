"""Resume journal: an append-only record of the byte ranges already on disk.

Next to ``NAME.dtune-part`` (the data, written with ``os.pwrite``) lives
``NAME.dtune-journal``:

    dtune-journal 1 {"url": ..., "size": ..., "checksum": "sha256:…", "etag": ...}\\n
    R <start> <end>\\n
    R <start> <end>\\n
    ...

A line is appended only after the bytes it names were written to the part
file, so after a crash (SIGKILL, exception) the journal never claims bytes
that are not there; at worst it lacks the last ones, which are fetched
again. A torn last line (no newline) is ignored. The header identifies the
file (URL, size, published checksum as ``ALGO:HEX``, validator); if the size, checksum or
validator no longer matches, the journal and part file are discarded and the file starts over.
Journals of older dtune versions carry ``"sha256": HEX`` instead of ``checksum``; they are read
the same way.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from dtune.checksums import Checksum
from dtune.engine.ranges import RangeSet
from dtune.fileio import open_nofollow

MAGIC = "dtune-journal 1 "
PART_SUFFIX = ".dtune-part"
JOURNAL_SUFFIX = ".dtune-journal"


@dataclass(slots=True)
class JournalState:
    header: dict
    done: RangeSet


def parse_journal(data: bytes) -> JournalState | None:
    """Replay a journal's bytes; None when it is not a readable journal."""
    lines = data.split(b"\n")
    if len(lines) < 2:  # header without its newline: torn at creation
        return None
    try:
        head = lines[0].decode("utf-8")
        if not head.startswith(MAGIC):
            return None
        header = json.loads(head[len(MAGIC):])
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(header, dict):
        return None
    done = RangeSet()
    for line in lines[1:-1]:  # the piece after the last newline is torn or empty
        parts = line.split()
        if len(parts) != 3 or parts[0] != b"R":
            continue
        try:
            start, end = int(parts[1]), int(parts[2])
        except ValueError:
            continue
        if 0 <= start < end:
            done.add(start, end)
    return JournalState(header, done)


def recorded_checksum(header: dict) -> tuple[str, str] | None:
    """``(algo, hex)`` a journal header recorded: ``"checksum": "ALGO:HEX"``, or an older dtune's
    ``"sha256": HEX``; None when it recorded none (or something unreadable)."""
    text = header.get("checksum")
    if isinstance(text, str):
        algo, _, digest = text.partition(":")
        return algo, digest.lower()
    old = header.get("sha256")
    return ("sha256", old.lower()) if isinstance(old, str) else None


def header_matches(header: dict, *, url: str, size: int | None, checksum: Checksum | None) -> bool:
    """Can a journal written with ``header`` be trusted for this file now?

    A checksum of the same algorithm with another digest means other content
    was announced; one of another algorithm cannot be compared (the final
    verification still checks the bytes).
    """
    if size is not None and header.get("size") not in (None, size):
        return False
    recorded = recorded_checksum(header)
    if checksum is not None and recorded is not None and recorded[0] == checksum.algo \
            and recorded[1] != checksum.hex:
        return False
    return header.get("size") is not None  # without a size the journal says nothing safe


class Journal:
    """Appends finished ranges for one part file."""

    def __init__(self, path: str, header: dict, *, fresh: bool) -> None:
        self.path = path
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (os.O_TRUNC if fresh else 0)
        self._fd = open_nofollow(path, flags)
        if fresh:
            self.write_header(header)

    def write_header(self, header: dict) -> None:
        os.write(self._fd, (MAGIC + json.dumps(header, sort_keys=True) + "\n").encode())

    def record(self, start: int, end: int) -> None:
        os.write(self._fd, b"R %d %d\n" % (start, end))

    def sync(self) -> None:
        fd = self._fd  # (read once: another thread may close the journal meanwhile)
        if fd >= 0:
            os.fdatasync(fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def read_journal(path: str) -> JournalState | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)  # a symlink is not our journal
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        try:
            return parse_journal(fh.read(64 << 20))
        except OSError:
            return None
