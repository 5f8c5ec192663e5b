"""Sources read through a catalogue or a repository's API: THREDDS ``catalog.xml`` trees and DOI
records (Zenodo, figshare, Dataverse).

``claim(source)`` says whether a source is one of them (cheap: no parser imported); the
``Catalogs`` object of one ``discover`` call reads it, asking every URL through discovery's own
request (sessions, cookies, retries with the server's Retry-After) and adding the files to the
same ``Catalogue`` a directory walk adds to (names made safe there, selection applied there).
The parsers are pure (``discovery/thredds.py``, ``discovery/records.py``).

THREDDS: catalogues are read breadth first, ``LISTING_CONCURRENCY`` at a time, with a visited set
(catalogRef loops, redirects to a catalogue already read), ``max_depth`` catalogRef levels,
``max_files`` catalogues at most, and only on the start catalogue's origin or another origin a
source names. A file's output path is its urlPath with the directory prefix every fetched
dataset shares removed (``thredds/fileServer/`` is no part of a urlPath: ``model/run1/a.nc``
and ``model/run2/b.nc`` become ``run1/a.nc`` and ``run2/b.nc``). ``dataSize`` is a planning
hint only (``FileSpec.size_hint``): the response's length is the size verified.

DOI records: a ``doi:`` source (or ``https://doi.org/DOI``) is asked of the resolver with
redirects not followed: each Location is looked at, and the first whose shape is a Zenodo
record, figshare article or Dataverse dataset page names the API to ask (at most
``RESOLVER_HOPS`` redirects). figshare's own DOIs (10.6084/m9.figshare.N[.vK]) name the
article without a resolver. Files a record marks restricted are asked with ``HEAD``: readable
(credentials given) they are fetched, else each goes into ``Dataset.unlisted`` (the run fails
naming them).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from dtune.dataset import FileSpec
from dtune.discovery import records
from dtune.discovery.manifest import load_json
from dtune.discovery.select import EVERYTHING, Selection
from dtune.discovery.urls import join_url, path_is_dir, requote_url
from dtune.errors import DiscoveryError
from dtune.http.client import REDIRECTS, FetchResult
from dtune.http.message import parse_retry_after, resolve_location
from dtune.http.redact import redact_url

if TYPE_CHECKING:
    from dtune.discovery.thredds import CatalogFile
    from dtune.discovery.tree import Call, Catalogue

DEFAULT_FIGSHARE_API = records.DEFAULT_FIGSHARE_API
RESOLVER_HOPS = 5       # redirects followed from a DOI resolver to a landing page (doi.org: one or two)
API_MAX_BYTES = 64 << 20
_JSON = {"Accept": "application/json", "Accept-Encoding": "gzip"}
_XML = {"Accept": "application/xml, text/xml;q=0.9, */*;q=0.1", "Accept-Encoding": "gzip"}


@dataclass(frozen=True, slots=True)
class RecordSettings:
    """Where DOIs are resolved and figshare's API lives (``--doi-resolver``, ``--figshare-api``)."""

    resolver: str = records.DEFAULT_RESOLVER
    figshare_api: str = records.DEFAULT_FIGSHARE_API


def claim(source: str, figshare_api: str = records.DEFAULT_FIGSHARE_API) -> str | None:
    """``"doi"``, ``"record"`` (a repository page), ``"thredds"`` or None for any other source."""
    if records.doi_of(source) is not None or source[:4].lower() == "doi:":
        return "doi"
    if not source[:8].lower().startswith(("http://", "https://")):
        return None
    if records.landing(source, figshare_api, figshare_anywhere=False) is not None:
        return "record"
    path = urlsplit(source).path
    last = path.rpartition("/")[2]
    if last in ("catalog.xml", "catalog.html") or ("/thredds/catalog/" in path and last.endswith(".xml")):
        return "thredds"
    return None


def _xml_url(url: str) -> str:
    """A TDS catalogue's HTML view (``catalog.html``) as the XML it is drawn from."""
    parts = urlsplit(url)
    if parts.path.endswith(".html"):
        return urlunsplit(parts._replace(path=parts.path[:-5] + ".xml"))
    return url


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme.lower()}://{(parts.netloc or '').lower()}"


def _retry_statuses(res: FetchResult, what: str) -> None:
    """A limit or server error answered to a request whose status is read (a resolver's HEAD, a
    restricted file's probe): asked again, after the server's Retry-After."""
    if res.status in (408, 429) or res.status >= 500:
        raise DiscoveryError(f"{what}: answered HTTP {res.status}", retryable=True,
                             retry_after=parse_retry_after(res.headers.get("retry-after"), time.time()))


