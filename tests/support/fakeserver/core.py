"""The core of every scripted test server: one connection loop, one request record, one start/stop.

Theory of operation
-------------------
A ``Server`` reads request heads off a connection one after the other, so a
client may pipeline many requests before the first answer. Each head becomes
a ``Request`` appended to ``requests`` (method, decoded path, Range header,
connection number, arrival time, and later what the answer carried) and an
``Exchange`` handed to ``answer``: a subclass writes whatever it likes on
``exchange.writer`` and returns whether the connection stays open. A head
that is not HTTP/1.x gets 400 and a close. After ``close_after`` answers the
server closes the connection itself (the answer is told it is the ``last``).

How the server closes: a ``linger`` server closes as nginx's lingering_close
does (FIN first, then swallow what the client still sends, so that unread
pipelined requests do not turn the close into an RST that makes the client's
kernel drop answers it has not read yet); the others close at once.

Where it runs: given a ``dtune.http.memory.MemoryNetwork`` it listens on
``fakeN.test:80`` in memory, on the loop of whoever connects (the engine's:
no socket at all, ``server.connect`` is then the engine's ``connect``);
otherwise on 127.0.0.1 and a free port, on a loop of its own in a daemon
thread (``dtune.server.thread.LoopThread``), so that an engine under test
and a ``dtune`` subprocess can both reach it. ``stop()`` resets the
connections still open, in both modes (a server that died).

Bodies can be paced: ``rate`` bytes per second per connection (``Throttle``,
one per connection, shared by the answers on it).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Self
from urllib.parse import quote, unquote, urlsplit

from dtune.http.memory import MemoryNetwork
from dtune.server.thread import LoopThread

MTIME = "Mon, 01 Jan 2024 00:00:00 GMT"   # every file's Last-Modified and listing mtime
REASONS = {200: "OK", 206: "Partial Content", 301: "Moved Permanently", 302: "Found",
           307: "Temporary Redirect", 308: "Permanent Redirect", 400: "Bad Request", 403: "Forbidden",
           404: "Not Found", 410: "Gone", 416: "Range Not Satisfiable", 429: "Too Many Requests",
           500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable"}
BAD_REQUEST = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")
_HOSTS = itertools.count(1)


@dataclass
class Request:
    """One request as the server read it, and what its answer carried."""

    method: str
    path: str                 # percent-decoded
    range: str | None         # the Range header as the client sent it
    conn: int                 # connection number (1, 2, ...)
    at: float                 # time.monotonic() when the request head was read
    status: int = 0           # what was answered (0: nothing, e.g. the connection closed first)
    span: tuple[int, int] | None = None  # file bytes [start, end) the answer carried
    sent: int = 0             # body bytes written to the connection
    query: str = ""           # the request target's query, as sent (without '?')

    def asked(self, size: int) -> tuple[int, int]:
        """The bytes [start, end) this request asked for (the whole file without Range)."""
        parsed = parse_range(self.range, size) if self.range else None
        return parsed if isinstance(parsed, tuple) else (0, size)


def parse_range(value: str, size: int) -> tuple[int, int] | str | None:
    """One ``bytes=`` range → [start, end); 'unsatisfiable'; None when it is to be ignored."""
    m = _RANGE.match(value.strip())
    if not m or (m.group(1) == "" and m.group(2) == ""):
        return None
    first, last = m.group(1), m.group(2)
    if first == "":
        n = int(last)
        return (max(0, size - n), size) if n else "unsatisfiable"
    start = int(first)
    end = size if last == "" else min(size, int(last) + 1)
    if last != "" and int(last) < start:
        return None
    if start >= size:
        return "unsatisfiable"
    return start, end


def parse_head(head: bytes, conn: int) -> tuple[Request, dict[str, str]] | None:
    """A request head → (the record, lower-cased headers); None when it is not HTTP/1.x we can read."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        return None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    try:
        split = urlsplit(parts[1])
        path = unquote(split.path, errors="strict")
    except UnicodeDecodeError:
        return None
    return Request(parts[0], path, headers.get("range"), conn, time.monotonic(), query=split.query), headers


