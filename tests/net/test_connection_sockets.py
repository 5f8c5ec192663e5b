"""``dtune.http.connection`` over real sockets: TCP segments split and merge answers as they like.

Each test runs a raw asyncio server on 127.0.0.1 that writes precisely the
bytes the test scripts (in one write, one byte per segment, then a close or
a reset), and a ``Connection`` opened by ``open_connection`` against it.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable

import pytest
from support.recorder import Recorder, response

from dtune.errors import HTTPError, ProtocolError
from dtune.http.connection import Connection, ConnectionClosed, open_connection
from dtune.http.message import Origin

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


def test_open_connection_to_a_closed_port_says_refused_and_dead() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()   # nobody listens there now

    async def main() -> None:
        with pytest.raises(HTTPError, match=f"127.0.0.1:{port}: connection refused") as info:
            await open_connection(Origin("http", "127.0.0.1", port), timeout=5)
        # retryable as a network failure; whoever knows the origin never answered makes it final
        assert info.value.retryable and getattr(info.value, "dead", False)

    asyncio.run(main())
