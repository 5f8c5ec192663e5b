"""Request reading: bytes in, complete requests out, within the size limits.

Theory of operation
-------------------
``RequestReader.feed`` hands bytes to ``httptools.HttpRequestParser``, which
calls the reader back (``on_url``, ``on_header`` …). The callbacks collect
the request line and headers, count against the limits of ``ServerConfig``
and append each complete request to the connection's queue. The reader does
no I/O: it never touches the socket and takes the clock from its caller.

A broken limit raises ``_Limit`` inside a callback, which httptools turns
into a parse error; ``feed`` then appends an error marker (a ``Request``
with ``error`` set to 414, 431, 413, or 400 for a plain parse error) and
answers True: read no more. Everything queued before the marker is still
answered, then the error, then the connection closes. An ``Upgrade``
(h2c, websocket) is not offered either: the request before it is answered
over HTTP/1.1 with keep-alive off, and reading stops.

httptools joins the pieces of a header name and value itself and calls
``on_header`` only once the pair is complete, so one endless header line
would grow unseen by the counters: ``feed`` also bounds the raw bytes of
one head that spans several reads (431 past the line and header limits
plus 1 KiB of slack).

Uploads (``--writable``): the connection passes a ``head_hook`` that is
called when a head is complete, before its body. It returns None (an
ordinary request: its body is counted against ``max_body`` and dropped), a
sink whose ``write`` takes the body as it arrives (not counted: the hook
has judged the length), or raises ``Refusal``. A refusal marked ``now`` is
queued at once and reading stops (the connection lingers and closes after
the answer); another one is answered after its body is dropped.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import httptools

from dtune.server.config import ServerConfig
from dtune.server.uploads import Refusal


class Request:
    """One parsed request, or (``error`` set) the marker of a request that broke a limit."""

    __slots__ = ("method", "target", "headers", "keep_alive", "http10", "error", "fields", "reason", "upload", "linger")

    def __init__(self) -> None:
        self.method = b""
        self.target = b""
        self.headers: dict[bytes, bytes] = {}
        self.keep_alive = True
        self.http10 = False
        self.error = 0  # a status (400, 413, 414, 431): answer it and close
        self.fields = ""  # header lines of the error answer
        self.reason = ""  # its body (a refused upload says why)
        self.upload: Any = None  # the complete body's ``uploads.Sink`` (``--writable``)
        self.linger = False  # an upload refused before its body: read and drop what follows before closing


class _Limit(Exception):
    """Raised inside a parser callback when the request breaks a limit."""


class RequestReader:
    """The httptools parser of one connection and the limits it enforces (see module docstring)."""

    def __init__(self, config: ServerConfig, queue: deque[Request],
                 head_hook: Callable[[Request], Any] | None = None) -> None:
        self._cfg = config
        self._queue = queue
        self._head_hook = head_hook
        self._sink: Any = None  # the upload body being written
        self._refused = False
        self.body_at = 0.0  # loop.time() of the last upload body bytes
        self._parser = httptools.HttpRequestParser(self)
        self._req: Request | None = None
        self._url = b""
        self._header_count = 0
        self._header_bytes = 0
        self._body_bytes = 0
        self._limit_status = 0
        self._seq = 0
        self._raw_head = 0
        self.now = 0.0  # loop.time() of the bytes being fed
        self.in_head = False  # a head has begun and is not complete
        self.head_started = 0.0  # when it began

    def feed(self, data: bytes, now: float) -> bool:
        """Parse ``data`` received at ``now``; True means stop reading (the queue ends the connection)."""
        self.now = now
        was_in_head, seq = self.in_head, self._seq
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self._queue:
                self._queue[-1].keep_alive = False
            return True
        except httptools.HttpParserError:
            if self._refused:
                return True
            return self._fail(self._limit_status or 400)
        if was_in_head and self.in_head and seq == self._seq:
            # the whole read belongs to one unfinished head: bound what httptools buffers
            self._raw_head += len(data)
            if self._raw_head > self._cfg.max_request_line + self._cfg.max_header_bytes + 1024:
                return self._fail(431)
        return False

    def _fail(self, status: int) -> bool:
        req = Request()
        req.error = status
        req.keep_alive = False
        self._queue.append(req)
        self.in_head = False
        return True

    # -- httptools callbacks -------------------------------------------------

    def on_message_begin(self) -> None:
        self._req = Request()
        self._url = b""
        self._header_count = self._header_bytes = self._body_bytes = 0
        self.in_head = True
        self._seq += 1
        self._raw_head = 0
        self.head_started = self.now

    def on_url(self, url: bytes) -> None:
        self._url += url
        if len(self._url) > self._cfg.max_request_line:
            self._limit_status = 414
            raise _Limit

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        self._header_bytes += len(name) + len(value) + 4
        if self._header_count > self._cfg.max_headers or self._header_bytes > self._cfg.max_header_bytes:
            self._limit_status = 431
            raise _Limit
        headers = self._req.headers  # type: ignore[union-attr]
        key = name.lower()
        old = headers.get(key)
        headers[key] = value if old is None else old + b", " + value

    def on_headers_complete(self) -> None:
        req = self._req
        parser = self._parser
        req.method = parser.get_method()  # type: ignore[union-attr]
        req.target = self._url  # type: ignore[union-attr]
        req.keep_alive = parser.should_keep_alive()  # type: ignore[union-attr]
        req.http10 = parser.get_http_version() == "1.0"  # type: ignore[union-attr]
        self.in_head = False
        if self._head_hook is not None:
            try:
                self._sink = self._head_hook(req)
            except Refusal as exc:
                req.error = exc.status  # type: ignore[union-attr]
                req.fields = exc.fields  # type: ignore[union-attr]
                req.reason = exc.reason  # type: ignore[union-attr]
                if exc.now:
                    req.keep_alive = False  # type: ignore[union-attr]
                    req.linger = True  # type: ignore[union-attr]
                    self._queue.append(req)  # type: ignore[arg-type]
                    self._refused = True
                    raise _Limit from None
            self.body_at = self.now

    @property
    def in_body(self) -> bool:
        """An upload body is being received."""
        return self._sink is not None

    def take_sink(self) -> Any:
        """The upload body in progress, taken away (the connection is gone)."""
        sink, self._sink = self._sink, None
        return sink

    def on_body(self, body: bytes) -> None:
        sink = self._sink
        if sink is not None:
            sink.write(body)
            self.body_at = self.now
            return
        self._body_bytes += len(body)
        if self._body_bytes > self._cfg.max_body:
            self._limit_status = 413
            raise _Limit

    def on_message_complete(self) -> None:
        if self._sink is not None:
            self._req.upload = self._sink  # type: ignore[union-attr]
            self._sink = None
        self._queue.append(self._req)  # type: ignore[arg-type]
