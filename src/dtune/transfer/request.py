"""What a transfer is asked to do: ``TransferRequest``, built from the option table's values.

``request_from`` turns resolved option values (``dtune.options``, ``dtune.config.resolve``)
into a request; ``access_from`` builds its ``Access`` (credentials, proxy, TLS), the one
place credentials are held. Every front end (the CLI, ``dtune.get``, fsspec, pooch, a
cluster's workers) builds its request here and runs it with ``dtune.transfer.run``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from dtune.checksums import Checksum
from dtune.config import Value
from dtune.dataset import FileSpec
from dtune.discovery.select import Selection
from dtune.discovery.urls import from_dav
from dtune.engine.options import EngineOptions
from dtune.errors import UsageError
from dtune.http.access import DIRECT, PROXY_VARIABLES, Access
from dtune.http.auth import cookie_jar, header_sources, strip_userinfo
from dtune.http.message import Origin, split_url
from dtune.http.redact import redact_url, shown_url
from dtune.http.trust import ssl_context_from
from dtune.http.trust import warnings as tls_warnings
from dtune.options import DEFAULT_MAX_CC, DEFAULT_PARTITIONS
from dtune.tuners import Fixed
from dtune.tuners.online_constants import DEFAULT_CAP

if TYPE_CHECKING:
    from dtune.discovery.s3 import S3Settings

# what a cluster's parent asks of a node's tuner (``Shard.limits``): cap, why[, fresh]
Limit = tuple[int | None, str] | tuple[int | None, str, bool]


@dataclass(slots=True)
class Shard:
    """A cluster worker's share of a transfer: files already listed and placed by the parent
    (``specs`` may carry ``Piece``s, a byte range of a file), so ``run`` skips the listing,
    the lock and the history. ``limits`` is asked every control tick; a (cap, why[, fresh])
    it returns goes to the tuner's ``limit``. ``on_engine`` is handed the engine once built."""

    specs: list[FileSpec]
    paths: list[Path]
    limits: Callable[[], Limit | None] | None = None
    on_engine: Callable[[Any], None] | None = None


@dataclass(slots=True)
class TransferRequest:
    """What the user asked for; ``None`` parameters are chosen by dtune. Built from resolved
    option values by ``request_from``; run by ``dtune.transfer.run``."""

    sources: list[str]
    outdir: str
    cc: int | None = None
    p: int | None = None
    pp: int | None = None
    mirrors: list[str] = field(default_factory=list)
    options: EngineOptions = field(default_factory=EngineOptions)
    tuner: str = "auto"
    max_cc: int = DEFAULT_MAX_CC
    partitions: int = DEFAULT_PARTITIONS
    bandwidth: float | None = None     # bytes/s, when the user gives it
    tcp_buffer: int | None = None      # bytes, when the user gives it
    rtt: float | None = None           # seconds, when the user gives it
    energy: bool = True                # meter the transfer's energy (RAPL, else a CPU-time estimate)
    energy_baseline: float = 1.0       # seconds of idle power measured first (RAPL only)
    sla: str | None = None             # decision-tree tuner: "max-throughput" | "min-energy"
    min_throughput_mbps: float | None = None  # its throughput floor (min-energy), Mbit/s
    max_energy_j: float | None = None  # its energy ceiling (max-throughput), J
    model: str | None = None           # its model file (default: dtune model build's path)
    online: bool | None = None         # the online search; None: the tuner's default (on for auto)
    max_per_host: int = DEFAULT_CAP    # most connections to one origin
    s3: S3Settings | None = None       # endpoint and region of s3:// sources (``discovery.s3``)
    dav: list[str] = field(default_factory=list)  # sources given as dav(s)://, now http(s)://: PROPFIND
    include: list[str] = field(default_factory=list)  # --include / --exclude globs (discovery.select)
    exclude: list[str] = field(default_factory=list)
    doi_resolver: str = "https://doi.org/"           # --doi-resolver (``discovery.catalogs``)
    figshare_api: str = "https://api.figshare.com"   # --figshare-api
    max_depth: int | None = None       # directories below a directory source; None: unlimited
    max_files: int | None = None       # stop listing once this many files are taken
    dry_run: bool = False              # list what would be fetched; write nothing (``dry_run``)
    checksum: Checksum | None = None   # --checksum: the digest of a single-file source
    checksum_files: list[str] = field(default_factory=list)  # --checksum-file paths or URLs
    listed_checksums: bool = True      # read the SHA256SUMS / NAME.md5 files listings hold
    cluster: str | None = None         # --cluster: a Dask scheduler's address (``dtune.cluster``)
    workers: int | None = None         # --workers: a local Dask cluster of this many processes
    history: str | None = None         # --history: the database URL (None: the default one)
    record_history: bool = True        # --no-history: False
    # the sources and option values as given, for a cluster's workers to build their own request
    # (``Access`` cannot travel): never part of ``record()``
    given: dict = field(default_factory=dict, repr=False, compare=False)
    # headers, credentials, proxy and TLS trust (``http.access``): never part of ``record()``
    access: Access = field(default=DIRECT, repr=False, compare=False)
    # a cluster worker's share: the files are already listed and placed (``Shard``)
    shard: Shard | None = field(default=None, repr=False, compare=False)
    # URL lists given as bytes, by the source that names them ("-": the one read from stdin,
    # ``dtune get -i -``): discovery reads them as local URL-list files; never part of ``record()``
    lists: dict[str, bytes] = field(default_factory=dict, repr=False, compare=False)
    # a descriptor the one file of the sources is written to, in order (``dtune get -o -``): the
    # bytes pass through a private temporary directory, ``outdir`` only names the stream ("-")
    stream: int | None = field(default=None, repr=False, compare=False)

    def record(self) -> dict:
        """What the history keeps of this request: everything but ``access`` (credentials)."""
        info = dataclasses.asdict(dataclasses.replace(self, access=DIRECT, given={}, shard=None, lists={},
                                                      stream=None))
        del info["access"], info["given"], info["shard"], info["record_history"], info["lists"], info["stream"]
        for name in ("sources", "mirrors", "dav"):  # a presigned URL's signature is a credential
            info[name] = [redact_url(url) for url in info[name]]
        return info

    def selection(self) -> Selection:
        """Which listed files this transfer takes (raises ValueError for a bad pattern)."""
        return Selection.of(self.include, self.exclude, max_depth=self.max_depth, max_files=self.max_files)

    def fixed(self) -> Fixed:
        """The parameters the user set explicitly: no tuner may change them."""
        return Fixed(cc=self.cc, p=self.p, pp=self.pp)


