"""WebDAV directories (RFC 4918 ``PROPFIND``): the request, and its ``207 Multi-Status`` as entries.

Theory of operation
-------------------
A directory is asked ``PROPFIND`` with ``Depth: 1`` (the directory and its
members, never ``infinity``: servers refuse it or pay for the whole tree at
once) and an explicit list of properties (``PROPFIND_BODY``): size
(``getcontentlength``), ``getlastmodified``, ``resourcetype`` (a collection
is a sub-directory), and the checksums two server families publish in
their own namespaces: dCache's ``Checksums`` (``adler32=0a1b2c3d,md5=B64``,
the members of an RFC 3230 ``Digest`` header) and ownCloud/Nextcloud's
``checksums/checksum`` (``SHA1:HEX MD5:HEX ADLER32:HEX``). A server that
knows none of them answers those with 404 inside the multistatus, which
costs nothing. ``Want-Digest`` rides along, as on a file's ``HEAD``.

``parse_multistatus`` only turns the answer into untrusted ``Entry`` objects
(``discover`` makes names safe). Each ``response``'s ``href`` (an absolute
path, a full URL, percent-encoded, with or without a trailing '/') is
resolved against the directory's URL: the directory itself is skipped,
an href on another origin or outside the directory is refused with a
warning, one more than a level down too (``Depth: 1`` was asked), and a
name holding an encoded '/' (``%2F``). Only
properties under a ``propstat`` whose status is 2xx (or missing) count. A
size that is not a byte count (negative, not digits, beyond 2^63) refuses
its entry with a warning; an href listed twice is taken once. The XML goes
through ``xmlsafe`` (no DOCTYPE, no entities) and its nesting is bounded.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from urllib.parse import unquote, urljoin, urlsplit

from dtune import checksums
from dtune.checksums import Checksum
from dtune.discovery.entries import Entry, Listing
from dtune.discovery.urls import WANT_DIGEST, checksum_from_headers, relative_segments, requote_url
from dtune.discovery.xmlsafe import parse_untrusted
from dtune.errors import DiscoveryError
from dtune.http.validators import http_time

DAV = "{DAV:}"
DCACHE = "{http://www.dcache.org/2013/webdav}"
OWNCLOUD = "{http://owncloud.org/ns}"

PROPFIND_BODY = (
    b'<?xml version="1.0" encoding="utf-8"?>\n'
    b'<D:propfind xmlns:D="DAV:" xmlns:dc="http://www.dcache.org/2013/webdav" xmlns:oc="http://owncloud.org/ns">'
    b"<D:prop><D:resourcetype/><D:getcontentlength/><D:getlastmodified/><D:getetag/>"
    b"<dc:Checksums/><oc:checksums/></D:prop></D:propfind>\n")

PROPFIND_HEADERS = {"Depth": "1", "Content-Type": 'application/xml; charset="utf-8"',
                    "Accept": "application/xml, text/xml", "Accept-Encoding": "gzip", "Want-Digest": WANT_DIGEST}

MAX_SIZE = (1 << 63) - 1   # larger than any file a filesystem holds: a lie, not a size
MAX_DEPTH = 64             # element nesting: a multistatus needs 6 levels; more is a trick


def _depth(root: ET.Element) -> int:
    deepest, stack = 0, [(root, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if deepest > MAX_DEPTH:
            break
        stack.extend((child, depth + 1) for child in node)
    return deepest


def _propstats(response: ET.Element) -> dict[str, ET.Element]:
    """The properties of ``response`` under a propstat whose status is 2xx (or says none)."""
    props: dict[str, ET.Element] = {}
    for propstat in response.findall(f"{DAV}propstat"):
        status = (propstat.findtext(f"{DAV}status") or "").split()
        if len(status) >= 2 and not status[1].startswith("2"):
            continue
        for prop in propstat.findall(f"{DAV}prop"):
            for item in prop:
                if isinstance(item.tag, str):
                    props.setdefault(item.tag, item)
    return props


def _text(element: ET.Element | None) -> str:
    return "".join(element.itertext()).strip() if element is not None else ""


def dcache_checksum(value: str) -> Checksum | None:
    """The strongest digest of dCache's ``Checksums`` property (``adler32=HEX,md5=B64``)."""
    found = checksum_from_headers({"digest": value})
    return None if found is None else Checksum(found.algo, found.hex, "dCache Checksums property")


