"""What the engine keeps per origin: the connection cap, when each last sent bytes, outage probes.

``OriginGate`` holds ``max_per_origin`` whatever the parameters ask: a lane
that would open one connection too many waits (``admit`` says no and keeps
it), and every connection that closes, or never opened, wakes the waiting
lanes (``gone``). ``OutageProbe`` tells a path that is down from connections
that only look stalled: when an origin has sent nothing on any connection for
``outage_probe`` seconds, one new connection is tried (at most one probe at a
time, one every ``PROBE_INTERVAL``); if it goes through, the silent
connections are dropped so that their ranges are asked again at once, instead
of waiting for TCP's backed-off retransmission. ``quiet`` says how long an
origin has been silent, which the outcome table reads to tell an outage from
a fault of the file.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable

from dtune.engine.state import Lane
from dtune.engine.watch import StallError
from dtune.errors import HTTPError
from dtune.http.connection import Connection
from dtune.http.message import Origin

PROBE_INTERVAL = 2.0   # seconds between outage probes of one origin, and each probe's connect timeout


class OriginGate:
    """Connections open (or being opened) per origin, and the lanes waiting under the cap (0: none)."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.open: dict[Origin, int] = {}
        self.waiting: dict[Lane, Origin] = {}

    def admit(self, lane: Lane, origin: Origin) -> bool:
        """Count a new connection to ``origin``, or keep ``lane`` waiting when the cap is reached
        (the connection just closed counts until its socket is gone)."""
        if self.cap and self.open.get(origin, 0) >= self.cap:
            self.waiting[lane] = origin
            return False
        self.open[origin] = self.open.get(origin, 0) + 1
        return True

    def gone(self, origin: Origin) -> list[Lane]:
        """A connection to ``origin`` closed (or never opened): the waiting lanes, to wake."""
        self.open[origin] -= 1
        woken, self.waiting = list(self.waiting), {}
        return woken

    def wanted(self, origin: Origin) -> bool:
        """Does a lane wait for a connection to ``origin``?"""
        return origin in self.waiting.values()


class OutageProbe:
    """One probe connection per silent origin (see the module docstring)."""

    def __init__(self, connect: Callable[..., Awaitable[Connection]], clock: Callable[[], float],
                 outage_probe: float) -> None:
        self._open = connect
        self._clock = clock
        self.outage_probe = outage_probe
        self.alive: dict[Origin, float] = {}   # origin → when it last sent bytes (ticks, answers)
        self._probing: set[Origin] = set()
        self._after: dict[Origin, float] = {}
        self._tasks: set[asyncio.Task] = set()

    def probe(self, origin: Origin, silent: Iterable[Connection]) -> None:
        """Try a new connection to ``origin`` unless a probe is out or one went less than
        ``PROBE_INTERVAL`` ago; if it goes through, drop the ``silent`` connections."""
        if origin in self._probing or self._clock() < self._after.get(origin, 0.0):
            return
        self._probing.add(origin)
        self._after[origin] = self._clock() + PROBE_INTERVAL
        task = asyncio.create_task(self._probe(origin, list(silent)))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _probe(self, origin: Origin, silent: list[Connection]) -> None:
        try:
            conn = await self._open(origin, timeout=PROBE_INTERVAL)
        except HTTPError:
            return  # still down
        finally:
            self._probing.discard(origin)
        conn.close()
        now = self._clock()
        for c in silent:
            if c.usable and now - c.last_activity > self.outage_probe:
                error = StallError(f"{origin}: no data for {now - c.last_activity:.0f} s, and a new "
                                   f"connection went through")
                error.silence = now - c.last_activity  # type: ignore[attr-defined]  # an outage's
                c.close(error)

    def quiet(self, origin: Origin, now: float, exc: Exception) -> float | None:
        """Seconds ``origin`` has sent nothing on any connection, when ``exc`` is a network failure
        (no connection, a stall, a lost connection) and the origin did send bytes earlier in this
        transfer: an outage of the path or the server, not a fault of the file. None otherwise."""
        silence = getattr(exc, "silence", None)  # dropped by a probe: how long it was silent
        if silence is not None:
            return silence
        if not getattr(exc, "network", False):
            return None
        alive = self.alive.get(origin)
        return None if alive is None else now - alive

    def cancel(self) -> None:
        """Cancel the probes still out (the transfer ends)."""
        for task in list(self._tasks):
            task.cancel()
