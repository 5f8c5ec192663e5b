"""One persistent HTTP/1.1 connection carrying a pipeline of exchanges.

Theory of operation
-------------------
A ``Connection`` is an ``asyncio.Protocol``. ``send(exchange)`` writes the
request at once and appends the exchange to a FIFO; responses arrive in the
same order (HTTP/1.1 pipelining), so the head of the FIFO owns whatever the
parser reports next. httptools (llhttp) splits back-to-back responses inside
one ``data_received`` call correctly; we never frame messages by hand.

An exchange is told, in order: ``on_headers(status, headers)`` (return False
to abandon the connection, e.g. when a server answers 200 to a Range
request and would stream the whole file), ``on_body(chunk)`` any number of
times, then exactly one of ``on_complete()`` or ``on_error(exc)``. When the
connection breaks, every exchange still in the FIFO gets ``on_error`` with a
retryable error, so no request is ever silently dropped.

Bodies delimited by connection close (HTTP/1.0 style, no Content-Length and
no chunking) complete on EOF; their length is then checked by the caller.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
from collections import deque
from typing import Protocol

import httptools

from dtune.errors import DtuneError, HTTPError, ProtocolError
from dtune.http.message import Origin
from dtune.http.trust import default_context

_TCP_INFO = getattr(socket, "TCP_INFO", 11)   # Linux; elsewhere getsockopt fails and tcp_rtt is None
_TCP_INFO_LEN = 104                           # through tcpi_total_retrans: tcpi_rtt at 68, tcpi_rcv_rtt at 92
MAX_HEADER_BYTES = 64 * 1024  # total header block we accept (nginx's large_client_header_buffers is 4×8k)
MAX_HEADERS = 200


class Exchange(Protocol):
    """What a connection reports to about one request."""

    request: bytes

    def on_headers(self, status: int, headers: dict[str, str]) -> bool: ...
    def on_body(self, data: bytes) -> None: ...
    def on_complete(self) -> None: ...
    def on_error(self, exc: Exception) -> None: ...


class FutureExchange:
    """An exchange whose end resolves the future ``done``: None when the response is complete,
    the error when it fails. Subclasses decide what to do with the head and the body."""

    def __init__(self, request: bytes, loop: asyncio.AbstractEventLoop) -> None:
        self.request = request
        self.done: asyncio.Future[None] = loop.create_future()

    def on_headers(self, status: int, headers: dict[str, str]) -> bool:
        return True

    def on_body(self, data: bytes) -> None:
        pass

    def on_complete(self) -> None:
        if not self.done.done():
            self.done.set_result(None)

    def on_error(self, exc: Exception) -> None:
        if not self.done.done():
            self.done.set_exception(exc)


# getaddrinfo's answers that the name has no address (EAI_AGAIN, a resolver that did not answer, is
# not one of them: asking again may help)
NO_NAME = frozenset(getattr(socket, name) for name in ("EAI_NONAME", "EAI_NODATA") if hasattr(socket, name))


class ConnectionClosed(HTTPError):
    """The connection ended before this exchange's response was complete."""

    network = True   # the path or the server went away, not an answer about this file


class Unreachable(HTTPError):
    """A connection to the origin could not be opened (refused, unreachable, timed out, no name).

    ``dead``: the origin's name does not resolve, or its port refuses the connection: an answer
    in milliseconds that, from an origin never reached before, asking again does not change
    (curl says so at once). Whoever knows whether the origin answered earlier decides."""

    network = True
    dead = False


class _Abandoned(Exception):
    """Raised inside a parser callback to stop parsing a body nobody wants."""


