"""Discovery of trees: walking directory listings, and reading the checksum files they hold.

``TreeWalk`` is what a directory source needs, held by the one-``discover``-call
state (``_Discovery`` in ``discovery/__init__.py``) and given only what it
uses: the ``Catalogue`` it adds files to (that state: names made safe,
warnings, the file count), the request to list with, the selection, the
mirrors and the limits.

- ``directory`` walks a tree breadth first, ``LISTING_CONCURRENCY`` listings
  at a time, with a visited set against redirect loops and repeated links,
  and only into directories that stay under the start URL (after its
  redirects). A sub-directory that cannot be listed goes into
  ``Dataset.unlisted``; the start URL itself failing is the source's error.
- ``parse_directory`` tells a dtune manifest, an nginx JSON index and an
  HTML index apart by Content-Type and first byte, and hands the body to its
  pure parser (``manifest``, ``autoindex``).
- WebDAV: a ``dav`` walk asks every level ``PROPFIND`` (``Depth: 1``) and
  reads the multistatus with ``webdav.parse_multistatus``; a walk started
  without it turns into one when the start URL gives no usable index
  (``NO_INDEX``, or an HTML page without links) and answers PROPFIND with a
  207 (``_dav_instead``). A sub-directory whose answer cannot be read is
  unlisted, as one whose request failed.
- ``read_checksum_files`` gives files the digests of the SHA256SUMS-style files
  the listings hold and of those the user named (``sums``).

The HTML and nginx-index parsers (``autoindex``) are imported on first use,
so a one-file get never loads them.
"""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from dtune.dataset import Dataset, FileSpec
from dtune.discovery.entries import Entry, Listing
from dtune.discovery.manifest import is_manifest, load_json, manifest_entries
from dtune.discovery.select import Selection
from dtune.discovery.urls import join_url, last_segment, path_is_dir, relative_segments, requote_url
from dtune.errors import DiscoveryError
from dtune.http.client import FetchResult

if TYPE_CHECKING:
    from dtune.discovery import sums

# Directory listings fetched at once. Eight hides most of the per-directory
# round trip on a WAN for trees of many small directories, while staying far
# below what a shared web server would notice as a crawl.
LISTING_CONCURRENCY = 8


# What a start URL without an index answers a GET (Apache's ``Options -Indexes``: 403; a WebDAV
# server with no pages: 404, 405): such a directory is asked PROPFIND before giving up.
NO_INDEX = (403, 404, 405)

# A listing may come gzip'd (``Fetcher`` decodes it within the same size limit): a manifest of
# 2000 files is 152 KB as it is, three round trips of slow start, and 23 KB gzip'd.
LISTING_HEADERS = {"Accept": "application/json", "Accept-Encoding": "gzip"}


def _read_small(path: str, limit: int) -> bytes:
    """A local file of at most ``limit`` bytes (OSError EFBIG beyond)."""
    with open(path, "rb") as fh:
        body = fh.read(limit + 1)
    if len(body) > limit:
        raise OSError(errno.EFBIG, f"larger than {limit >> 20} MiB")
    return body


def _content_type(headers: dict[str, str]) -> tuple[str, str | None]:
    value = headers.get("content-type", "")
    mime, _, params = value.partition(";")
    charset = None
    for param in params.split(";"):
        key, _, val = param.partition("=")
        if key.strip().lower() == "charset":
            charset = val.strip().strip('"') or None
    return mime.strip().lower(), charset


def _is_json(res: FetchResult) -> bool:
    """Is a directory response read as JSON (a manifest, an nginx JSON index) by ``parse_directory``?"""
    mime, _ = _content_type(res.headers)
    return "json" in mime or (mime not in ("text/html", "application/xhtml+xml")
                              and res.body.lstrip()[:1] in (b"{", b"["))


