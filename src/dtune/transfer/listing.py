"""The listing of a transfer: its sources discovered, selected and placed under the output directory.

``list_sources`` runs discovery (``dtune.discovery``) with the request's selection and
access, keeping the connections it opened for the engine (``http.warm``); ``placed`` gives
each file its final path, refusing names that would escape the output directory;
``add_unfetched`` fails, in the result, what could not be listed or placed: exit 0 means
the whole tree.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from dtune import checksums
from dtune.dataset import Dataset, FileSpec
from dtune.discovery import discover
from dtune.discovery.catalogs import RecordSettings
from dtune.discovery.paths import Inside
from dtune.discovery.urls import path_is_dir
from dtune.engine.outcomes import backoff
from dtune.engine.result import FileResult, TransferResult
from dtune.errors import DtuneError, UnsafePathError, UsageError
from dtune.http.access import DIRECT
from dtune.http.client import Fetcher
from dtune.http.connection import Connection
from dtune.http.message import Origin, split_url
from dtune.http.redact import redact_url
from dtune.http.warm import WarmPool
from dtune.netprobe import measure_rtt
from dtune.transfer.events import EventSink
from dtune.transfer.plan import rtt_samples
from dtune.transfer.request import TransferRequest


class Found(NamedTuple):
    """What ``list_sources`` found: the dataset, the connect times seen (origin → seconds), and
    with ``warm`` the connections discovery opened, for the engine (the caller closes them)."""

    dataset: Dataset
    connect_times: dict
    warm: WarmPool | None


class MirrorProbes:
    """The ``--mirror`` origins' RTTs, measured while discovery asks the primary (origin → task):
    the tuner needs every replica's RTT next. Nothing when ``request.rtt`` is given; a mirror
    that is not a URL is skipped (discovery says why). The probes' connections stay open (origin →
    them, ``kept``) for the engine's first lanes to that mirror (``WarmPool.adopt``)."""

    def __init__(self, request: TransferRequest) -> None:
        self.tasks: dict[str, asyncio.Task] = {}
        self.kept: dict[Origin, list[Connection]] = {}
        if request.rtt is not None:
            return
        for mirror in request.mirrors:
            try:
                origin = split_url(mirror)[0]
            except DtuneError:
                continue
            if str(origin) not in self.tasks:
                self.tasks[str(origin)] = asyncio.ensure_future(measure_rtt(
                    mirror, rtt_samples(request), access=request.access, keep=self.kept.setdefault(origin, [])))

    def close(self) -> None:
        """A transfer that ends before its engine starts: stop the probes, close their connections."""
        for task in self.tasks.values():
            task.cancel()
        for conns in self.kept.values():
            for conn in conns:
                conn.close()
            conns.clear()


# Connections opened to a directory source's origin while its listing is read, for the engine
# to take (``http.warm``): its first lanes skip a handshake round trip. A few, not the tuner's
# count, which is not known before the listing is: the rest open as the engine starts.
WARM_CONNECTIONS = 8


def warm_count(request: TransferRequest) -> int:
    """How many connections to open ahead for each directory source (``WARM_CONNECTIONS``, within
    the per-origin cap and the user's --cc × -p; the listing's own connection is one of them)."""
    n = min(WARM_CONNECTIONS, request.max_per_host)
    if request.cc is not None and request.p is not None:
        n = min(n, request.cc * request.p)
    return max(0, n - 1)


def _warm(fetcher: Fetcher, request: TransferRequest) -> None:
    n = warm_count(request)
    origins = set()
    for source in request.sources:
        if source.startswith(("http://", "https://")) and path_is_dir(source):
            try:
                origins.add(split_url(source)[0])
            except ValueError:
                continue  # (discovery says what is wrong with it)
    for origin in origins:
        fetcher.warm(origin, n)


