"""``FakeServer``: a scriptable well-behaved server whose paths misbehave as sloppy servers do.

It serves an in-memory ``{path: bytes}`` dict with correct single-range
support (206 / 416), If-Modified-Since (304: every file's Last-Modified is
``core.MTIME``), keep-alive and pipelining, HEAD, and an nginx
``autoindex_format json`` listing for every directory path ending in ``/``;
it closes connections as nginx does (lingering). In memory or on
127.0.0.1: see ``core``.

Each path can be told to misbehave with a ``Rule`` (see its fields), for
``times`` requests or for ever. Connection-wide misbehaviour is set on the
server: ``close_after`` responses per connection (``announce_close``: the
last says "Connection: close"), ``rate`` bytes per second per connection.

Every request is recorded (``requests``): method, decoded path, the Range
header as sent, the connection it came on, when it arrived, and what was
answered (status, file span, body bytes ``sent``), so that tests can assert
exactly which bytes were asked for and delivered.
"""

from __future__ import annotations

import asyncio
import email.utils
from dataclasses import dataclass

from dtune.http.memory import MemoryNetwork

from .core import MTIME, Exchange, Request, Server, Throttle, etag, nginx_json


@dataclass
class Rule:
    """How one path misbehaves. Unset fields behave; ``times`` limits how often the rule applies."""

    times: int | None = None            # requests the rule spoils, then the path behaves; None = all
    methods: tuple[str, ...] = ("GET",)
    only_start: int | None = None       # spoil only Range requests starting at this byte
    status: int | None = None           # answer this status (small body) instead of the file
    retry_after: str | None = None      # ... with this Retry-After
    location: str | None = None         # redirect here (status 302 unless ``status`` says otherwise)
    ignore_range: bool = False          # answer a Range request with 200 and the whole file
    shift: int = 0                      # a Range request gets Content-Range (and bytes) moved by this
    truncate: int | None = None         # send this many body bytes of the promised length, then close
    cut_at: int | None = None           # never send the file's bytes from this offset on: close there
    stall: bool = False                 # send the head and ``stall_after`` body bytes, then nothing
    stall_after: int = 0
    http10: bool = False                # HTTP/1.0 answer, no Content-Length, the body ends at close
    chunked: bool = False               # Transfer-Encoding: chunked
    corrupt_at: int | None = None       # the file's byte at this offset goes out flipped

    def applies(self, method: str, span: tuple[int, int] | None) -> bool:
        if method not in self.methods or self.times == 0:
            return False
        if self.only_start is not None and (span is None or span[0] != self.only_start):
            return False
        if self.times is not None:
            self.times -= 1
        return True


def _unmodified_since(value: str | None) -> bool:
    """Is ``MTIME`` no later than the If-Modified-Since date ``value`` (RFC 9110 §13.1.3)?"""
    if value is None:
        return False
    try:
        return email.utils.parsedate_to_datetime(MTIME) <= email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return False


class _Close(Exception):
    """End this connection after the current answer."""


