"""Property tests of the response header parsers: Content-Range, Retry-After, the digests of
RFC 3230 / RFC 9530 / Content-MD5 / x-goog-hash, ETag and Last-Modified validators, a proxy's
answer to CONNECT and gzip'd bodies. Any header value gives a result or the module's own error
(``ProtocolError`` / ``HTTPError``), never another exception."""

from __future__ import annotations

import gzip

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from support.fuzz import FUZZ

from dtune.checksums import Checksum
from dtune.discovery.urls import checksum_from_headers
from dtune.errors import HTTPError, ProtocolError
from dtune.http.client import gunzip
from dtune.http.message import Origin, parse_content_range, parse_retry_after, parse_unsatisfied_range
from dtune.http.proxy import parse_connect_reply, parse_proxy
from dtune.http.validators import Validators, http_time

pytestmark = pytest.mark.fuzz
LATIN1 = st.text(st.characters(min_codepoint=0, max_codepoint=255), max_size=80)
NUMBERS = st.one_of(st.integers(-5, 10**21).map(str), st.just("9" * 5000), st.just("*"), st.just(""),
                    st.just("\u0663"), st.just("0x10"), st.just("1e3"))


def _range(unit: str, a: str, b: str, total: str, gap: str) -> str:
    return f"{unit}{gap}{a}-{b}/{total}"


content_ranges = st.one_of(LATIN1, st.builds(_range, st.sampled_from(["bytes ", "BYTES ", "bytes", "items ", ""]),
                                             NUMBERS, NUMBERS, NUMBERS, st.sampled_from(["", " ", "\t"])))


@FUZZ
@given(value=content_ranges)
@example(value="bytes 0-" + "9" * 5000 + "/*")
def test_content_range_gives_a_sane_span_or_a_protocol_error(value: str) -> None:
    try:
        start, end, total = parse_content_range(value)
    except ProtocolError as exc:
        assert "Content-Range" in str(exc) and len(str(exc)) < 200
        return
    assert 0 <= start < end and (total is None or end <= total)


@FUZZ
@given(value=st.one_of(st.none(), content_ranges, NUMBERS.map(lambda n: f"bytes */{n}")))
def test_a_416_content_range_gives_a_size_or_nothing(value: str | None) -> None:
    got = parse_unsatisfied_range(value)
    assert got is None or got >= 0


dates = st.one_of(LATIN1, st.datetimes().map(lambda d: d.strftime("%a, %d %b %Y %H:%M:%S GMT")),
                  st.sampled_from(["Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT",
                                   "Sun Nov  6 08:49:37 1994", "Fri, 31 Dec 9999 23:59:59 GMT",
                                   "Mon, 01 Jan 0001 00:00:00 +2359", "Thu, 01 Jan 1970 00:00:00 -2359",
                                   "Sun, 31 Feb 2026 25:61:61 GMT", "Sun, 06 Nov 99999 08:49:37 GMT"]))


@FUZZ
@given(value=st.one_of(dates, NUMBERS), now=st.floats(0, 4e9))
def test_retry_after_gives_a_bounded_wait_or_nothing(value: str, now: float) -> None:
    got = parse_retry_after(value, now)
    assert got is None or 0 <= got < float("inf")


etags = st.one_of(LATIN1, st.sampled_from(['"abc"', 'W/"abc"', "W/", '""', "*", '"a\x00b"', "x" * 300]))


@FUZZ
@given(first=st.dictionaries(st.sampled_from(["etag", "last-modified", "date"]), st.one_of(etags, dates)),
       later=st.dictionaries(st.sampled_from(["etag", "last-modified", "date"]), st.one_of(etags, dates)),
       strict=st.booleans())