def parse_directory(res: FetchResult, page_url: str) -> tuple[str, Listing]:
    """Which kind of listing a directory response is, and its entries."""
    mime, charset = _content_type(res.headers)
    is_html = mime in ("text/html", "application/xhtml+xml")
    if _is_json(res):
        doc = load_json(res.body, page_url, "directory listing")
        if is_manifest(doc):
            return "manifest", manifest_entries(doc, page_url, consume=True)
        if isinstance(doc, list):
            from dtune.discovery.autoindex import nginx_json_entries  # listings only: not for one file
            return "nginx-json", nginx_json_entries(doc, page_url)
        raise DiscoveryError(f"{page_url}: JSON listing is neither a dtune manifest nor an nginx JSON index")
    if is_html or (not mime and res.body.lstrip()[:1] == b"<"):
        from dtune.discovery.autoindex import parse_html_index  # html.parser: listings only
        return "html", parse_html_index(res.body, page_url, page_url, charset=charset)
    raise DiscoveryError(f"{page_url}: cannot list a directory served as {mime or 'no content type'!r}")


def one_line(exc: BaseException) -> str:
    """An exception as one line of text (its type name when it has no message)."""
    return " ".join(str(exc).split()) or type(exc).__name__


_CHECKSUM_SUFFIXES = ("sums", "sums.txt", "sum", ".sha512", ".sha384", ".sha256", ".sha224", ".sha1", ".md5")


def _is_checksum_file(relpath: str) -> bool:
    """Whether a listed file's name may be a checksum file: a cheap test before ``sums`` decides."""
    name = relpath.rpartition("/")[2]
    if not name.lower().endswith(_CHECKSUM_SUFFIXES):
        return False
    from dtune.discovery import sums  # (its patterns: only for a name that may be a checksum file)
    return sums.checksum_file_kind(name) is not None



class Catalogue(Protocol):
    """What a walk adds the files it lists to (``_Discovery``)."""

    dataset: Dataset
    cut: bool   # set when listing stops at the selection's max_files with directories left

    def warn(self, message: str) -> None: ...
    def safe(self, name: str, where: str, prefix: str = "") -> str | None: ...
    def add(self, spec: FileSpec, source: str) -> None: ...
    def full(self) -> bool: ...


Call = Callable[..., Awaitable[FetchResult]]  # (url, **fetch options) -> the answer, asked again while it may mend


