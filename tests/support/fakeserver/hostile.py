"""``HostileServer``: misbehaves in the ways a broken or hostile server does, for ``dtune get``.

``FakeServer`` (``rules``) misbehaves in the ways a sloppy server does; this
one also misbehaves in the ways a broken or hostile one does: garbage instead
of a status line, a megabyte of headers, lying framing, answers that never
come, redirects to other schemes, bodies dripped a few bytes a second. Both
stand on the same core (``core.Server``: connection loop, request record,
start and stop); this one runs on 127.0.0.1 and closes at once, without
lingering.

The server keeps ``files`` (decoded path → bytes) and ``pages`` (decoded path
→ (content type, body[, more headers]), for listings and manifests); ``fallback`` bytes, when
set, answer every other file path. Every path may be given a **behaviour**:
an ``async`` callable ``behaviour(ctx) -> bool`` that writes whatever it
likes on ``ctx.writer`` and returns whether the connection stays open
(``ctx`` is the core's ``Exchange``). ``serve`` is the well-behaved default
(200, 206 and 416 with one range, HEAD, keep-alive, pipelining); the
factories below build the hostile ones, and ``first(n, bad)`` spoils only
the first ``n`` requests of a path. Behaviours apply to GET; HEAD is always
answered honestly unless ``heads=True`` is given to ``route`` (so discovery
learns the true size).

Each request is recorded (``requests``, also named ``seen`` here: method,
path, Range header, connection number, arrival time) so a test can say what
dtune asked for and when. ``stop()`` closes the listener and resets every
connection it still holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import json
import socket
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from .core import Exchange, Request, Server, etag
from .core import nginx_json as nginx_json  # the listings of the hostile tests

Ctx = Exchange
Behaviour = Callable[[Ctx], Awaitable[bool]]


async def serve(ctx: Ctx) -> bool:
    """The honest answer: a page, a file (one range at most), 416, or 404."""
    page = ctx.server.pages.get(ctx.request.path)
    if page is not None:
        ctype, body, *more = page  # (a third item: more headers, such as Content-Encoding)
        return ctx.simple(200, {"Content-Type": ctype, **(more[0] if more else {})}, body)
    if ctx.data is None and ctx.server.fallback is not None and not ctx.request.path.endswith("/"):
        ctx.data = ctx.server.fallback
    if ctx.data is None:
        return ctx.simple(404, body=b"not found\n")
    if ctx.span == "unsatisfiable":
        return ctx.simple(416, {"Content-Range": f"bytes */{len(ctx.data)}"}, b"")
    start, end = ctx.promise()
    if ctx.request.method != "HEAD":
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


def whole_to_if_range() -> Behaviour:
    """Ranges honoured, but 200 and the whole file to any request with If-Range: what Apache
    answers while the file's Last-Modified is within the last second (a weak validator)."""
    async def behaviour(ctx: Ctx) -> bool:
        if "if-range" not in ctx.headers:
            return await serve(ctx)
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


def promised(body: Callable[[bytes, int, int], bytes], *, keep: bool = True) -> Behaviour:
    """The honest head for the asked bytes [start, end), then ``body(file, start, end)``; ``keep``:
    the connection stays open after it."""
    async def behaviour(ctx: Ctx) -> bool:
        start, end = ctx.promise()
        assert ctx.data is not None
        ctx.writer.write(body(ctx.data, start, end))
        return keep
    return behaviour


def cut_at(offset: int) -> Behaviour:
    """Promise the asked bytes, never send the file's bytes from ``offset`` on: close there."""
    return promised(lambda data, start, end: data[start:max(start, min(end, offset))], keep=False)


