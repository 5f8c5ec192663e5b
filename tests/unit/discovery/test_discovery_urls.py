"""URL helpers: names round-trip through quoting; URLs become request-ready without changing meaning."""

from __future__ import annotations

import base64
import hashlib

import pytest
from support.urls import assert_whole_name_in_path

from dtune.discovery.urls import (
    checksum_from_headers,
    join_url,
    last_segment,
    path_is_dir,
    quote_relpath,
    relative_segments,
    requote_url,
)

NAMES = ["a b.txt", "100%.dat", "hash#tag.txt", "what?.txt", "this&that.txt", "ünïcødé.dat",
         "quote\"d 'name' <b>.txt", "plus+sign=1;x,y", "%2F", "tilde~_-.x", "sub dir/inner #1.bin"]


@pytest.mark.parametrize("name", NAMES)
def test_quoted_names_round_trip_through_a_url(name: str) -> None:
    url = join_url("http://h/data/", name)
    assert_whole_name_in_path(url, "/data/" + name)
    assert url.isascii() and " " not in url


def test_quote_relpath_keeps_slashes_and_encodes_everything_else() -> None:
    assert quote_relpath("a b/c#d?e%f") == "a%20b/c%23d%3Fe%25f"


REQUOTE = [
    ("http://h/a%20b.txt", "http://h/a%20b.txt"),  # valid escapes stay
    ("http://h/a b.txt", "http://h/a%20b.txt"),
    ("http://h/ünï.dat", "http://h/%C3%BCn%C3%AF.dat"),
    ("http://h/100%.dat", "http://h/100%25.dat"),  # a lone '%' is a literal
    ("http://h/%zz", "http://h/%25zz"),
    ("http://h/a%2Fb", "http://h/a%2Fb"),  # an encoded slash keeps its meaning
    ("http://h/x?token=a b&c=%41", "http://h/x?token=a%20b&c=%41"),
    ("http://h/x#frag", "http://h/x"),  # never sent in a request line
    ("HTTP://H/x", "http://H/x"),
    ("http://h", "http://h/"),
    ("  https://h:8443/d/  ", "https://h:8443/d/"),
    ("http://dé.example/x", "http://xn--d-bga.example/x"),
    ("http://u:p@dé.example:81/x", "http://u:p@xn--d-bga.example:81/x"),
    ("http://[::1]:8080/x", "http://[::1]:8080/x"),
    ('http://h/"<>{}|^`', "http://h/%22%3C%3E%7B%7D%7C%5E%60"),
]


@pytest.mark.parametrize(("given", "expected"), REQUOTE)
def test_requote_url(given: str, expected: str) -> None:
    assert requote_url(given) == expected
    assert requote_url(expected) == expected  # idempotent


@pytest.mark.parametrize("bad", ["ftp://h/x", "h/x", "/x", "http://", "http:///x", "http://h:99999/x",
                                 "http://h:port/x", "http://h h/x", "file:///etc/passwd", "javascript:x", ""])
def test_requote_url_refuses_non_http_urls(bad: str) -> None:
    with pytest.raises(ValueError):
        requote_url(bad)


@pytest.mark.parametrize(("url", "is_dir"), [("http://h/d/", True), ("http://h/d/?x=1", True), ("http://h/", True),
                                             ("http://h/d", False), ("http://h/d?x=/", False)])
def test_path_is_dir_looks_at_the_path_only(url: str, is_dir: bool) -> None:
    assert path_is_dir(url) is is_dir


@pytest.mark.parametrize(("url", "segment"), [("http://h/a/b%20c.bin", "b c.bin"), ("http://h/x.bin?y=1", "x.bin"),
                                              ("http://h/d/", ""), ("http://h/%C3%BC", "ü"),
                                              ("http://h/%ff", "\udcff")])
def test_last_segment_is_decoded(url: str, segment: str) -> None:
    assert last_segment(url) == segment


def test_join_url_adds_the_missing_directory_slash_and_drops_the_query() -> None:
    assert join_url("http://m/data", "a b/c") == "http://m/data/a%20b/c"
    assert join_url("http://m/data/?k=v", "x") == "http://m/data/x"


RELATIVE = [
    ("http://h/d/a.bin", "http://h/d/", ["a.bin"]),
    ("http://h/d/s/", "http://h/d/", ["s", ""]),
    ("http://h/d/s/x", "http://h/d/", ["s", "x"]),
    ("http://h/d/%C3%BC", "http://h/d/", ["ü"]),
    ("http://h/d%20x/a", "http://h/d x/", ["a"]),
    ("http://h/%c3%bc/a", "http://h/%C3%BC/", ["a"]),  # escapes compare decoded
    ("http://H:80/d/a", "http://h/d/", ["a"]),  # default port, host case
    ("http://h/d/a", "http://h/d/index.html", ["a"]),  # the directory of a page URL
    ("http://h/d/", "http://h/d/", None),  # itself
    ("http://h/", "http://h/d/", None),  # parent
    ("http://h/e/a", "http://h/d/", None),  # sibling
    ("http://h/dx/a", "http://h/d/", None),  # prefix of a name is not a parent
    ("https://h/d/a", "http://h/d/", None),  # other scheme
    ("http://h:81/d/a", "http://h/d/", None),  # other port
    ("http://evil/d/a", "http://h/d/", None),  # other host
]


@pytest.mark.parametrize(("url", "base", "expected"), RELATIVE)
def test_relative_segments(url: str, base: str, expected: list[str] | None) -> None:
    assert relative_segments(url, base) == expected


DATA = b"hello"
HEX = hashlib.sha256(DATA).hexdigest()
B64 = base64.b64encode(hashlib.sha256(DATA).digest()).decode()

DIGESTS = [
    ({"repr-digest": f"sha-256=:{B64}:"}, HEX),
    ({"repr-digest": f"sha-512=:AAAA:, sha-256=:{B64}:"}, HEX),
    ({"repr-digest": f"sha-256=:{B64}:;param=1"}, HEX),
    ({"digest": f"SHA-256={B64}"}, HEX),
    ({"digest": f"md5=abc, sha-256={B64}"}, HEX),
    ({"digest": f"sha-256={HEX}"}, HEX),  # hex where base64 belongs: still unambiguous
    ({"repr-digest": "sha-256=:bm90IDMyIGJ5dGVz:", "digest": f"sha-256={B64}"}, HEX),  # bad one ignored
    ({"repr-digest": f"sha-256={B64}"}, None),  # not a byte sequence
    ({"digest": "sha-256=!!!"}, None),
    ({"digest": "md5=abc"}, None),
    ({}, None),
]


@pytest.mark.parametrize(("headers", "expected"), DIGESTS)
def test_sha256_from_headers(headers: dict[str, str], expected: str | None) -> None:
    found = checksum_from_headers(headers)
    assert (found and (found.algo, found.hex)) == (expected and ("sha256", expected))
