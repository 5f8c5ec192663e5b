"""Sending a response body: sendfile straight to the socket, or pieces through the TLS transport.

``BodySender`` is the part of ``HttpConnection`` (``protocol.py``) that moves
the bytes of a body larger than ``inline_body_max``. Without TLS the head
goes out with ``os.write`` and the body with ``os.sendfile`` on the socket,
synchronously as far as the socket takes it, once the transport's buffer is
empty (``_send_body``); on ``EAGAIN`` a task takes over and waits for
writability on a ``dup`` of the socket (``_sendfile``), because asyncio and
uvloop both refuse ``add_writer`` on a descriptor their transport owns.
Under TLS the socket carries ciphertext, so the body is ``pread`` in pieces
of ``tls_piece`` and written through the transport, the next piece only
while the transport has not asked to pause (``_stream``).

Every path closes the file descriptor it was given, counts the body bytes
in ``stats.bytes_sent`` and a body cut short in ``stats.cut``, records
progress for the send deadline, and ends with the connection's ``_finish``
or ``_abort``.
"""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dtune.server.config import ServerConfig
    from dtune.server.context import ServerContext
    from dtune.server.request import Request


def wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class BodySender:
    """Body-sending methods of ``HttpConnection``; the state they use is the connection's own."""

    if TYPE_CHECKING:  # provided by HttpConnection
        _srv: ServerContext
        _cfg: ServerConfig
        _loop: asyncio.AbstractEventLoop
        _transport: asyncio.Transport | None
        _sock_fd: int
        _dup_fd: int
        _closed: bool
        _write_paused: bool
        _progress_at: float

        def _flush(self) -> None: ...
        def _abort(self, *, reset: bool = False) -> None: ...
        def _finish(self, req: Request, status: int, sent: int, *, counted: bool = True) -> None: ...
        async def _wait_writable_transport(self) -> None: ...

    def _send_body(self, req: Request, status: int, fd: int, head: bytes, offset: int, length: int):  # type: ignore[no-untyped-def]
        """Send head and body now, straight to the socket, as far as it takes them without waiting.

        Returns None when all went out, else the coroutine that sends the rest.
        Writing past the transport is safe only while its buffer is empty.
        """
        self._flush()
        sock = self._sock_fd
        if sock < 0 or self._closed or self._transport.get_write_buffer_size() > 0:  # type: ignore[union-attr]
            return self._sendfile(req, status, fd, head, offset, length)
        try:
            head = head[os.write(sock, head):]
            while not head and length > 0:
                n = os.sendfile(sock, fd, offset, length)
                if n == 0:  # the file shrank under us; the promised length cannot be kept
                    os.close(fd)
                    self._srv.stats.cut += 1
                    self._abort()
                    return None
                offset += n
                length -= n
                self._srv.stats.bytes_sent += n
        except BlockingIOError:
            pass
        except OSError:  # EPIPE, ECONNRESET: the client is gone
            os.close(fd)
            self._srv.stats.cut += 1
            self._abort()
            return None
        if head or length:
            return self._sendfile(req, status, fd, head, offset, length)
        os.close(fd)
        self._finish(req, status, 0)
        return None

    async def _sendfile(self, req: Request, status: int, fd: int, head: bytes, offset: int, length: int) -> None:
        """Send ``head`` then ``length`` bytes of ``fd`` straight to the socket."""
        sent_body = 0
        try:
            sock = await self._direct_socket()
            if sock < 0:
                return
            loop = self._loop
            while head:
                try:
                    n = os.write(sock, head)
                except BlockingIOError:
                    await self._writable(sock)
                    continue
                head = head[n:]
            while length > 0:
                try:
                    n = os.sendfile(sock, fd, offset, length)
                except BlockingIOError:
                    await self._writable(sock)
                    continue
                if n == 0:  # the file shrank under us; the promised length cannot be kept
                    self._abort()
                    return
                offset += n
                length -= n
                sent_body += n
                self._srv.stats.bytes_sent += n
                self._progress_at = loop.time()
        except (BrokenPipeError, ConnectionError):
            self._abort()
            return
        except OSError as exc:
            self._srv.internal_error("sendfile", exc)
            self._abort()
            return
        finally:
            os.close(fd)
            if head or length:  # the client went away, or the server stopped: cut short
                self._srv.stats.cut += 1
        self._finish(req, status, 0)

    async def _stream(self, req: Request, status: int, fd: int, head: bytes, offset: int, length: int) -> None:
        """TLS: ``head``, then ``length`` bytes of ``fd`` in pieces through the transport (no sendfile).

        A piece is read only while the transport takes more (flow control), so
        at most one piece plus the transport's buffers is held in memory.
        """
        transport = self._transport
        stats = self._srv.stats
        piece = self._cfg.tls_piece
        loop = self._loop
        try:
            transport.write(head)  # type: ignore[union-attr]
            while length > 0:
                if self._write_paused:
                    await self._wait_writable_transport()
                if self._closed:
                    return
                data = os.pread(fd, min(piece, length), offset)
                if not data:  # the file shrank under us; the promised length cannot be kept
                    self._abort()
                    return
                transport.write(data)  # type: ignore[union-attr]
                n = len(data)
                offset += n
                length -= n
                stats.bytes_sent += n
                self._progress_at = loop.time()
                await asyncio.sleep(0)  # a client that reads as fast as we write must not keep the loop
        finally:
            os.close(fd)
            if length:  # the client went away, or the server stopped: cut short
                stats.cut += 1
        self._finish(req, status, 0)

    async def _direct_socket(self) -> int:
        """A descriptor for writing past the transport, once the transport's buffer is empty."""
        transport = self._transport
        if self._dup_fd < 0:
            if self._sock_fd < 0 or self._closed:
                return -1
            self._dup_fd = os.dup(self._sock_fd)
        while transport is not None and transport.get_write_buffer_size() > 0:
            if self._closed:
                return -1
            await self._writable(self._dup_fd)
            await asyncio.sleep(0)  # let the transport flush its own buffer first
        return -1 if self._closed else self._dup_fd

    async def _writable(self, fd: int) -> None:
        fut = self._loop.create_future()
        self._loop.add_writer(fd, wake, fut)
        try:
            await fut
        finally:
            self._loop.remove_writer(fd)
        if self._closed:
            raise ConnectionResetError("connection closed")