def reset_at(offset: int) -> Behaviour:
    """Honour Range, but reset the connection (RST) when the file's byte ``offset`` is due: a request
    that starts there is reset before any answer, one that starts below gets the bytes up to it."""
    async def behaviour(ctx: Ctx) -> bool:
        _, start, end, _ = ctx.plan()
        if start < offset:
            ctx.promise()
            assert ctx.data is not None
            ctx.writer.write(ctx.data[start:min(end, offset)])
            await ctx.writer.drain()
        if end > offset:
            _reset(ctx)
        return end <= offset
    return behaviour


def hold_at(offset: int) -> Behaviour:
    """Honour Range, but go silent when the file's byte ``offset`` is due, the connection held open
    until the client drops it (a server whose disk read hangs there)."""
    async def behaviour(ctx: Ctx) -> bool:
        start, end = ctx.promise()
        assert ctx.data is not None
        ctx.writer.write(ctx.data[start:max(start, min(end, offset))])
        if end <= offset:
            return True
        await ctx.writer.drain()
        await _wait_for_client_close(ctx)
        return False
    return behaviour


def whole_cut_at(offset: int) -> Behaviour:
    """Ignore Range: 200 and the whole file's length every time, its bytes from 0, cut (closed) at
    ``offset``."""
    async def behaviour(ctx: Ctx) -> bool:
        assert ctx.data is not None
        ctx.head(200, {"Content-Length": str(len(ctx.data)), "ETag": etag(ctx.data)})
        ctx.writer.write(ctx.data[:offset])
        await ctx.writer.drain()
        return False
    return behaviour


def _reset(ctx: Ctx) -> None:
    """Close with a TCP reset (SO_LINGER 0), as a crashed worker or a middlebox does."""
    sock = ctx.writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    ctx.writer.transport.abort()


def truncate(fraction: float = 0.5) -> Behaviour:
    """Promise the asked bytes, send ``fraction`` of them, close."""
    return promised(lambda data, start, end: data[start:start + int((end - start) * fraction)], keep=False)


def corrupt(offset: int) -> Behaviour:
    """Honest framing, but the file's byte at ``offset`` goes out flipped."""
    def flipped(data: bytes, start: int, end: int) -> bytes:
        body = bytearray(data[start:end])
        if start <= offset < end:
            body[offset - start] ^= 0xFF
        return bytes(body)
    return promised(flipped)


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
        start, end = ctx.promise()
        assert ctx.data is not None
        await ctx.writer.drain()
        for i in range(start, end):
            await asyncio.sleep(1 / bytes_per_second)
            ctx.writer.write(ctx.data[i:i + 1])
            await ctx.writer.drain()
        return True
    return behaviour


def steady(bytes_per_second: int, piece: int = 256) -> Behaviour:
    """The honest answer, its body written ``piece`` bytes at a time at ``bytes_per_second``: slow,
    but never stopping."""
    async def behaviour(ctx: Ctx) -> bool:
        start, end = ctx.promise()
        assert ctx.data is not None
        for i in range(start, end, piece):
            await asyncio.sleep(piece / bytes_per_second)
            ctx.writer.write(ctx.data[i:min(end, i + piece)])
            await ctx.writer.drain()
        return True
    return behaviour


def drip_headers(lines_per_second: float) -> Behaviour:
    """A status line, then header lines one at a time at ``lines_per_second``, never ending."""
    async def behaviour(ctx: Ctx) -> bool:
        ctx.writer.write(b"HTTP/1.1 200 OK\r\n")
        n = 0
        while True:
            await asyncio.sleep(1 / lines_per_second)
            ctx.writer.write(f"X-Drip-{n}: {n}\r\n".encode())
            await ctx.writer.drain()
            n += 1
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


def chunked(piece: int = 1000, *, coding: str = "chunked", cut_after: int | None = None) -> Behaviour:
    """A valid chunked body in pieces of ``piece`` bytes (with a chunk extension, as the RFC allows),
    under ``Transfer-Encoding: coding`` (the bytes themselves are never encoded: a client that saves
    them under "gzip, chunked" saves a lie). ``cut_after``: close after that many chunks."""
    async def behaviour(ctx: Ctx) -> bool:
        status_, start, end, headers = ctx.plan()
        assert ctx.data is not None
        ctx.head(status_, {**headers, "Transfer-Encoding": coding})
        body = ctx.data[start:end]
        for n, i in enumerate(range(0, len(body), piece)):
            if cut_after is not None and n >= cut_after:
                return False
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