def etag(data: bytes) -> str:
    return '"' + hashlib.sha1(data).hexdigest()[:16] + '"'


def nginx_json(entries: list[dict]) -> tuple[str, bytes]:
    """An nginx ``autoindex_format json`` page from ``{"name", "type", "size"}`` dicts."""
    return "application/json", json.dumps([{"mtime": MTIME, **e} for e in entries]).encode()


def spans_overlap(spans: list[tuple[int, int]]) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Pairs of ranges (sorted by start) that share at least one byte."""
    ordered = sorted(spans)
    return [(a, b) for a, b in itertools.pairwise(ordered) if b[0] < a[1]]


class Throttle:
    """Paces one connection's body bytes to ``rate`` bytes per second (None: as fast as possible)."""

    def __init__(self, rate: int | None) -> None:
        self.rate = rate
        # pieces of 1/20 s at the rate, 1 KiB to 64 KiB: smooth pacing without a write per byte
        self.piece = 256 * 1024 if rate is None else max(1024, min(64 * 1024, rate // 20))
        self._start = time.monotonic()
        self._bytes = 0

    async def wait(self, n: int) -> None:
        if self.rate is None:
            return
        self._bytes += n
        due = self._start + self._bytes / self.rate
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        else:
            self._start -= min(0.0, delay + 0.05)  # never bank more than 50 ms of idle time


@dataclass
class Exchange:
    """One request being answered, with what the answer may need."""

    server: Server
    request: Request
    headers: dict[str, str]   # lower-cased names
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    clock: Throttle           # this connection's pacing
    last: bool                # the server closes the connection after this answer (``close_after``)
    data: bytes | None        # the file at this path, if the server holds one

    @property
    def span(self) -> tuple[int, int] | str | None:
        """[start, end) of a satisfiable Range, 'unsatisfiable', or None (no Range / ignored)."""
        if self.data is None or not self.request.range:
            return None
        return parse_range(self.request.range, len(self.data))

    def head(self, status: int, headers: dict[str, str] | list[tuple[str, str]], version: str = "HTTP/1.1") -> None:
        items = headers.items() if isinstance(headers, dict) else headers
        lines = [f"{version} {status} {REASONS.get(status, 'Status')}", *(f"{k}: {v}" for k, v in items)]
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))

    def simple(self, status: int, extra: dict[str, str] | None = None, body: bytes = b"nope\n") -> bool:
        """``status`` with a small body (none for HEAD); the connection stays open."""
        self.request.status = status
        self.head(status, {"Content-Length": str(len(body)), **(extra or {})})
        if self.request.method != "HEAD":
            self.writer.write(body)
            self.request.sent = len(body)
        return True

    def plan(self) -> tuple[int, int, int, dict[str, str]]:
        """What an honest server answers: (status, start, end, headers) for this file request."""
        assert self.data is not None
        size = len(self.data)
        span = self.span
        headers = {"Accept-Ranges": "bytes", "ETag": etag(self.data)}
        if isinstance(span, tuple):
            headers["Content-Range"] = f"bytes {span[0]}-{span[1] - 1}/{size}"
            return 206, span[0], span[1], headers
        return 200, 0, size, headers

    def promise(self, extra: dict[str, str] | None = None) -> tuple[int, int]:
        """Write the honest head (``extra`` headers over it) with the asked length; return [start, end)."""
        status, start, end, headers = self.plan()
        self.head(status, {**headers, **(extra or {}), "Content-Length": str(end - start)})
        return start, end


