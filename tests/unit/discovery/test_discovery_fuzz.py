"""Property tests: any input gives entries or a DiscoveryError (never another exception),
and whatever safe_relpath accepts stays inside the output directory."""

from __future__ import annotations

import json
import os
import os.path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from support.fuzz import FUZZ

from dtune.checksums import Checksum
from dtune.discovery.autoindex import parse_html_index, parse_nginx_json
from dtune.discovery.entries import Listing
from dtune.discovery.manifest import parse_manifest
from dtune.discovery.metalink import parse_metalink
from dtune.discovery.paths import relpath_problem, safe_relpath
from dtune.discovery.urllist import parse_url_list
from dtune.errors import DiscoveryError, UnsafePathError

PAGE = "http://h/d/"
PARSERS = {
    "manifest": lambda body: parse_manifest(body, "src"),
    "nginx-json": lambda body: parse_nginx_json(body, "src"),
    "html": lambda body: parse_html_index(body, PAGE, "src"),
    "url-list": lambda body: parse_url_list(body, "src"),
    "metalink": lambda body: parse_metalink(body, "src"),
}
pytestmark = pytest.mark.fuzz


def entries_or_discovery_error(parser: str, body: bytes) -> None:
    try:
        listing = PARSERS[parser](body)
    except DiscoveryError as exc:
        assert str(exc).startswith("src: ")
        return
    assert isinstance(listing, Listing)
    for entry in listing.entries:
        assert isinstance(entry.name, str)
        assert entry.size is None or (isinstance(entry.size, int) and entry.size >= 0)
        assert entry.checksum is None or isinstance(entry.checksum, Checksum)
        for url in entry.urls:
            assert url.startswith(("http://", "https://")) and url.isascii() and " " not in url


BIG = "9" * 5000  # int() refuses 4,300 digits and more


@FUZZ
@given(parser=st.sampled_from(sorted(PARSERS)), body=st.binary(max_size=2000))
@example(parser="metalink", body=(f'<metalink xmlns="urn:ietf:params:xml:ns:metalink"><file name="a"><size>{BIG}'
                                  '</size><url>http://h/a</url></file></metalink>').encode())
@example(parser="metalink", body=(f'<metalink xmlns="urn:ietf:params:xml:ns:metalink"><file name="a">'
                                  f'<url priority="{BIG}">http://h/a</url></file></metalink>').encode())
@example(parser="html", body=f'<pre><a href="a">a</a> 01-Jan-2020 10:00 {BIG}\n</pre>'.encode())
@example(parser="manifest", body=f'{{"dtune_manifest": 1, "files": [{{"path": "a", "size": {BIG}}}]}}'.encode())
@example(parser="nginx-json", body=f'[{{"name": "a", "type": "file", "size": {BIG}}}]'.encode())
def test_random_bytes_give_entries_or_discovery_error(parser: str, body: bytes) -> None:
    entries_or_discovery_error(parser, body)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(
        st.sampled_from(["dtune_manifest", "files", "path", "size", "mtime", "sha256", "base", "name",
                         "type", "file", "directory"]) | st.text(max_size=5), children, max_size=5),
    max_leaves=20)


@FUZZ
@given(parser=st.sampled_from(["manifest", "nginx-json"]), doc=json_values)
def test_random_json_documents_give_entries_or_discovery_error(parser: str, doc: object) -> None:
    entries_or_discovery_error(parser, json.dumps(doc).encode())


@FUZZ
@given(files=st.lists(st.fixed_dictionaries({"path": st.text(max_size=30)}, optional={
    "size": st.integers(min_value=0, max_value=2**63), "mtime": st.floats(allow_nan=False, allow_infinity=False),
    "sha256": st.text("0123456789abcdef", min_size=64, max_size=64)}), max_size=5))
