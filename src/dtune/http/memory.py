"""In-memory connections: requests answered by a server coroutine on the same event loop.

Theory of operation
-------------------
As httpcore's mock backend: ``MemoryNetwork.connect`` has the signature of
``http.connection.open_connection`` (what ``Engine(connect=...)`` takes) and
returns a real ``Connection`` — the same httptools parser, the same
pipelining and error paths — whose transport is one end of an in-memory
pipe. The other end is given to a server coroutine ``handler(reader,
writer)`` with the ``asyncio.start_server`` signature, running on the same
loop with ordinary asyncio streams. So a scripted test server written for
sockets serves in memory unchanged, and engine tests need no socket.

Bytes written at one end reach the other end's protocol on the next loop
iteration, in order; ``write_eof`` is a FIN, ``close`` a FIN once the queued
bytes are delivered, ``abort`` a reset that both ends see at once. There is
no flow control: a writer is never paused (test files are small). A reader
can pause (``pause_reading``, as a rate limit does): what reaches it meanwhile
waits, in order, and is delivered on ``resume_reading``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

from dtune.errors import HTTPError
from dtune.http.connection import Connection
from dtune.http.message import Origin

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class _End(asyncio.Transport):
    """One end of an in-memory pipe: what it writes, its peer's protocol receives."""

    def __init__(self, loop: asyncio.AbstractEventLoop, name: tuple[str, int]) -> None:
        super().__init__()
        self._loop = loop
        self._name = name
        self.peer: _End | None = None
        self.protocol: asyncio.BaseProtocol | None = None
        self._closing = False
        self._dead = False   # reset: nothing more is delivered to this end
        self._lost = False
        self._held: list[bytes | None] | None = None   # paused: what arrived meanwhile (None: the FIN)

    # ---- what the owner calls ----------------------------------------------------------
    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing or not data:
            return
        self._loop.call_soon(self.peer._deliver, bytes(data))

    def writelines(self, chunks: Any) -> None:
        for chunk in chunks:
            self.write(chunk)

    def write_eof(self) -> None:
        if not self._closing:
            self._loop.call_soon(self.peer._deliver_eof)

    def can_write_eof(self) -> bool:
        return True

    def close(self) -> None:
        """FIN after what is queued, then this end is gone."""
        if self._closing:
            return
        self._closing = True
        self._loop.call_soon(self.peer._deliver_eof)
        self._loop.call_soon(self._lose, None)

    def abort(self) -> None:
        """A reset: nothing more is delivered either way; both ends learn it on the next iteration."""
        self._closing = True
        self._dead = self.peer._dead = True
        self._loop.call_soon(self._lose, None)
        self._loop.call_soon(self.peer._lose, ConnectionResetError("connection reset by peer"))

    def is_closing(self) -> bool:
        return self._closing or self._lost

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name in ("peername", "sockname"):
            return self._name
        return default

    def pause_reading(self) -> None:
        if self._held is None:
            self._held = []

    def resume_reading(self) -> None:
        """Deliver what was held at once, in order (a later write is already queued behind it),
        until the protocol pauses again."""
        held, self._held = self._held or [], None
        while held:
            item = held.pop(0)
            if item is None:
                self._deliver_eof()
            else:
                self._deliver(item)
            if self._held is not None:   # paused again: the rest stays first in line
                self._held[:0] = held
                return

    def is_reading(self) -> bool:
        return not self._lost and self._held is None

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    # ---- what the peer's writes do here -------------------------------------------------
    def _deliver(self, data: bytes) -> None:
        if self._held is not None:
            self._held.append(data)
        elif not (self._dead or self._lost):
            self.protocol.data_received(data)

    def _deliver_eof(self) -> None:
        if self._dead or self._lost:
            return
        if self._held is not None:
            self._held.append(None)
            return
        keep_open = self.protocol.eof_received()
        if not keep_open:
            self.close()

    def _lose(self, exc: Exception | None) -> None:
        if self._lost:
            return
        self._lost = True
        self._closing = True
        self.protocol.connection_lost(exc)


class MemoryNetwork:
    """Origins served by in-memory handlers; ``connect`` opens a ``Connection`` to one of them."""

    def __init__(self) -> None:
        self._handlers: dict[tuple[str, int], Handler] = {}
        self._ends: dict[tuple[str, int], set[_End]] = {}
        self._tasks: set[asyncio.Task] = set()
        self.connections = 0  # opened so far

    def listen(self, host: str, port: int, handler: Handler) -> None:
        self._handlers[(host, port)] = handler
        self._ends.setdefault((host, port), set())

    def unlisten(self, host: str, port: int) -> None:
        """Refuse new connections to ``host:port`` and reset the open ones (a server that died)."""
        self._handlers.pop((host, port), None)
        for end in list(self._ends.pop((host, port), ())):
            end.abort()

    async def connect(self, origin: Origin, *, timeout: float = 0.0,
                      ssl_context: ssl.SSLContext | None = None) -> Connection:
        key = (origin.host, origin.port)
        handler = self._handlers.get(key)
        if handler is None:
            raise HTTPError(f"{origin}: cannot connect (connection refused)")
        loop = asyncio.get_running_loop()
        client, server = _End(loop, key), _End(loop, ("memory-client", self.connections))
        client.peer, server.peer = server, client
        conn = Connection(origin, loop)
        client.protocol = conn
        reader = asyncio.StreamReader()
        server.protocol = asyncio.StreamReaderProtocol(reader)
        server.protocol.connection_made(server)
        writer = asyncio.StreamWriter(server, server.protocol, reader, loop)
        self._ends[key].add(server)
        self.connections += 1
        task = loop.create_task(self._serve(handler, reader, writer, key, server))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        conn.connection_made(client)
        return conn

    async def _serve(self, handler: Handler, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     key: tuple[str, int], end: _End) -> None:
        try:
            await handler(reader, writer)
        finally:
            self._ends.get(key, set()).discard(end)
            with contextlib.suppress(Exception):
                writer.close()

    def __repr__(self) -> str:
        hosts = ", ".join(f"{h}:{p}" for h, p in self._handlers)
        return f"<MemoryNetwork [{hosts}] open={sum(len(e) for e in self._ends.values())}>"