class Server(LoopThread):
    """Serve ``files`` (decoded path → bytes) through ``answer``; see the module docstring."""

    linger = False        # close as nginx's lingering_close does (see the module docstring)
    max_head = 1 << 16    # largest request head read (asyncio's default stream limit)

    def __init__(self, files: dict[str, bytes] | None = None, *, close_after: int | None = None,
                 rate: int | None = None, network: MemoryNetwork | None = None, name: str = "fakeserver") -> None:
        super().__init__(name)
        self.network = network                  # serve in memory on the client's loop, not on a socket
        self.host = f"fake{next(_HOSTS)}.test" if network is not None else "127.0.0.1"
        self.files: dict[str, bytes] = dict(files or {})
        self.close_after = close_after          # answers per connection, then the server closes it
        self.rate = rate                        # body bytes per second per connection
        self.requests: list[Request] = []
        self.port = 0
        self.bind_port = 0                      # the port to listen on (0: any free one); a server
                                                # started again on its predecessor's port comes back
        self._conn_ids = itertools.count(1)
        self._open: dict[asyncio.Task, asyncio.StreamWriter] = {}

    async def answer(self, exchange: Exchange) -> bool:
        """Write the answer to ``exchange.request``; return whether the connection stays open."""
        raise NotImplementedError

    # ---- lifecycle -----------------------------------------------------------------------
    def start(self) -> Self:
        if self.network is not None:
            self.port = 80
            self.network.listen(self.host, self.port, self._connection)
            return self
        return super().start()

    def stop(self) -> None:
        """Stop serving; open connections are reset (a server that died)."""
        if self.network is not None:
            self.network.unlisten(self.host, self.port)
            return
        super().stop()

    async def serve(self, stop: asyncio.Event) -> None:
        server = await asyncio.start_server(self._connection, "127.0.0.1", self.bind_port, limit=self.max_head)
        self.port = server.sockets[0].getsockname()[1]
        self.ready()
        await stop.wait()
        server.close()
        for task, writer in list(self._open.items()):
            writer.transport.abort()
            task.cancel()
        await asyncio.gather(*self._open, return_exceptions=True)
        await server.wait_closed()

    # ---- what tests read -----------------------------------------------------------------
    @property
    def base(self) -> str:
        return f"http://{self.host}" if self.network is not None else f"http://127.0.0.1:{self.port}"

    @property
    def connect(self) -> Callable | None:
        """The Engine's ``connect``: in memory, or None for sockets."""
        return self.network.connect if self.network is not None else None

    def url(self, path: str) -> str:
        return self.base + quote(path)

    def gets(self, path: str) -> list[Request]:
        return [r for r in list(self.requests) if r.method == "GET" and r.path == path]

    def asked(self, path: str) -> list[tuple[int, int]]:
        """The byte ranges GET requests for ``path`` asked for, in arrival order."""
        size = len(self.files[path])
        return [r.asked(size) for r in self.gets(path)]

    @property
    def connections(self) -> int:
        return len({r.conn for r in list(self.requests)})

    # ---- one connection ------------------------------------------------------------------
    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._open[task] = writer
        conn = next(self._conn_ids)
        clock = Throttle(self.rate)
        answered = 0
        closing = False   # the server ends the connection (not the client, not a reset)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                parsed = parse_head(head, conn)
                if parsed is None:
                    writer.write(BAD_REQUEST)
                    closing = True
                    return
                request, headers = parsed
                self.requests.append(request)
                answered += 1
                last = self.close_after is not None and answered >= self.close_after
                exchange = Exchange(self, request, headers, reader, writer, clock, last,
                                    self.files.get(request.path))
                keep = await self.answer(exchange)
                await writer.drain()
                if not keep or last:
                    closing = True
                    return
        except (ConnectionError, asyncio.CancelledError):
            return
        finally:
            self._open.pop(task, None)
            if closing and self.linger:
                await lingering_close(reader, writer)
            with contextlib.suppress(Exception):
                writer.close()


async def lingering_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Close like nginx's lingering_close: FIN first, then swallow what the client still sends.

    Closing a socket with unread pipelined requests in its buffer makes the kernel send RST,
    and an RST makes the client's kernel drop response bytes it has not read yet.
    """
    with contextlib.suppress(Exception):
        await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
        async with asyncio.timeout(2):
            while await reader.read(65536):
                pass
