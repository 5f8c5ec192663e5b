"""``dtune.http.connection``: one pipelined HTTP/1.1 connection, fed in memory and over real sockets.

In-memory tests hand bytes to ``Connection.data_received`` directly (exact
control over how responses are split); socket tests run a raw asyncio
server on 127.0.0.1 that writes precisely the bytes each test scripts.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable

import pytest

from dtune.errors import HTTPError, ProtocolError
from dtune.http.connection import Connection, ConnectionClosed, open_connection
from dtune.http.message import Origin, build_request

ORIGIN = Origin("http", "127.0.0.1", 80)


class Recorder:
    """An exchange that records what the conn told it."""

    def __init__(self, target: str = "/", *, keep: bool = True) -> None:
        self.request = build_request("GET", ORIGIN, target)
        self.keep = keep
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.body = bytearray()
        self.body_calls = 0
        self.outcome: str | None = None     # complete | error
        self.error: Exception | None = None
        self.calls: list[str] = []

    def on_headers(self, status: int, headers: dict[str, str]) -> bool:
        self.calls.append("headers")
        self.status, self.headers = status, headers
        return self.keep

    def on_body(self, data: bytes) -> None:
        self.calls.append("body")
        self.body += data
        self.body_calls += 1

    def on_complete(self) -> None:
        self.calls.append("complete")
        assert self.outcome is None, "told twice how it ended"
        self.outcome = "complete"

    def on_error(self, exc: Exception) -> None:
        self.calls.append("error")
        assert self.outcome is None, "told twice how it ended"
        self.outcome, self.error = "error", exc


def response(body: bytes, status: int = 200, *headers: str) -> bytes:
    head = [f"HTTP/1.1 {status} X", f"Content-Length: {len(body)}", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


# -- in memory ------------------------------------------------------------------------------------

class MemoryTransport:
    def __init__(self) -> None:
        self.written = bytearray()
        self.aborted = False
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written += data

    def abort(self) -> None:
        self.aborted = True

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.aborted or self.closed


def in_memory(test: Callable[[Connection, MemoryTransport], None]) -> None:
    async def main() -> None:
        conn = Connection(ORIGIN, asyncio.get_running_loop())
        transport = MemoryTransport()
        conn.connection_made(transport)  # type: ignore[arg-type]
        test(conn, transport)
    asyncio.run(main())


def test_two_pipelined_responses_in_one_data_received_call_are_both_parsed() -> None:
    def check(ch: Connection, tr: MemoryTransport) -> None:
        a, b = Recorder("/a"), Recorder("/b")
        ch.send(a)
        ch.send(b)
        assert tr.written == a.request + b.request   # both requests went out before any answer
        assert ch.in_flight == 2
        ch.data_received(response(b"first") + response(b"second!", 206, "Content-Range: bytes 0-6/9"))
        assert (a.outcome, bytes(a.body), a.status) == ("complete", b"first", 200)
        assert (b.outcome, bytes(b.body), b.status) == ("complete", b"second!", 206)
        assert b.headers["content-range"] == "bytes 0-6/9"
        assert ch.in_flight == 0 and ch.usable and ch.responses == 2
    in_memory(check)


def test_responses_fed_one_byte_at_a_time_are_parsed_in_order() -> None:
    def check(ch: Connection, tr: MemoryTransport) -> None:
        ex = [Recorder(f"/{i}") for i in range(3)]
        for e in ex:
            ch.send(e)
        stream = b"".join(response(bytes([65 + i]) * (i + 3)) for i in range(3))
        for i in range(len(stream)):
            ch.data_received(stream[i:i + 1])
        assert [bytes(e.body) for e in ex] == [b"AAA", b"BBBB", b"CCCCC"]
        assert all(e.calls[0] == "headers" and e.calls[-1] == "complete" for e in ex)
        assert ch.bytes_in == 12
    in_memory(check)


def test_chunked_body_is_reassembled_and_its_framing_is_not_in_the_body() -> None:
    def check(ch: Connection, tr: MemoryTransport) -> None:
        a, b = Recorder(), Recorder()
        ch.send(a)
        ch.send(b)
        ch.data_received(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                         b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n" + response(b"next"))
        assert bytes(a.body) == b"hello world" and a.outcome == "complete"
        assert bytes(b.body) == b"next" and b.outcome == "complete"
    in_memory(check)


def test_on_headers_false_drops_the_connection_and_fails_the_queued_requests_innocently() -> None:
    def check(ch: Connection, tr: MemoryTransport) -> None:
        a, b = Recorder(keep=False), Recorder()
        ch.send(a)
        ch.send(b)
        ch.data_received(response(b"x" * 100))
        assert a.calls == ["headers"]               # abandoned: no body, no complete, no error
        assert b.outcome == "error" and isinstance(b.error, ConnectionClosed)
        assert b.error.innocent and b.error.retryable
        assert tr.aborted and not ch.usable
    in_memory(check)


def test_connection_close_header_ends_the_connection_after_that_response() -> None:
    def check(ch: Connection, tr: MemoryTransport) -> None:
        a, b = Recorder(), Recorder()
        ch.send(a)
        ch.send(b)
        ch.data_received(response(b"bye", 200, "Connection: close"))
        assert a.outcome == "complete" and bytes(a.body) == b"bye"
        assert b.outcome == "error" and isinstance(b.error, ConnectionClosed) and b.error.innocent
        assert tr.closed and not ch.usable
    in_memory(check)


def test_a_close_delimited_body_ends_at_eof_in_memory() -> None:
    def check(ch: Connection, tr: MemoryTransport) -> None:
        a = Recorder()
        ch.send(a)
        ch.data_received(b"HTTP/1.0 200 OK\r\n\r\nuntil ")
        ch.data_received(b"the end")
        assert a.outcome is None
        ch.connection_lost(None)
        assert a.outcome == "complete" and bytes(a.body) == b"until the end"
    in_memory(check)


def test_requests_queued_behind_a_close_delimited_response_fail_innocently() -> None:
    def check(ch: Connection, tr: MemoryTransport) -> None:
        a, b = Recorder(), Recorder()
        ch.send(a)
        ch.send(b)
        ch.data_received(b"HTTP/1.0 200 OK\r\n\r\nold body")
        ch.connection_lost(None)
        assert a.outcome == "complete" and bytes(a.body) == b"old body"
        assert isinstance(b.error, ConnectionClosed) and b.error.innocent
    in_memory(check)


def test_send_on_a_closed_connection_fails_the_exchange_at_once() -> None:
    def check(ch: Connection, tr: MemoryTransport) -> None:
        ch.close()
        late = Recorder()
        ch.send(late)
        assert late.outcome == "error" and isinstance(late.error, ConnectionClosed)
        assert late.request not in tr.written
    in_memory(check)


def test_close_with_a_reason_reports_it_to_the_head_and_innocence_to_the_rest() -> None:
    def check(ch: Connection, tr: MemoryTransport) -> None:
        a, b, c = Recorder(), Recorder(), Recorder()
        for e in (a, b, c):
            ch.send(e)
        reason = HTTPError("stalled")
        ch.close(reason)
        assert a.error is reason
        assert all(isinstance(e.error, ConnectionClosed) and e.error.innocent for e in (b, c))
        assert tr.aborted and "closed" in repr(ch) and "in_flight=0" in repr(ch)
    in_memory(check)


def test_interim_1xx_answers_are_skipped_and_the_final_response_belongs_to_the_request() -> None:
    def check(ch: Connection, tr: MemoryTransport) -> None:
        ex = Recorder()
        ch.send(ex)
        ch.data_received(b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"
                         b"HTTP/1.1 100 Continue\r\n\r\n" + response(b"body"))
        assert ex.outcome == "complete" and ex.status == 200 and ex.body == b"body"
        assert ch.usable and ch.in_flight == 0
    in_memory(check)


@pytest.mark.parametrize(("data", "why"), [
    (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\n", "protocol switch"),
    (b"HTTP/1.1 200 OK\r\n" + b"X-Big: " + b"y" * 70_000 + b"\r\n\r\n", "too large"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabc", "malformed"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "malformed"),
])
def test_broken_responses_become_a_protocol_error(data: bytes, why: str) -> None:
    def check(ch: Connection, tr: MemoryTransport) -> None:
        ex = Recorder()
        ch.send(ex)
        ch.data_received(data)
        assert ex.outcome == "error" and isinstance(ex.error, ProtocolError), ex.error
        assert why in str(ex.error)
        assert tr.aborted and not ch.usable
    in_memory(check)


def test_a_response_nobody_asked_for_drops_the_connection() -> None:
    def check(ch: Connection, tr: MemoryTransport) -> None:
        a = Recorder()
        ch.send(a)
        ch.data_received(response(b"ok") + response(b"extra"))
        assert a.outcome == "complete"
        assert tr.aborted and not ch.usable
    in_memory(check)


def test_a_disk_error_raised_by_the_body_sink_reaches_the_exchange_unchanged() -> None:
    from dtune.errors import DiskError

    class Full(Recorder):
        def on_body(self, data: bytes) -> None:
            raise DiskError("out.bin: no space left on device")

    def check(ch: Connection, tr: MemoryTransport) -> None:
        ex = Full()
        ch.send(ex)
        ch.data_received(response(b"data"))
        assert isinstance(ex.error, DiskError) and "no space" in str(ex.error)
    in_memory(check)


# -- over a real socket ---------------------------------------------------------------------------

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def with_server(handler: Handler, client: Callable[[Connection], Awaitable[None]]) -> None:
    """Run ``handler`` per connection on 127.0.0.1 and ``client`` against a fresh conn."""
    tasks: list[asyncio.Task] = []

    async def wrapped(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        tasks.append(asyncio.current_task())  # type: ignore[arg-type]
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            await handler(reader, writer)
        finally:
            writer.close()

    server = await asyncio.start_server(wrapped, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    conn = await open_connection(Origin("http", "127.0.0.1", port), timeout=5)
    try:
        await asyncio.wait_for(client(conn), 10)
    finally:
        conn.close()
        server.close()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()


async def read_requests(reader: asyncio.StreamReader, n: int) -> list[bytes]:
    return [await reader.readuntil(b"\r\n\r\n") for _ in range(n)]


async def until_done(*exchanges: Recorder) -> None:
    while not all(e.outcome for e in exchanges):
        await asyncio.sleep(0.005)


def test_two_pipelined_responses_in_one_tcp_write_are_both_parsed() -> None:
    feeds: list[int] = []

    async def server(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_requests(reader, 2)          # both requests arrive before any answer
        writer.write(response(b"one") + response(b"two"))   # one write, back to back
        await writer.drain()
        await reader.read()

    async def client(ch: Connection) -> None:
        original = ch.data_received
        ch.data_received = lambda data: (feeds.append(len(data)), original(data))  # type: ignore[method-assign]
        a, b = Recorder("/a"), Recorder("/b")
        ch.send(a)
        ch.send(b)
        await until_done(a, b)
        assert (bytes(a.body), bytes(b.body)) == (b"one", b"two")
        assert a.outcome == b.outcome == "complete"

    asyncio.run(with_server(server, client))
    assert feeds and feeds[0] == len(response(b"one") + response(b"two")), feeds


def test_responses_delivered_one_byte_per_tcp_segment_are_parsed() -> None:
    stream = response(b"abcdef", 200, "X-Long-Header: " + "h" * 50) + b"HTTP/1.1 204 No Content\r\n\r\n"
    feeds: list[int] = []

    async def server(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_requests(reader, 2)
        for i in range(len(stream)):
            writer.write(stream[i:i + 1])
            await writer.drain()
            await asyncio.sleep(0.001)
        await reader.read()

    async def client(ch: Connection) -> None:
        original = ch.data_received
        ch.data_received = lambda data: (feeds.append(len(data)), original(data))  # type: ignore[method-assign]
        a, b = Recorder(), Recorder()
        ch.send(a)
        ch.send(b)
        await until_done(a, b)
        assert bytes(a.body) == b"abcdef" and a.headers["x-long-header"] == "h" * 50
        assert b.status == 204 and b.outcome == "complete" and not b.body

    asyncio.run(with_server(server, client))
    assert len(feeds) > len(stream) // 2, "the bytes were not delivered in tiny pieces"


def test_close_delimited_body_completes_on_eof() -> None:
    async def server(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_requests(reader, 1)
        writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: x\r\n\r\n")
        for piece in (b"old ", b"style ", b"body"):
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(0.01)
        writer.close()

    async def client(ch: Connection) -> None:
        ex = Recorder()
        ch.send(ex)
        await until_done(ex)
        assert ex.outcome == "complete", ex.error
        assert bytes(ex.body) == b"old style body"
        await asyncio.wait_for(ch.closed, 5)
        assert not ch.usable

    asyncio.run(with_server(server, client))


def test_garbage_status_line_reports_a_protocol_error() -> None:
    async def server(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_requests(reader, 2)
        writer.write(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
        await writer.drain()
        await reader.read()

    async def client(ch: Connection) -> None:
        a, b = Recorder(), Recorder()
        ch.send(a)
        ch.send(b)
        await until_done(a, b)
        assert isinstance(a.error, ProtocolError) and "malformed HTTP response" in str(a.error)
        assert isinstance(b.error, ConnectionClosed) and b.error.innocent
        assert not ch.usable

    asyncio.run(with_server(server, client))


def test_queued_exchanges_get_on_error_when_the_connection_drops() -> None:
    async def server(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_requests(reader, 3)
        writer.write(response(b"only this") + b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
        await writer.drain()
        writer.transport.abort()   # the server dies mid-body of the second response

    async def client(ch: Connection) -> None:
        a, b, c = Recorder(), Recorder(), Recorder()
        for e in (a, b, c):
            ch.send(e)
        await until_done(a, b, c)
        assert a.outcome == "complete" and bytes(a.body) == b"only this"
        assert b.outcome == "error" and bytes(b.body) == b"partial"
        assert isinstance(b.error, ConnectionClosed) and b.error.retryable and not b.error.innocent
        assert c.outcome == "error" and isinstance(c.error, ConnectionClosed) and c.error.innocent
        assert c.calls == ["error"]
        await asyncio.wait_for(ch.closed, 5)
        assert ch.in_flight == 0 and not ch.usable

    asyncio.run(with_server(server, client))


def test_open_connection_to_a_closed_port_is_a_retryable_http_error() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()   # nobody listens there now

    async def main() -> None:
        with pytest.raises(HTTPError, match="cannot connect") as info:
            await open_connection(Origin("http", "127.0.0.1", port), timeout=5)
        assert info.value.retryable

    asyncio.run(main())