def replaced_after_dated(n: int, new: bytes, *, if_range: bool, seen: list[str] | None = None) -> Behaviour:
    """A server without ETags (Last-Modified only) whose file is replaced (same size) after ``n``
    requests, its Last-Modified moving on. ``if_range``: it honours If-Range (a range of a version
    that is gone is answered with 200 and the whole new file). ``seen`` collects every If-Range."""
    old_date = email.utils.formatdate(time.time() - 3600, usegmt=True)
    new_date = email.utils.formatdate(time.time() - 60, usegmt=True)
    count = [0]

    async def behaviour(ctx: Ctx) -> bool:
        count[0] += 1
        if count[0] > n:
            ctx.data = new
        assert ctx.data is not None
        modified = new_date if count[0] > n else old_date
        headers = {"Accept-Ranges": "bytes", "Last-Modified": modified,
                   "Date": email.utils.formatdate(usegmt=True)}
        cond = ctx.headers.get("if-range")
        if cond is not None and seen is not None:
            seen.append(cond)
        span = ctx.span
        start, end, code = 0, len(ctx.data), 200
        if isinstance(span, tuple) and not (if_range and cond is not None and cond != modified):
            (start, end), code = span, 206
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{len(ctx.data)}"
        ctx.head(code, {**headers, "Content-Length": str(end - start)})
        ctx.writer.write(ctx.data[start:end])
        return True
    return behaviour


def flapping_etag(tags: tuple[str, ...]) -> Behaviour:
    """The same bytes, but each answer carries the next ETag of ``tags`` in turn (as behind a load
    balancer whose nodes derive ETags from inode numbers)."""
    count = [0]

    async def behaviour(ctx: Ctx) -> bool:
        start, end = ctx.promise({"ETag": tags[count[0] % len(tags)]})
        count[0] += 1
        assert ctx.data is not None
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


class HostileServer(Server):
    """Serve ``files`` and ``pages`` with per-path behaviours; see the module docstring."""

    max_head = 1 << 20  # a request head larger than this is not HTTP we want to read

    def __init__(self, files: dict[str, bytes] | None = None, pages: dict[str, tuple[str, bytes]] | None = None,
                 *, close_after: int | None = None, fallback: bytes | None = None) -> None:
        super().__init__(files, close_after=close_after, name="hostile-server")
        self.pages: dict[str, tuple[str, bytes]] = dict(pages or {})
        # served for any file path it does not know (so that every name a client accepts from a
        # listing really gets written somewhere)
        self.fallback = fallback
        self.routes: dict[str, _Route] = {}

    @property
    def seen(self) -> list[Request]:
        """The request record (``requests``)."""
        return self.requests

    def route(self, path: str, behaviour: Behaviour, *, heads: bool = False) -> None:
        self.routes[path] = _Route(behaviour, heads)

    async def answer(self, ctx: Ctx) -> bool:
        route = self.routes.get(ctx.request.path)
        if route is not None and (ctx.request.method == "GET" or route.heads):
            return await route.behaviour(ctx)
        return await serve(ctx)


@dataclass
class World:
    """The hostile server, a well-behaved one on another port, and any extra servers a case starts."""

    hostile: HostileServer
    other: HostileServer
    extra: list[HostileServer] = field(default_factory=list)

    def spawn(self, **kw: object) -> HostileServer:
        server = HostileServer(**kw).start()  # type: ignore[arg-type]
        self.extra.append(server)
        return server

    def stop(self) -> None:
        for server in (self.hostile, self.other, *self.extra):
            server.stop()
