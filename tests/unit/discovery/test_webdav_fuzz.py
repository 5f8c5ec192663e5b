"""Property tests of the PROPFIND parser: any bytes, and XML-like soup of multistatus pieces, give
entries or a DiscoveryError (never another exception); every entry is a direct member of the listed
directory, and whatever name safe_relpath accepts stays inside the output directory."""

from __future__ import annotations

import os.path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.fuzz import FUZZ

from dtune.checksums import Checksum
from dtune.discovery.entries import Listing
from dtune.discovery.paths import safe_relpath
from dtune.discovery.urls import relative_segments
from dtune.discovery.webdav import parse_multistatus
from dtune.errors import DiscoveryError, UnsafePathError

PAGE = "http://h/d/"
pytestmark = pytest.mark.fuzz


def entries_or_discovery_error(body: bytes) -> None:
    try:
        listing = parse_multistatus(body, PAGE, "src")
    except DiscoveryError as exc:
        assert str(exc).startswith("src: ")
        return
    assert isinstance(listing, Listing)
    names = set()
    for entry in listing.entries:
        assert isinstance(entry.name, str) and "/" not in entry.name and entry.name not in ("", ".", "..")
        assert entry.name not in names
        names.add(entry.name)
        assert entry.size is None or 0 <= entry.size < 1 << 63
        assert entry.checksum is None or isinstance(entry.checksum, Checksum)
        (url,) = entry.urls
        assert url.isascii() and " " not in url
        segments = relative_segments(url, PAGE)
        assert segments is not None and segments[0] == entry.name and len([s for s in segments if s]) == 1
        try:
            rel = safe_relpath(entry.name)
        except UnsafePathError:
            continue
        out = "/tmp/dtune-out"
        assert os.path.normpath(os.path.join(out, rel)).startswith(out + "/")


@FUZZ
@given(body=st.binary(max_size=2000))
def test_random_bytes_give_entries_or_discovery_error(body: bytes) -> None:
    entries_or_discovery_error(body)


HREFS = st.sampled_from(["/d/", "/d", "/d/a", "/d/a/", "/d/../x", "../x", "/d/%2e%2e/", "/d/%2F", "http://evil/d/a",
                         "//evil/d/a", "/d/a%00b", "/d/%ff", "/d/\u00fc", "/d/a b", "/d/a/b/c", "https://h/d/a",
                         "/d/.", "/d/%", "", "/d/?q=1", "/d/#f", "javascript:x", "/d/a%2f..%2f..%2fetc"]) | st.text(max_size=20)
PROPS = st.sampled_from([
    "<D:resourcetype><D:collection/></D:resourcetype>", "<D:resourcetype/>", "<D:getcontentlength>12</D:getcontentlength>",
    "<D:getcontentlength>-5</D:getcontentlength>", "<D:getcontentlength>99999999999999999999999</D:getcontentlength>",
    "<D:getlastmodified>Mon, 01 Jan 2024 00:00:00 GMT</D:getlastmodified>", "<D:getlastmodified>junk</D:getlastmodified>",
    "<dc:Checksums>adler32=0a1b2c3d,md5=1B2M2Y8AsgTpgAmY7PhCfg==</dc:Checksums>", "<dc:Checksums>adler32=zz</dc:Checksums>",
    "<oc:checksums><oc:checksum>SHA1:da39a3ee5e6b4b0d3255bfef95601890afd80709</oc:checksum></oc:checksums>",
    "<D:getetag>\"x\"</D:getetag>", "&amp;", "<![CDATA[<x>]]>", "<D:prop>", "</D:response>", "&lt;", "<x:y/>",
])
STATUS = st.sampled_from(["HTTP/1.1 200 OK", "HTTP/1.1 404 Not Found", "", "garbage", "HTTP/1.1 2"])


@st.composite
def soup(draw) -> bytes:
    responses = []
    for _ in range(draw(st.integers(0, 6))):
        href = draw(HREFS).replace("&", "&amp;").replace("<", "&lt;")
        props = "".join(draw(st.lists(PROPS, max_size=5)))
        responses.append(f"<D:response><D:href>{href}</D:href><D:propstat><D:prop>{props}</D:prop>"
                         f"<D:status>{draw(STATUS)}</D:status></D:propstat></D:response>")
    text = ('<D:multistatus xmlns:D="DAV:" xmlns:dc="http://www.dcache.org/2013/webdav" '
            'xmlns:oc="http://owncloud.org/ns">' + "".join(responses) + "</D:multistatus>")
    if draw(st.booleans()):  # cut or spliced somewhere
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.sampled_from(["", "<!DOCTYPE x>", '<!ENTITY e "e">', "&e;", "\x00", "<<"])) + text[at:]
    return text.encode("utf-8", errors="surrogatepass")


@FUZZ
@given(body=soup())
def test_multistatus_soup_gives_member_entries_or_discovery_error(body: bytes) -> None:
    entries_or_discovery_error(body)
