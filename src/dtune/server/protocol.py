"""One client connection: HTTP/1.1 on httptools, answers in order, bodies by sendfile.

Theory of operation
-------------------
``data_received`` feeds bytes to the connection's ``RequestReader``
(``request.py``), which appends each complete request to ``_queue`` and
enforces the size limits. A parse error or a limit appends an error marker
instead and stops reading: everything parsed before it is still answered,
then the 400/414/431/413 answer, then the connection closes.

``_pump`` answers the queue strictly first-in first-out, which is what makes
pipelining safe. Most answers are produced synchronously: a small file is
``pread`` and its head and body join the other answers of the same batch in
one ``writelines`` (``flush_bytes`` at a time). An answer that must wait — a large body, or a
listing / manifest built in a worker thread — becomes the connection's single
``_task``; ``_pump`` does nothing else until that task has finished, so a
later answer can never overtake it. Reading pauses when more than
``max_pipeline`` requests wait.

Bodies up to ``inline_body_max`` (64 KiB) are ``pread`` into memory: for
pipelined small files that is 1.4–1.5× cheaper in CPU than a sendfile per
answer, because a whole batch leaves in one ``writelines``. Larger bodies
bypass the transport: once its buffer is empty, the head goes out with
``os.write`` and the body with ``os.sendfile`` on the socket (zero copy),
synchronously as far as the socket takes it; only on ``EAGAIN`` does a task
take over, waiting for writability on a ``dup`` of the socket (asyncio and
uvloop both refuse ``add_writer`` on a descriptor their transport owns).
``loop.sendfile`` is not used: uvloop does not implement it, and the own
loop gives the same speed on both loops plus progress times for the send
deadline. ``docs/server.md`` has the measurements. The body-sending methods
live in ``send.py`` (``BodySender``, which this class inherits).

Under TLS the socket carries ciphertext, so nothing bypasses the transport:
bodies above ``inline_body_max`` are ``pread`` in pieces of ``tls_piece``
(256 KiB) and written through it, the next piece only while the transport
has not asked to pause (``pause_writing``), so a body is never held in
memory whole (``_stream``). Everything else is the same on both.

Deadlines are not timers: each connection records when its current phase
began or last made progress, and the server's sweeper calls
``check_deadline`` about once a second (see ``ServerConfig`` for values).
A connection's idle time counts from its last answer (or from its
connect): bytes that start no request (blank lines) do not reset it.

When every place is taken (``places.py``) a new connection waits: it is
read, but before its first complete request is answered it asks the server
for a place (``connection_ready``); without one that request is answered 503.
With a token file, every request must carry the bearer token (``auth.py``)
or is answered 401. With ``--writable``, ``PUT`` bodies go to the upload
store as they arrive and ``DELETE ?upload`` aborts an upload (``writer.py``).

The connection knows its server only as a ``ServerContext``
(``context.py``): configuration, counters, the served root, the access log
and the manifest / listing builders.
"""

from __future__ import annotations

import asyncio
import mimetypes
import os
import socket
import stat
import struct
from collections import deque
from urllib.parse import quote

import httptools

from dtune import __version__
from dtune.server.auth import denial
from dtune.server.conditions import accepts_gzip, etag_for, http_date, plan_file_response
from dtune.server.context import ServerContext
from dtune.server.paths import PathRejected, split_target
from dtune.server.request import Request, RequestReader
from dtune.server.send import BodySender, wake
from dtune.server.uploads import is_internal
from dtune.server.writer import CONTINUE, UploadHandler

STATS_PATH = b"/.well-known/dtune/stats"

REASONS = {
    200: "OK", 201: "Created", 202: "Accepted", 204: "No Content", 206: "Partial Content",
    301: "Moved Permanently", 304: "Not Modified",
    400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed",
    409: "Conflict", 411: "Length Required", 413: "Content Too Large", 414: "URI Too Long",
    416: "Range Not Satisfiable", 417: "Expectation Failed", 431: "Request Header Fields Too Large",
    500: "Internal Server Error", 503: "Service Unavailable", 507: "Insufficient Storage",
}
SERVER_NAME = f"dtune/{__version__}"
_MIME: dict[bytes, str] = {}
_QUERY_SAFE = "/?&=;:@!$'()*+,%~-._"  # a query copied into Location stays printable ASCII
LINGER = 2.0  # seconds a connection reads and drops after refusing an upload before its body (as Apache's lingering close)
_LINGER_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST and drops unsent data


