"""``dtune.http.message``: URLs → origins, request bytes, Content-Range and Retry-After, sans I/O."""

from __future__ import annotations

import email.utils

import pytest

from dtune.errors import ProtocolError, UsageError
from dtune.http import message
from dtune.http.message import (
    USER_AGENT,
    Origin,
    build_request,
    parse_content_range,
    parse_retry_after,
    resolve_location,
    split_url,
)

# -- split_url ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("url", "origin", "target"), [
    ("http://example.org/data/f.bin", Origin("http", "example.org", 80), "/data/f.bin"),
    ("https://example.org/f", Origin("https", "example.org", 443), "/f"),
    ("http://127.0.0.1:8080/a/b", Origin("http", "127.0.0.1", 8080), "/a/b"),
    ("http://example.org", Origin("http", "example.org", 80), "/"),
    ("http://example.org?x=1", Origin("http", "example.org", 80), "/?x=1"),
    ("http://example.org/f?x=1&y=%20", Origin("http", "example.org", 80), "/f?x=1&y=%20"),
    ("http://example.org/f#frag", Origin("http", "example.org", 80), "/f"),      # fragment never sent
    ("HTTP://Example.ORG/F", Origin("http", "example.org", 80), "/F"),           # path case kept
    ("http://[::1]:9000/x", Origin("http", "::1", 9000), "/x"),
    ("http://u:pw@host/x", Origin("http", "host", 80), "/x"),
    ("http://h/%C3%BC%20x", Origin("http", "h", 80), "/%C3%BC%20x"),
])
def test_split_url_gives_origin_and_request_target(url, origin, target) -> None:
    assert split_url(url) == (origin, target)


@pytest.mark.parametrize(("url", "why"), [
    ("ftp://h/x", "only http"),
    ("file:///etc/passwd", "only http"),
    ("http:///x", "no host"),
    ("http://h:99999/x", "bad URL"),
    ("http://h:abc/x", "bad URL"),
    ("http://h/a b", "whitespace"),
    ("http://h/a\x00b", "bad URL"),
    # urlsplit silently drops tab/CR/LF (bpo-43882): "/a\tb" would become another resource, "/ab"
    ("http://h/a\tb", "bad URL"),
    ("http://h/a\nb", "bad URL"),
    ("http://h/a\rb", "bad URL"),
    ("http://h/a?x=\r\nHost: evil", "bad URL"),
])
def test_split_url_refuses_what_cannot_be_requested(url, why) -> None:
    with pytest.raises(UsageError, match=why):
        split_url(url)


@pytest.mark.parametrize("rest", ["/", "/f", "/f?", "/f?x", "/f?x?y", "/f#", "/f#a?b", "/f?#z", "/f?a#b?c",
                                  "//double", "/%2F..%2F", "/ü/x", "/a b", "/a\x00b", "/a\rb", "/;p?q"])
@pytest.mark.parametrize("base", ["http://h", "http://h:8080", "https://u:pw@h", "http://[::1]:81", "HTTP://H",
                                  "http://h:99999", "http://", " http://h", "http://h?q", "http://h#f"])
def test_split_url_of_a_known_origin_is_what_urlsplit_gives(base, rest) -> None:
    """After one URL of an origin, its other URLs are split without urlsplit (``_ORIGINS``):
    each gives the same answer, or the same refusal, as the first time."""
    def answer(url: str) -> object:
        try:
            return split_url(url)
        except UsageError as exc:
            return str(exc)

    message._ORIGINS.clear()
    fresh = answer(base + rest)
    answer(base + "/known")                 # the origin is now known, if it can be
    assert answer(base + rest) == fresh
    message._ORIGINS.clear()
    assert answer(base + rest) == fresh     # (and the slow path alone agrees)


def test_split_url_remembers_few_origins() -> None:
    for n in range(3 * message._ORIGINS_MAX):
        split_url(f"http://h{n}/x")
    assert 0 < len(message._ORIGINS) <= message._ORIGINS_MAX


@pytest.mark.parametrize(("origin", "host_header", "text"), [
    (Origin("http", "h", 80), "h", "http://h"),
    (Origin("http", "h", 8080), "h:8080", "http://h:8080"),
    (Origin("https", "h", 443), "h", "https://h"),
    (Origin("https", "h", 80), "h:80", "https://h:80"),
    (Origin("http", "::1", 80), "[::1]", "http://[::1]"),
    (Origin("http", "::1", 81), "[::1]:81", "http://[::1]:81"),
])
def test_origin_host_header_omits_only_the_default_port(origin, host_header, text) -> None:
    assert origin.host_header == host_header
    assert str(origin) == text