def _checksum_file_urls(values: Mapping[str, Any]) -> list[str]:
    """``--checksum-file`` values; a URL carrying credentials is refused (they belong in the
    credential options, not in a value the history records)."""
    items = list(values["checksum_file"] or [])
    for item in items:
        if "://" in item and urlsplit(item).username is not None:
            raise UsageError(f"--checksum-file {urlsplit(item).hostname}: give credentials with the "
                             f"credential options, not in the URL")
    return items




SCHEMES = ("http", "https", "s3", "dav", "davs")  # what a source or a mirror URL may start with ("doi:" too, for a source)



def check_schemes(sources: list[str], mirrors: list[str]) -> None:
    """A source or mirror that names a scheme dtune does not fetch (ftp://, gopher://, file://)
    is a usage error naming the URL; a source that is an existing local file is a URL list or
    Metalink, whatever its name looks like. ``doi:10.X/Y`` is a source (a DOI record), never a
    mirror."""
    for flag, urls in (("", sources), ("--mirror ", mirrors)):
        for url in urls:
            if flag and url[:4].lower() == "doi:":
                raise UsageError(f"--mirror {url}: a DOI names a record of files, not a replica of one")
            scheme, sep, _ = url.partition("://")
            if not sep or scheme.lower() in SCHEMES or not scheme.replace("+", "").isalnum():
                continue
            if not flag and os.path.isfile(url):
                continue
            raise UsageError(f"{flag}{shown_url(url)}: {scheme.lower()}:// is not supported (dtune fetches "
                             f"http://, https://, dav://, davs:// and s3:// URLs and doi: records, or reads a "
                             f"local URL list or Metalink)")


def access_from(values: Mapping[str, Any], sources: list[str], mirrors: list[str],
                 environ: Mapping[str, str] | None = None, *,
                 s3: tuple[Any, Any] | None = None) -> tuple[Access, list[str], list[str]]:
    """The transfer's ``Access`` (credentials, proxy, TLS), and the sources and mirrors without
    the userinfo they carried: only the ``Access`` holds credentials. ``s3``: the
    ``(S3Settings, Credentials | None)`` of s3:// sources, whose requests are signed."""
    env = os.environ if environ is None else environ
    userinfo: dict[Origin, tuple[str, str]] = {}
    clean: list[list[str]] = [[], []]
    for urls, out in ((sources, clean[0]), (mirrors, clean[1])):
        for url in urls:
            bare, cred = strip_userinfo(url)
            out.append(bare)
            if cred is not None and "://" in bare:
                userinfo[split_url(bare)[0]] = cred
    trusted = set()
    for url in clean[0] + clean[1]:
        if url.startswith(("http://", "https://")):
            trusted.add(split_url(url)[0])
    warnings: list[str] = []
    headers = header_sources(values, userinfo, environ=env, warn=warnings.append)
    if s3 is not None and s3[1] is not None:
        from dtune.discovery.s3 import s3_signer  # (S3: xml, email, SigV4, only for s3:// sources)
        headers.append(s3_signer(*s3))  # SigV4, for the S3 endpoint's origin only
    route = None
    if values.get("proxy") is not None or any(name in env for name in PROXY_VARIABLES):
        from dtune.http.proxy import route_from  # (only with a proxy: asyncio's ssl glue, ~40 ms)
        route = route_from(values, env)
    jar = cookie_jar(values, warnings.append)  # the transfer's one jar (``--cookies``: saved back there)
    access = Access(headers, route=route, ssl_context=ssl_context_from(values), trusted=trusted, jar=jar,
                    allow_insecure_redirect=bool(values.get("allow_insecure_redirect")))
    access.warnings.extend(warnings)
    access.warnings.extend(tls_warnings(access.ssl_context))
    return access, clean[0], clean[1]


