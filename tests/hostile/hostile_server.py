"""A deliberately misbehaving HTTP/1.1 server for ``dtune get`` (127.0.0.1, a free port).

``tests/fakeserver.py`` misbehaves in the ways a sloppy server does; this one
also misbehaves in the ways a broken or hostile one does: garbage instead of
a status line, a megabyte of headers, lying framing, answers that never come,
redirects to other schemes, bodies dripped a few bytes a second.

The server keeps ``files`` (decoded path → bytes) and ``pages`` (decoded path
→ (content type, body), for listings and manifests); ``fallback`` bytes, when
set, answer every other file path. Every path may be given
a **behaviour**: an ``async`` callable ``behaviour(ctx) -> bool`` that writes
whatever it likes on ``ctx.writer`` and returns whether the connection stays
open. ``serve`` is the well-behaved default (200, 206 and 416 with one
range, HEAD, keep-alive, pipelining); the factories below build the hostile
ones, and ``first(n, bad)`` spoils only the first ``n`` requests of a path.
Behaviours apply to GET; HEAD is always answered honestly unless
``heads=True`` is given to ``route`` (so discovery learns the true size).

Each request is recorded in ``seen`` (method, path, Range header, connection
number, arrival time) so a test can say what dtune asked for and when.

The server runs its own asyncio loop in a daemon thread; ``stop()`` closes
the listener and every connection it still holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import hashlib
import itertools
import json
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from urllib.parse import quote, unquote, urlsplit

from fakeserver import parse_range

REASONS = {200: "OK", 206: "Partial Content", 301: "Moved Permanently", 302: "Found",
           307: "Temporary Redirect", 308: "Permanent Redirect", 400: "Bad Request", 403: "Forbidden",
           404: "Not Found", 410: "Gone", 416: "Range Not Satisfiable", 429: "Too Many Requests",
           500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable"}
MAX_HEAD = 1 << 20  # a request head larger than this is not HTTP we want to read


@dataclass
class Seen:
    method: str
    path: str                 # percent-decoded
    range: str | None
    conn: int
    at: float                 # time.monotonic() when the head was read


@dataclass
class Ctx:
    """One request being answered."""

    server: HostileServer
    seen: Seen
    headers: dict[str, str]
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    data: bytes | None        # the file at this path, if any

    @property
    def span(self) -> tuple[int, int] | str | None:
        """[start, end) of a satisfiable Range, 'unsatisfiable', or None (no Range / ignored)."""
        if self.data is None or not self.seen.range:
            return None
        return parse_range(self.seen.range, len(self.data))

    def head(self, status: int, headers: dict[str, str] | list[tuple[str, str]], version: str = "HTTP/1.1") -> None:
        items = headers.items() if isinstance(headers, dict) else headers
        lines = [f"{version} {status} {REASONS.get(status, 'Status')}", *(f"{k}: {v}" for k, v in items)]
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))

    def simple(self, status: int, extra: dict[str, str] | None = None, body: bytes = b"nope\n") -> bool:
        self.head(status, {"Content-Length": str(len(body)), **(extra or {})})
        if self.seen.method != "HEAD":
            self.writer.write(body)
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


Behaviour = Callable[[Ctx], Awaitable[bool]]


def etag(data: bytes) -> str:
    return '"' + hashlib.sha1(data).hexdigest()[:16] + '"'


async def serve(ctx: Ctx) -> bool:
    """The honest answer: a page, a file (one range at most), 416, or 404."""
    page = ctx.server.pages.get(ctx.seen.path)
    if page is not None:
        ctype, body = page
        return ctx.simple(200, {"Content-Type": ctype}, body)
    if ctx.data is None and ctx.server.fallback is not None and not ctx.seen.path.endswith("/"):
        ctx.data = ctx.server.fallback
    if ctx.data is None:
        return ctx.simple(404, body=b"not found\n")
    if ctx.span == "unsatisfiable":
        return ctx.simple(416, {"Content-Range": f"bytes */{len(ctx.data)}"}, b"")
    status, start, end, headers = ctx.plan()
    ctx.head(status, {**headers, "Content-Length": str(end - start)})
    if ctx.seen.method != "HEAD":
        ctx.writer.write(ctx.data[start:end])
    return True


# ---------------------------------------------------------------------------------------------
# hostile behaviours (factories: each returns a Behaviour)
# ---------------------------------------------------------------------------------------------
def first(n: int, bad: Behaviour, then: Behaviour = serve) -> Behaviour:
    """``bad`` for the first ``n`` requests of the path, ``then`` afterwards."""
    left = [n]

    async def behaviour(ctx: Ctx) -> bool:
        if left[0] > 0:
            left[0] -= 1
            return await bad(ctx)
        return await then(ctx)
    return behaviour


def cycle(*behaviours: Behaviour) -> Behaviour:
    """Each request gets the next behaviour of the list (the last one repeats)."""
    it = iter(behaviours)
    last = [behaviours[-1]]

    async def behaviour(ctx: Ctx) -> bool:
        b = next(it, last[0])
        return await b(ctx)
    return behaviour


def status(code: int, headers: dict[str, str] | Callable[[], dict[str, str]] | None = None) -> Behaviour:
    """Answer ``code`` with a small body (``headers`` may be a function, e.g. for an HTTP-date)."""
    async def behaviour(ctx: Ctx) -> bool:
        extra = headers() if callable(headers) else headers
        return ctx.simple(code, extra)
    return behaviour


def redirect(location: str, code: int = 302) -> Behaviour:
    return status(code, {"Location": location})


def ignore_range() -> Behaviour:
    """200 and the whole file, whatever Range says."""
    async def behaviour(ctx: Ctx) -> bool:
        assert ctx.data is not None
        ctx.head(200, {"Content-Length": str(len(ctx.data)), "ETag": etag(ctx.data)})
        ctx.writer.write(ctx.data)
        return True
    return behaviour


def content_range(make: Callable[[int, int, int], tuple[int, int, str]]) -> Behaviour:
    """206 whose Content-Range and body come from ``make(start, end, size) -> (body_start, body_end, header)``."""
    async def behaviour(ctx: Ctx) -> bool:
        status_, start, end, headers = ctx.plan()
        if status_ != 206:
            return await serve(ctx)
        assert ctx.data is not None
        b_start, b_end, header = make(start, end, len(ctx.data))
        body = ctx.data[b_start:b_end]
        ctx.head(206, {**headers, "Content-Range": header, "Content-Length": str(len(body))})
        ctx.writer.write(body)
        return True
    return behaviour


def cut_at(offset: int) -> Behaviour:
    """Promise the asked bytes, never send the file's bytes from ``offset`` on: close there."""
    async def behaviour(ctx: Ctx) -> bool:
        status_, start, end, headers = ctx.plan()
        assert ctx.data is not None
        ctx.head(status_, {**headers, "Content-Length": str(end - start)})
        ctx.writer.write(ctx.data[start:max(start, min(end, offset))])
        return False
    return behaviour