@pytest.mark.parametrize(("base", "location", "url"), [
    ("http://h/a/b", "/c", "http://h/c"),
    ("http://h/a/b", "c", "http://h/a/c"),
    ("http://h/a/b", " http://o:81/z ", "http://o:81/z"),
    ("http://h/a/b", "//o/z", "http://o/z"),
])
def test_resolve_location_accepts_relative_redirects(base, location, url) -> None:
    assert resolve_location(base, location) == url


# -- build_request ------------------------------------------------------------------------------------

def test_build_request_without_range_is_a_plain_get() -> None:
    assert build_request("GET", Origin("http", "h", 8080), "/a%20b") == (
        b"GET /a%20b HTTP/1.1\r\nHost: h:8080\r\nUser-Agent: " + USER_AGENT.encode()
        + b"\r\nAccept-Encoding: identity\r\n\r\n")


def test_a_listing_asks_for_gzip_instead_of_identity() -> None:
    from dtune.discovery.tree import LISTING_HEADERS
    raw = build_request("GET", Origin("http", "h", 80), "/d/", extra=LISTING_HEADERS)
    assert b"\r\nAccept-Encoding: gzip\r\n" in raw and b"identity" not in raw
    assert raw.count(b"Accept-Encoding") == 1


@pytest.mark.parametrize(("range_", "line"), [
    ((0, 100), b"Range: bytes=0-99"),
    ((5, 6), b"Range: bytes=5-5"),                                 # one byte
    ((1 << 40, (1 << 40) + 10), b"Range: bytes=1099511627776-1099511627785"),
])
def test_build_request_sends_half_open_range_as_inclusive_bytes(range_, line) -> None:
    request = build_request("GET", Origin("http", "h", 80), "/f", range_)
    lines = request.split(b"\r\n")
    assert lines[0] == b"GET /f HTTP/1.1"
    assert lines[1] == b"Host: h"
    assert line in lines
    assert request.endswith(b"\r\n\r\n") and request.count(b"\r\n\r\n") == 1


def test_build_request_adds_extra_headers_and_refuses_line_breaks_in_them() -> None:
    request = build_request("HEAD", Origin("http", "h", 80), "/", extra={"Accept": "application/json"})
    assert request.startswith(b"HEAD / HTTP/1.1\r\n")
    assert b"\r\nAccept: application/json\r\n\r\n" in request
    with pytest.raises(ValueError):
        build_request("GET", Origin("http", "h", 80), "/", extra={"X": "a\r\nInjected: 1"})


# -- parse_content_range ------------------------------------------------------------------------------

@pytest.mark.parametrize(("value", "parsed"), [
    ("bytes 0-99/100", (0, 100, 100)),
    ("bytes 100-199/1000", (100, 200, 1000)),
    ("bytes 5-5/6", (5, 6, 6)),
    ("bytes 0-99/*", (0, 100, None)),                  # total unknown
    ("Bytes 0-0/1", (0, 1, 1)),                        # unit is case-insensitive
    ("  bytes 1-2/3  ", (1, 3, 3)),
    ("bytes 1099511627776-1099511627777/1099511627778", (1 << 40, (1 << 40) + 2, (1 << 40) + 2)),
])
def test_parse_content_range_returns_half_open_range_and_total(value, parsed) -> None:
    assert parse_content_range(value) == parsed


@pytest.mark.parametrize("value", [
    "",
    "bytes",
    "0-99/100",                       # no unit
    "items 0-99/100",                 # other unit
    "bytes 0-99",                     # no total
    "bytes */100",                    # the unsatisfied form (416) carries no range
    "bytes 10-5/100",                 # last < first
    "bytes 0-100/100",                # last byte past the total
    "bytes 0-99/0",
    "bytes -1-5/10",
    "bytes a-b/c",
    "bytes 0-99/100, bytes 0-1/2",
    "bytes 0 - 99/100",
    "bytes 1-2/" + "9" * 20,          # absurd numbers
])
def test_parse_content_range_refuses_malformed_or_impossible_values(value) -> None:
    with pytest.raises(ProtocolError):
        parse_content_range(value)


# -- parse_retry_after --------------------------------------------------------------------------------

NOW = 1_700_000_000.0


@pytest.mark.parametrize(("value", "seconds"), [
    (None, None),
    ("", None),
    ("0", 0.0),
    ("120", 120.0),
    (" 7 ", 7.0),
    ("99999999", 86400.0),                                    # capped at one day
    (email.utils.formatdate(NOW + 30, usegmt=True), 30.0),     # HTTP-date in the future
    (email.utils.formatdate(NOW - 30, usegmt=True), 0.0),      # in the past: no wait
    ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0),
    ("-5", None),
    ("1.5", None),                                            # delta-seconds are integers
    ("soon", None),
])
def test_parse_retry_after_understands_seconds_and_http_dates(value, seconds) -> None:
    got = parse_retry_after(value, NOW)
    if seconds is None:
        assert got is None
    else:
        assert got == pytest.approx(seconds, abs=1.0)
