"""Hypothesis throws generated requests at a running ``dtune serve`` (a child process on 127.0.0.1).

Each example is one connection: a request line built from a method, a
target made of traversal-flavoured pieces (``..``, ``%2e%2e``, ``%2f``,
``\\``, ``%00``, symlink names, queries, absolute forms) or raw bytes, an
HTTP version, headers with interesting or random values, maybe a body and
maybe bare ``\\n`` line ends — or simply random bytes. The client half-closes
after sending. For every example the server must

* answer with a well-formed status line (``HTTP/1.1 NNN Reason``) or close
  without a byte, and not hang (5 s);
* never send a byte of the secret file next to its root (a random token) nor
  of ``/etc/passwd`` or its own environment;
* stay up: the next example connects to the same process.

After the run a normal GET still works and the server's stderr holds no
traceback and no "error while" line (an internal error). The example count
is the shared fuzz budget (``support.fuzz``, ``DTUNE_FUZZ_EXAMPLES``).

A coverage-guided harness for the pure request-path functions is in
``tests/unit/server/fuzz_serve_paths_atheris.py`` (run by hand, not in CI).
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.fuzz import FUZZ
from support.rawhttp import STATUS_LINE, exchange, request, status_of
from support.realservers import DtuneServe, make_box

TOKEN = "FUZZ-SECRET-" + secrets.token_hex(8)
PUBLIC = b"public bytes for the fuzzer\n"
pytestmark = pytest.mark.fuzz

PIECES = ["..", "%2e%2e", "%2E%2e", ".%2e", "%2e.", ".", "", "%2f", "%2F", "%5c", "\\", "%00", "%252e%252e",
          "%c0%ae%c0%ae", "secret.txt", "public.txt", "sub", "inner.txt", "link-out", "link-dir-out",
          "link-chain", "link-etc", "link-proc", "fifo", "%2e%2e", "~", "%", "%zz", "%u002e", ";", "..;",
          "....", "etc", "passwd", "\u00fc", "%ff", "a" * 300]
METHODS = ["GET", "HEAD", "POST", "PUT", "OPTIONS", "CONNECT", "TRACE", "PRI", "DELETE", "get", "G ET", ""]
VERSIONS = ["HTTP/1.1", "HTTP/1.0", "HTTP/0.9", "HTTP/2.0", "HTTP/1.1x", "http/1.1", "HTTP/1.01", ""]
HEADER_NAMES = ["Host", "Range", "If-Range", "If-None-Match", "If-Modified-Since", "Accept", "Connection",
                "Content-Length", "Transfer-Encoding", "Expect", "Upgrade", "X-Forwarded-For", ""]
HEADER_VALUES = ["bytes=0-", "bytes=-1", "bytes=5-2", "bytes=0-0,1-1", "bytes=99999999999999999999-",
                 "bytes=-0", "items=0-1", "chunked", "gzip, chunked", "-1", "99999999999999999999", "0", "close",
                 "keep-alive", "application/json", "h2c", "100-continue", '"x"', "*", "Thu, 01 Jan 1970 00:00:00 GMT",
                 "../secret.txt", "\u00fc"]


def _text(s: str) -> bytes:
    return s.encode("utf-8", "surrogatepass")


piece_targets = st.tuples(
    st.sampled_from(["", "", "", "http://127.0.0.1", "http://evil", "HTTP://127.0.0.1:1", "//"]),
    st.lists(st.sampled_from(PIECES), min_size=0, max_size=8),
    st.sampled_from(["", "", "/", "?manifest", "?x=../..", "#frag", "/?manifest"]),
).map(lambda t: _text(t[0] + "/" + "/".join(t[1]) + t[2]))
targets = st.one_of(piece_targets, piece_targets, piece_targets,
                    st.sampled_from([b"*", b"secret.txt", b"../secret.txt", b"/\x00", b"\\..\\secret.txt", b""]),
                    st.binary(min_size=0, max_size=64))
fair_headers = st.lists(st.tuples(st.sampled_from(HEADER_NAMES[:-1]).map(_text),
                                  st.sampled_from(HEADER_VALUES).map(_text)), max_size=4)
any_headers = st.lists(st.tuples(st.one_of(st.sampled_from(HEADER_NAMES).map(_text), st.binary(max_size=12)),
                                 st.one_of(st.sampled_from(HEADER_VALUES).map(_text), st.binary(max_size=40))),
                       max_size=6)


def _request(method: str, target: bytes, version: str, hdrs: list[tuple[bytes, bytes]], body: bytes,
             eol: bytes) -> bytes:
    line = _text(method) + b" " + target + (b" " + _text(version) if version else b"")
    return line + eol + b"".join(name + b": " + value + eol for name, value in hdrs) + eol + body


# Mostly requests a server must parse (so that paths, ranges and conditions are exercised), some broken ones.
fair = st.builds(_request, st.sampled_from(["GET", "GET", "HEAD"]), piece_targets,
                 st.sampled_from(["HTTP/1.1", "HTTP/1.1", "HTTP/1.0"]), fair_headers, st.just(b""),
                 st.just(b"\r\n"))
broken = st.builds(_request, st.sampled_from(METHODS), targets, st.sampled_from(VERSIONS), any_headers,
                   st.one_of(st.just(b""), st.binary(max_size=200)), st.sampled_from([b"\r\n", b"\r\n", b"\n"]))
payloads = st.one_of(fair, fair, st.lists(fair, min_size=2, max_size=4).map(b"".join), broken,
                     st.lists(st.one_of(fair, broken), min_size=2, max_size=4).map(b"".join),
                     st.binary(min_size=1, max_size=300))


@pytest.fixture(scope="module")
def server() -> Iterator[DtuneServe]:
    box, root = make_box(TOKEN, PUBLIC)
    try:
        with DtuneServe(root, "--checksums", env={**os.environ, "XDG_CACHE_HOME": str(box / "cache")}) as serve:
            yield serve
    finally:
        shutil.rmtree(box, ignore_errors=True)


def assert_answer(data: bytes) -> None:
    assert TOKEN.encode() not in data, "the secret leaked"
    assert b"root:x:0:0" not in data and b"PATH=" not in data, "a system file leaked"
    if data:
        assert STATUS_LINE.match(data), f"not a status line: {data[:80]!r}"


@FUZZ
@given(payload=payloads)
def test_generated_requests_get_a_status_line_or_a_close_and_never_a_secret_byte(
        server: DtuneServe, payload: bytes) -> None:
    data, closed = exchange(server.port, payload, timeout=5)
    assert closed, f"the server neither answered completely nor closed within 5 s: {payload[:120]!r}"
    assert_answer(data)
    assert server.alive(), f"the server died on {payload[:120]!r}"


def test_after_the_fuzzing_the_server_still_serves_and_logged_no_internal_error(server: DtuneServe) -> None:
    data, _ = exchange(server.port, request("/public.txt"))
    assert status_of(data) == 200 and data.endswith(PUBLIC)
    err = server.stderr()
    assert "Traceback" not in err and "error while" not in err, err[-2000:]