class Catalogs:
    """THREDDS trees and DOI records for one ``discover`` call."""

    def __init__(self, catalogue: Catalogue, call: Call, *, mirrors: Sequence[str], sources: Sequence[str],
                 max_depth: int, max_files: int, listing_max_bytes: int,
                 settings: RecordSettings | None = None, select: Selection = EVERYTHING) -> None:
        self.catalogue = catalogue
        self._select = select
        self._call = call
        self._mirrors = [m for m in mirrors if path_is_dir(m)]
        self._origins = {_origin(s) for s in sources if s[:8].lower().startswith(("http://", "https://"))}
        self._max_depth = max_depth
        self._max_files = max_files
        self._max_bytes = listing_max_bytes
        self.settings = settings or RecordSettings()

    async def read(self, kind: str, source: str) -> bool:
        """Add the files of ``source``; False when a ``catalog.xml`` is no THREDDS catalogue after all
        (the caller fetches it as one file)."""
        if kind == "thredds":
            return await self.thredds(requote_url(source), source)
        await self.record(kind, source)
        return True

    # -- THREDDS ---------------------------------------------------------------------------

    async def _get(self, url: str, limit: asyncio.Semaphore) -> FetchResult | DiscoveryError:
        async with limit:
            try:
                return await self._call(url, headers=_XML, status_ok=False, max_bytes=self._max_bytes)
            except DiscoveryError as exc:
                return exc

    async def thredds(self, start: str, source: str) -> bool:
        from dtune.discovery import thredds  # xml: catalogue sources only
        from dtune.discovery.tree import LISTING_CONCURRENCY  # (the same pace as directory listings)

        start = _xml_url(start)
        allowed = self._origins | {_origin(start)}
        seen: set[str] = {start}
        level: list[tuple[str, int]] = [(start, 0)]
        files: list[tuple[CatalogFile, str]] = []
        skipped = read = 0
        limit = asyncio.Semaphore(LISTING_CONCURRENCY)
        while level:
            read += len(level)
            if read > self._max_files:
                raise DiscoveryError(f"{source}: more than max_files={self._max_files} THREDDS catalogues")
            async with asyncio.TaskGroup() as group:
                tasks = [group.create_task(self._get(url, limit)) for url, _ in level]
            next_level: list[tuple[str, int]] = []
            for (url, depth), task in zip(level, tasks, strict=True):
                outcome = task.result()
                try:
                    if isinstance(outcome, DiscoveryError):
                        raise outcome
                    final = outcome.url or url
                    try:
                        final = requote_url(final)
                    except ValueError:
                        final = url
                    if final != url and final in seen:
                        continue  # redirected to a catalogue already read
                    seen.add(final)
                    catalog = thredds.parse_catalog(outcome.body, final)
                except thredds.NotACatalog:
                    if url == start:
                        return False
                    self.catalogue.warn(f"{redact_url(url)} (catalogRef of {source}) is not a THREDDS catalogue: "
                                        "skipped")
                    continue
                except DiscoveryError as exc:
                    if url == start:
                        raise
                    where = urlsplit(url).path.lstrip("/") or url
                    self.catalogue.dataset.unlisted.append(
                        (where, f"{where}: THREDDS catalogue of {source} could not be read: {exc}"))
                    continue
                self.catalogue.dataset.warnings.extend(catalog.warnings)
                skipped += catalog.skipped
                files.extend((f, final) for f in catalog.files)
                for ref in catalog.refs:
                    ref = _xml_url(ref)
                    if ref in seen:
                        continue
                    seen.add(ref)
                    if _origin(ref) not in allowed:
                        self.catalogue.warn(f"not following catalogRef {redact_url(ref)} of {source}: another "
                                            "origin (name it as a source to fetch it too)")
                    elif not urlsplit(ref).path.endswith(".xml"):
                        self.catalogue.warn(f"not following catalogRef {redact_url(ref)} of {source}: not a "
                                            "catalog .xml")
                    elif depth + 1 > self._max_depth:
                        self.catalogue.warn(f"not following catalogRef {redact_url(ref)} of {source}: deeper "
                                            f"than max_depth={self._max_depth}")
                    else:
                        next_level.append((ref, depth + 1))
            level = next_level
        if skipped:
            self.catalogue.warn(f"{source}: {skipped} dataset(s) offered only through other services (OPeNDAP, "
                                "WMS, ...) and not HTTPServer: skipped")
        self._add_catalog_files(files, source)
        return True

    def _add_catalog_files(self, files: list[tuple[CatalogFile, str]], source: str) -> None:
        """Each file under its urlPath less the directory prefix all of them share."""
        kept: list[tuple[CatalogFile, str]] = []
        urls: set[str] = set()
        for item, where in files:
            if item.url in urls:
                continue  # (one dataset listed by two catalogues)
            safe = self.catalogue.safe(item.path, redact_url(where))
            if safe is not None:
                urls.add(item.url)
                kept.append((item, safe))
        if not kept:
            return
        shared = kept[0][1].split("/")[:-1]
        for _, path in kept[1:]:
            dirs = path.split("/")[:-1]
            n = 0
            while n < min(len(shared), len(dirs)) and shared[n] == dirs[n]:
                n += 1
            shared = shared[:n]
        cut = len(shared)
        for item, path in kept:
            relpath = "/".join(path.split("/")[cut:])
            self.catalogue.add(FileSpec(url=item.url, relpath=relpath, size_hint=item.size_hint,
                                        mirrors=[join_url(m, relpath) for m in self._mirrors]), source)
            if self.catalogue.full():
                self.catalogue.cut = True
                return

    # -- DOI records -----------------------------------------------------------------------

    async def record(self, kind: str, source: str) -> None:
        api = self.settings.figshare_api
        if kind == "doi":
            doi = records.check_doi(source)
            place = records.figshare_from_doi(doi, api) or await self._resolve(doi, source)
        else:
            place = records.landing(source, api, figshare_anywhere=False)
            if place is None:  # (claim said it was one)
                raise DiscoveryError(f"{source}: not a Zenodo, figshare or Dataverse record page")
        try:
            res = await self._call(place.api, headers=_JSON, status_ok=False, max_bytes=API_MAX_BYTES)
        except DiscoveryError as exc:
            raise DiscoveryError(f"{source} ({place.label}): {exc}") from None
        doc = load_json(res.body, f"{source} ({place.label})", "API answer")
        if place.kind == "zenodo":
            found = records.zenodo_files(doc, place)
        elif place.kind == "figshare":
            found, links = records.figshare_files(doc, place)
            for name in links:
                self.catalogue.warn(f"{place.label}: {name[:200]!r} is a link to elsewhere, not a file figshare "
                                    "holds: skipped")
        else:
            found = records.dataverse_files(doc, place)
        if not found:
            raise DiscoveryError(f"{source} ({place.label}): the record lists no files (none published, or "
                                 "all restricted)")
        for item in found:
            relpath = self.catalogue.safe(item.name, place.label)
            if relpath is None or not self._select.wants_file(relpath):
                continue
            if item.restricted and not await self._readable(item.url):
                self.catalogue.dataset.unlisted.append(
                    (relpath, f"{relpath}: restricted in {place.label}: not readable without credentials "
                              f"(a .netrc entry for {urlsplit(item.url).hostname}, or --header/--token-file "
                              "with the record's page URL as the source)"))
                continue
            self.catalogue.add(FileSpec(url=item.url, relpath=relpath, size=item.size, checksum=item.checksum,
                                        mirrors=[join_url(m, relpath) for m in self._mirrors]), source)

    async def _readable(self, url: str) -> bool:
        """Whether a restricted file answers its ``HEAD`` (credentials given make it readable)."""
        try:
            res = await self._call(url, method="HEAD", check=_retry_statuses)
        except DiscoveryError:
            return False
        return res.status == 200

    async def _resolve(self, doi: str, source: str) -> records.Landing:
        """The record a DOI's landing page is, read from the resolver's redirects (not followed)."""
        url = records.resolver_url(self.settings.resolver, doi)
        for _ in range(RESOLVER_HOPS + 1):
            res = await self._call(url, method="HEAD", follow=False, check=_retry_statuses)
            if res.status in (403, 405, 501):  # HEAD refused: the same with GET, its body unread
                res = await self._call(url, follow=False, check=_retry_statuses, max_bytes=1 << 16)
            location = res.headers.get("location", "").strip()
            if res.status not in REDIRECTS or not location:
                if url == records.resolver_url(self.settings.resolver, doi):
                    why = "does not know it" if res.status == 404 else f"answered HTTP {res.status}"
                    raise DiscoveryError(f"{source}: the DOI resolver {redact_url(url)} {why}")
                raise DiscoveryError(f"{source}: its landing page {redact_url(url)} is not a Zenodo record, "
                                     "figshare article or Dataverse dataset (the repositories dtune reads)")
            target = resolve_location(url, location)
            place = records.landing(target, self.settings.figshare_api)
            if place is not None:
                return place
            try:
                url = requote_url(target)
            except ValueError:
                raise DiscoveryError(f"{source}: the DOI resolves to {target[:200]!r}, not an http(s) page") from None
        raise DiscoveryError(f"{source}: its landing page {redact_url(url)} is not a Zenodo record, figshare "
                             f"article or Dataverse dataset (after {RESOLVER_HOPS} redirects)")