def owncloud_checksum(value: str) -> Checksum | None:
    """The strongest digest of an ownCloud/Nextcloud ``checksum`` (``SHA1:HEX MD5:HEX ADLER32:HEX``)."""
    found = []
    for word in value.split():
        algo, sep, digest = word.partition(":")
        if sep:
            found.append(checksums.make(algo, digest, "ownCloud checksums property"))
    return checksums.strongest(*found)


def _checksum(props: dict[str, ET.Element]) -> Checksum | None:
    dcache = _text(props.get(f"{DCACHE}Checksums"))
    oc = props.get(f"{OWNCLOUD}checksums")
    return checksums.strongest(dcache_checksum(dcache) if dcache else None,
                               owncloud_checksum(" ".join(_text(c) for c in oc.iter(f"{OWNCLOUD}checksum")))
                               if oc is not None else None)


def _is_collection(props: dict[str, ET.Element], href: str) -> bool:
    kind = props.get(f"{DAV}resourcetype")
    if kind is None:
        return urlsplit(href).path.endswith("/")
    return kind.find(f"{DAV}collection") is not None


def _size(props: dict[str, ET.Element]) -> tuple[int | None, str | None]:
    """(size, None), or (None, why the entry is refused)."""
    text = _text(props.get(f"{DAV}getcontentlength"))
    if not text:
        return None, None
    if not (text.isascii() and text.isdigit()) or len(text) > 19 or int(text) > MAX_SIZE:
        return None, f"getcontentlength {text[:40]!r} is not a byte count"
    return int(text), None


def parse_multistatus(body: bytes, page_url: str, source: str) -> Listing:
    """The members of the directory ``page_url`` a ``207`` answer lists (see the module doc).

    ``page_url`` is request-ready and ends in '/'; names are decoded and UNTRUSTED; ``urls``
    are the hrefs made absolute and request-ready. Raises ``DiscoveryError`` (prefixed with
    ``source``) for a body that is no multistatus."""
    def bad(why: str) -> DiscoveryError:
        return DiscoveryError(f"{source}: PROPFIND answer: {why}")

    root = parse_untrusted(body, bad)
    if root.tag != f"{DAV}multistatus":
        raise bad(f"not a DAV:multistatus document (root {str(root.tag)[:60]!r})")
    if _depth(root) > MAX_DEPTH:
        raise bad(f"XML nested deeper than {MAX_DEPTH} levels")
    listing = Listing()
    seen: set[str] = set()
    for response in root.findall(f"{DAV}response"):
        href = (response.findtext(f"{DAV}href") or "").strip()
        if not href:
            listing.warnings.append(f"{source}: PROPFIND answer: a response without href skipped")
            continue
        try:
            url = requote_url(urljoin(page_url, href))
        except ValueError as exc:
            listing.warnings.append(f"refusing {href[:200]!r} from {source}: {exc}")
            continue
        segments = relative_segments(url, page_url)
        if segments is None:
            if unquote(urlsplit(url).path).rstrip("/") != unquote(urlsplit(page_url).path).rstrip("/") \
                    or urlsplit(url).netloc.lower() != urlsplit(page_url).netloc.lower():
                listing.warnings.append(f"refusing {href[:200]!r} from {source}: not in the listed directory")
            continue  # (the directory itself)
        if segments[-1] == "":
            segments = segments[:-1]
        if len(segments) != 1 or segments[0] in ("", ".", "..") or "/" in segments[0]:
            listing.warnings.append(f"refusing {href[:200]!r} from {source}: not a member of the listed "
                                    f"directory (PROPFIND asked Depth: 1)")
            continue
        name = segments[0]
        if name in seen:
            continue  # (an href listed twice)
        seen.add(name)
        props = _propstats(response)
        if _is_collection(props, href):
            listing.entries.append(Entry(name=name, is_dir=True, urls=(url if url.endswith("/") else url + "/",)))
            continue
        size, refused = _size(props)
        if refused is not None:
            listing.warnings.append(f"refusing {name!r} from {source}: {refused}")
            continue
        listing.entries.append(Entry(name=name, size=size, urls=(url,), checksum=_checksum(props),
                                     mtime=http_time(_text(props.get(f"{DAV}getlastmodified")) or None)))
    return listing