def test_validators_of_any_headers_compare_and_give_a_header_safe_if_range(
        first: dict[str, str], later: dict[str, str], strict: bool) -> None:
    a, b = Validators.of(first), Validators.of(later)
    for v in (a, b):
        if v is None:
            continue
        got = v.if_range()
        assert got is None or (got and not any(c in got for c in "\r\n\x00") and not got.startswith("W/"))
        assert Validators.from_header(v.to_header()) == v
        assert v.change(v, strict=strict) is None
    if a is not None and b is not None:
        said = a.change(b, strict=strict)
        assert said is None or said.startswith(("ETag ", "Last-Modified "))
    assert http_time(first.get("date")) is None or isinstance(http_time(first.get("date")), float)


@FUZZ
@given(header=st.dictionaries(st.one_of(st.sampled_from(["etag", "last_modified", "strong_date"]), st.text(max_size=5)),
                              st.one_of(st.none(), st.booleans(), st.integers(), LATIN1, st.lists(st.integers()))))
def test_validators_from_a_journal_header_of_anything(header: dict) -> None:
    got = Validators.from_header(header)
    assert got is None or got.etag is not None or got.last_modified is not None


ALGOS = ["sha-256", "SHA-256", "sha-512", "md5", "MD5", "sha", "crc32c", "adler32", "unixsum", "", "sha-256;x"]
digest_values = st.one_of(LATIN1, st.binary(min_size=0, max_size=70).map(lambda b: __import__("base64")
                                                                         .b64encode(b).decode()),
                          st.text("0123456789abcdefABCDEF", max_size=130))


@FUZZ
@given(headers=st.dictionaries(
    st.sampled_from(["repr-digest", "digest", "content-md5", "x-goog-hash", "other"]),
    st.one_of(LATIN1, st.lists(st.tuples(st.sampled_from(ALGOS), digest_values,
                                         st.sampled_from(["", ":", ";p=1"])), max_size=4).map(
        lambda ms: ", ".join(f"{a}={w}{v}{w if w == ':' else ''}" for a, v, w in ms)))))
def test_digest_headers_give_a_well_formed_checksum_or_nothing(headers: dict[str, str]) -> None:
    got = checksum_from_headers(headers)
    assert got is None or isinstance(got, Checksum)
    if got is not None:
        assert got.source.endswith("header")


PROXY = parse_proxy("http://127.0.0.1:3128", "test")
ORIGIN = Origin("https", "data.example.org", 443)
status_lines = st.builds(lambda v, s, r, rest: f"{v} {s} {r}\r\n{rest}".encode(),
                         st.sampled_from(["HTTP/1.1", "HTTP/1.0", "HTTP/2", "ICY", ""]),
                         st.one_of(st.integers(0, 1000).map(str), NUMBERS), LATIN1, LATIN1)


@FUZZ
@given(head=st.one_of(st.binary(max_size=300), status_lines))
def test_a_proxy_answer_to_connect_opens_the_tunnel_or_is_an_http_error(head: bytes) -> None:
    try:
        parse_connect_reply(head, ORIGIN, PROXY)
    except HTTPError as exc:
        text = str(exc)
        assert text.startswith(str(ORIGIN)) and "\n" not in text and "\r" not in text
        return
    assert head.split(b" ", 2)[1][:1] == b"2"


@FUZZ
@given(data=st.one_of(st.binary(max_size=300), st.binary(max_size=3000).map(gzip.compress),
                      st.binary(max_size=3000).map(lambda b: gzip.compress(b)[:-3]),
                      st.tuples(st.binary(max_size=300), st.binary(max_size=20)).map(
                          lambda t: gzip.compress(t[0]) + t[1])),
       max_bytes=st.integers(0, 4000))
@example(data=gzip.compress(b"\0" * 100_000), max_bytes=1000)
def test_gzip_bodies_inflate_within_the_limit_or_are_an_http_error(data: bytes, max_bytes: int) -> None:
    try:
        out = gunzip(data, max_bytes, "http://h/x?X-Amz-Signature=secret")
    except HTTPError as exc:
        assert "secret" not in str(exc) and "http://h/x" in str(exc)  # (a presigned URL's signature is not shown)
        return
    assert len(out) <= max_bytes