def truncate(fraction: float = 0.5) -> Behaviour:
    """Promise the asked bytes, send ``fraction`` of them, close."""
    async def behaviour(ctx: Ctx) -> bool:
        status_, start, end, headers = ctx.plan()
        assert ctx.data is not None
        ctx.head(status_, {**headers, "Content-Length": str(end - start)})
        ctx.writer.write(ctx.data[start:start + int((end - start) * fraction)])
        return False
    return behaviour


def corrupt(offset: int) -> Behaviour:
    """Honest framing, but the file's byte at ``offset`` goes out flipped."""
    async def behaviour(ctx: Ctx) -> bool:
        status_, start, end, headers = ctx.plan()
        assert ctx.data is not None
        body = bytearray(ctx.data[start:end])
        if start <= offset < end:
            body[offset - start] ^= 0xFF
        ctx.head(status_, {**headers, "Content-Length": str(end - start)})
        ctx.writer.write(bytes(body))
        return True
    return behaviour


def raw(payload: bytes | Callable[[], bytes], keep_open: bool = False) -> Behaviour:
    """Write ``payload`` instead of a response, then close (or keep silent)."""
    async def behaviour(ctx: Ctx) -> bool:
        ctx.writer.write(payload() if callable(payload) else payload)
        if keep_open:
            await _wait_for_client_close(ctx)
        return False
    return behaviour


def silent() -> Behaviour:
    """Read the request and never answer; hold the connection until the client drops it."""
    async def behaviour(ctx: Ctx) -> bool:
        await _wait_for_client_close(ctx)
        return False
    return behaviour