def request_from(sources: list[str], output: str, values: Mapping[str, Value],
               environ: Mapping[str, str] | None = None) -> TransferRequest:
    """The ``TransferRequest`` for resolved option values (``dtune.config.resolve``); a combination
    that makes no sense is a UsageError naming the flags."""
    v = {name: value.value for name, value in values.items()}
    dtree = {"--sla": v["sla"], "--min-throughput": v["min_throughput"], "--max-energy": v["max_energy"],
             "--model": v["model"]}
    given = [flag for flag, value in dtree.items() if value is not None]
    if given and v["tuner"] not in ("dtree", "auto"):
        raise UsageError(f"{given[0]} is for --tuner dtree (or auto), not {v['tuner']}")
    options = EngineOptions(stall_timeout=v["stall_timeout"], connect_timeout=v["connect_timeout"],
                            retries=v["retries"], speed_limit=v["speed_limit"], speed_time=v["speed_time"],
                            header_timeout=v["header_timeout"], update=v["update"],
                            verify_existing=v["verify_existing"],
                            limit_rate=v["limit_rate"], max_rps=tuple(v["max_rps"] or ()),
                            retry_after_max=v["max_retry_after"])
    include, exclude = list(v["include"] or []), list(v["exclude"] or [])
    try:
        Selection.of(include, exclude)
    except ValueError as exc:
        raise UsageError(f"--include/--exclude: {exc}") from None
    s3 = None
    if any(source[:5].lower() == "s3://" for source in sources):
        from dtune.discovery.s3 import s3_settings  # (S3: xml, email, SigV4, only for s3:// sources)
        s3 = s3_settings(v, os.environ if environ is None else environ)
    if v["cluster"] is not None and v["workers"] is not None:
        raise UsageError("--cluster and --workers: give one (an existing cluster, or a local one of N workers)")
    if (v["cluster"] is not None or v["workers"] is not None) and v["dry_run"]:
        raise UsageError("--dry-run lists on this host: it takes no --cluster or --workers")
    check_schemes(list(sources), list(v["mirror"] or []))
    given = {"sources": list(sources), "values": dict(v)}  # what a cluster's worker builds its request from
    sources = [from_dav(source) or source for source in sources]  # (dav:// is http:// listed with PROPFIND)
    mirrors = [from_dav(mirror) or mirror for mirror in v["mirror"] or []]
    access, sources, mirrors = access_from(v, sources, mirrors, environ, s3=s3)
    dav = [source for source, as_given in zip(sources, given["sources"], strict=True) if from_dav(as_given)]
    return TransferRequest(sources=sources, outdir=output, cc=v["cc"], p=v["parallelism"], pp=v["pp"],
                        mirrors=mirrors, options=options, tuner=v["tuner"], access=access,
                        max_cc=v["max_cc"], partitions=v["partitions"], bandwidth=v["bandwidth"],
                        online=v["online"], max_per_host=v["max_connections_per_host"],
                        tcp_buffer=v["tcp_buffer"], rtt=v["rtt"], sla=v["sla"],
                        min_throughput_mbps=None if v["min_throughput"] is None else v["min_throughput"] * 8 / 1e6,
                        max_energy_j=v["max_energy"], model=v["model"], s3=s3[0] if s3 else None,
                        doi_resolver=v["doi_resolver"], figshare_api=v["figshare_api"],
                        include=include, exclude=exclude, max_depth=v["max_depth"], max_files=v["max_files"],
                        dry_run=v["dry_run"], checksum=v["checksum"],
                        checksum_files=_checksum_file_urls(v), listed_checksums=v["checksum_files"],
                        cluster=v["cluster"], workers=v["workers"], given=given, dav=dav,
                           history=v["history"], record_history=not v["no_history"])
