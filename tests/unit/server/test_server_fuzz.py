"""Property tests of what ``dtune serve`` parses from a client: the request path (``split_target``,
``Root.open``: nothing outside the served root, through ``..``, encodings or symlinks), the request
head (``RequestReader``: complete requests or an error status, within the limits), ``Range``,
``If-Range``, ``If-Modified-Since`` dates, ``Accept-Encoding`` and the bearer token header. Only
``PathRejected`` escapes; everything else answers a value."""

from __future__ import annotations

import os
import secrets
import shutil
from collections import deque
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.fuzz import FUZZ
from support.realservers import make_box

from dtune.server.auth import INVALID, MISSING, denial
from dtune.server.conditions import (
    UNSATISFIABLE,
    accepts_gzip,
    if_range_allows,
    parse_http_date,
    parse_range,
)
from dtune.server.config import ServerConfig
from dtune.server.paths import PathRejected, Root, split_target
from dtune.server.request import Request, RequestReader

pytestmark = pytest.mark.fuzz
TOKEN = "FUZZ-SECRET-" + secrets.token_hex(8)
PIECES = ["..", "%2e%2e", "%2E%2e", ".%2e", ".", "", "%2f", "%5c", "\\", "%00", "%252e%252e", "%c0%ae", "sub",
          "inner.txt", "public.txt", "link-out", "link-out-abs", "link-dir-out", "link-chain", "link-dotdot",
          "link-etc", "link-proc", "link-dev", "link-loop", "link-in", "link-in-abs", "fifo", "%2e%2e",
          "literal.txt", "secret.txt", "secret-dir", "~", "%", "%zz", "%ff", "a" * 300, "\u00fc", "/"]
paths = st.one_of(
    st.lists(st.sampled_from(PIECES), max_size=8).map(lambda p: ("/" + "/".join(p)).encode()),
    st.binary(max_size=64), st.binary(max_size=64).map(lambda b: b"/" + b))


@pytest.fixture(scope="module")
def box() -> Iterator[tuple[Path, Path]]:
    box, root = make_box(TOKEN, b"public\n")
    try:
        yield box, root
    finally:
        shutil.rmtree(box, ignore_errors=True)


@FUZZ
@given(raw=paths)
def test_a_request_path_decodes_to_segments_inside_the_root_or_is_rejected(raw: bytes) -> None:
    try:
        target = split_target(raw)
    except PathRejected as exc:
        assert exc.status in (400, 403)
        return
    rel = target.relbytes
    assert rel and not rel.startswith(b"/") and b"\x00" not in rel and b"\\" not in rel
    assert rel == b"." or not ({b"..", b".", b""} & set(rel.split(b"/")))
    assert os.path.normpath(os.path.join(b"/srv/root", rel)).startswith(b"/srv/root")
    assert split_target(target.url_path().encode()).relbytes == rel  # the canonical URL names it again


@FUZZ
@given(raw=paths, fast=st.booleans())
def test_whatever_the_root_opens_is_inside_it_and_never_the_secret(box: tuple[Path, Path], raw: bytes,
                                                                   fast: bool) -> None:
    _, root_dir = box
    root = Root(root_dir, fast_open=fast)
    try:
        try:
            target = split_target(raw)
            fd, st, _real = root.open(target)
        except PathRejected as exc:
            assert exc.status in (400, 403, 404)
            return
        try:
            real = os.readlink(f"/proc/self/fd/{fd}")
            assert real == str(root_dir.resolve()) or real.startswith(str(root_dir.resolve()) + "/"), real
            if not os.path.isdir(real):
                assert TOKEN.encode() not in os.pread(fd, 4096, 0)
        finally:
            os.close(fd)
    finally:
        root.close()


HEAD_PIECES = [b"GET ", b"HEAD ", b"POST ", b"G\x00T ", b"/", b"/a", b"%2e%2e", b"*", b"http://h/", b" HTTP/1.1",
               b" HTTP/1.0", b" HTTP/9.9", b"\r\n", b"\n", b"\r", b"Host: h", b"Range: bytes=0-", b"Content-Length: ",
               b"Content-Length: 5", b"Content-Length: -1", b"Content-Length: 99999999999999999999999",
               b"Transfer-Encoding: chunked", b"Connection: upgrade", b"Upgrade: h2c", b"Expect: 100-continue",
               b"0\r\n\r\n", b"5\r\nhello\r\n", b"x" * 9000, b": ", b" ", b"\t", b"\xff"]
heads = st.one_of(st.binary(max_size=400), st.lists(st.sampled_from(HEAD_PIECES), max_size=30).map(b"".join))


@FUZZ
@given(data=heads, cut=st.integers(1, 64), many=st.booleans())
def test_any_request_bytes_give_requests_or_an_error_status_within_the_limits(data: bytes, cut: int,
                                                                               many: bool) -> None:
    cfg = ServerConfig(root=Path("/nonexistent"), max_request_line=512, max_header_bytes=1024, max_headers=8,
                       max_body=64)
    queue: deque[Request] = deque()
    reader = RequestReader(cfg, queue)
    pieces = [data[i:i + cut] for i in range(0, len(data), cut)] if many else [data]
    stopped = False
    for i, piece in enumerate(pieces):
        if reader.feed(piece, float(i)):
            stopped = True
            break
    for req in queue:
        if req.error:
            assert req.error in (400, 413, 414, 431) and not req.keep_alive
            assert req is queue[-1] and stopped
        else:
            assert len(req.target) <= cfg.max_request_line
            assert len(req.headers) <= cfg.max_headers
            assert sum(len(k) + len(v) + 4 for k, v in req.headers.items()) <= cfg.max_header_bytes + 4 * len(data)


range_values = st.one_of(
    st.none(), st.text(max_size=40),
    st.builds(lambda u, a, b: f"{u}={a}-{b}", st.sampled_from(["bytes", "BYTES", " bytes ", "items"]),
              st.one_of(st.integers(0, 2**70).map(str), st.sampled_from(["", " ", "-1", "\u0663", "9" * 5000])),
              st.one_of(st.integers(0, 2**70).map(str), st.sampled_from(["", " ", "-1", "9" * 5000]))))


@FUZZ
@given(value=range_values, size=st.integers(0, 2**64))
def test_a_range_header_gives_a_span_inside_the_file_unsatisfiable_or_none(value: str | None, size: int) -> None:
    got = parse_range(value, size)
    if got is None or got == UNSATISFIABLE:
        return
    start, end = got
    assert 0 <= start <= end < size


@FUZZ
@given(value=st.one_of(st.text(max_size=60), st.sampled_from(['"e"', 'W/"e"', "Sun, 06 Nov 1994 08:49:37 GMT",
                                                                "Fri, 31 Dec 9999 23:59:59 +2359"])),
       gzip=st.text(max_size=40), auth=st.one_of(st.none(), st.binary(max_size=80)))
def test_conditional_and_encoding_headers_and_tokens_give_answers(value: str, gzip: str, auth: bytes | None) -> None:
    assert isinstance(if_range_allows(value, '"e"', 784111777), bool)
    when = parse_http_date(value)
    assert when is None or isinstance(when, int)
    assert isinstance(accepts_gzip(gzip), bool)
    assert denial(auth, b"\0" * 32) in (MISSING, INVALID)