def drip(bytes_per_second: float) -> Behaviour:
    """The honest answer, its body written one byte at a time at ``bytes_per_second``."""
    async def behaviour(ctx: Ctx) -> bool:
        status_, start, end, headers = ctx.plan()
        assert ctx.data is not None
        ctx.head(status_, {**headers, "Content-Length": str(end - start)})
        await ctx.writer.drain()
        for i in range(start, end):
            await asyncio.sleep(1 / bytes_per_second)
            ctx.writer.write(ctx.data[i:i + 1])
            await ctx.writer.drain()
        return True
    return behaviour


def headers_then_file(extra: list[tuple[str, str]]) -> Behaviour:
    """The honest answer with ``extra`` header lines added (huge or many headers)."""
    async def behaviour(ctx: Ctx) -> bool:
        status_, start, end, headers = ctx.plan()
        assert ctx.data is not None
        ctx.head(status_, [*headers.items(), *extra, ("Content-Length", str(end - start))])
        ctx.writer.write(ctx.data[start:end])
        return True
    return behaviour


def framing(lengths: list[str], *, chunks: bytes | None = None) -> Behaviour:
    """The honest status and body, framed by the given Content-Length values (or raw ``chunks``)."""
    async def behaviour(ctx: Ctx) -> bool:
        status_, start, end, headers = ctx.plan()
        assert ctx.data is not None
        items = list(headers.items()) + [("Content-Length", v) for v in lengths]
        if chunks is not None:
            items.append(("Transfer-Encoding", "chunked"))
        ctx.head(status_, items)
        ctx.writer.write(chunks if chunks is not None else ctx.data[start:end])
        return chunks is None
    return behaviour


def chunked(piece: int = 1000) -> Behaviour:
    """A valid chunked body in pieces of ``piece`` bytes (with a chunk extension, as the RFC allows)."""
    async def behaviour(ctx: Ctx) -> bool:
        status_, start, end, headers = ctx.plan()
        assert ctx.data is not None
        ctx.head(status_, {**headers, "Transfer-Encoding": "chunked"})
        body = ctx.data[start:end]
        for i in range(0, len(body), piece):
            part = body[i:i + piece]
            ctx.writer.write(b"%x;ext=1\r\n%s\r\n" % (len(part), part))
        ctx.writer.write(b"0\r\n\r\n")
        return True
    return behaviour


def http10(*, cut_at: int | None = None) -> Behaviour:
    """HTTP/1.0, no Content-Length: the body ends when the connection closes.

    With ``cut_at`` the file's bytes from that offset on are never sent.
    """
    async def behaviour(ctx: Ctx) -> bool:
        status_, start, end, headers = ctx.plan()
        assert ctx.data is not None
        ctx.head(status_, headers, version="HTTP/1.0")
        stop = end if cut_at is None else max(start, min(end, cut_at))
        ctx.writer.write(ctx.data[start:stop])
        return False
    return behaviour


def interim(code: int, reason: str, then: Behaviour = serve) -> Behaviour:
    """A 1xx interim response (e.g. 103 Early Hints, as CDNs send) before the real answer."""
    async def behaviour(ctx: Ctx) -> bool:
        ctx.writer.write(f"HTTP/1.1 {code} {reason}\r\nLink: </style.css>; rel=preload\r\n\r\n".encode())
        return await then(ctx)
    return behaviour


def replaced_after(n: int, new: bytes) -> Behaviour:
    """The file is replaced on the server (same size, new ETag) after ``n`` requests."""
    count = [0]

    async def behaviour(ctx: Ctx) -> bool:
        count[0] += 1
        if count[0] > n:
            ctx.data = new
        return await serve(ctx)
    return behaviour


def flapping_etag(tags: tuple[str, ...]) -> Behaviour:
    """The same bytes, but each answer carries the next ETag of ``tags`` in turn (as behind a load
    balancer whose nodes derive ETags from inode numbers)."""
    count = [0]

    async def behaviour(ctx: Ctx) -> bool:
        status_, start, end, headers = ctx.plan()
        assert ctx.data is not None
        headers["ETag"] = tags[count[0] % len(tags)]
        count[0] += 1
        ctx.head(status_, {**headers, "Content-Length": str(end - start)})
        ctx.writer.write(ctx.data[start:end])
        return True
    return behaviour