class Connection(asyncio.Protocol):
    """An HTTP/1.1 connection to one origin with up to N requests in flight."""

    one_at_a_time = False  # True where the route cannot carry a pipeline (``http.proxy``)
    # seconds its opening took, when whoever opened it measured that (``http.client``: discovery's
    # connections, which the engine takes over; one round trip each, as the engine's own)
    connect_seconds: float | None = None

    def __init__(self, origin: Origin, loop: asyncio.AbstractEventLoop) -> None:
        self.origin = origin
        self._loop = loop
        self._parser = httptools.HttpResponseParser(self)
        self._fifo: deque[Exchange] = deque()
        self._current: Exchange | None = None
        self._headers: dict[str, str] = {}
        self._header_bytes = 0
        self._close_delimited = False
        self._interim = False  # the message being parsed is a 1xx interim answer
        self._closing = False  # server said Connection: close, or we gave up on it
        self.transport: asyncio.Transport | None = None
        self.closed: asyncio.Future[None] = loop.create_future()
        self.last_activity = loop.time()
        self.server_closes = False   # an answer said the server closes after it
        self.head_started: float | None = None  # a response head is being read since then
        self.paused = False          # not reading, by the reader's choice (a rate limit): not silent
        self.resumed_at: float | None = None  # when reading last resumed after a pause
        self.bytes_in = 0
        self.responses = 0
        self.kept_alive = False  # a final answer said the server keeps the connection (HTTP/1.1, no close)

    # ---- public -------------------------------------------------------
    @property
    def in_flight(self) -> int:
        return len(self._fifo)

    @property
    def queued(self) -> list[Exchange]:
        """Every exchange sent and not yet answered, in order (the current one first)."""
        return list(self._fifo)

    @property
    def current(self) -> Exchange | None:
        """The exchange whose response is being read now (None between responses)."""
        return self._current

    @property
    def usable(self) -> bool:
        return self.transport is not None and not self._closing and not self.closed.done()

    def send(self, exchange: Exchange) -> None:
        if not self.usable:
            exchange.on_error(ConnectionClosed(f"{self.origin}: connection is closed"))
            return
        if not self._fifo:
            self.last_activity = self._loop.time()  # the stall clock starts with the first request
        self._fifo.append(exchange)
        self.transport.write(exchange.request)

    def pause(self) -> None:
        """Stop reading: the kernel's receive buffer fills and TCP's window stops the sender, so
        nothing is lost and nothing is received until ``resume``."""
        if self.paused or not self.usable:
            return
        self.paused = True
        self.transport.pause_reading()

    def resume(self) -> None:
        """Read again. The time spent paused was the reader's: the stall clock and a response head's
        clock start again from now, and ``resumed_at`` says when (a reader's own clocks restart)."""
        if not self.paused:
            return
        self.paused = False
        now = self._loop.time()
        self.last_activity = now
        self.resumed_at = now
        if self.head_started is not None:
            self.head_started = now
        if self.usable:
            self.transport.resume_reading()

    def close(self, exc: Exception | None = None) -> None:
        """Drop the connection; every exchange still queued gets ``on_error``."""
        self._closing = True
        if self.transport is not None:
            self.transport.abort()
        self._fail_all(exc or ConnectionClosed(f"{self.origin}: connection closed"))

    def __repr__(self) -> str:
        state = "open" if self.usable else "closed"
        return f"<Connection {self.origin} {state} in_flight={len(self._fifo)} bytes_in={self.bytes_in}>"

    # ---- asyncio.Protocol ----------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def tcp_rtt(self) -> float | None:
        """The kernel's round-trip estimate for this connection, in seconds (Linux TCP_INFO).

        The receiver's own estimate (``tcpi_rcv_rtt``) when the kernel has one, else the
        sender-side smoothed RTT of our requests; None where TCP_INFO is not available.
        """
        if not self.usable:
            return None
        sock = self.transport.get_extra_info("socket")  # None for in-memory transports
        if sock is None:
            return None
        try:
            info = sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, _TCP_INFO_LEN)
        except (OSError, AttributeError, ValueError):
            return None
        if len(info) < _TCP_INFO_LEN:
            return None
        rtt, _, rcv_rtt = (struct.unpack_from("I", info, off)[0] for off in (68, 72, 92))
        micros = rcv_rtt or rtt
        return micros / 1e6 if micros else None

    def data_received(self, data: bytes) -> None:
        self.last_activity = self._loop.time()
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self.close(ProtocolError(f"{self.origin}: unexpected protocol upgrade"))
        except httptools.HttpParserCallbackError as exc:
            cause = exc.__context__ or exc
            if isinstance(cause, _Abandoned):
                err: Exception = ConnectionClosed(
                    f"{self.origin}: connection dropped by an earlier response", innocent=True)
            elif isinstance(cause, DtuneError):
                err = cause  # e.g. a DiskError raised while writing the body
            else:
                err = ProtocolError(f"{self.origin}: {cause}")
            self.close(err)
        except httptools.HttpParserError as exc:
            self.close(ProtocolError(f"{self.origin}: malformed HTTP response ({exc})"))

    def eof_received(self) -> bool | None:
        return None  # let the transport close; connection_lost finishes the job

    def connection_lost(self, exc: Exception | None) -> None:
        ended_by_eof = False
        if self._current is not None and self._close_delimited:
            # HTTP/1.0-style body: EOF is the end of the message.
            current, self._current = self._current, None
            self._fifo.popleft()
            current.on_complete()
            ended_by_eof = True
        self._closing = True
        reason = f"{self.origin}: connection lost" + (f" ({exc})" if exc else "")
        # after a body that ends at EOF, the requests behind it were simply never answered
        self._fail_all(ConnectionClosed(reason, innocent=ended_by_eof))
        if not self.closed.done():
            self.closed.set_result(None)

    # ---- httptools callbacks --------------------------------------------
    def on_message_begin(self) -> None:
        if not self._fifo:
            raise ProtocolError(f"{self.origin}: response without a request")
        self._current = self._fifo[0]
        self.head_started = self._loop.time()
        self._close_delimited = False
        self._headers = {}
        self._header_bytes = 0

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_bytes += len(name) + len(value) + 4
        if self._header_bytes > MAX_HEADER_BYTES or len(self._headers) > MAX_HEADERS:
            raise ProtocolError(f"{self.origin}: response headers too large")
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        if key in self._headers and key != "content-length":
            # a repeated header is one list (RFC 9110 5.3), but Set-Cookie's values hold commas
            # (Expires=Wed, 09 Jun ...): they stay apart, one per line (no value holds a line break)
            self._headers[key] += ("\n" if key == "set-cookie" else ", ") + text
        else:
            self._headers[key] = text

    def on_headers_complete(self) -> None:
        self.head_started = None
        status = self._parser.get_status_code()
        if status == 101:
            raise ProtocolError(f"{self.origin}: unexpected protocol switch (101)")
        if 100 <= status < 200:
            # Interim answer (100 Continue, 103 Early Hints): RFC 9110 §15.2 says to read on;
            # the real response for the same request follows.
            self._interim = True
            return
        headers = self._headers
        if not self._parser.should_keep_alive():
            self._closing = True
            self.server_closes = True  # HTTP/1.0 or Connection: close: requests behind this one are lost
        else:
            self.kept_alive = True
        self._close_delimited = ("content-length" not in headers
                                 and "chunked" not in headers.get("transfer-encoding", "").lower()
                                 and status not in (204, 304))
        if not self._current.on_headers(status, headers):
            # The exchange does not want this body: the only way out is to drop the connection.
            self._current = None
            self._fifo.popleft()
            raise _Abandoned()

    def on_body(self, body: bytes) -> None:
        self.bytes_in += len(body)
        if self._interim:
            return
        current = self._current
        if current is not None:
            current.on_body(body)

    def on_message_complete(self) -> None:
        if self._interim:
            self._interim = False  # the request still waits for its final answer
            return
        current, self._current = self._current, None
        if current is None:
            return
        self._fifo.popleft()
        self._close_delimited = False
        self.responses += 1
        current.on_complete()
        if self._closing and self.transport is not None:
            self.transport.close()
            self._fail_all(ConnectionClosed(f"{self.origin}: server closed the connection", innocent=True))

    # ---- helpers --------------------------------------------------------
    def _fail_all(self, exc: Exception) -> None:
        """The head of the pipeline gets ``exc``; the requests queued behind it are innocent."""
        self._current = None
        first = True
        while self._fifo:
            exchange = self._fifo.popleft()
            if first:
                first = False
                exchange.on_error(exc)
            else:
                exchange.on_error(ConnectionClosed(f"{self.origin}: connection closed before this "
                                                   f"request was answered", innocent=True))


