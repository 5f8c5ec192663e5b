"""Discovery: turn sources (URLs, URL lists, Metalinks) into a ``Dataset``.

Theory of operation
-------------------
``discover()`` looks at each source once and decides what it is:

- an existing local file: a Metalink 4 (by extension or first bytes) or an
  aria2-style URL list; read here, parsed by a pure parser.
- an http(s) URL whose path ends in '/': a directory. It is fetched with
  ``Accept: application/json`` (and ``Accept-Encoding: gzip``, inflated
  within the listing's size limit); a JSON object with ``dtune_manifest`` is a
  whole tree at once; a JSON list is one nginx ``autoindex_format json``
  level; HTML is one nginx/Apache index level. Levels are walked breadth
  first, a few requests at a time, with a visited set (redirect loops and
  repeated links), ``max_depth`` and ``max_files`` as guards, and only into
  directories that stay under the starting URL.
- any other http(s) URL: one file. A ``HEAD`` gives its size and maybe a
  digest; if redirects end on a path with '/', it was a directory after all.
  A server that refuses HEAD (403, 405: a presigned S3 URL is signed for GET
  only) is asked ``GET`` with ``Range: bytes=0-0`` instead, for the size.
- an http(s) directory that answers its GET with no usable index (403, 404,
  or 405, or a page without links) is asked ``PROPFIND`` (``Depth: 1``);
  a ``207 Multi-Status`` makes it a WebDAV tree, every level listed so
  (``discovery.webdav``). ``dav://`` and ``davs://`` sources (and those the
  caller names in ``dav``) are listed with PROPFIND from the start, and
  fetched over http:// and https://. A file's ``HEAD`` (and every PROPFIND)
  carries ``Want-Digest: adler32, md5, sha-256`` (RFC 3230): the ``Digest``
  a WebDAV server answers is verified like any other checksum.
- ``s3://BUCKET/PREFIX/`` or ``s3://BUCKET/KEY``: listed with ListObjectsV2,
  or one object asked for its first byte, on the endpoint of ``s3``
  (``discovery.s3``).
- a THREDDS ``catalog.xml`` (its catalogRefs followed) or a DOI record
  (``doi:10.X/Y``, ``https://doi.org/...``, a Zenodo record, figshare article or
  Dataverse dataset page): read by ``discovery.catalogs`` (``claim`` tells them),
  through the same requests; a ``catalog.xml`` that is no THREDDS catalogue is one file.

Parsers (``manifest``, ``autoindex``, ``urllist``, ``metalink``) only turn
bytes into untrusted ``Entry`` objects. This module is the one place that
makes names safe: each goes through ``safe_relpath``; a refused name costs
that entry only (a ``refusing NAME from SOURCE: REASON`` warning), never the
rest of the dataset. Malformed listings and failed requests of a source's
own URL raise ``DiscoveryError``. Requests that fail in a way that may mend
(timeouts, resets, 408, 429, 5xx) are asked again with backoff, as file
ranges are; a sub-directory that still cannot be listed goes into
``Dataset.unlisted``: the rest of the tree is still fetched, and the run
fails naming it (exit 0 means the whole tree).

Walking a directory tree and reading the checksum files it holds live in
``discovery/tree.py`` (``TreeWalk``, which the per-call state holds); the
parsers they need are imported on first use, not for a one-file source.

The network is injected: ``fetch`` is a coroutine function with the
signature of ``dtune.http.client.Fetcher.fetch``; tests pass in-memory fakes.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from dtune.checksums import Checksum
from dtune.dataset import Dataset, FileSpec
from dtune.discovery.entries import Entry
from dtune.discovery.paths import relpath_problem, resolve_inside, safe_relpath
from dtune.discovery.select import EVERYTHING, Selection
from dtune.discovery.tree import TreeWalk, one_line
from dtune.discovery.urllist import parse_url_list
from dtune.discovery.urls import (
    WANT_DIGEST,
    checksum_from_headers,
    from_dav,
    join_url,
    last_segment,
    path_is_dir,
    requote_url,
)
from dtune.errors import DiscoveryError, DtuneError, SourceError, UsageError
from dtune.http.auth import strip_userinfo
from dtune.http.client import FetchResult, unauthorized  # (FetchResult: what every fetch returns)
from dtune.http.message import parse_content_range, parse_retry_after, split_url
from dtune.http.redact import redact_url
from dtune.http.validators import http_time

if TYPE_CHECKING:
    from dtune.discovery.catalogs import RecordSettings
    from dtune.discovery.s3 import S3Settings

__all__ = ["FetchResult", "Fetch", "discover", "safe_relpath", "resolve_inside"]

STDIN = "stdin"  # how messages name a URL list read from standard input (the source "-")

# A listing body may hold a whole tree (a manifest); allow ~256 bytes per
# file up to max_files, at least fetch's usual 64 MiB, at most 1 GiB.
_BYTES_PER_LISTED_FILE = 256


# await fetch(url, *, method="GET", headers=None, max_bytes=64 << 20) -> FetchResult
Fetch = Callable[..., Awaitable[FetchResult]]
# delay(failures, retry_after) -> seconds before asking again
Delay = Callable[[int, float | None], float]
# trust(url): the URL is one the user named (from a local URL list or Metalink)
Trust = Callable[[str], None]


def default_delay(failures: int, retry_after: float | None) -> float:
    """Retry-After (at most 300 s), else 0.5 s doubling up to 30 s: the engine's defaults."""
    return min(retry_after, 300.0) if retry_after is not None else min(30.0, 0.5 * 2 ** (failures - 1))


