"""What a connection and the server know of each other, and the counters they share.

``HttpConnection`` (``protocol.py``) is written against ``ServerContext``:
the few values and calls it needs from the server that accepted it. The
server (``FileServer`` in ``app.py``) satisfies it and holds its connections
as ``Connection``: the two calls its sweeper and its stop make. Neither
module imports the other's class, so a connection can be driven by any
object with these members (a test double, another listener).
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from dtune.server.config import ServerConfig
from dtune.server.paths import Root
from dtune.server.uploads import UploadStore


class Stats:
    """Counters since start, served at ``/.well-known/dtune/stats`` (which does not count itself).

    requests     answered requests
    bytes_sent   body bytes of file answers (200 and 206), as written to sockets (those of
                 answers cut short too)
    cut          file answers whose body was cut short (the client went away mid-body)
    connections  accepted connections, including those turned away
    responses    answers per status code
    rejected     connections turned away: answered 503, or dropped while waiting for a place
    reclaimed    places taken from an unused connection for a newcomer's request (``places.py``)
    """

    __slots__ = ("requests", "bytes_sent", "cut", "connections", "responses", "rejected", "reclaimed",
                 "internal_errors")

    def __init__(self) -> None:
        self.requests = 0
        self.bytes_sent = 0
        self.cut = 0
        self.connections = 0
        self.responses: dict[int, int] = {}
        self.rejected = 0
        self.reclaimed = 0
        self.internal_errors = 0

    def __repr__(self) -> str:
        return f"<Stats {self.requests} requests, {self.bytes_sent} bytes, {self.connections} connections>"

    def snapshot(self, open_connections: int, waiting_connections: int = 0) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "bytes_sent": self.bytes_sent,
            "cut": self.cut,
            "connections": self.connections,
            "responses": {str(k): v for k, v in sorted(self.responses.items())},
            "open_connections": open_connections,
            "waiting_connections": waiting_connections,
            "rejected_connections": self.rejected,
            "reclaimed_connections": self.reclaimed,
        }


class Connection(Protocol):
    """What the server asks of a connection it registered."""

    def check_deadline(self, now: float) -> None:
        """Close the connection if its current phase has lasted too long (``now`` is ``loop.time()``)."""

    def shutdown(self) -> None:
        """Drop the connection at server stop."""

    def unused_since(self) -> float | None:
        """Since when (``loop.time()``) the connection has had no request in progress; None while it has one."""

    def close_for_newcomer(self) -> None:
        """Close the connection: its place (or its turn to wait) went to a newer connection."""


class ServerContext(Protocol):
    """What a connection asks of the server that accepted it."""

    config: ServerConfig
    loop: asyncio.AbstractEventLoop
    stats: Stats
    root: Root
    token_digest: bytes | None  # SHA-256 of the bearer token every request must carry; None: no token
    uploads: UploadStore | None  # ``--writable``: where uploads go; None: read-only

    def connection_opened(self, conn: Connection) -> bool:
        """Register a connection: True, it holds a place; False, it waits for one (the server is full)."""

    def connection_ready(self, conn: Connection) -> bool:
        """A waiting connection's first request is complete: True, it has a place now; False, answer 503."""

    def connection_closed(self, conn: Connection) -> None:
        """Forget a connection (its transport is gone)."""

    def log_access(self, peer: str, method: bytes, target: bytes, status: int) -> None:
        """Record one access-log line."""

    def flush_log(self) -> None:
        """Write the recorded access-log lines."""

    def internal_error(self, what: str, exc: BaseException) -> None:
        """Report a server bug or OS failure; the server carries on."""

    def common_fields(self) -> str:
        """The ``Server`` and ``Date`` header lines, CRLF-terminated."""

    def stats_json(self) -> bytes:
        """The body of the stats answer."""

    def manifest(self, directory: str, base: str, gzip: bool = False) -> tuple[bytes, bool]:
        """The manifest body of ``directory`` (a real path), gzip'd when ``gzip`` and worth it,
        and whether it was; runs in a worker thread."""

    def listing(self, directory: str, base: str, is_root: bool, gzip: bool = False) -> tuple[bytes, bool]:
        """The HTML listing body of ``directory`` (a real path), as ``manifest``; runs in a
        worker thread."""
