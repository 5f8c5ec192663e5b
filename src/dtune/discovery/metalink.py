"""Metalink 4 files (RFC 5854, namespace ``urn:ietf:params:xml:ns:metalink``).

Per ``<file name="...">`` dtune reads ``<size>``, the whole-file ``<hash>``
elements (``sha-512``, ``sha-384``, ``sha-256``, ``sha-224``, ``sha-1``, ``md5``,
``adler32``, ``crc32c``; the strongest is verified) and the ``<url>`` elements; the rest (``<pieces>``, ``<metaurl>`` torrents,
signatures, descriptions) is ignored. URLs are ordered by ``priority``
(1 = most preferred; RFC 5854 section 4.2.16.2: a URL without one comes after
those that have one), document order among equals. Non-HTTP URLs (ftp,
rsync...) are skipped with a warning, and a file left with no HTTP URL is
skipped with a warning too.

Safety: the document is untrusted XML, parsed by ``discovery.xmlsafe`` (no
DOCTYPE, no entity declarations: nothing is ever expanded).

Metalink 3 (``http://www.metalinker.org/``, what older tools write) is read
the same way from its own places: ``<files><file>``, ``<size>``,
``<verification><hash type="md5|sha1|sha256|sha512">`` and
``<resources><url preference="0-100">`` (highest preference first).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass

from dtune import checksums
from dtune.checksums import Checksum
from dtune.discovery.entries import Entry, Listing
from dtune.discovery.urls import requote_url
from dtune.discovery.xmlsafe import parse_untrusted
from dtune.errors import DiscoveryError

NS = "urn:ietf:params:xml:ns:metalink"
_V3_NS = "http://www.metalinker.org/"
_NO_PRIORITY = 1_000_000  # after the RFC's largest priority, 999999


def looks_like_metalink(path: str, head: bytes) -> bool:
    """A local file is read as a Metalink if its name or its first bytes say so."""
    if path.lower().endswith((".meta4", ".metalink")):
        return True
    start = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    return start.startswith((b"<?xml", b"<metalink"))


def _text(element: ET.Element) -> str:
    return (element.text or "").strip()


def parse_metalink(body: bytes, source: str) -> Listing:
    """Entries of a Metalink 4 (or 3) document (names untrusted, ``urls`` request-ready, best first)."""
    def bad(why: str) -> DiscoveryError:
        return DiscoveryError(f"{source}: Metalink: {why}")

    root = parse_untrusted(body, bad)

    if root.tag == f"{{{_V3_NS}}}metalink":
        return _entries(root, _V3, source, bad)
    if root.tag != f"{{{NS}}}metalink":
        raise bad(f"root element is {root.tag!r}, not <metalink xmlns=\"{NS}\">")
    return _entries(root, _V4, source, bad)


@dataclass(frozen=True, slots=True)
class _Dialect:
    """Where a Metalink version keeps its elements (ElementTree paths), and how it ranks URLs."""

    files: str        # from the root to each <file>
    size: str         # from a <file>
    hashes: str       # from a <file>: its whole-file <hash> elements
    urls: str         # from a <file>
    rank_attr: str    # "priority" (1 first) or "preference" (highest first)


_V4 = _Dialect(f"{{{NS}}}file", f"{{{NS}}}size", f"{{{NS}}}hash", f"{{{NS}}}url", "priority")
_V3 = _Dialect(f"{{{_V3_NS}}}files/{{{_V3_NS}}}file", f"{{{_V3_NS}}}size",
               f"{{{_V3_NS}}}verification/{{{_V3_NS}}}hash", f"{{{_V3_NS}}}resources/{{{_V3_NS}}}url",
               "preference")


def _entries(root: ET.Element, dialect: _Dialect, source: str, bad: Callable[[str], DiscoveryError]) -> Listing:
    listing = Listing()
    for index, file in enumerate(root.findall(dialect.files)):
        name = file.get("name")
        if name is None:
            raise bad(f"<file> number {index + 1} has no name")
        size = None
        size_el = file.find(dialect.size)
        if size_el is not None:
            text = _text(size_el)
            if not text.isascii() or not text.isdigit() or len(text) > 19:  # (int() refuses 4,300 digits)
                raise bad(f"file {name!r}: <size> is not a non-negative integer below 10**19")
            size = int(text)
        checksum = _file_checksum(file.findall(dialect.hashes), name, source, listing, bad)
        ranked = []
        skipped = 0
        for order, url_el in enumerate(file.findall(dialect.urls)):
            rank_text = url_el.get(dialect.rank_attr)
            if rank_text is None:
                rank = _NO_PRIORITY
            elif rank_text.strip().isascii() and rank_text.strip().isdigit() and len(rank_text.strip()) <= 19:
                rank = int(rank_text) if dialect.rank_attr == "priority" else -int(rank_text)
            else:
                raise bad(f"file {name!r}: url {dialect.rank_attr} {rank_text!r} is not a number")
            try:
                url = requote_url(_text(url_el))
            except ValueError:
                skipped += 1
                continue
            ranked.append((rank, order, url))
        urls = tuple(dict.fromkeys(url for _, _, url in sorted(ranked)))
        if skipped:
            listing.warnings.append(f"{source}: file {name!r}: ignoring {skipped} non-HTTP URL(s)")
        if not urls:
            listing.warnings.append(f"{source}: skipping file {name!r}: no HTTP URL")
            continue
        listing.entries.append(Entry(name=name, size=size, checksum=checksum, urls=urls))
    return listing


def _file_checksum(hashes: list[ET.Element], name: str, source: str, listing: Listing,
                   bad: Callable[[str], DiscoveryError]) -> Checksum | None:
    """The strongest whole-file ``<hash>`` of a ``<file>`` dtune knows (``<pieces>`` hashes are not
    whole-file ones). A known type with a malformed digest is an error: the document is wrong; a
    file whose hashes are all of unknown types gets a warning and is checked by size only."""
    found: list[Checksum] = []
    unknown: list[str] = []
    for hash_el in hashes:
        kind = (hash_el.get("type") or "").strip()
        if checksums.canonical(kind) is None:
            unknown.append(kind)
            continue
        checksum = checksums.make(kind, _text(hash_el), "metalink")
        if checksum is None:
            digits = checksums.hex_length(checksums.canonical(kind) or "")
            raise bad(f"file {name!r}: {kind} <hash> is not {digits} hex digits")
        found.append(checksum)
    if not found and unknown:
        listing.warnings.append(f"{source}: file {name!r}: ignoring <hash> of type(s) "
                                f"{', '.join(map(repr, unknown))}: only the size is checked")
    return checksums.strongest(*found)
