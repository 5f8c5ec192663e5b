"""THREDDS ``catalog.xml`` (InvCatalog 1.0, as TDS 4 and 5 serve it): the datasets a catalogue
offers over HTTPServer, and the catalogues it refers to. A pure parser: bytes in, untrusted
objects out; fetching and walking are ``discovery/catalogs.py``'s.

Theory of operation
-------------------
A catalogue declares ``<service>`` elements (``name``, ``serviceType``, ``base``); a
``Compound`` service holds others, and naming it names each of them. A ``<dataset>`` is
fetched through a service when it has a ``urlPath`` and a ``serviceName`` (an attribute, a
``<serviceName>`` child, or one in a ``<metadata>`` of its own or of an enclosing dataset
whose ``metadata`` says ``inherited="true"``), or through each ``<access serviceName
urlPath>`` child. Of those, only an ``HTTPServer`` service (TDS's ``fileServer``) serves the
file itself: the file's URL is the service base (resolved against the catalogue's URL) with
the urlPath appended. Datasets reachable only through other services (OPeNDAP, WMS, WCS,
NetcdfSubset...) are counted, not listed. ``<catalogRef xlink:href>`` names another
catalogue (relative or absolute, resolved here); ``<dataSize units>`` is kept as a hint
only: TDS rounds it (``12.5 Mbytes``), so the response's length is the size verified.
``<property>`` checksums are not part of the standard and are not read.

Elements are matched by local name, so catalogues in the InvCatalog 1.0 namespace and
those without one read the same. Names (urlPaths) are untrusted: ``discover`` makes them
safe; a URL that is not http(s) is dropped with a warning.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from urllib.parse import urljoin

from dtune.discovery.urls import requote_url
from dtune.discovery.xmlsafe import parse_untrusted
from dtune.errors import DiscoveryError

NAMESPACE = "http://www.unidata.ucar.edu/namespaces/thredds/InvCatalog/v1.0"
XLINK_HREF = "{http://www.w3.org/1999/xlink}href"
FILE_SERVICE = "httpserver"  # serviceType of TDS's fileServer (compared in lower case)

# dataSize units as TDS writes them (decimal multiples, as its byte-size formatter uses)
_UNITS = {"bytes": 1, "byte": 1, "kbytes": 10**3, "mbytes": 10**6, "gbytes": 10**9, "tbytes": 10**12,
          "pbytes": 10**15}
_MAX_HINT = 1 << 62  # a "size" beyond any disk is no hint


class NotACatalog(DiscoveryError):
    """Well-formed XML whose root is no THREDDS ``catalog``."""


@dataclass(frozen=True, slots=True)
class CatalogFile:
    """A dataset served by HTTPServer. ``path``: its urlPath (UNTRUSTED, '/'-separated as given);
    ``url``: request-ready; ``size_hint``: bytes from ``dataSize`` (rounded by TDS), or None."""

    path: str
    url: str
    size_hint: int | None = None


@dataclass(slots=True)
class Catalog:
    files: list[CatalogFile] = field(default_factory=list)
    refs: list[str] = field(default_factory=list)   # absolute URLs of catalogRefs, in document order
    skipped: int = 0                                 # datasets with access, none of it HTTPServer
    warnings: list[str] = field(default_factory=list)


def _local(tag: object) -> str:
    return tag.rpartition("}")[2] if isinstance(tag, str) else ""


def is_catalog(root: ET.Element) -> bool:
    return _local(root.tag) == "catalog"


def parse_catalog(body: bytes, url: str) -> Catalog:
    """The datasets and catalogRefs of one catalogue fetched from ``url``; ``DiscoveryError`` for a
    document that is not a THREDDS catalogue."""
    root = parse_untrusted(body, lambda why: DiscoveryError(f"{url}: THREDDS catalogue: {why}"))
    if not is_catalog(root):
        raise NotACatalog(f"{url}: not a THREDDS catalogue (root element {_local(root.tag)[:80]!r})")
    return _Reader(url).read(root)


class _Reader:
    def __init__(self, url: str) -> None:
        self._url = url
        self._services: dict[str, list[tuple[str, str]]] = {}  # name -> leaf (type, base) services
        self.catalog = Catalog()

    def read(self, root: ET.Element) -> Catalog:
        for service in root.iter():
            if _local(service.tag) == "service":
                name = service.get("name")
                if name and name not in self._services:
                    self._services[name] = self._leaves(service, 0)
        self._children(root, None)
        return self.catalog

    def _leaves(self, service: ET.Element, depth: int) -> list[tuple[str, str]]:
        kind = (service.get("serviceType") or "").strip().lower()
        if kind != "compound":
            return [(kind, (service.get("base") or "").strip())]
        out: list[tuple[str, str]] = []
        if depth < 8:  # (a compound nests a few levels at most)
            for child in service:
                if _local(child.tag) == "service":
                    out.extend(self._leaves(child, depth + 1))
        return out

    def _children(self, parent: ET.Element, inherited: str | None) -> None:
        """Datasets and catalogRefs below ``parent`` (iteratively: nesting is untrusted)."""
        stack: list[tuple[ET.Element, str | None]] = [(parent, inherited)]
        while stack:
            node, inh = stack.pop()
            pending = []
            for child in node:
                name = _local(child.tag)
                if name == "dataset":
                    own_inh = _metadata_service(child, inherited_only=True) or inh
                    self._dataset(child, inh)
                    pending.append((child, own_inh))
                elif name == "catalogRef":
                    self._ref(child)
            stack.extend(reversed(pending))

    def _ref(self, element: ET.Element) -> None:
        href = element.get(XLINK_HREF) or element.get("href")
        if not href or not href.strip():
            return
        try:
            self.catalog.refs.append(requote_url(urljoin(self._url, href.strip())))
        except ValueError:
            self.catalog.warnings.append(f"{self._url}: catalogRef {href.strip()[:200]!r} is not an http(s) "
                                         "URL: not followed")

    def _dataset(self, element: ET.Element, inherited: str | None) -> None:
        accesses: list[tuple[str, str]] = []  # (serviceName, urlPath)
        url_path = element.get("urlPath")
        if url_path:
            service = (element.get("serviceName") or _child_text(element, "serviceName")
                       or _metadata_service(element, inherited_only=False) or inherited)
            if service:
                accesses.append((service.strip(), url_path))
        for child in element:
            if _local(child.tag) == "access" and child.get("urlPath"):
                accesses.append(((child.get("serviceName") or "").strip(), child.get("urlPath") or ""))
        if not accesses:
            return
        for service, path in accesses:
            for kind, base in self._services.get(service, []):
                if kind == FILE_SERVICE:
                    self._file(path, base, _size_hint(element))
                    return
        self.catalog.skipped += 1

    def _file(self, path: str, base: str, hint: int | None) -> None:
        rel = path.strip().lstrip("/")
        if not rel:
            return
        try:
            base_url = urljoin(self._url, base or "/")
            url = requote_url(base_url.rstrip("/") + "/" + rel)
        except ValueError:
            self.catalog.warnings.append(f"{self._url}: dataset {rel[:200]!r}: its HTTPServer base "
                                         f"{base[:200]!r} is not an http(s) URL: skipped")
            return
        self.catalog.files.append(CatalogFile(rel, url, hint))


def _child_text(element: ET.Element, name: str) -> str | None:
    for child in element:
        if _local(child.tag) == name and child.text and child.text.strip():
            return child.text.strip()
    return None


def _metadata_service(element: ET.Element, *, inherited_only: bool) -> str | None:
    """The serviceName a dataset's own ``<metadata>`` gives (only ``inherited="true"`` ones when
    ``inherited_only``: those pass to the datasets inside it)."""
    for child in element:
        if _local(child.tag) != "metadata":
            continue
        if inherited_only and (child.get("inherited") or "").strip().lower() != "true":
            continue
        found = _child_text(child, "serviceName")
        if found:
            return found
    return None


def _size_hint(element: ET.Element) -> int | None:
    for holder in [element, *(c for c in element if _local(c.tag) == "metadata")]:
        for child in holder:
            if _local(child.tag) != "dataSize" or not child.text:
                continue
            unit = _UNITS.get((child.get("units") or "bytes").strip().lower())
            try:
                value = float(child.text.strip())
            except ValueError:
                return None
            if unit is None or not (0 <= value * unit < _MAX_HINT):  # (also false for nan)
                return None
            return int(value * unit)
    return None