class TreeWalk:
    """Directory trees and the checksum files they hold, for one ``discover`` call.

    ``call`` asks a URL (with retries); ``mirrors`` are the directory mirrors (each holds the
    same relative paths); ``max_files`` bounds the listings as well as the files."""

    def __init__(self, catalogue: Catalogue, call: Call, select: Selection, mirrors: list[str], *,
                 max_depth: int, max_files: int, listing_max_bytes: int) -> None:
        self.catalogue = catalogue
        self._call = call
        self._select = select
        self._mirrors = mirrors
        self._max_depth = max_depth
        self._max_files = max_files
        self._listing_max_bytes = listing_max_bytes
        self._listed = 0
        self._checksum_files: list[FileSpec] = []  # listed files whose names say they hold digests

    # -- directories -----------------------------------------------------------------------

    async def _list_one(self, url: str, limit: asyncio.Semaphore, dav: bool = False) -> FetchResult | DiscoveryError:
        async with limit:
            try:
                if dav:
                    from dtune.discovery import webdav  # (WebDAV directories only)
                    return await self._call(url, method="PROPFIND", headers=webdav.PROPFIND_HEADERS,
                                            body=webdav.PROPFIND_BODY, status_ok=False, accept=207,
                                            max_bytes=self._listing_max_bytes)
                return await self._call(url, headers=LISTING_HEADERS, status_ok=False,
                                        max_bytes=self._listing_max_bytes)
            except DiscoveryError as exc:
                return exc

    async def _dav_instead(self, url: str, outcome: FetchResult | DiscoveryError,
                           limit: asyncio.Semaphore) -> FetchResult | DiscoveryError | None:
        """The start URL gave no usable index (``NO_INDEX``, or a page without links): its
        ``PROPFIND`` answer when that is a 207 (a WebDAV directory), else None (the GET's answer
        stands; an error then says that PROPFIND failed too)."""
        if isinstance(outcome, DiscoveryError):
            if outcome.status not in NO_INDEX:
                return None
        else:
            if _is_json(outcome):
                return None  # (not a page: a JSON listing is read once, by the walk)
            try:
                kind, listing = parse_directory(outcome, url)
            except DiscoveryError:
                return None  # (not a page: the parse says why)
            if kind != "html" or listing.entries:
                return None
        probe = await self._list_one(url, limit, dav=True)
        if isinstance(probe, DiscoveryError) and isinstance(outcome, DiscoveryError):
            why = f"HTTP {probe.status}" if probe.status is not None else one_line(probe)
            return DiscoveryError(f"{outcome} (and PROPFIND, for a WebDAV directory: {why})", status=outcome.status)
        return None if isinstance(probe, DiscoveryError) else probe

    async def directory(self, start: str, source: str, *, dav: bool = False) -> None:
        """Walk a directory tree breadth first; relpaths are relative to ``start``. ``dav``: list
        with PROPFIND (``dav://`` sources); else a start URL without a usable index is asked
        PROPFIND once, and a 207 lists the whole tree that way."""
        root: str | None = None  # the start URL after redirects: everything must stay under it
        seen: set[str] = {start}
        level: list[tuple[str, str, int]] = [(start, "", 0)]  # (url, relpath prefix, depth)
        limit = asyncio.Semaphore(LISTING_CONCURRENCY)
        while level:
            if self.catalogue.full():
                self.catalogue.cut = True  # (directories left unlisted)
                break
            self._listed += len(level)
            if self._listed > self._max_files:
                raise DiscoveryError(f"{source}: more than max_files={self._max_files} directory listings")
            async with asyncio.TaskGroup() as group:
                tasks = [group.create_task(self._list_one(url, limit, dav)) for url, _, _ in level]
            next_level: list[tuple[str, str, int]] = []
            for (url, prefix, depth), task in zip(level, tasks, strict=True):
                outcome = task.result()
                if root is None and not dav:
                    instead = await self._dav_instead(url, outcome, limit)
                    if isinstance(instead, FetchResult):
                        outcome, dav = instead, True
                    elif instead is not None:
                        outcome = instead
                if isinstance(outcome, DiscoveryError):
                    if root is None:
                        raise outcome
                    self.catalogue.dataset.unlisted.append((prefix, f"{prefix}: directory of {source} could not be "
                                                          f"listed: {outcome}"))
                    continue
                try:
                    final = requote_url(outcome.url)
                except ValueError:
                    final = url
                if root is None:
                    root = final if path_is_dir(final) else url
                elif final != url:
                    if final in seen:
                        continue  # redirected to a directory already listed
                    if relative_segments(final, root) is None:
                        self.catalogue.warn(f"skipping directory {prefix!r} of {source}: redirected outside it, to {final}")
                        continue
                seen.add(final)
                if dav:
                    from dtune.discovery.webdav import parse_multistatus  # (WebDAV directories only)
                    page = final if path_is_dir(final) else url
                    try:
                        listing = parse_multistatus(outcome.body, page, page)
                    except DiscoveryError as exc:  # (a sub-directory's answer costs that directory only)
                        if prefix == "":
                            raise
                        self.catalogue.dataset.unlisted.append((prefix, f"{prefix}: directory of {source} could not "
                                                                        f"be listed: {exc}"))
                        continue
                else:
                    _, listing = parse_directory(outcome, final)
                self.catalogue.dataset.warnings.extend(listing.warnings)
                entries, listing.entries = listing.entries, []
                entries.reverse()
                while entries:  # (each entry let go of once its file is added: not held twice)
                    sub = self._entry(entries.pop(), final, prefix, depth, source)
                    if sub is not None and sub[0] not in seen:
                        seen.add(sub[0])
                        next_level.append(sub)
            level = next_level

    def _entry(self, entry: Entry, page: str, prefix: str, depth: int,
               source: str) -> tuple[str, str, int] | None:
        """Add a file entry; return ``(url, prefix, depth)`` for a sub-directory to list next."""
        rel = self.catalogue.safe(entry.name, page)
        if rel is None:
            return None
        relpath = self.catalogue.safe(rel, page, prefix) if prefix else rel  # (``rel`` is already safe)
        if relpath is None:
            return None
        url = entry.urls[0] if entry.urls else join_url(page, rel)
        if entry.is_dir:
            if not self._select.descends(relpath, depth + 1):
                return None  # pruned by --exclude DIR/ or --max-depth: never requested
            if depth + 1 > self._max_depth:
                self.catalogue.warn(f"not descending into {relpath + '/'!r} of {source}: deeper than "
                          f"max_depth={self._max_depth}")
                return None
            if not url.endswith("/"):
                url += "/"
            return url, relpath + "/", depth + 1
        spec = FileSpec(url=url, relpath=relpath, size=entry.size, checksum=entry.checksum,
                        mirrors=[join_url(m, relpath) for m in self._mirrors], mtime=entry.mtime)
        self.catalogue.add(spec, source)
        if _is_checksum_file(relpath):
            self._checksum_files.append(spec)
        return None

    # -- checksum files (discovery/sums.py) ------------------------------------------------

    async def read_checksum_files(self, explicit: Sequence[str], listed: bool) -> None:
        """Give files the digests of the checksum files the listings hold (``listed``) and of those the
        user named; a listed one that cannot be read costs a warning, a named one is an error."""
        if not explicit and not (listed and self._checksum_files):
            return
        from dtune.discovery import sums  # (its patterns and parsers: only when there are checksum files)
        files = {spec.relpath: spec for spec in self.catalogue.dataset.files}
        jobs = [self._explicit_checksum_job(where) for where in explicit]
        if listed:
            kept = [s for s in self._checksum_files if files.get(s.relpath) is s]  # (not a refused duplicate)
            jobs += sums.listed_jobs(kept, files, self.catalogue.warn)
        if not jobs:
            return
        limit = asyncio.Semaphore(LISTING_CONCURRENCY)
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(self._read_checksum_file(job, limit)) for job in jobs]
        for job, task in zip(jobs, tasks, strict=True):
            body = task.result()
            if isinstance(body, DiscoveryError):
                raise body
            if body is not None:
                parsed = sums.parse_sums(body, job.kind, job.label)
                sums.attach(parsed, job.directory, files, job.label, self.catalogue.warn, suffix_match=job.explicit)

    def _explicit_checksum_job(self, where: str) -> sums.Job:
        from dtune.discovery import sums  # (its patterns: only for --checksum-file)
        if os.path.isfile(where):
            name = os.path.basename(where)
            label = where
        else:
            try:
                where = requote_url(where)
            except ValueError as exc:
                raise DiscoveryError(f"--checksum-file {where}: not an existing file, and {exc}") from None
            name = label = last_segment(where)  # (not the URL: its query may hold a signature)
        return sums.Job(where, sums.checksum_file_kind(name) or sums.ANY, "", label, explicit=True)

    async def _read_checksum_file(self, job: sums.Job, limit: asyncio.Semaphore) -> bytes | DiscoveryError | None:
        """The bytes of a checksum file; None after a warning (a listed one that cannot be read); the
        error for one the user named (returned, not raised: the other reads finish first)."""
        from dtune.discovery import sums  # (loaded already: a job comes from it)
        async with limit:
            try:
                if job.explicit and os.path.isfile(job.where):
                    return await asyncio.to_thread(_read_small, job.where, sums.MAX_BYTES)
                res = await self._call(job.where, max_bytes=sums.MAX_BYTES)
                if res.status != 200:
                    raise DiscoveryError(f"GET {job.where}: answered HTTP {res.status}")
                return res.body
            except (DiscoveryError, OSError) as exc:
                reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else one_line(exc)
                if job.explicit:
                    return DiscoveryError(f"--checksum-file {job.label}: {reason}")
                self.catalogue.warn(f"{job.label}: not read as a checksum file ({reason}); the files it names "
                          f"are checked by the other digests published, else by size only")
                return None
