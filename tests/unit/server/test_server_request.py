"""RequestReader in memory: bytes in, requests and error markers out, no socket."""

from __future__ import annotations

from collections import deque
from pathlib import Path

import pytest

from dtune.server.config import ServerConfig
from dtune.server.request import Request, RequestReader


def reader(**limits: int) -> tuple[RequestReader, deque[Request]]:
    queue: deque[Request] = deque()
    return RequestReader(ServerConfig(root=Path("."), **limits), queue), queue


def test_two_pipelined_requests_in_one_read_are_queued_in_order() -> None:
    r, queue = reader()
    stop = r.feed(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nHEAD /b HTTP/1.0\r\n\r\n", 1.0)
    assert not stop
    assert [(q.method, q.target, q.keep_alive, q.http10) for q in queue] == [
        (b"GET", b"/a", True, False), (b"HEAD", b"/b", False, True)]


def test_repeated_header_fields_are_joined_with_a_comma() -> None:
    r, queue = reader()
    r.feed(b"GET / HTTP/1.1\r\nAccept: a\r\naccept: b\r\n\r\n", 1.0)
    assert queue[0].headers[b"accept"] == b"a, b"


@pytest.mark.parametrize(("data", "limits", "status"), [
    (b"GET /" + b"x" * 100 + b" HTTP/1.1\r\n\r\n", {"max_request_line": 50}, 414),
    (b"GET / HTTP/1.1\r\n" + b"".join(b"h%d: v\r\n" % i for i in range(5)) + b"\r\n", {"max_headers": 3}, 431),
    (b"POST / HTTP/1.1\r\nContent-Length: 100\r\n\r\n" + b"x" * 100, {"max_body": 10}, 413),
    (b"GET / HTTP/1.1\r\nBad Header\r\n\r\n", {}, 400),
])
def test_a_broken_limit_queues_an_error_marker_and_stops_reading(data: bytes, limits: dict, status: int) -> None:
    r, queue = reader(**limits)
    assert r.feed(data, 1.0)
    assert queue[-1].error == status and not queue[-1].keep_alive
    assert not r.in_head


def test_a_head_trickled_one_byte_a_read_is_bounded_although_no_header_completes() -> None:
    r, queue = reader(max_request_line=64, max_header_bytes=64)
    r.feed(b"GET / HTTP/1.1\r\nX: ", 1.0)
    stop = False
    for _ in range(2000):
        stop = r.feed(b"v", 2.0)
        if stop:
            break
    assert stop and queue[-1].error == 431


def test_an_upgrade_ends_keep_alive_of_the_request_before_it() -> None:
    r, queue = reader()
    assert r.feed(b"GET / HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n", 1.0)
    assert len(queue) == 1 and not queue[0].keep_alive and not queue[0].error


def test_the_head_start_is_the_time_of_the_read_that_began_it() -> None:
    r, _ = reader()
    r.feed(b"GET / HT", 5.0)
    r.feed(b"TP/1.1\r\n", 7.0)
    assert r.in_head and r.head_started == 5.0
