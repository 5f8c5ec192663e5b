"""The upload side of a connection (``--writable``): heads judged before their body, answers after it.

``UploadHandler`` is the part of ``HttpConnection`` (``protocol.py``) that
speaks the upload protocol of ``docs/server.md`` ("Uploads"). The request
reader calls ``_upload_head`` as soon as the head of a ``PUT`` is complete,
before any body byte: the token, the method, the path, the lengths, the
digests, the quota are judged there. A refusal (``uploads.Refusal``) is
answered before the body when the client waits for it (``Expect:
100-continue``) or the body is larger than the 64 KiB the server discards;
the connection then closes after lingering to read what the client still
sends (so the answer is not lost in a reset). Otherwise the body is read and
dropped and the refusal answered after it, keeping the connection. An
accepted head returns the ``Sink`` the body is written to; when the body is
complete the request joins the answer queue like any other and
``_answer_upload`` waits for the store's verdict (``uploads.UploadStore``).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import httptools

from dtune.server.auth import denial
from dtune.server.confine import status_of
from dtune.server.paths import PathRejected, Target, split_target
from dtune.server.uploadhead import (
    HeadError,
    parse_content_md5,
    parse_content_range,
    parse_length,
    parse_repr_digest,
)
from dtune.server.uploads import Answer, Refusal, Sink, is_internal

if TYPE_CHECKING:
    from collections import deque

    from dtune.server.config import ServerConfig
    from dtune.server.context import ServerContext
    from dtune.server.request import Request, RequestReader

CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
ALLOW = "Allow: GET, HEAD, PUT, DELETE\r\n"


class UploadHandler:
    """Upload methods of ``HttpConnection``; the state they use is the connection's own."""

    if TYPE_CHECKING:  # provided by HttpConnection
        _srv: ServerContext
        _cfg: ServerConfig
        _loop: asyncio.AbstractEventLoop
        _transport: asyncio.Transport | None
        _queue: deque[Request]
        _reader: RequestReader
        _task: asyncio.Task[None] | None
        _closed: bool
        _waiting: bool
        _overflow: bool
        _token: bytes | None
        _continue_due: Request | None

        def _simple(self, req: Request, status: int, fields: str = "", body: bytes | None = None) -> None: ...

    # -- at the head ---------------------------------------------------------------

    def _upload_head(self, req: Request) -> Sink | None:
        """Judge a complete head (no body byte read yet): the body's ``Sink``, None for a request that
        is not an upload, or ``Refusal``."""
        if req.method != b"PUT":
            return None
        store = self._srv.uploads
        assert store is not None
        headers = req.headers
        expect = headers.get(b"expect")
        chunked = b"transfer-encoding" in headers
        try:
            length = parse_length(headers[b"content-length"].decode("latin-1")) if b"content-length" in headers else -1
        except HeadError as exc:
            raise Refusal(400, exc.reason, now=True) from None
        # refused before the body when the client waits for the answer or the body is too big to drop
        now = expect is not None or chunked or length < 0 or length > self._cfg.max_body
        if self._waiting:  # the server was full when this connection came: it needs a place first
            self._waiting = False
            self._overflow = not self._srv.connection_ready(self)  # type: ignore[arg-type]
            if self._overflow:
                raise Refusal(503, "the server is full", "Retry-After: 1\r\n", now=True)
        try:
            sink = self._judge(req, length, chunked, expect)
        except Refusal as exc:
            exc.now = exc.now or now
            raise
        except HeadError as exc:
            raise Refusal(exc.status, exc.reason, now=now) from None
        except PathRejected as exc:
            raise Refusal(exc.status, str(exc), now=now) from None
        except OSError as exc:  # the part or the journal could not be written
            raise Refusal(status_of(exc), f"cannot start the upload: {exc.strerror}", now=now) from None
        if expect is not None and not req.http10:
            if self._task is None and not self._queue:
                self._transport.write(CONTINUE)  # type: ignore[union-attr]
            else:  # after the answers before it (``_pump``)
                self._continue_due = req
        return sink

    def _judge(self, req: Request, length: int, chunked: bool, expect: bytes | None) -> Sink:
        store = self._srv.uploads
        assert store is not None
        headers = req.headers
        if self._token is not None:
            challenge = denial(headers.get(b"authorization"), self._token)
            if challenge:
                raise Refusal(401, "a bearer token is needed", challenge)
        if expect is not None and expect.strip().lower() != b"100-continue":
            raise Refusal(417, "the only expectation understood is 100-continue", now=True)
        if chunked:
            raise Refusal(411, "send uploads with Content-Length (Transfer-Encoding is not accepted)", now=True)
        if length < 0:
            raise Refusal(411, "an upload needs Content-Length", now=True)
        target, query = _target_of(req.target)
        if query is not None:
            raise Refusal(400, "PUT takes no query")
        if target.relbytes == b"." or target.trailing_slash:
            raise Refusal(405, "PUT names a file, not a directory", ALLOW)
        if is_internal(target):
            raise Refusal(403, "the .dtune directory is the server's own")
        limit = self._cfg.max_upload_size
        crange = headers.get(b"content-range")
        digests = parse_repr_digest(headers[b"repr-digest"].decode("latin-1")) if b"repr-digest" in headers else {}
        md5 = parse_content_md5(headers[b"content-md5"].decode("latin-1")) if b"content-md5" in headers else None
        if crange is None:
            if length > limit:
                raise Refusal(413, f"larger than --max-upload-size ({limit} bytes)", now=True)
            return store.open_whole(target, length, digests, md5)
        start, end, total = parse_content_range(crange.decode("latin-1"))
        if end - start != length:
            raise Refusal(400, "Content-Range and Content-Length disagree")
        if total > limit:
            raise Refusal(413, f"TOTAL is larger than --max-upload-size ({limit} bytes)", now=True)
        return store.open_piece(target, start, end, total, digests, md5)

    # -- in the answer queue -------------------------------------------------------------

    async def _answer_upload(self, req: Request, sink: Sink) -> None:
        store = self._srv.uploads
        assert store is not None
        answer: Answer = await asyncio.shield(store.finish(sink))
        if not self._closed:
            self._upload_answer(req, answer)

    def _upload_answer(self, req: Request, answer: Answer) -> None:
        if answer.status in (201, 202, 204):
            head = self._head(answer.status, req, None if answer.status == 204 else 0, answer.fields)
            self._out.append(head)
            self._flush()
            self._finish(req, answer.status, 0)
        else:
            self._simple(req, answer.status, answer.fields, (answer.reason or str(answer.status)).encode() + b"\n")
            self._flush()

    def _other_method(self, req: Request) -> None:
        """A request that is neither GET, HEAD nor an upload's PUT on a writable server."""
        if req.method != b"DELETE":
            self._simple(req, 405, ALLOW)
            return
        try:
            target, query = _target_of(req.target)
        except (PathRejected, Refusal) as exc:
            self._simple(req, getattr(exc, "status", 400))
            return
        if query != b"upload":
            self._simple(req, 405, ALLOW, b"DELETE only aborts an unfinished upload: DELETE /path?upload\n")
            return
        store = self._srv.uploads
        assert store is not None
        self._upload_answer(req, store.abort(target.relbytes))

    def _pending_fields(self, raw_path: bytes) -> str:
        """``Dtune-Received`` and ``Dtune-Upload-Length`` of an unfinished upload of this path, or ""."""
        store = self._srv.uploads
        if store is None or not store.entries:
            return ""
        try:
            return store.fields_for(split_target(raw_path).relbytes)
        except PathRejected:
            return ""

    def _drop_uploads(self) -> None:
        """The connection is gone: a body in progress is cut; complete ones not yet answered still finish."""
        store = self._srv.uploads
        if store is None:
            return
        sink = self._reader.take_sink()
        if sink is not None:
            store.cut(sink)
        for req in self._queue:
            if req.upload is not None:
                store.finish(req.upload)
                req.upload = None

    if TYPE_CHECKING:
        _out: list[bytes]

        def _head(self, status: int, req: Request, length: int | None, fields: str) -> bytes: ...
        def _flush(self) -> None: ...
        def _finish(self, req: Request, status: int, sent: int, *, counted: bool = True) -> None: ...


def _target_of(raw: bytes) -> tuple[Target, bytes | None]:
    """The decoded path and the query of a request target; ``PathRejected`` or ``Refusal`` (400)."""
    query = None
    if raw[:1] != b"/" or b"?" in raw or b"#" in raw:
        try:
            url = httptools.parse_url(raw)
        except httptools.HttpParserInvalidURLError:
            raise Refusal(400, "the request target is not a URL") from None
        if url.schema or url.host:
            raise Refusal(400, "the request target must be a path")
        raw = url.path or b"/"
        query = url.query
    return split_target(raw), query