def test_valid_manifests_round_trip(files: list[dict]) -> None:
    body = json.dumps({"dtune_manifest": 1, "files": files}).encode()
    entries = parse_manifest(body, "src").entries
    assert [e.name for e in entries] == [f["path"] for f in files]
    assert [e.size for e in entries] == [f.get("size") for f in files]


html_pieces = st.sampled_from([
    "<a href=\"", "\">", "</a>", "<pre>", "</pre>", "<tr>", "</tr>", "<td>", "</td>", "<li>", "\n", " ",
    "../", "/", "?C=N;O=D", "#", "%", "%2e", "%ff", "http://h/d/", "http://evil/", "sub/", "a.bin",
    "10:00", "123", "1.2K", "9" * 4400, "-", "&amp;", "&#0;", "<!--", "-->", "<![CDATA[", "]]>", "<!", "<?", "<![if",
    "<script>", "</script>", "'", "\"", "=", "<a", "<a href=", ">", "\x00", "ü",
])


@FUZZ
@given(pieces=st.lists(html_pieces, max_size=40))
def test_html_like_soup_gives_entries_under_the_page_or_discovery_error(pieces: list[str]) -> None:
    body = "".join(pieces).encode()
    entries_or_discovery_error("html", body)
    try:
        entries = parse_html_index(body, PAGE, "src").entries
    except DiscoveryError:
        return
    for entry in entries:
        assert entry.urls[0].startswith(PAGE)
        assert "?" not in entry.urls[0] and "#" not in entry.urls[0]


list_lines = st.lists(st.one_of(
    st.sampled_from(["http://h/a", "https://h/b c", "http://h/%zz", "ftp://h/x", "# c", "", " out=x",
                     "\tchecksum=sha-256=" + "a" * 64, " checksum=md5=1", " dir=/", " bogus", "\r"]),
    st.text(max_size=20)), max_size=10)


@FUZZ
@given(lines=list_lines)
def test_url_list_like_text_gives_entries_or_discovery_error(lines: list[str]) -> None:
    entries_or_discovery_error("url-list", "\n".join(lines).encode())


xml_pieces = st.sampled_from([
    '<metalink xmlns="urn:ietf:params:xml:ns:metalink">', "</metalink>", '<file name="a">', "<file>",
    "</file>", "<size>", "</size>", "12", "-1", "9" * 4400, '<url priority="' + "9" * 4400 + '">', '<hash type="sha-256">', "</hash>", "a" * 64,
    '<url priority="1">', '<url priority="x">', "<url>", "</url>", "http://h/a", "ftp://h/a",
    "<!DOCTYPE x>", '<!ENTITY e "x">', "&e;", "&amp;", "<?xml version='1.0'?>", "<![CDATA[", "]]>", " ",
])


@FUZZ
@given(pieces=st.lists(xml_pieces, max_size=30))
def test_metalink_like_xml_gives_entries_or_discovery_error(pieces: list[str]) -> None:
    entries_or_discovery_error("metalink", "".join(pieces).encode())


names = st.lists(st.sampled_from(["a", "b c", "..", ".", "", "/", "\\", "C:", "\x00", "\n", "é", "...",
                                  "%2e", "~", "x" * 100]), max_size=8).map("".join) | st.text(max_size=40)


@FUZZ
@given(name=names)
def test_whatever_safe_relpath_accepts_stays_inside_any_directory(name: str) -> None:
    try:
        relpath = safe_relpath(name)
    except UnsafePathError as exc:
        assert relpath_problem(name)[0] is None
        assert "\n" not in str(exc)
        return
    assert relpath and not relpath.startswith("/")
    assert ".." not in relpath.split("/") and "" not in relpath.split("/") and "." not in relpath.split("/")
    assert "\\" not in relpath and "\x00" not in relpath
    assert safe_relpath(relpath) == relpath
    outdir = "/srv/out"
    joined = os.path.normpath(os.path.join(outdir, relpath))
    assert joined.startswith(outdir + "/")
