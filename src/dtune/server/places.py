"""Who is served when every place is taken: places, connections waiting for one, reclaiming (no I/O).

Theory of operation
-------------------
``max_connections`` connections hold a **place**: they are read and answered.
A connection that arrives when every place is taken — or while others wait —
is not refused at once: it **waits** (at most ``max_waiting`` of them; when
that many wait, the one that has waited longest is dropped for the
newcomer). What it sends is read and parsed as usual, but nothing is
answered. When its first request is complete it asks for a place (``claim``):

1. a place is free (a holder left meanwhile): it takes it;
2. else the holder that has gone longest without a request in progress —
   idle since its last answer, silent since it connected, or inside a head
   that began long ago — gives up its place, if it has gone at least
   ``reclaim_after`` seconds;
3. else it is answered 503 (``Retry-After: 1``) and closed.

A connection that never completes a request (slowloris) therefore holds a
place only until a complete request needs one, and never takes one itself:
however many of them an attacker keeps open, a real request gets a place as
soon as its head has arrived. While connections wait, a place that is freed
goes to the next complete request, not to the next connection (which may be
one more slow one). ``reclaim_after`` keeps a burst of new connections from
closing places that are about to be used (a client sends its next request
within a round trip of connecting or of its last answer).

``Places`` decides and returns the connections to close; the server closes
them. A holder says since when it has been unused through ``unused_since()``.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, Protocol, TypeVar


class Holder(Protocol):
    """What ``Places`` asks of a connection."""

    def unused_since(self) -> float | None:
        """When the connection last had nothing to do (a clock value), None while a request is in progress."""


C = TypeVar("C", bound=Holder)


class Places(Generic[C]):
    """``limit`` places, at most ``max_waiting`` connections waiting for one (see the module docstring)."""

    def __init__(self, *, limit: int, max_waiting: int, reclaim_after: float) -> None:
        if limit < 1 or max_waiting < 1:
            raise ValueError("a server needs at least one place and room for one waiting connection")
        self.limit = limit
        self.max_waiting = max_waiting
        self.reclaim_after = reclaim_after
        self.served: set[C] = set()
        self.waiting: OrderedDict[C, None] = OrderedDict()  # oldest first
        self.reclaimed = 0  # places given to a newcomer
        self.dropped = 0  # waiting connections dropped for a newer one

    def __repr__(self) -> str:
        return (f"<Places {len(self.served)}/{self.limit} served, {len(self.waiting)}/{self.max_waiting} waiting, "
                f"{self.reclaimed} reclaimed, {self.dropped} dropped>")

    def arrive(self, conn: C) -> tuple[bool, C | None]:
        """A new connection: ``(True, None)`` it holds a place; ``(False, dropped)`` it waits, and
        ``dropped`` (when not None) is the waiting connection that made room for it: close that one.
        """
        if len(self.served) < self.limit and not self.waiting:
            self.served.add(conn)
            return True, None
        dropped = None
        if len(self.waiting) >= self.max_waiting:
            dropped, _ = self.waiting.popitem(last=False)
            self.dropped += 1
        self.waiting[conn] = None
        return False, dropped

    def claim(self, conn: C, now: float) -> tuple[bool, C | None]:
        """A waiting connection's first request is complete: ``(True, None)`` a free place is its own,
        ``(True, old)`` it takes ``old``'s place (close ``old``), ``(False, None)`` no place: answer 503.

        A connection that already holds a place keeps it: ``(True, None)``.
        """
        if conn in self.served:
            return True, None
        self.waiting.pop(conn, None)
        if len(self.served) < self.limit:
            self.served.add(conn)
            return True, None
        old = self.longest_unused(now)
        if old is None:
            return False, None
        self.served.discard(old)
        self.served.add(conn)
        self.reclaimed += 1
        return True, old

    def longest_unused(self, now: float) -> C | None:
        """The holder unused for longest, if for at least ``reclaim_after`` seconds at ``now``."""
        best: C | None = None
        best_since = now - self.reclaim_after
        for conn in self.served:
            since = conn.unused_since()
            if since is not None and since <= best_since:
                best, best_since = conn, since
        return best

    def leave(self, conn: C) -> None:
        """A connection is gone (held a place, waited, or was given up already)."""
        if conn in self.served:
            self.served.discard(conn)
        else:
            self.waiting.pop(conn, None)

    def all(self) -> list[C]:
        """Every connection known, served and waiting (for the sweeper and for the stop)."""
        return [*self.served, *self.waiting]
