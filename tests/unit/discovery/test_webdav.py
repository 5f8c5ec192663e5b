"""WebDAV directories: the PROPFIND multistatus parser on plain bytes, and discover() choosing
PROPFIND (dav:// sources, directories without an index) against an in-memory web."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import zlib

import pytest

from dtune.checksums import Checksum
from dtune.discovery import FetchResult, discover
from dtune.discovery.webdav import (
    PROPFIND_BODY,
    dcache_checksum,
    owncloud_checksum,
    parse_multistatus,
)
from dtune.errors import DiscoveryError

PAGE = "http://h:8080/data/"


def response(href: str, *, collection: bool = False, size: str | None = None, status: str = "HTTP/1.1 200 OK",
             extra: str = "") -> str:
    kind = "<D:resourcetype><D:collection/></D:resourcetype>" if collection else "<D:resourcetype/>"
    length = f"<D:getcontentlength>{size}</D:getcontentlength>" if size is not None else ""
    return (f"<D:response><D:href>{href}</D:href><D:propstat><D:prop>{kind}{length}"
            f"<D:getlastmodified>Mon, 01 Jan 2024 00:00:00 GMT</D:getlastmodified>{extra}</D:prop>"
            f"<D:status>{status}</D:status></D:propstat></D:response>")


def multistatus(*responses: str) -> bytes:
    return ('<?xml version="1.0" encoding="utf-8"?><D:multistatus xmlns:D="DAV:" '
            'xmlns:dc="http://www.dcache.org/2013/webdav" xmlns:oc="http://owncloud.org/ns">'
            + "".join(responses) + "</D:multistatus>").encode()


def names(listing) -> dict[str, tuple[bool, int | None]]:
    return {e.name: (e.is_dir, e.size) for e in listing.entries}


# ---- the parser ------------------------------------------------------------------------------


@pytest.mark.parametrize("self_href", ["/data/", "/data", "http://h:8080/data/", "/%64ata/"])
@pytest.mark.parametrize("child", [("/data/a%20b.bin", "a b.bin"), ("http://h:8080/data/a%20b.bin", "a b.bin"),
                                   ("a%20b.bin", "a b.bin"), ("/data/%C3%BC%25.bin", "\u00fc%.bin"),
                                   ("/data/x y.bin", "x y.bin")])
def test_hrefs_in_every_form_name_the_member_and_the_directory_itself_is_skipped(
        self_href: str, child: tuple[str, str]) -> None:
    href, name = child
    listing = parse_multistatus(multistatus(response(self_href, collection=True), response(href, size="12")),
                                PAGE, "src")
    assert names(listing) == {name: (False, 12)}
    assert listing.warnings == []
    assert listing.entries[0].urls[0].startswith("http://h:8080/data/") and " " not in listing.entries[0].urls[0]
    assert listing.entries[0].mtime == 1704067200.0


@pytest.mark.parametrize("href", ["/data/sub", "/data/sub/", "http://h:8080/data/sub"])
def test_collections_are_directories_whatever_their_trailing_slash(href: str) -> None:
    listing = parse_multistatus(multistatus(response(href, collection=True)), PAGE, "src")
    (entry,) = listing.entries
    assert (entry.name, entry.is_dir, entry.urls) == ("sub", True, ("http://h:8080/data/sub/",))


@pytest.mark.parametrize("href", ["/data/../secret", "/other/x.bin", "http://evil:8080/data/x.bin",
                                  "https://h:8080/data/x.bin", "/data/a/b.bin", "/data/%2e%2e/x", "/",
                                  "/data/a%2Fb.bin", "/data/%2e%2e"])
def test_hrefs_outside_the_directory_or_deeper_are_refused_with_a_warning(href: str) -> None:
    listing = parse_multistatus(multistatus(response("/data/", collection=True), response(href, size="1"),
                                            response("/data/ok.bin", size="2")), PAGE, "src")
    assert names(listing) == {"ok.bin": (False, 2)}
    assert len(listing.warnings) == 1 and "refusing" in listing.warnings[0], listing.warnings


@pytest.mark.parametrize("size", ["-1", "1e9", "12 bytes", "99999999999999999999", str(1 << 63), "\u0661\u0662"])
def test_sizes_that_are_no_byte_count_refuse_their_entry(size: str) -> None:
    listing = parse_multistatus(multistatus(response("/data/bad.bin", size=size), response("/data/ok.bin", size="0")),
                                PAGE, "src")
    assert names(listing) == {"ok.bin": (False, 0)}
    assert any("bad.bin" in w and "getcontentlength" in w for w in listing.warnings), listing.warnings


def test_largest_size_and_missing_size_are_kept() -> None:
    listing = parse_multistatus(multistatus(response("/data/big", size=str((1 << 63) - 1)), response("/data/n")),
                                PAGE, "src")
    assert names(listing) == {"big": (False, (1 << 63) - 1), "n": (False, None)}


def test_a_duplicate_href_is_taken_once() -> None:
    listing = parse_multistatus(multistatus(response("/data/a", size="1"), response("/data/a", size="9"),
                                            response("/data/%61", size="7")), PAGE, "src")
    assert names(listing) == {"a": (False, 1)}


def test_properties_under_a_failed_propstat_are_ignored() -> None:
    failed = ("<D:response><D:href>/data/f</D:href>"
              "<D:propstat><D:prop><D:getcontentlength>5</D:getcontentlength></D:prop>"
              "<D:status>HTTP/1.1 200 OK</D:status></D:propstat>"
              "<D:propstat><D:prop><D:getcontentlength>99</D:getcontentlength><D:resourcetype><D:collection/>"
              "</D:resourcetype><dc:Checksums/></D:prop><D:status>HTTP/1.1 404 Not Found</D:status></D:propstat>"
              "</D:response>")
    listing = parse_multistatus(multistatus(failed), PAGE, "src")
    assert names(listing) == {"f": (False, 5)} and listing.entries[0].checksum is None


def test_dcache_checksums_property_gives_the_strongest_digest() -> None:
    data = b"hello dcache\n"
    adler = f"{zlib.adler32(data):08x}"
    md5 = base64.b64encode(hashlib.md5(data).digest()).decode()
    prop = f"<dc:Checksums>adler32={adler},md5={md5}</dc:Checksums>"
    listing = parse_multistatus(multistatus(response("/data/f", size="13", extra=prop)), PAGE, "src")
    assert listing.entries[0].checksum == Checksum("md5", hashlib.md5(data).hexdigest(), "dCache Checksums property")
    only_adler = parse_multistatus(multistatus(response("/data/f", extra=f"<dc:Checksums>ADLER32={adler}"
                                                                       "</dc:Checksums>")), PAGE, "src")
    assert only_adler.entries[0].checksum == Checksum("adler32", adler, "dCache Checksums property")


def test_owncloud_checksums_property() -> None:
    sha1 = hashlib.sha1(b"x").hexdigest()
    prop = (f"<oc:checksums><oc:checksum>SHA1:{sha1} MD5:{hashlib.md5(b'x').hexdigest()} ADLER32:00c5007a"
            "</oc:checksum></oc:checksums>")
    listing = parse_multistatus(multistatus(response("/data/f", extra=prop)), PAGE, "src")
    assert listing.entries[0].checksum == Checksum("sha1", sha1, "ownCloud checksums property")


@pytest.mark.parametrize("value", ["", "adler32=zz", "md5=notbase64!", "crc=1,sha-256=short", ",,,==="])
def test_malformed_checksum_values_give_none(value: str) -> None:
    assert dcache_checksum(value) is None
    assert owncloud_checksum(value) is None


@pytest.mark.parametrize("body", [
    b"", b"not xml", b"<html><body>hi</body></html>", b"<D:multistatus xmlns:D='DAV:'>",
    b'<!DOCTYPE m [<!ENTITY a "aaaa">]><D:multistatus xmlns:D="DAV:">&a;</D:multistatus>',
    b'<!DOCTYPE m SYSTEM "http://evil/dtd"><D:multistatus xmlns:D="DAV:"/>',
    b"<D:multistatus xmlns:D='DAV:'>" + b"<x>" * 200 + b"</x>" * 200 + b"</D:multistatus>",
])
def test_documents_that_are_no_multistatus_are_discovery_errors(body: bytes) -> None:
    with pytest.raises(DiscoveryError, match=r"^src: PROPFIND answer: "):
        parse_multistatus(body, PAGE, "src")


def test_the_propfind_body_asks_the_properties_read() -> None:
    for prop in (b"getcontentlength", b"getlastmodified", b"resourcetype", b"Checksums", b"checksums"):
        assert prop in PROPFIND_BODY
    assert b"allprop" not in PROPFIND_BODY


# ---- discover() choosing PROPFIND ------------------------------------------------------------


class DavWeb:
    """``fetch`` over dicts: GET pages and PROPFIND answers by URL; every call recorded."""

    def __init__(self) -> None:
        self.get: dict[str, tuple[int, dict[str, str], bytes]] = {}
        self.propfind: dict[str, tuple[int, bytes]] = {}
        self.calls: list[tuple[str, str, dict[str, str], bytes | None]] = []

    async def fetch(self, url: str, *, method: str = "GET", headers: dict[str, str] | None = None,
                    max_bytes: int = 64 << 20, body: bytes | None = None) -> FetchResult:
        self.calls.append((method, url, dict(headers or {}), body))
        await asyncio.sleep(0)
        if method == "PROPFIND":
            status, text = self.propfind.get(url, (405, b"no"))
            return FetchResult(status, {"content-type": "application/xml"}, text, url)
        status, hdrs, text = self.get.get(url, (404, {}, b"not found"))
        return FetchResult(status, hdrs, b"" if method == "HEAD" else text, url)


def dav_tree(web: DavWeb, base: str = "http://h/d/") -> None:
    web.propfind[base] = (207, multistatus(response("/d/", collection=True), response("/d/a.bin", size="3"),
                                           response("/d/sub%20dir/", collection=True)))
    web.propfind[base + "sub%20dir/"] = (207, multistatus(response("/d/sub%20dir/", collection=True),
                                                          response("/d/sub%20dir/b%C3%BC.bin", size="4")))


def run(sources, web: DavWeb, **kwargs):
    return asyncio.run(discover(sources, fetch=web.fetch, delay=lambda n, after: 0.0, **kwargs))


@pytest.mark.parametrize("status", [403, 404, 405])
def test_a_directory_without_an_index_is_listed_with_propfind(status: int) -> None:
    web = DavWeb()
    web.get["http://h/d/"] = (status, {}, b"no")
    dav_tree(web)
    dataset = run(["http://h/d/"], web)
    assert {f.relpath: f.size for f in dataset.files} == {"a.bin": 3, "sub dir/b\u00fc.bin": 4}
    assert [(m, u) for m, u, _, _ in web.calls] == [("GET", "http://h/d/"), ("PROPFIND", "http://h/d/"),
                                                    ("PROPFIND", "http://h/d/sub%20dir/")]
    _, _, headers, body = web.calls[1]
    assert headers["Depth"] == "1" and "adler32" in headers["Want-Digest"] and body == PROPFIND_BODY


def test_a_page_without_links_is_asked_propfind_and_a_page_with_links_is_not() -> None:
    web = DavWeb()
    web.get["http://h/d/"] = (200, {"content-type": "text/html"}, b"<html><body>WebDAV here</body></html>")
    dav_tree(web)
    assert len(run(["http://h/d/"], web).files) == 2
    web = DavWeb()
    web.get["http://h/d/"] = (200, {"content-type": "text/html"}, b'<a href="x.bin">x.bin</a>')
    dav_tree(web)
    assert [f.relpath for f in run(["http://h/d/"], web).files] == ["x.bin"]
    assert all(m == "GET" for m, _, _, _ in web.calls)


@pytest.mark.parametrize("source", ["dav://h/d/", "DAV://h/d/", "http://h/d/"])
def test_dav_sources_are_listed_with_propfind_from_the_start(source: str) -> None:
    web = DavWeb()
    web.get["http://h/d/"] = (200, {"content-type": "text/html"}, b'<a href="x.bin">x.bin</a>')
    dav_tree(web)
    dataset = run([source], web, dav=["http://h/d/"] if source.startswith("http") else ())
    assert sorted(f.relpath for f in dataset.files) == ["a.bin", "sub dir/b\u00fc.bin"]
    assert all(m == "PROPFIND" for m, _, _, _ in web.calls)
    assert all(f.url.startswith("http://h/d/") for f in dataset.files)


def test_davs_is_https_and_a_dav_file_is_fetched_as_a_file() -> None:
    web = DavWeb()
    web.get["https://h/d/f.bin"] = (200, {"content-length": "5", "digest": "adler32=062c0215"}, b"")
    dataset = run(["davs://h/d/f.bin"], web)
    (spec,) = dataset.files
    assert (spec.url, spec.size, spec.checksum) == ("https://h/d/f.bin", 5, Checksum("adler32", "062c0215",
                                                                                    "Digest header"))
    assert web.calls[0][0] == "HEAD" and web.calls[0][2]["Want-Digest"] == "adler32, md5, sha-256"


def test_when_propfind_fails_too_the_error_says_both() -> None:
    web = DavWeb()
    web.get["http://h/d/"] = (403, {}, b"no")
    with pytest.raises(DiscoveryError, match=r"answered HTTP 403 .*PROPFIND.*HTTP 405"):
        run(["http://h/d/"], web)


def test_a_sub_directory_propfind_failing_is_unlisted_and_the_rest_fetched() -> None:
    web = DavWeb()
    dav_tree(web)
    web.propfind["http://h/d/sub%20dir/"] = (403, b"no")
    dataset = run(["dav://h/d/"], web)
    assert [f.relpath for f in dataset.files] == ["a.bin"]
    assert [rel for rel, _ in dataset.unlisted] == ["sub dir/"]


def test_selection_prunes_dav_directories_before_they_are_asked() -> None:
    from dtune.discovery.select import Selection  # (only this test selects)

    web = DavWeb()
    dav_tree(web)
    dataset = run(["dav://h/d/"], web, select=Selection.of([], ["sub dir/"]))
    assert [f.relpath for f in dataset.files] == ["a.bin"]
    assert [u for _, u, _, _ in web.calls] == ["http://h/d/"]


def test_hostile_members_never_leave_the_tree() -> None:
    web = DavWeb()
    web.propfind["http://h/d/"] = (207, multistatus(
        response("/d/", collection=True), response("/d/../etc/passwd", size="3"), response("http://evil/d/x", size="1"),
        response("/d/%2e%2e/", collection=True), response("/d/..%2Fup", size="1"), response("/d/ok", size="1"),
        response("/d/loop/", collection=True)))
    web.propfind["http://h/d/loop/"] = (207, multistatus(response("/d/loop/", collection=True),
                                                         response("/d/", collection=True),
                                                         response("/d/loop/", collection=True)))
    dataset = run(["dav://h/d/"], web)
    assert [f.relpath for f in dataset.files] == ["ok"]
    assert sum("refusing" in w for w in dataset.warnings) >= 3, dataset.warnings
    assert [u for m, u, _, _ in web.calls] == ["http://h/d/", "http://h/d/loop/"]


def test_a_propfind_answered_503_retry_after_is_asked_again_after_the_servers_wait() -> None:
    web = DavWeb()
    dav_tree(web)
    answers = [(503, b"busy"), (429, b"slow down")]
    fetch = web.fetch

    async def busy_first(url: str, **kwargs) -> FetchResult:
        if kwargs.get("method") == "PROPFIND" and url == "http://h/d/sub%20dir/" and answers:
            status, text = answers.pop(0)
            web.calls.append(("PROPFIND", url, dict(kwargs.get("headers") or {}), kwargs.get("body")))
            return FetchResult(status, {"retry-after": "7"}, text, url)
        return await fetch(url, **kwargs)

    waits: list[float | None] = []
    dataset = asyncio.run(discover(["dav://h/d/"], fetch=busy_first,
                                   delay=lambda n, after: waits.append(after) or 0.0))
    assert sorted(f.relpath for f in dataset.files) == ["a.bin", "sub dir/b\u00fc.bin"]
    assert waits == [7.0, 7.0]
    assert [u for m, u, _, _ in web.calls].count("http://h/d/sub%20dir/") == 3
