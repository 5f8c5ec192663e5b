"""URL-list files (aria2 --input-file subset): one file per unindented line, options below it."""

from __future__ import annotations

import pytest
from support.paths import assert_sample_parses

from dtune.checksums import Checksum
from dtune.discovery.entries import Entry
from dtune.discovery.urllist import parse_url_list
from dtune.errors import DiscoveryError

SHA_X = "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"  # sha256(b"x")


def test_sample_url_list() -> None:
    assert_sample_parses(parse_url_list, "urls.txt", [
        Entry(name="run 1/x.nc", checksum=Checksum("sha256", SHA_X, "url list"),
              urls=("http://a.example/data/x.nc", "http://b.example/mirror/x.nc")),
        Entry(name="y z.nc", urls=("http://a.example/data/y%20z.nc",)),
        Entry(name="plain.bin", checksum=Checksum("md5", "d41d8cd98f00b204e9800998ecf8427e", "url list"),
              urls=("http://a.example/data/plain.bin",)),
        Entry(name="../escape.bin", urls=("http://a.example/get?id=5",)),  # raw: discover refuses it
    ], [
        "urls.txt: line 7: ignoring unsupported option 'dir'",
        "urls.txt: line 8: ignoring unsupported option 'max-connection-per-server'",
    ])


CASES = [
    # (text, entries as (name, urls, sha256 hex))
    ("", []),
    ("\n\n# only comments\n   \n", []),
    ("http://h/a", [("a", ("http://h/a",), None)]),
    ("http://h/a\n", [("a", ("http://h/a",), None)]),
    ("\ufeffhttp://h/a", [("a", ("http://h/a",), None)]),  # BOM
    ("http://h/a b.bin", [("a b.bin", ("http://h/a%20b.bin",), None)]),
    ("http://h/d/\n out=x", [("x", ("http://h/d/",), None)]),
    ("http://h/a\thttp://m/a\t\thttp://h/a", [("a", ("http://h/a", "http://m/a"), None)]),  # dup mirror
    ("http://h/a\n out=sub/b c\n out=final", [("final", ("http://h/a",), None)]),  # last out= wins
    (f"http://h/a\n checksum=SHA256={SHA_X.upper()}", [("a", ("http://h/a",), SHA_X)]),
    ("http://h/a\n out = spaced ", [("spaced", ("http://h/a",), None)]),
    ("http://h/%C3%BC", [("ü", ("http://h/%C3%BC",), None)]),
    ("http://h/a#frag", [("a", ("http://h/a",), None)]),
    ("http://h/a\nhttp://h/b", [("a", ("http://h/a",), None), ("b", ("http://h/b",), None)]),
]


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_url_list_cases(text: str, expected: list) -> None:
    entries = parse_url_list(text.encode(), "list.txt").entries
    assert [(e.name, e.urls, e.checksum and e.checksum.hex) for e in entries] == expected
    assert all(e.checksum is None or e.checksum.algo == "sha256" for e in entries)


@pytest.mark.parametrize(("body", "reason"), [
    (b"\xff\xfe", "not UTF-8"),
    (b" out=x\nhttp://h/a", "line 1: option 'out=x' before any URI"),
    (b"http://h/a\n out", "line 2: option 'out' has no '='"),
    (b"http://h/a\n checksum=sha-256=abc", "line 2: sha-256 checksum is not 64 hex digits"),
    (b"ftp://h/a", "line 1: not an http(s) URL"),
    (b"http://h/a\tmagnet:?xt=urn:btih:abc", "line 1: not an http(s) URL"),
    (b"relative/path.bin", "line 1: not an http(s) URL"),
    (b"http:///a", "line 1: no host"),
    (b"http://h:99999/a", "line 1:"),
])
def test_malformed_url_list_is_a_discovery_error_naming_file_and_line(body: bytes, reason: str) -> None:
    with pytest.raises(DiscoveryError) as info:
        parse_url_list(body, "list.txt")
    assert str(info.value).startswith("list.txt: ")
    assert reason in str(info.value)