async def open_connection(origin: Origin, *, timeout: float,
                       ssl_context: ssl.SSLContext | None = None) -> Connection:
    """Open a new connection; connection failures become retryable HTTPError, a certificate
    that is not accepted a final one."""
    loop = asyncio.get_running_loop()
    ctx = None
    if origin.scheme == "https":
        if ssl_context is None:
            ssl_context = default_context()
        ctx = ssl_context
    try:
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for returns the connection when it
        # completes just as the caller is cancelled, and the cancellation is lost (the engine's
        # shutdown then waited for ever on a lane that had connected meanwhile)
        async with asyncio.timeout(timeout):
            _, conn = await loop.create_connection(lambda: Connection(origin, loop), origin.host,
                                                   origin.port, ssl=ctx)
    except TimeoutError:
        raise Unreachable(f"{origin}: connect timed out after {timeout:g} s") from None
    except ssl.SSLError as exc:  # (an OSError too: before it)
        raise tls_failure(origin, exc) from None
    except OSError as exc:
        raise unreachable(origin, exc) from None
    return conn


def unreachable(origin: Origin, exc: OSError) -> Unreachable:
    """The error for a connection to ``origin`` that failed with ``exc``: a name that does not
    resolve and a refused port say so in those words, and are ``dead``."""
    if isinstance(exc, socket.gaierror) and exc.errno in NO_NAME:
        error = Unreachable(f"{origin.host_header}: name does not resolve ({exc.strerror or exc})")
    elif isinstance(exc, ConnectionRefusedError):
        error = Unreachable(f"{origin.host_header}: connection refused")
    else:
        return Unreachable(f"{origin}: cannot connect ({exc.strerror or exc})")
    error.dead = True
    return error


def tls_failure(origin: Origin, exc: ssl.SSLError) -> HTTPError:
    """The error for a failed TLS handshake with ``origin``: final for a certificate that is not
    accepted (asking again fails the same way), retryable for the rest (a handshake cut short)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        why = exc.verify_message or exc.reason or "not trusted"
        return HTTPError(f"{origin}: TLS certificate not accepted ({why}; --ca-certificate FILE trusts "
                         f"another CA, --insecure checks nothing)", retryable=False)
    return Unreachable(f"{origin}: TLS failed ({exc.reason or exc})")
