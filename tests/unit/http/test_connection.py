"""``dtune.http.connection``: one pipelined HTTP/1.1 connection, fed in memory.

The tests hand bytes to ``Connection.data_received`` directly (exact control
over how responses are split); the same connection over real sockets is in
``tests/net/test_connection_sockets.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from support.recorder import ORIGIN, Recorder, response

from dtune.errors import HTTPError, ProtocolError
from dtune.http.connection import Connection, ConnectionClosed


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


@pytest.fixture
def tr() -> MemoryTransport:
    return MemoryTransport()


@pytest.fixture
def ch(tr: MemoryTransport) -> Iterator[Connection]:
    """A ``Connection`` made with ``tr`` on a loop of its own (never run: nothing here waits)."""
    loop = asyncio.new_event_loop()
    conn = Connection(ORIGIN, loop)
    conn.connection_made(tr)  # type: ignore[arg-type]
    yield conn
    loop.close()


def test_two_pipelined_responses_in_one_data_received_call_are_both_parsed(
        ch: Connection, tr: MemoryTransport) -> None:
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


def test_responses_fed_one_byte_at_a_time_are_parsed_in_order(ch: Connection, tr: MemoryTransport) -> None:
    ex = [Recorder(f"/{i}") for i in range(3)]
    for e in ex:
        ch.send(e)
    stream = b"".join(response(bytes([65 + i]) * (i + 3)) for i in range(3))
    for i in range(len(stream)):
        ch.data_received(stream[i:i + 1])
    assert [bytes(e.body) for e in ex] == [b"AAA", b"BBBB", b"CCCCC"]
    assert all(e.calls[0] == "headers" and e.calls[-1] == "complete" for e in ex)
    assert ch.bytes_in == 12


def test_chunked_body_is_reassembled_and_its_framing_is_not_in_the_body(
        ch: Connection, tr: MemoryTransport) -> None:
    a, b = Recorder(), Recorder()
    ch.send(a)
    ch.send(b)
    ch.data_received(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n" + response(b"next"))
    assert bytes(a.body) == b"hello world" and a.outcome == "complete"
    assert bytes(b.body) == b"next" and b.outcome == "complete"


def test_on_headers_false_drops_the_connection_and_fails_the_queued_requests_innocently(
        ch: Connection, tr: MemoryTransport) -> None:
    a, b = Recorder(keep=False), Recorder()
    ch.send(a)
    ch.send(b)
    ch.data_received(response(b"x" * 100))
    assert a.calls == ["headers"]               # abandoned: no body, no complete, no error
    assert b.outcome == "error" and isinstance(b.error, ConnectionClosed)
    assert b.error.innocent and b.error.retryable
    assert tr.aborted and not ch.usable


def test_connection_close_header_ends_the_connection_after_that_response(
        ch: Connection, tr: MemoryTransport) -> None:
    a, b = Recorder(), Recorder()
    ch.send(a)
    ch.send(b)
    ch.data_received(response(b"bye", 200, "Connection: close"))
    assert a.outcome == "complete" and bytes(a.body) == b"bye"
    assert b.outcome == "error" and isinstance(b.error, ConnectionClosed) and b.error.innocent
    assert tr.closed and not ch.usable


def test_a_close_delimited_body_ends_at_eof_in_memory(ch: Connection, tr: MemoryTransport) -> None:
    a = Recorder()
    ch.send(a)
    ch.data_received(b"HTTP/1.0 200 OK\r\n\r\nuntil ")
    ch.data_received(b"the end")
    assert a.outcome is None
    ch.connection_lost(None)
    assert a.outcome == "complete" and bytes(a.body) == b"until the end"


def test_requests_queued_behind_a_close_delimited_response_fail_innocently(
        ch: Connection, tr: MemoryTransport) -> None:
    a, b = Recorder(), Recorder()
    ch.send(a)
    ch.send(b)
    ch.data_received(b"HTTP/1.0 200 OK\r\n\r\nold body")
    ch.connection_lost(None)
    assert a.outcome == "complete" and bytes(a.body) == b"old body"
    assert isinstance(b.error, ConnectionClosed) and b.error.innocent


def test_send_on_a_closed_connection_fails_the_exchange_at_once(ch: Connection, tr: MemoryTransport) -> None:
    ch.close()
    late = Recorder()
    ch.send(late)
    assert late.outcome == "error" and isinstance(late.error, ConnectionClosed)
    assert late.request not in tr.written


def test_close_with_a_reason_reports_it_to_the_head_and_innocence_to_the_rest(
        ch: Connection, tr: MemoryTransport) -> None:
    a, b, c = Recorder(), Recorder(), Recorder()
    for e in (a, b, c):
        ch.send(e)
    reason = HTTPError("stalled")
    ch.close(reason)
    assert a.error is reason
    assert all(isinstance(e.error, ConnectionClosed) and e.error.innocent for e in (b, c))
    assert tr.aborted and "closed" in repr(ch) and "in_flight=0" in repr(ch)


def test_interim_1xx_answers_are_skipped_and_the_final_response_belongs_to_the_request(
        ch: Connection, tr: MemoryTransport) -> None:
    ex = Recorder()
    ch.send(ex)
    ch.data_received(b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"
                     b"HTTP/1.1 100 Continue\r\n\r\n" + response(b"body"))
    assert ex.outcome == "complete" and ex.status == 200 and ex.body == b"body"
    assert ch.usable and ch.in_flight == 0


@pytest.mark.parametrize(("data", "why"), [
    (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\n", "protocol switch"),
    (b"HTTP/1.1 200 OK\r\n" + b"X-Big: " + b"y" * 70_000 + b"\r\n\r\n", "too large"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabc", "malformed"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "malformed"),
])
def test_broken_responses_become_a_protocol_error(
        data: bytes, why: str, ch: Connection, tr: MemoryTransport) -> None:
    ex = Recorder()
    ch.send(ex)
    ch.data_received(data)
    assert ex.outcome == "error" and isinstance(ex.error, ProtocolError), ex.error
    assert why in str(ex.error)
    assert tr.aborted and not ch.usable


def test_a_response_nobody_asked_for_drops_the_connection(ch: Connection, tr: MemoryTransport) -> None:
    a = Recorder()
    ch.send(a)
    ch.data_received(response(b"ok") + response(b"extra"))
    assert a.outcome == "complete"
    assert tr.aborted and not ch.usable


def test_a_disk_error_raised_by_the_body_sink_reaches_the_exchange_unchanged(
        ch: Connection, tr: MemoryTransport) -> None:
    from dtune.errors import DiskError

    class Full(Recorder):
        def on_body(self, data: bytes) -> None:
            raise DiskError("out.bin: no space left on device")

    ex = Full()
    ch.send(ex)
    ch.data_received(response(b"data"))
    assert isinstance(ex.error, DiskError) and "no space" in str(ex.error)


