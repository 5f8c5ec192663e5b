"""Metalink 4 files (RFC 5854, namespace ``urn:ietf:params:xml:ns:metalink``).

Per ``<file name="...">`` dtune reads ``<size>``, ``<hash type="sha-256">``
and the ``<url>`` elements; the rest (``<pieces>``, ``<metaurl>`` torrents,
signatures, descriptions) is ignored. URLs are ordered by ``priority``
(1 = most preferred; RFC 5854 section 4.2.16.2: a URL without one comes after
those that have one), document order among equals. Non-HTTP URLs (ftp,
rsync...) are skipped with a warning, and a file left with no HTTP URL is
skipped with a warning too.

Safety: the document is untrusted XML. Before ElementTree sees it, a pass
with expat refuses any DOCTYPE (internal or external) and any entity
declaration, so entity expansion ("billion laughs") and external entities
never happen. Metalink 3 (``http://www.metalinker.org/``) is refused by name.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from xml.parsers import expat

from dtune.discovery.entries import Entry, Listing
from dtune.discovery.urls import requote_url
from dtune.errors import DiscoveryError

NS = "urn:ietf:params:xml:ns:metalink"
_V3_NS = "http://www.metalinker.org/"
_HEX64 = re.compile(r"^[0-9a-fA-F]{64}$")
_NO_PRIORITY = 1_000_000  # after the RFC's largest priority, 999999


def looks_like_metalink(path: str, head: bytes) -> bool:
    """A local file is read as a Metalink if its name or its first bytes say so."""
    if path.lower().endswith((".meta4", ".metalink")):
        return True
    start = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    return start.startswith((b"<?xml", b"<metalink"))


class _Refused(Exception):
    pass


def _refuse_doctype(*_args: object) -> None:
    raise _Refused("DOCTYPE declarations are not allowed")


def _refuse_entity(*_args: object) -> None:
    raise _Refused("entity declarations are not allowed")


def _check_no_dtd(body: bytes) -> None:
    """Raise ``_Refused`` on a DOCTYPE or ENTITY declaration, ``ExpatError`` on bad XML."""
    scanner = expat.ParserCreate()
    scanner.StartDoctypeDeclHandler = _refuse_doctype
    scanner.EntityDeclHandler = _refuse_entity
    scanner.UnparsedEntityDeclHandler = _refuse_entity
    scanner.ExternalEntityRefHandler = _refuse_entity
    scanner.Parse(body, True)


def _text(element: ET.Element) -> str:
    return (element.text or "").strip()


def parse_metalink(body: bytes, source: str) -> Listing:
    """Entries of a Metalink 4 document (names untrusted, ``urls`` request-ready, best first)."""
    def bad(why: str) -> DiscoveryError:
        return DiscoveryError(f"{source}: Metalink: {why}")

    try:
        _check_no_dtd(body)
        root = ET.fromstring(body)
    except _Refused as exc:
        raise bad(f"{exc} (refusing a document that could expand entities)") from None
    except (expat.ExpatError, ET.ParseError) as exc:
        raise bad(f"not well-formed XML: {exc}") from None
    except (ValueError, LookupError, RecursionError) as exc:  # bad encoding declaration, absurd nesting
        raise bad(f"cannot be read: {exc}") from None

    if root.tag == f"{{{_V3_NS}}}metalink":
        raise bad("Metalink 3 is not supported; use Metalink 4 (RFC 5854)")
    if root.tag != f"{{{NS}}}metalink":
        raise bad(f"root element is {root.tag!r}, not <metalink xmlns=\"{NS}\">")

    listing = Listing()
    for index, file in enumerate(root.findall(f"{{{NS}}}file")):
        name = file.get("name")
        if name is None:
            raise bad(f"<file> number {index + 1} has no name")
        size = None
        size_el = file.find(f"{{{NS}}}size")
        if size_el is not None:
            text = _text(size_el)
            if not text.isascii() or not text.isdigit():
                raise bad(f"file {name!r}: <size> is not a non-negative integer")
            size = int(text)
        sha256 = None
        for hash_el in file.findall(f"{{{NS}}}hash"):
            if (hash_el.get("type") or "").lower() == "sha-256":
                if not _HEX64.match(_text(hash_el)):
                    raise bad(f"file {name!r}: sha-256 <hash> is not 64 hex digits")
                sha256 = _text(hash_el).lower()
        ranked = []
        skipped = 0
        for order, url_el in enumerate(file.findall(f"{{{NS}}}url")):
            priority_text = url_el.get("priority")
            if priority_text is None:
                priority = _NO_PRIORITY
            elif priority_text.strip().isascii() and priority_text.strip().isdigit():
                priority = int(priority_text)
            else:
                raise bad(f"file {name!r}: url priority {priority_text!r} is not a number")
            try:
                url = requote_url(_text(url_el))
            except ValueError:
                skipped += 1
                continue
            ranked.append((priority, order, url))
        urls = tuple(dict.fromkeys(url for _, _, url in sorted(ranked)))
        if skipped:
            listing.warnings.append(f"{source}: file {name!r}: ignoring {skipped} non-HTTP URL(s)")
        if not urls:
            listing.warnings.append(f"{source}: skipping file {name!r}: no HTTP URL")
            continue
        listing.entries.append(Entry(name=name, size=size, sha256=sha256, urls=urls))
    return listing