async def discover(sources: Sequence[str], *, fetch: Fetch, mirrors: Sequence[str] = (),
                   max_depth: int = 32, max_files: int = 1_000_000, retries: int = 5,
                   delay: Delay = default_delay, trust: Trust | None = None,
                   s3: S3Settings | None = None, select: Selection = EVERYTHING,
                   checksum_files: Sequence[str] = (), listed_checksums: bool = True,
                   checksum: Checksum | None = None, lists: Mapping[str, bytes] | None = None,
                   dav: Sequence[str] = (), records: RecordSettings | None = None) -> Dataset:
    """List every source and return the files to fetch.

    sources    URLs (a path ending in '/' is a directory), or local URL-list / Metalink files
    fetch      ``await fetch(url, *, method="GET", headers=None, max_bytes=...) -> FetchResult``
    mirrors    other places serving the same bytes (``--mirror``): for a directory source a
               directory URL holding the same relative paths; for a single-file source another
               URL of that file (or a directory URL holding it by name); for URL lists and
               Metalinks, directory URLs only
    max_depth  deepest sub-directory level followed below a directory source
    max_files  more files than this (or more directory listings) is an error, not a truncation
    retries    a listing or HEAD that fails in a way asking again may mend (timeout, reset, 408,
               429, 5xx) is asked again this many times, after ``delay(failures, retry_after)``
               seconds (``retry_after``: the server's Retry-After, parsed); a sub-directory that
               still cannot be listed goes into ``Dataset.unlisted``
    trust      told every URL of a URL-list file or Metalink the user gave (``Access.trust_url``):
               those are user-named, so credentials meant for the user's origins go to them;
               redirect targets and URLs of remote listings are never passed
    s3         endpoint and region of ``s3://`` sources (default: AWS in us-east-1, unsigned)
    select     which files to take (``discovery.select``: --include/--exclude/--max-depth/
               --max-files): a file it refuses is never added, a directory it prunes never
               requested, and listing stops once ``select.max_files`` files are taken
    checksum_files    SUMS files (local paths or URLs) whose digests go to the files they name
                      (``discovery.sums``; names relative to the output directory)
    listed_checksums  read the SHA256SUMS / MD5SUMS / ``NAME.sha256`` files directory listings hold
    checksum   the digest of the one file the sources name (``--checksum``); it wins over any other
    lists      URL lists given as bytes, by the source name that stands for them (``-``: the one
               ``dtune get -i -`` read from stdin); read as a local URL-list file would be
    dav        http(s) sources to list with PROPFIND from the start (``dav://`` sources the caller
               turned into http(s) URLs); a ``dav://`` or ``davs://`` source is one too
    records    the DOI resolver and figshare API of DOI sources (``discovery.catalogs``)
    """
    if isinstance(sources, str):
        sources = [sources]
    if not sources:
        raise DiscoveryError("discovery: no source given")
    walker = _Discovery(fetch, [_checked_mirror(m) for m in mirrors], max_depth=max_depth,
                        max_files=max_files, single_source=len(sources) == 1, retries=retries, delay=delay,
                        trust=trust, s3=s3, select=select, lists=lists, dav=dav)
    walker.records = records
    walker.sources = list(sources)
    for source in sources:
        if walker.full():
            walker.cut = True  # (sources left unlisted)
            break
        await walker.source(source)
    walker.refuse_file_dir_clashes()
    if walker.cut:
        walker.warn(f"listing stopped at --max-files {select.max_files}: only the first "
                    f"{select.max_files} files listed are fetched")
    await walker.tree.read_checksum_files(checksum_files, listed_checksums)
    if checksum is not None:
        if len(walker.dataset.files) != 1:
            raise UsageError(f"--checksum gives the digest of one file, but the sources list "
                             f"{len(walker.dataset.files)}; use --checksum-file for many")
        walker.dataset.files[0].checksum = checksum
    return walker.dataset


