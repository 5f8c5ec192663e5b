"""``Fetcher.fetch()``: one small HTTP document (a listing, a HEAD) with redirects.

Used by discovery; the engine moves file bytes itself over ``Connection``s.
Idle keep-alive connections are kept per origin so that walking a deep
directory tree does not pay a TCP handshake per directory. An origin whose name
does not resolve, or whose port refuses, before any connection to it opened is
a final answer (not retried): the first words come in milliseconds.
"""

from __future__ import annotations

import asyncio
import zlib
from dataclasses import dataclass

from dtune.errors import HTTPError
from dtune.http.access import DIRECT, Access
from dtune.http.connection import Connection, ConnectionClosed, FutureExchange, Unreachable
from dtune.http.message import Origin, resolve_location, split_url
from dtune.http.redact import redact_url
from dtune.http.warm import WarmPool

MAX_REDIRECTS = 5
REDIRECTS = (301, 302, 303, 307, 308)


@dataclass(slots=True)
class FetchResult:
    """What ``fetch`` returns: the last response after following redirects.

    status   HTTP status code of the final response
    headers  response headers, names in lower case
    body     the body (empty for HEAD)
    url      the final URL, after redirects
    """

    status: int
    headers: dict[str, str]
    body: bytes
    url: str


class _Collect(FutureExchange):
    """An exchange that keeps the whole (bounded) body in memory."""

    def __init__(self, request: bytes, head: bool, max_bytes: int, url: str,
                 loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(request, loop)
        self.head = head
        self.max_bytes = max_bytes
        self.url = url
        self.status = 0
        self.headers: dict[str, str] = {}
        self.parts: list[bytes] = []
        self.size = 0

    def on_headers(self, status: int, headers: dict[str, str]) -> bool:
        self.status, self.headers = status, headers
        if self.head or status in REDIRECTS:
            self.done.set_result(None)
            return False  # no body wanted: the connection is dropped
        return True

    def on_body(self, data: bytes) -> None:
        self.size += len(data)
        if self.size > self.max_bytes:
            raise HTTPError(f"{redact_url(self.url)}: response larger than {self.max_bytes} bytes", retryable=False)
        self.parts.append(data)


def gunzip(data: bytes, max_bytes: int, url: str) -> bytes:
    """A gzip'd body as it was, never more than ``max_bytes`` of it (a small body may inflate a
    thousandfold); HTTPError naming ``url`` when it is cut short, corrupt or too large."""
    unpack = zlib.decompressobj(31)  # gzip only, header and trailer checked
    try:
        out = unpack.decompress(data, max_bytes + 1)
    except zlib.error as exc:
        raise HTTPError(f"{redact_url(url)}: corrupt gzip body ({exc})", retryable=False) from None
    if len(out) > max_bytes or unpack.unconsumed_tail:
        raise HTTPError(f"{redact_url(url)}: response larger than {max_bytes} bytes once unzipped",
                        retryable=False)
    if not unpack.eof or unpack.unused_data:
        raise HTTPError(f"{redact_url(url)}: gzip body cut short or followed by other bytes")
    return out


class Fetcher:
    """Small-document client with a per-origin pool of idle connections."""

    def __init__(self, *, timeout: float = 30.0, access: Access = DIRECT) -> None:
        self.timeout = timeout
        self.access = access
        self._idle: dict[Origin, list[Connection]] = {}
        # seconds each new connection took to open, per origin: one round trip each (the RTT
        # the tuners start from, measured on connections the transfer needed anyway)
        self.connect_times: dict[Origin, list[float]] = {}
        self._opening: dict[Origin, list[asyncio.Task]] = {}  # ``warm``: for the engine, later

    async def fetch(self, url: str, *, method: str = "GET", headers: dict[str, str] | None = None,
                    max_bytes: int = 64 << 20) -> FetchResult:
        for _ in range(MAX_REDIRECTS + 1):
            result = await self._once(url, method, headers, max_bytes)
            if result.status in REDIRECTS and "location" in result.headers:
                url = resolve_location(url, result.headers["location"])
                if result.status == 303:
                    method = "GET"
                continue
            return result
        raise HTTPError(f"{redact_url(url)}: more than {MAX_REDIRECTS} redirects", retryable=False)

    async def _once(self, url: str, method: str, headers: dict[str, str] | None,
                    max_bytes: int) -> FetchResult:
        origin, target = split_url(url)
        loop = asyncio.get_running_loop()
        request = self.access.request(method, origin, target, extra=headers)
        conn = self._take(origin)
        for attempt in (1, 2):
            reused = conn is not None
            if conn is None:
                conn = await self._open(origin)
            ex = _Collect(request, method == "HEAD", max_bytes, url, loop)
            conn.send(ex)
            try:
                async with asyncio.timeout(self.timeout):  # (wait_for can lose a cancellation)
                    await asyncio.shield(ex.done)
                break
            except TimeoutError:
                ex.done.cancel()  # nobody will await it: closing must not park an exception on it
                conn.close()
                raise HTTPError(f"{redact_url(url)}: no response within {self.timeout:g} s") from None
            except ConnectionClosed:
                if not reused or attempt == 2:
                    raise
                conn = None  # an idle connection the server had closed: try a fresh one
        if conn.usable and conn.in_flight == 0:
            self._idle.setdefault(origin, []).append(conn)
        body = b"".join(ex.parts)
        if ex.headers.get("content-encoding", "").strip().lower() in ("gzip", "x-gzip") and method != "HEAD":
            body = gunzip(body, max_bytes, url)
            del ex.headers["content-encoding"]
        return FetchResult(ex.status, ex.headers, body, url)

    async def _open(self, origin: Origin) -> Connection:
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            conn = await self.access.connect(origin, timeout=self.timeout)
        except Unreachable as exc:
            if exc.dead and origin not in self.connect_times:
                # a name that does not resolve, a port that refuses, at the first contact: asking
                # again for 16 s would only hide the answer
                raise HTTPError(str(exc), retryable=False) from None
            raise
        conn.connect_seconds = loop.time() - started
        self.connect_times.setdefault(origin, []).append(conn.connect_seconds)
        return conn

    def warm(self, origin: Origin, n: int) -> None:
        """Start opening ``n`` connections to ``origin`` for the engine (``hand_over``), while
        discovery reads its listing; one that opens before then serves discovery too."""
        for _ in range(n):
            task = asyncio.ensure_future(self._open(origin))
            task.add_done_callback(self._opened)
            self._opening.setdefault(origin, []).append(task)

    def _opened(self, task: asyncio.Task) -> None:
        if task.cancelled() or task.exception() is not None:  # (retrieved: the engine connects anew)
            return
        for tasks in self._opening.values():
            if task in tasks:
                tasks.remove(task)
                conn = task.result()
                self._idle.setdefault(conn.origin, []).append(conn)
                return
        # (not found: handed over meanwhile, and the WarmPool that has it hands it out or closes it)

    def hand_over(self) -> WarmPool:
        """Every idle connection and every one still opening, for the engine's ``connect``; this
        fetcher keeps none (``WarmPool.close`` closes what the engine does not take)."""
        pool = WarmPool(self._idle, self._opening, self.access.connect)
        self._idle, self._opening = {}, {}
        return pool

    def _take(self, origin: Origin) -> Connection | None:
        pool = self._idle.get(origin) or []
        while pool:
            conn = pool.pop()
            if conn.usable:
                return conn
        return None

    def close(self) -> None:
        self.hand_over().close()