def retry_after_date(seconds: float) -> Callable[[], dict[str, str]]:
    """A ``Retry-After`` HTTP-date ``seconds`` from now (computed when the answer is sent)."""
    return lambda: {"Retry-After": email.utils.formatdate(time.time() + seconds, usegmt=True)}


async def _wait_for_client_close(ctx: Ctx) -> None:
    with contextlib.suppress(Exception):
        while await ctx.reader.read(65536):
            pass


# ---------------------------------------------------------------------------------------------
# listings
# ---------------------------------------------------------------------------------------------
def nginx_json(entries: list[dict]) -> tuple[str, bytes]:
    """An nginx ``autoindex_format json`` page from ``{"name", "type", "size"}`` dicts."""
    mtime = "Mon, 01 Jan 2024 00:00:00 GMT"
    return "application/json", json.dumps([{"mtime": mtime, **e} for e in entries]).encode()


def manifest(files: list[dict], base: str = "/") -> tuple[str, bytes]:
    """A dtune manifest page from ``{"path", "size", "sha256"}`` dicts."""
    return "application/json", json.dumps({"dtune_manifest": 1, "base": base, "files": files}).encode()


def html_index(hrefs: list[str]) -> tuple[str, bytes]:
    links = "".join(f'<a href="{h}">{h}</a>\n' for h in hrefs)
    return "text/html", f"<html><body><pre>{links}</pre></body></html>".encode()


# ---------------------------------------------------------------------------------------------
# the server
# ---------------------------------------------------------------------------------------------
@dataclass
class _Route:
    behaviour: Behaviour
    heads: bool = False


@dataclass
class HostileServer:
    """Serve ``files`` and ``pages`` with per-path behaviours; see the module docstring."""

    files: dict[str, bytes] = field(default_factory=dict)
    pages: dict[str, tuple[str, bytes]] = field(default_factory=dict)
    close_every: int | None = None   # close silently after this many answers on one connection
    fallback: bytes | None = None    # served for any file path it does not know (so that every name
                                     # a client accepts from a listing really gets written somewhere)

    def __post_init__(self) -> None:
        self.routes: dict[str, _Route] = {}
        self.seen: list[Seen] = []
        self.port = 0
        self._conn_ids = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task] = set()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    # ---- what tests use ----------------------------------------------------------------------
    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        return self.base + quote(path)

    def route(self, path: str, behaviour: Behaviour, *, heads: bool = False) -> None:
        self.routes[path] = _Route(behaviour, heads)

    def gets(self, path: str) -> list[Seen]:
        return [s for s in list(self.seen) if s.method == "GET" and s.path == path]

    # ---- lifecycle ---------------------------------------------------------------------------
    def start(self) -> HostileServer:
        self._thread = threading.Thread(target=self._run, name="hostile-server", daemon=True)
        self._thread.start()
        if not self._ready.wait(10) or self._error is not None:
            raise RuntimeError(f"hostile server did not start: {self._error}")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None and self._thread is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(10)

    def __enter__(self) -> HostileServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # reported by start()
            self._error = exc
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._connection, "127.0.0.1", 0, limit=MAX_HEAD)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        await self._stop.wait()
        server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # ---- one connection ----------------------------------------------------------------------
    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(writer)
        conn = next(self._conn_ids)
        answered = 0
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                parsed = _parse(head, conn)
                if parsed is None:
                    writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                    return
                seen, headers = parsed
                self.seen.append(seen)
                route = self.routes.get(seen.path)
                behaviour = serve
                if route is not None and (seen.method == "GET" or route.heads):
                    behaviour = route.behaviour
                ctx = Ctx(self, seen, headers, reader, writer, self.files.get(seen.path))
                keep = await behaviour(ctx)
                await writer.drain()
                answered += 1
                if not keep or (self.close_every is not None and answered >= self.close_every):
                    return
        except (ConnectionError, asyncio.CancelledError):
            return
        finally:
            self._tasks.discard(task)
            self._writers.discard(writer)
            with contextlib.suppress(Exception):
                writer.close()


def _parse(head: bytes, conn: int) -> tuple[Seen, dict[str, str]] | None:
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
        path = unquote(urlsplit(parts[1]).path, errors="strict")
    except UnicodeDecodeError:
        return None
    return Seen(parts[0], path, headers.get("range"), conn, time.monotonic()), headers
