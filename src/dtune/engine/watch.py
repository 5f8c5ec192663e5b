"""What the engine's tick keeps about each lane's connection, and the errors it closes one with.

A ``Watch`` is the lane's record of the connection it holds (``Lane.watch``):
the bytes it had received at the last tick (has its origin sent anything
since?) and the start of the speed-floor window. It belongs to the engine,
not to the connection: ``http.connection`` knows bytes and clocks of HTTP
(``bytes_in``, ``last_activity``, ``head_started``, ``resumed_at``), nothing
of ticks or floors. A lane that holds another connection gets a new record
(``watch``).
"""

from __future__ import annotations

from typing import Any

from dtune.engine.state import Lane
from dtune.errors import HTTPError


class StallError(HTTPError):
    """No byte arrived on a busy connection for ``stall_timeout`` seconds."""

    network = True


class HeadTimeout(HTTPError):
    """A response's status line and headers took longer than ``header_timeout`` seconds."""


class TooSlow(HTTPError):
    """A busy connection received less than ``speed_limit`` bytes/s over ``speed_time`` seconds.

    The bytes it did bring are kept, but they are no progress: the file's failures keep counting
    (``progress = False``), so a file that only ever trickles fails after ``retries`` windows."""

    progress = False


class Watch:
    """The tick's record of one connection of a lane."""

    __slots__ = ("conn", "seen_bytes", "floor_mark")

    def __init__(self, conn: Any) -> None:
        self.conn = conn                 # the connection watched (http.connection.Connection)
        self.seen_bytes = 0              # its bytes_in at the last tick
        self.floor_mark: tuple[float, int] | None = None  # (time, bytes_in): the speed-floor window

    def floor_start(self) -> tuple[float, int] | None:
        """The speed-floor window's start, None when it starts again: none yet, or the connection
        resumed reading since (the time it was paused was the reader's, not the path's)."""
        mark = self.floor_mark
        if mark is None:
            return None
        resumed = self.conn.resumed_at
        return None if resumed is not None and resumed >= mark[0] else mark


def watch(lane: Lane) -> Watch:
    """The record of the connection ``lane`` holds now (``lane.conn``, not None)."""
    w = lane.watch
    if w is None or w.conn is not lane.conn:
        w = lane.watch = Watch(lane.conn)
    return w