def _checked_mirror(mirror: str) -> str:
    try:
        return requote_url(mirror)
    except ValueError as exc:
        raise SourceError(f"mirror {mirror!r}: {exc}") from None


class _Discovery:
    """Accumulates one ``Dataset`` over all sources (state for a single ``discover`` call)."""

    def __init__(self, fetch: Fetch, mirrors: list[str], *, max_depth: int, max_files: int,
                 single_source: bool, retries: int = 5, delay: Delay = default_delay,
                 trust: Trust | None = None, s3: S3Settings | None = None,
                 select: Selection = EVERYTHING, lists: Mapping[str, bytes] | None = None,
                 dav: Sequence[str] = ()) -> None:
        self._fetch = fetch
        self._dav = set(dav)
        self._lists = dict(lists or {})
        self._trust = trust
        self._s3 = s3
        self._select = select
        self.cut = False  # select.max_files were taken and something was left unlisted or untaken
        self._retries = retries
        self._delay = delay
        self._mirrors = mirrors
        self._max_files = max_files
        self._single_source = single_source
        self._owner: dict[str, tuple[str, str]] = {}  # relpath -> (the source it came from, its URL)
        self._mirrors_of: dict[str, list[str]] = {}  # relpath -> the mirrors of the file kept for it (if any)
        self.dataset = Dataset()
        self.records: RecordSettings | None = None  # DOI resolver and figshare API (``discovery.catalogs``)
        self.sources: list[str] = []
        self._max_depth = max_depth
        self._listing_max_bytes = min(1 << 30, max(64 << 20, max_files * _BYTES_PER_LISTED_FILE))
        self.tree = TreeWalk(self, self._call, select, mirrors, max_depth=max_depth, max_files=max_files,
                             listing_max_bytes=self._listing_max_bytes)

    # -- bookkeeping -----------------------------------------------------------------------

    def warn(self, message: str) -> None:
        self.dataset.warnings.append(message)

    def safe(self, name: str, where: str, prefix: str = "") -> str | None:
        """``prefix`` + the safe form of ``name``, or None after a refusal warning."""
        relpath, reason = relpath_problem(name)
        if relpath is not None and prefix:
            relpath, reason = relpath_problem(prefix + relpath)
        if relpath is None:
            self.warn(f"refusing {prefix + name!r} from {where}: {reason}")
        return relpath

    def add(self, spec: FileSpec, source: str) -> None:
        if not self._select.everything and not self._take(spec.relpath):
            return
        first = self._owner.get(spec.relpath)
        if first is not None:
            # the same URL reached twice (a page linking deep and its sub-page) is fine, and so is a
            # mirror of the file already listed; another file for the same path is a collision
            if first[1] != spec.url and spec.url not in self._mirrors_of.get(spec.relpath, ()) \
                    and first[1] not in spec.mirrors:
                self.dataset.collisions.append((spec.relpath, first[1], spec.url))
            return
        if len(self.dataset.files) >= self._max_files:
            raise DiscoveryError(f"{source}: more than max_files={self._max_files} files; "
                                 "raise the limit to fetch them all")
        self._owner[spec.relpath] = (source, spec.url)
        if spec.mirrors:  # (a file without mirrors keeps its one empty list: no second one per file)
            spec.mirrors = list(dict.fromkeys(m for m in spec.mirrors if m != spec.url))
        if spec.mirrors:  # (only a file with mirrors: a million files without need no entry each)
            self._mirrors_of[spec.relpath] = spec.mirrors
        self.dataset.files.append(spec)

    def _take(self, relpath: str) -> bool:
        """Does the selection take this file (and is there room for it under --max-files)?"""
        if not self._select.wants_file(relpath):
            return False
        if self.full() and relpath not in self._owner:
            self.cut = True
            return False
        return True

    def full(self) -> bool:
        """Have ``select.max_files`` files been taken (nothing more is listed)?"""
        limit = self._select.max_files
        return limit is not None and len(self.dataset.files) >= limit

    def refuse_file_dir_clashes(self) -> None:
        """A relpath that is a file and also a directory of other files cannot be written."""
        dirs = {rel.rsplit("/", 1)[0] for rel in self._owner if "/" in rel}
        for rel in list(dirs):
            while "/" in rel:
                rel = rel.rsplit("/", 1)[0]
                dirs.add(rel)
        if not dirs.intersection(self._owner):
            return
        kept = []
        for spec in self.dataset.files:
            if spec.relpath in dirs:
                self.warn(f"refusing {spec.relpath!r} from {self._owner[spec.relpath][0]}: "
                          "it is also a directory of other files")
            else:
                kept.append(spec)
        self.dataset.files = kept

    async def _call(self, url: str, **kwargs: object) -> FetchResult:
        """One request, asked again while it fails in a way that may mend (see ``discover``)."""
        failures = 0
        while True:
            try:
                return await self._call_once(url, **kwargs)
            except DiscoveryError as exc:
                if not exc.retryable or failures >= self._retries:
                    if failures:
                        raise DiscoveryError(f"{exc} (gave up after {failures} retries)", status=exc.status) from None
                    raise
                failures += 1
                await asyncio.sleep(self._delay(failures, exc.retry_after))

    async def _call_once(self, url: str, *, status_ok: bool = True, accept: int = 200,
                         check: Callable[[FetchResult, str], None] | None = None,
                         **kwargs: object) -> FetchResult:
        """``status_ok`` False: an answer other than ``accept`` (200; 207 for a PROPFIND) raises.
        ``check(result, what)`` may raise ``DiscoveryError`` too (retried when retryable)."""
        what = f"{kwargs.get('method', 'GET')} {redact_url(url)}"
        try:
            res = await self._fetch(url, **kwargs)
        except DiscoveryError:
            raise
        except (DtuneError, OSError) as exc:  # TimeoutError is an OSError
            retryable = isinstance(exc, OSError) or getattr(exc, "retryable", False)
            text = one_line(exc).removeprefix(f"{redact_url(url)}: ")  # (the URL once: it is in `what`)
            raise DiscoveryError(f"{what}: {text}", retryable=retryable) from None
        headers = {k.lower(): v for k, v in res.headers.items()}
        if not status_ok and res.status != accept:
            retryable = res.status in (408, 429) or res.status >= 500
            hint = ""
            if res.status == 401:  # (who asked, and the ways to give credentials)
                sent = getattr(res, "sent_authorization", False)
                hint = f" ({unauthorized(split_url(res.url or url)[0], res.headers, sent)})"
            raise DiscoveryError(f"{what}: listing answered HTTP {res.status}{hint}", retryable=retryable,
                                 retry_after=parse_retry_after(headers.get("retry-after"), time.time()),
                                 status=res.status)
        result = FetchResult(status=res.status, headers=headers, body=res.body, url=res.url or url)
        if check is not None:
            check(result, what)
        return result

    # -- sources ---------------------------------------------------------------------------

    async def source(self, source: str) -> None:
        if source in self._lists:  # a URL list read already (stdin)
            self._listed(STDIN if source == "-" else source, self._lists[source])
            return
        if source[:5].lower() == "s3://":
            await self._bucket(source)
            return
        if os.path.isfile(source):
            await self._local_file(source)
            return
        if await self._catalog(source):
            return
        if os.path.isdir(source):
            raise SourceError(f"{source}: is a local directory; give a URL, a URL list or a Metalink file")
        dav = source in self._dav
        over_http = from_dav(source)
        try:
            url = requote_url(over_http or source)
        except ValueError as exc:
            raise SourceError(f"{source}: not an existing file, and {exc}") from None
        dav = dav or over_http is not None
        if path_is_dir(url):
            await self.tree.directory(url, source, dav=dav)
        else:
            await self._single_file(url, source, dav=dav)

    async def _catalog(self, source: str) -> bool:
        """A THREDDS catalogue or a DOI record (``discovery.catalogs``): True once read."""
        from dtune.discovery import catalogs  # (the catalogue and record readers: their sources only)

        kind = catalogs.claim(source, self.records.figshare_api if self.records else catalogs.DEFAULT_FIGSHARE_API)
        if kind is None:
            return False
        reader = catalogs.Catalogs(self, self._call, mirrors=self._mirrors, sources=self.sources,
                                   max_depth=self._max_depth, max_files=self._max_files,
                                   listing_max_bytes=self._listing_max_bytes, settings=self.records,
                                   select=self._select)
        return await reader.read(kind, source)

    async def _local_file(self, path: str) -> None:
        try:
            body = await asyncio.to_thread(Path(path).read_bytes)
        except OSError as exc:
            raise DiscoveryError(f"{path}: cannot read: {exc.strerror or exc}") from None
        self._listed(path, body)

    def _listed(self, path: str, body: bytes) -> None:
        """The files of a URL list or Metalink read from ``path`` (a file, or stdin)."""
        from dtune.discovery.metalink import looks_like_metalink, parse_metalink  # xml: local files only
        if looks_like_metalink(path, body[:64]):
            listing = parse_metalink(body, path)
        else:
            listing = parse_url_list(body, path)
        self.dataset.warnings.extend(listing.warnings)
        file_mirrors = [m for m in self._mirrors if not path_is_dir(m)]
        for mirror in file_mirrors:
            self.warn(f"ignoring mirror {mirror} for {path}: a list of files needs directory mirrors "
                      "(URLs ending in '/')")
        dir_mirrors = [m for m in self._mirrors if path_is_dir(m)]
        stripped = 0
        for entry in listing.entries:
            relpath = self.safe(entry.name, path)
            if relpath is None:
                continue
            urls = []
            for url in entry.urls:
                bare, cred = strip_userinfo(url)
                stripped += cred is not None
                urls.append(bare)
                if self._trust is not None:
                    self._trust(bare)  # the user's own file: its URLs are user-named
            mirrors = urls[1:] + [join_url(m, relpath) for m in dir_mirrors]
            self.add(FileSpec(url=urls[0], relpath=relpath, size=entry.size, checksum=entry.checksum,
                              mirrors=mirrors, mtime=entry.mtime), path)
        if stripped:
            self.warn(f"{path}: user:password@ removed from {stripped} URL(s) and not used: credentials are "
                      "not read from a URL list or Metalink (give them in a .netrc, or with --token-file)")

    async def _single_file(self, url: str, source: str, *, dav: bool = False) -> None:
        res = await self._call(url, method="HEAD", headers={"Want-Digest": WANT_DIGEST})
        try:
            final = requote_url(res.url)
        except ValueError:
            final = url
        if path_is_dir(final) and res.status < 400:
            await self.tree.directory(final, source, dav=dav)
            return
        size = checksum = None
        ranged = False
        if res.status in (403, 405):  # HEAD refused (a presigned URL is signed for GET only): ask one byte
            size, ranged = await self._first_byte(url)
        if res.status == 200:  # (a HEAD: its digest headers are the whole file's)
            length = res.headers.get("content-length", "").strip()
            size = int(length) if length.isascii() and length.isdigit() else None
            checksum = checksum_from_headers(res.headers)
        elif size is None and res.status >= 400 and res.status not in (405, 501):
            self.warn(f"HEAD {redact_url(url)} answered HTTP {res.status}; will try GET anyway")
        relpath = self.safe(last_segment(url), source)
        if relpath is None:
            return
        mirrors = []
        for mirror in self._mirrors:
            if path_is_dir(mirror):
                mirrors.append(join_url(mirror, relpath))
            elif self._single_source:
                mirrors.append(mirror)
            else:
                self.warn(f"ignoring mirror {mirror} for {source}: with several sources a mirror must be "
                          "a directory URL (ending in '/')")
        ranges = ranged or (res.status == 200 and "bytes" in res.headers.get("accept-ranges", "").lower())
        self.add(FileSpec(url=url, relpath=relpath, size=size, checksum=checksum, mirrors=mirrors, ranges=ranges,
                          mtime=http_time(res.headers.get("last-modified")) if res.status == 200 else None),
                 source)

    async def _first_byte(self, url: str) -> tuple[int | None, bool]:
        """``(size, ranges)`` from ``GET`` with ``Range: bytes=0-0`` (its Content-Range), for a
        server that refused HEAD. One byte of body is asked for, a short error answer is read, a
        server that sends more (ignoring Range) is cut off after 4 KiB. ``(None, False)`` when that
        does not tell: the file is then fetched as one whose size is unknown."""
        try:
            res = await self._call(url, headers={"Range": "bytes=0-0"}, max_bytes=4096)
        except DiscoveryError:  # e.g. the whole body of a 200, cut off
            return None, False
        if res.status == 206:
            try:
                return parse_content_range(res.headers.get("content-range", ""))[2], True
            except DtuneError:
                return None, False
        return None, False

    # -- buckets ---------------------------------------------------------------------------

    async def _bucket(self, source: str) -> None:
        """An ``s3://`` source: every object under a prefix, or one object."""
        from dtune.discovery import s3  # xml and the S3 rules: only for s3:// sources

        settings = self._s3 or s3.S3Settings()
        bucket, key = s3.parse_source(source)
        single = bool(key) and not key.endswith("/")
        mirrors = [m for m in self._mirrors if path_is_dir(m) or (single and self._single_source)]
        for mirror in self._mirrors:
            if mirror not in mirrors:
                self.warn(f"ignoring mirror {mirror} for {source}: it must be a directory URL (ending in '/')")

        def check(res: FetchResult, what: str) -> None:
            s3.check_answer(res, what, settings)

        if single:
            def first_byte(res: FetchResult, what: str) -> None:
                s3.check_answer(res, what, settings, ok=s3.FIRST_BYTE_OK)

            try:
                res = await self._call(settings.object_url(bucket, key), headers={"Range": "bytes=0-0"},
                                       check=first_byte, max_bytes=s3.FIRST_BYTE_MAX)
            except DiscoveryError as exc:
                hint = " (no such object; for every object under it, end the source with '/')" \
                    if "HTTP 404" in str(exc) else ""
                raise DiscoveryError(f"{source}: {exc}{hint}") from None
            self._bucket_entry(s3.object_entry_from_get(res, settings, bucket, key), source, mirrors)
            return

        async def get(url: str, method: str) -> FetchResult:
            return await self._call(url, method=method, check=check, max_bytes=s3.MAX_PAGE_BYTES)

        async for obj in s3.list_objects(get, settings, bucket, key):
            entry = s3.object_entry(obj, settings, bucket, key)
            if entry is not None:
                self._bucket_entry(entry, source, mirrors)

    def _bucket_entry(self, entry: Entry, source: str, mirrors: list[str]) -> None:
        """Add one object; a directory mirror serves it under its relpath, a file mirror as is."""
        relpath = self.safe(entry.name, source)
        if relpath is None:
            return
        self.add(FileSpec(url=entry.urls[0], relpath=relpath, size=entry.size, mtime=entry.mtime, ranges=True,
                          mirrors=[join_url(m, relpath) if path_is_dir(m) else m for m in mirrors],
                          checksum=entry.checksum), source)
