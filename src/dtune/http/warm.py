"""``WarmPool``: connections discovery opened, which the engine takes before opening its own.

A directory's listing is read over one connection while the files wait for
it: the round trip of every data connection's handshake would come after.
``Fetcher.warm`` opens a few connections to the directory's origin while the
listing is on its way, and ``Fetcher.hand_over`` gives the engine those, any
still opening, and discovery's own keep-alives (the HEAD of a one-file get,
the listing's connection). The engine's ``connect`` is ``WarmPool.connect``:
a warm connection to the origin if there is one, else a new one. What the
engine has not taken by the time it runs is closed (``close``): the engine's
per-origin cap counts only the connections it holds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from dtune.errors import HTTPError
from dtune.http.connection import Connection
from dtune.http.message import Origin

Connector = Callable[..., Awaitable[Connection]]  # (origin, *, timeout) -> a connected Connection


class WarmPool:
    """Open (or opening) connections per origin, handed out first by ``connect``."""

    def __init__(self, ready: dict[Origin, list[Connection]], opening: dict[Origin, list[asyncio.Task]],
                 connect: Connector) -> None:
        self._ready = ready
        self._opening = opening
        self._connect = connect
        self.taken = 0  # warm connections handed out (what the tests read)

    def __len__(self) -> int:
        return sum(len(v) for v in self._ready.values()) + sum(len(v) for v in self._opening.values())

    async def connect(self, origin: Origin, *, timeout: float) -> Connection:
        ready = self._ready.get(origin)
        while ready:
            conn = ready.pop()
            if conn.usable and not conn.in_flight:
                self.taken += 1
                return conn
            conn.close()
        opening = self._opening.get(origin)
        while opening:
            task = opening.pop()
            try:
                conn = await asyncio.shield(task)
            except (HTTPError, OSError):
                continue  # it did not open: the next, or a connection of the engine's own
            if conn.usable and not conn.in_flight:
                self.taken += 1
                return conn
            conn.close()
        return await self._connect(origin, timeout=timeout)

    def adopt(self, conns: dict[Origin, list[Connection]]) -> None:
        """Hand out these open connections too (the mirrors' RTT probes, ``netprobe.measure_rtt``):
        a mirror's first lanes then skip their handshake, a round trip of that mirror."""
        for origin, more in conns.items():
            self._ready.setdefault(origin, []).extend(more)
            more.clear()

    def close(self) -> None:
        """Close every connection not taken, and stop opening the rest."""
        for conns in self._ready.values():
            for conn in conns:
                conn.close()
        self._ready.clear()
        for tasks in self._opening.values():
            for task in tasks:
                if task.done():
                    if not task.cancelled() and task.exception() is None:
                        task.result().close()
                else:
                    task.cancel()
                    task.add_done_callback(_close_result)
        self._opening.clear()


def _close_result(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is None:
        task.result().close()