async def list_sources(request: TransferRequest, *, warm: bool = False) -> Found:
    """The dataset of ``request.sources``, selected as the request says (``Found``)."""
    fetcher = Fetcher(timeout=request.options.connect_timeout + request.options.stall_timeout, access=request.access)
    if warm:
        _warm(fetcher, request)
    try:
        opts = request.options
        select = request.selection()
        # (discovery's guards against endless trees stay, unless the user asked for more)
        guards = {"max_depth": max(32, select.max_depth or 0), "max_files": max(1_000_000, select.max_files or 0)}
        dataset = await discover(request.sources, fetch=fetcher.fetch, mirrors=request.mirrors, retries=opts.retries,
                                 delay=lambda n, after: backoff(n, after, opts, random.uniform(
                                     1 - opts.backoff_jitter, 1 + opts.backoff_jitter)),
                                 trust=None if request.access is DIRECT else request.access.trust_url,
                                 s3=request.s3, select=select, checksum_files=request.checksum_files,
                                 listed_checksums=request.listed_checksums, checksum=request.checksum,
                                 lists=request.lists, dav=request.dav, records=_records(request), **guards)
        return Found(dataset, dict(fetcher.connect_times), fetcher.hand_over() if warm else None)
    finally:
        fetcher.close()


def _records(request: TransferRequest) -> RecordSettings:
    return RecordSettings(resolver=request.doi_resolver, figshare_api=request.figshare_api)


def place(dataset: Dataset, outdir: str, warn: Callable[[str], None], *,
          text: bool = False) -> tuple[list, list]:
    """Final paths under ``outdir``; names that would escape it are refused (and reported).
    ``text``: each path as a ``str`` rather than a ``Path`` (a tenth of the memory: the engine's
    files take strings, and a million-file tree holds a million of them)."""
    specs, paths = [], []
    inside = Inside(outdir)
    for spec in dataset.files:
        try:
            paths.append(inside.text(spec.relpath) if text else inside(spec.relpath))
        except UnsafePathError as exc:
            warn(f"refusing {spec.relpath!r}: {exc}")
            continue
        specs.append(spec)
    return specs, paths


def refuse_collisions(dataset: Dataset, outdir: str) -> None:
    """UsageError when two different files would be written to one output path (before any byte
    moves: the second would overwrite or be dropped), both sources named."""
    if not dataset.collisions:
        return
    lines = [f"{Path(outdir) / relpath}: both {redact_url(first)} and {redact_url(other)} would be written there"
             for relpath, first, other in dataset.collisions[:5]]
    more = len(dataset.collisions) - len(lines)
    raise UsageError("; ".join(lines) + (f" (and {more} more)" if more else "")
                     + "; give each file its own name (out= in a URL list) or fetch them apart")


def warn_unverifiable(specs: list, emit: EventSink) -> None:
    """Say before the transfer, not only after it, that files whose checksum is a crc32c cannot be
    verified without the optional crc32c package (they fail at verification, their bytes kept)."""
    count = sum(1 for s in specs if s.checksum is not None and s.checksum.algo == "crc32c")
    if count and not checksums.available("crc32c"):
        emit({"event": "warning", "reason": f"{count} file(s) have a crc32c checksum, and "
                                            f"{checksums.MISSING_CRC32C}: they will fail verification"})


def placed(request: TransferRequest, dataset: Dataset, emit: EventSink, *,
           text: bool = False) -> tuple[list[FileSpec], list]:
    """The files of ``dataset`` to fetch and their final paths (``place``; ``text``: as strings),
    its warnings said; DtuneError when there is nothing to fetch (and why)."""
    for warning in dataset.warnings:
        emit({"event": "warning", "reason": warning})
    refuse_collisions(dataset, request.outdir)
    specs, paths = place(dataset, request.outdir, lambda msg: emit({"event": "warning", "reason": msg}), text=text)
    warn_unverifiable(specs, emit)
    if not specs:
        if dataset.unlisted:
            raise DtuneError(dataset.unlisted[0][1] + (f" (and {len(dataset.unlisted) - 1} more directories)"
                                                       if len(dataset.unlisted) > 1 else ""))
        if not request.selection().everything:
            raise DtuneError("nothing to fetch: no listed file is selected by --include/--exclude/--max-depth")
        raise DtuneError("nothing to fetch: the sources list no files")
    return specs, paths


def add_unfetched(result: TransferResult, dataset: Dataset, specs: list) -> None:
    """Fail, in ``result``, the directories that could not be listed and the files refused for an
    unsafe path: exit 0 means the whole tree."""
    for relpath, reason in dataset.unlisted:
        result.files.append(FileResult(relpath, "failed", None, reason))
    refused = len(dataset.files) - len(specs)
    if refused:
        kept = {s.relpath for s in specs}
        for spec in dataset.files:
            if spec.relpath not in kept:
                result.files.append(FileResult(spec.relpath, "failed", spec.size,
                                               f"{spec.relpath}: refused (unsafe output path)"))