class FakeServer(Server):
    """Serve ``files`` until ``stop()``, each path as its ``Rule`` says; see the module docstring."""

    linger = True

    def __init__(self, files: dict[str, bytes] | None = None, *, close_after: int | None = None,
                 announce_close: bool = False, rate: int | None = None,
                 network: MemoryNetwork | None = None) -> None:
        super().__init__(files, close_after=close_after, rate=rate, network=network, name="fakeserver")
        self.rules: dict[str, Rule] = {}
        self.announce_close = announce_close    # say "Connection: close" on the last answer

    async def answer(self, exchange: Exchange) -> bool:
        try:
            await self._answer(exchange, close=exchange.last and self.announce_close)
        except _Close:
            return False
        return True

    async def _answer(self, ex: Exchange, *, close: bool) -> None:
        req, writer, reader, clock = ex.request, ex.writer, ex.reader, ex.clock
        head_only = req.method == "HEAD"
        extra = {"Connection": "close"} if close else {}
        data = ex.data
        if data is None:
            listing = self._listing(req.path)
            if listing is not None and req.method in ("GET", "HEAD"):
                await self._simple(ex, 200, listing, {"Content-Type": "application/json", **extra})
            else:
                await self._simple(ex, 404, b"not found\n", extra)
            return
        size = len(data)
        span = ex.span
        rule = self.rules.get(req.path)
        if rule is not None and not rule.applies(req.method, span if isinstance(span, tuple) else None):
            rule = None
        if rule is not None and (rule.status is not None or rule.location is not None):
            status = rule.status or 302
            more = dict(extra)
            if rule.retry_after is not None:
                more["Retry-After"] = rule.retry_after
            if rule.location is not None:
                more["Location"] = rule.location
            await self._simple(ex, status, b"nope\n", more)
            return
        if req.method == "GET" and _unmodified_since(ex.headers.get("if-modified-since")):
            req.status = 304
            ex.head(304, {"ETag": etag(data), "Last-Modified": MTIME, **extra})
            await writer.drain()
            if close:
                raise _Close()
            return
        if span == "unsatisfiable":
            await self._simple(ex, 416, b"", {"Content-Range": f"bytes */{size}", **extra})
            return
        if rule is not None and rule.ignore_range:
            span = None
        status = 200
        if isinstance(span, tuple):
            status = 206
            if rule is not None and rule.shift:
                start = min(max(0, span[0] + rule.shift), size - 1)
                end = min(size, max(start + 1, span[1] + rule.shift))
                span = (start, end)
        else:
            span = (0, size)
        start, end = span
        headers = {"Accept-Ranges": "bytes", "ETag": etag(data), "Last-Modified": MTIME, **extra}
        version = "HTTP/1.1"
        if status == 206:
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
        if rule is not None and rule.http10:
            version = "HTTP/1.0"
            headers.pop("Connection", None)
        elif rule is not None and rule.chunked:
            headers["Transfer-Encoding"] = "chunked"
        else:
            headers["Content-Length"] = str(end - start)
        req.status, req.span = status, span
        ex.head(status, headers, version)
        if head_only:
            await writer.drain()
            return
        body = data[start:end]
        if rule is not None and rule.corrupt_at is not None and start <= rule.corrupt_at < end:
            i = rule.corrupt_at - start
            body = body[:i] + bytes([body[i] ^ 0xFF]) + body[i + 1:]
        if rule is not None and rule.stall:
            await self._send(req, writer, body[:rule.stall_after], clock, chunked=False)
            while await reader.read(65536):  # nothing more is sent; wait for the client to give up
                pass
            raise _Close()
        cut = None
        if rule is not None and rule.truncate is not None:
            cut = rule.truncate
        if rule is not None and rule.cut_at is not None:
            cut = max(0, min(len(body), rule.cut_at - start))
        if cut is not None and cut < len(body):
            await self._send(req, writer, body[:cut], clock, chunked=False)
            raise _Close()
        await self._send(req, writer, body, clock, chunked=bool(rule and rule.chunked and not rule.http10))
        if (rule is not None and rule.http10) or close:
            raise _Close()

    async def _simple(self, ex: Exchange, status: int, body: bytes, headers: dict[str, str]) -> None:
        ex.simple(status, headers, body)
        await ex.writer.drain()
        if headers.get("Connection") == "close":
            raise _Close()

    async def _send(self, req: Request, writer: asyncio.StreamWriter, body: bytes, clock: Throttle, *,
                    chunked: bool) -> None:
        piece = clock.piece
        for i in range(0, len(body), piece):
            chunk = body[i:i + piece]
            await clock.wait(len(chunk))
            if chunked:
                writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            else:
                writer.write(chunk)
            await writer.drain()
            req.sent += len(chunk)
        if chunked:
            writer.write(b"0\r\n\r\n")
        await writer.drain()

    def _listing(self, path: str) -> bytes | None:
        """nginx ``autoindex_format json`` for a directory path, or None when there is none."""
        if not path.endswith("/"):
            return None
        names: dict[str, dict] = {}
        for name, data in self.files.items():
            if not name.startswith(path):
                continue
            child, slash, _ = name[len(path):].partition("/")
            if slash:
                names.setdefault(child, {"name": child, "type": "directory"})
            else:
                names[child] = {"name": child, "type": "file", "size": len(data)}
        if not names and path != "/":
            return None
        return nginx_json(list(names.values()))[1]