def content_type(path: bytes) -> str:
    """MIME type from the extension of a file path (cached per extension; it cannot go stale)."""
    dot = path.rfind(b".")
    ext = path[dot:].lower() if dot > path.rfind(b"/") + 1 else b""
    found = _MIME.get(ext)
    if found is None:
        guessed = mimetypes.guess_type("f" + ext.decode("latin-1"), strict=False)[0] if ext else None
        found = guessed or "application/octet-stream"
        if len(_MIME) < 1024:
            _MIME[ext] = found
    return found


class HttpConnection(UploadHandler, BodySender, asyncio.Protocol):
    """The asyncio protocol for one accepted connection (see module docstring)."""

    def __init__(self, server: ServerContext) -> None:
        self._srv = server
        self._cfg = server.config
        self._loop = server.loop
        self._transport: asyncio.Transport | None = None
        self._sock_fd = -1
        self._dup_fd = -1
        self._peer = "-"
        self._queue: deque[Request] = deque()
        self._reader = RequestReader(server.config, self._queue,
                                     self._upload_head if server.uploads is not None else None)
        self._continue_due: Request | None = None  # owes a 100 Continue once the answers before it are out
        self._lingering = False
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._task: asyncio.Task[None] | None = None
        self._in_thread = False
        self._write_paused = False
        self._write_waiter: asyncio.Future[None] | None = None
        self._reading = True
        self._stopped = False  # no more requests will be parsed
        self._closed = False
        self._waiting = False  # has no place yet (the server was full when it connected)
        self._overflow = False  # found no place: its first request is answered 503
        self._tls = False
        self._token = server.token_digest
        self._log = not server.config.quiet
        # deadline bookkeeping (loop.time() values; the reader keeps when a head began)
        self._idle_since = 0.0
        self._progress_at = 0.0

    def __repr__(self) -> str:
        state = "busy" if self._task or self._queue else ("head" if self._reader.in_head else "idle")
        waiting = ", waiting for a place" if self._waiting else ""
        return f"<HttpConnection {self._peer} {state}, {len(self._queue)} queued{waiting}>"

    # -- asyncio.Protocol ----------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's is not an asyncio.Transport subclass
        self._tls = transport.get_extra_info("sslcontext") is not None
        sock = transport.get_extra_info("socket")
        # under TLS the socket carries ciphertext: never write to it past the transport
        self._sock_fd = sock.fileno() if sock is not None and not self._tls else -1
        peer = transport.get_extra_info("peername")
        if peer:
            self._peer = f"{peer[0]}:{peer[1]}"
        self._idle_since = self._loop.time()
        self._waiting = not self._srv.connection_opened(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._stopped = True
        self._drop_uploads()
        self._queue.clear()
        if self._task is not None:
            self._task.cancel()
        elif self._dup_fd >= 0:
            os.close(self._dup_fd)
            self._dup_fd = -1
        if self._write_waiter is not None:
            wake(self._write_waiter)
        self._srv.connection_closed(self)

    def eof_received(self) -> bool:
        # A client may half-close after sending its pipelined requests: answer them, then close.
        self._stopped = True
        if self._tls:
            # The client's close_notify: asyncio's TLS (and uvloop's) has no half-close, the transport
            # shuts down now and would drop (and warn about) anything written after this.
            self._closed = True
            return False
        if not self._queue and self._task is None:
            return False
        return True

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._progress_at = self._loop.time()
        if self._write_waiter is not None:
            wake(self._write_waiter)

    def data_received(self, data: bytes) -> None:
        if self._stopped:
            return  # (while lingering too: what a refused upload still sends is dropped)
        if self._reader.feed(data, self._loop.time()):
            self._stop_reading()  # an error marker or an Upgrade ends the queue
        if self._waiting and self._queue:
            self._waiting = False
            if not self._queue[0].error:  # a broken request is answered and closed without a place
                self._overflow = not self._srv.connection_ready(self)
        if self._reading and len(self._queue) > self._cfg.max_pipeline:
            self._reading = False
            self._transport.pause_reading()  # type: ignore[union-attr]
        self._pump()

    # -- answering, in order ---------------------------------------------------

    def _stop_reading(self) -> None:
        self._stopped = True
        if self._reading and self._transport is not None:
            self._reading = False
            self._transport.pause_reading()

    def _pump(self) -> None:
        if self._task is not None or self._closed:
            return
        queue = self._queue
        answered = bool(queue)
        while queue:
            if self._write_paused:
                self._flush()
                self._start(self._wait_writable_transport())
                return
            req = queue.popleft()
            try:
                step = self._respond(req)
            except Exception as exc:  # a bug must cost one connection, never the server
                self._srv.internal_error("answering a request", exc)
                self._flush()
                self._abort()
                return
            if step is not None:
                self._flush()
                self._start(step)
                return
            if self._closed:
                return
        self._flush()
        if self._continue_due is not None and not self._closed:
            self._continue_due = None  # (cleared when its body came complete without waiting for it)
            self._transport.write(CONTINUE)  # type: ignore[union-attr]
        if answered:  # idle from the last answer on (bytes that start no request do not count)
            self._idle_since = self._loop.time()
        if self._stopped and self._transport is not None and not self._lingering:
            self._transport.close()  # EOF or error after the last answer
            return
        if not self._reading and not self._stopped:
            self._reading = True
            self._transport.resume_reading()  # type: ignore[union-attr]
        self._srv.flush_log()

    def _start(self, coro) -> None:  # type: ignore[no-untyped-def]
        self._progress_at = self._loop.time()
        self._task = self._loop.create_task(self._run(coro))

    async def _run(self, coro) -> None:  # type: ignore[no-untyped-def]
        try:
            await coro
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._srv.internal_error("sending an answer", exc)
            self._abort()
        finally:
            self._task = None
            self._idle_since = self._loop.time()
            if self._closed and self._dup_fd >= 0:
                os.close(self._dup_fd)
                self._dup_fd = -1
        self._pump()

    async def _wait_writable_transport(self) -> None:
        while self._write_paused and not self._closed:
            self._write_waiter = self._loop.create_future()
            try:
                await self._write_waiter
            finally:
                self._write_waiter = None

    def _flush(self) -> None:
        out = self._out
        if out:
            if not self._closed:
                self._transport.writelines(out)  # type: ignore[union-attr]
            out.clear()
            self._out_bytes = 0

    def _abort(self, *, reset: bool = False) -> None:
        """Drop the connection now; ``reset`` also discards unsent data (RST), as for a stalled client."""
        self._out.clear()
        self._queue.clear()
        self._stopped = True
        if self._transport is None:
            return
        if reset:
            sock = self._transport.get_extra_info("socket")
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
            except (OSError, AttributeError):
                pass
        self._transport.abort()

    def _finish(self, req: Request, status: int, sent: int, *, counted: bool = True) -> None:
        """Count the answer; close after it when keep-alive ends here."""
        if counted:
            stats = self._srv.stats
            stats.requests += 1
            stats.bytes_sent += sent
            responses = stats.responses
            responses[status] = responses.get(status, 0) + 1
            if self._log:
                self._srv.log_access(self._peer, req.method, req.target, status)
        if not req.keep_alive:
            self._stopped = True
            self._drop_uploads()
            self._queue.clear()
            self._flush()
            if req.linger and not self._tls and self._transport is not None and self._transport.can_write_eof():
                self._linger()
                return
            if self._transport is not None:
                self._transport.close()
            self._closed = True

    def _linger(self) -> None:
        """Close after a refused upload without losing the answer: send FIN, then read and drop what
        the client still sends until it closes or ``LINGER`` seconds pass (a close with unread data
        would reset the connection and could destroy the answer before the client reads it)."""
        self._lingering = True
        self._idle_since = self._loop.time()
        self._transport.write_eof()  # type: ignore[union-attr]
        if not self._reading:
            self._reading = True
            self._transport.resume_reading()  # type: ignore[union-attr]

    def _head(self, status: int, req: Request, length: int | None, fields: str) -> bytes:
        if req.keep_alive:
            conn = "Connection: keep-alive\r\n" if req.http10 else ""
        else:
            conn = "Connection: close\r\n"
        clen = "" if length is None else f"Content-Length: {length}\r\n"
        return f"HTTP/1.1 {status} {REASONS[status]}\r\n{self._srv.common_fields()}{clen}{fields}{conn}\r\n".encode(
            "latin-1")

    def _simple(self, req: Request, status: int, fields: str = "", body: bytes | None = None) -> None:
        """A short answer with a text body (errors, redirects)."""
        if status == 400:
            req.keep_alive = False  # the stream may be out of step: never parse past a bad request
        if body is None:
            body = f"{status} {REASONS[status]}\n".encode()
        head = self._head(status, req, len(body), "Content-Type: text/plain; charset=utf-8\r\n" + fields)
        self._out.append(head if req.method == b"HEAD" else head + body)
        self._finish(req, status, 0)

    def _respond(self, req: Request):  # type: ignore[no-untyped-def]
        """Answer one request; return a coroutine when the answer must wait, else None."""
        if req.error:
            self._simple(req, req.error, req.fields, (req.reason + "\n").encode() if req.reason else None)
            return None
        if req.upload is not None:
            if self._continue_due is req:  # the client sent the body without waiting: no 100 after the answer
                self._continue_due = None
            sink, req.upload = req.upload, None
            return self._answer_upload(req, sink)
        if self._overflow:
            req.keep_alive = False
            self._simple(req, 503, "Retry-After: 1\r\n")
            return None
        if self._token is not None:
            challenge = denial(req.headers.get(b"authorization"), self._token)
            if challenge:
                self._simple(req, 401, challenge)
                return None
        method = req.method
        if method == b"GET":
            is_get = True
        elif method == b"HEAD":
            is_get = False
        elif self._srv.uploads is not None:
            self._other_method(req)
            return None
        else:
            self._simple(req, 405, "Allow: GET, HEAD\r\n")
            return None
        raw_path = req.target
        query = None
        if raw_path[:1] != b"/" or b"?" in raw_path or b"#" in raw_path:  # not a bare origin-form path
            try:
                url = httptools.parse_url(raw_path)
            except httptools.HttpParserInvalidURLError:
                req.keep_alive = False
                self._simple(req, 400)
                return None
            raw_path = url.path or b"/"
            query = url.query
        if raw_path == STATS_PATH:
            self._stats(req)
            return None
        try:
            target = split_target(raw_path)
            if is_internal(target):
                raise PathRejected(404, "the server's own directory")
            fd, st, real = self._srv.root.open(target)
        except PathRejected as exc:
            self._simple(req, exc.status, self._pending_fields(raw_path) if exc.status == 404 else "")
            return None
        if stat.S_ISDIR(st.st_mode):
            try:
                real = self._srv.root.real_of(fd, target, real)
            finally:
                os.close(fd)
            if not target.trailing_slash:
                location = target.url_path(slash=True)
                if query:
                    location += "?" + quote(query, safe=_QUERY_SAFE)
                self._simple(req, 301, f"Location: {location}\r\n")
                return None
            return self._directory(req, target, real, query)
        if target.trailing_slash:  # "file/" names no file (ENOTDIR), as in nginx
            os.close(fd)
            self._simple(req, 404)
            return None
        uploads = self._srv.uploads
        pending = uploads.fields_for(target.relbytes) if uploads is not None and uploads.entries else ""
        return self._file(req, is_get, fd, st, target.relbytes, pending)

    def _file(self, req: Request, is_get: bool, fd: int, st: os.stat_result, name: bytes,  # type: ignore[no-untyped-def]
              pending: str = ""):
        size = st.st_size
        mtime = int(st.st_mtime)
        etag = etag_for(size, st.st_mtime_ns)
        headers = req.headers
        if b"range" in headers or b"if-none-match" in headers or b"if-modified-since" in headers:
            plan = plan_file_response(
                is_get=is_get, size=size, mtime=mtime, etag=etag,
                range_value=_text(headers.get(b"range")), if_range=_text(headers.get(b"if-range")),
                if_none_match=_text(headers.get(b"if-none-match")),
                if_modified_since=_text(headers.get(b"if-modified-since")),
            )
            status, start, length = plan.status, plan.start, plan.length
        else:
            status, start, length = 200, 0, size
        # (``pending``: Dtune-Received of an unfinished upload replacing this file, ``--writable``)
        validators = f"ETag: {etag}\r\nLast-Modified: {http_date(mtime)}\r\nAccept-Ranges: bytes\r\n{pending}"
        if status == 304:
            os.close(fd)
            self._out.append(self._head(304, req, None, validators))
            self._finish(req, 304, 0)
            return None
        if status == 416:
            os.close(fd)
            self._simple(req, 416, f"Content-Range: bytes */{size}\r\n" + validators)
            return None
        fields = f"Content-Type: {content_type(name)}\r\n{validators}"
        if status == 206:
            fields += f"Content-Range: bytes {start}-{start + length - 1}/{size}\r\n"
        head = self._head(status, req, length, fields)
        if not is_get or length == 0:
            os.close(fd)
            self._out.append(head)
            self._finish(req, status, 0)
            return None
        if length <= self._cfg.inline_body_max:
            try:
                body = os.pread(fd, length, start)
            finally:
                os.close(fd)
            if len(body) != length:  # shrank since fstat: the promised length cannot be kept
                self._flush()
                self._abort()
                return None
            out = self._out
            out.append(head)
            out.append(body)
            self._out_bytes += length
            if self._out_bytes >= self._cfg.flush_bytes:
                self._flush()
            self._finish(req, status, length)
            return None
        if self._tls:
            return self._stream(req, status, fd, head, start, length)
        return self._send_body(req, status, fd, head, start, length)

    async def _directory(self, req: Request, target, real: str, query: bytes | None) -> None:  # type: ignore[no-untyped-def]
        accept = req.headers.get(b"accept", b"")
        want_manifest = b"application/json" in accept or _has_manifest_key(query)
        base = target.url_path(slash=True)
        gzip = accepts_gzip(req.headers.get(b"accept-encoding", b"").decode("latin-1"))
        self._in_thread = True
        try:
            if want_manifest:
                body, gzipped = await self._loop.run_in_executor(None, self._srv.manifest, real, base, gzip)
                ctype = "application/json"
            else:
                body, gzipped = await self._loop.run_in_executor(None, self._srv.listing, real, base,
                                                                 target.relbytes == b".", gzip)
                ctype = "text/html; charset=utf-8"
        except PermissionError:
            self._simple(req, 403)
            return
        except OSError:  # vanished or replaced while we looked
            self._simple(req, 404)
            return
        finally:
            self._in_thread = False
        if self._closed:
            return
        fields = f"Content-Type: {ctype}\r\nCache-Control: no-cache\r\nVary: Accept-Encoding\r\n"
        if gzipped:
            fields += "Content-Encoding: gzip\r\n"
        head = self._head(200, req, len(body), fields)
        self._out.append(head if req.method == b"HEAD" else head + body)
        self._flush()
        self._finish(req, 200, 0)

    def _stats(self, req: Request) -> None:
        body = self._srv.stats_json()
        head = self._head(200, req, len(body), "Content-Type: application/json\r\nCache-Control: no-store\r\n")
        self._out.append(head if req.method == b"HEAD" else head + body)
        self._finish(req, 200, 0, counted=False)  # the stats request itself is not counted

    # -- deadlines -------------------------------------------------------------

    def check_deadline(self, now: float) -> None:
        """Close the connection if its current phase has lasted too long (called by the sweeper)."""
        if self._closed or self._transport is None:
            return
        cfg = self._cfg
        if self._lingering:
            if now - self._idle_since > LINGER:
                self._abort()
        elif self._task is not None or self._queue:
            if self._in_thread or now - self._progress_at <= cfg.send_timeout:
                return
            self._abort(reset=True)  # the client stopped reading: free the socket buffers too
        elif self._reader.in_body:
            if now - self._reader.body_at > cfg.send_timeout:
                self._abort(reset=True)  # an upload body stalled
        elif self._reader.in_head:
            if now - self._reader.head_started > cfg.header_timeout:
                self._abort(reset=True)  # slowloris: the head did not arrive in time
        elif now - self._idle_since > cfg.keepalive_timeout:
            self._stopped = True
            self._transport.close()

    def shutdown(self) -> None:
        """Server stop: drop the connection (answers in progress are cut)."""
        if not self._closed and self._transport is not None:
            self._abort()

    # -- places (``places.py``) ----------------------------------------------------

    def unused_since(self) -> float | None:
        """When this connection last had nothing to do; None while a request is in progress."""
        if self._task is not None or self._queue or self._closed or self._reader.in_body:
            return None
        if self._reader.in_head:
            return self._reader.head_started
        return self._idle_since

    def close_for_newcomer(self) -> None:
        """Its place (or its turn to wait) went to a newer connection: idle ones close, heads are reset."""
        if self._closed or self._transport is None:
            return
        if self._reader.in_head:
            self._abort(reset=True)  # as at the head deadline
        else:
            self._stopped = True
            self._transport.close()
        self._closed = True


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("latin-1")


def _has_manifest_key(query: bytes | None) -> bool:
    if not query:
        return False
    return any(part.split(b"=", 1)[0] == b"manifest" for part in query.split(b"&"))
