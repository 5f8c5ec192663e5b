"""dtune from Python: ``dtune.get`` and ``dtune.aget``.

    result = dtune.get("http://host/data/", "out", retries=3, max_connections_per_host=8)
    result.raise_for_status()

The keywords are the options of ``dtune get`` (``dtune.options.OPTIONS``, the long
flag with ``_``), resolved as on the command line: the config file and the ``DTUNE_*``
variables apply, an argument wins over both, and a value may be a Python value or the text
a flag takes (``"4M"``). Headers may be a mapping, ``headers={"Authorization": "Bearer …"}``,
or the command line's lines, ``header=["Authorization: Bearer …"]``; as with ``--header`` they
go to the origins named, never to one reached only through a redirect. A transfer is
recorded in the history (never its headers) unless ``no_history=True``.

Nothing here prints or touches signals; ``progress`` receives the events ``dtune get --json``
prints, as dicts, on the loop's thread (a slow callback slows the transfer).
"""

from __future__ import annotations

import asyncio
import dataclasses
import difflib
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dtune.config import Value, resolve
from dtune.errors import DtuneError, UsageError
from dtune.http.auth import basic_auth
from dtune.loop import run_quietly
from dtune.options import OPTIONS

if TYPE_CHECKING:
    from dtune.accounting import Snapshot

Progress = Callable[[dict], None]

# options of the command line's output: the API prints nothing whatever they say
_CLI_ONLY = {"json": "dtune.get() prints nothing: its events go to progress=",
             "no_progress": "dtune.get() draws no progress bar"}


@dataclass(frozen=True, slots=True)
class FileReport:
    """One file of a transfer. ``path``: where it is on disk (None when it failed);
    ``checksum``: what verified it beyond its size, as the ``file_done`` event says
    ("sha256 (SHA256SUMS)"), None when only the size was checked or it was kept."""

    relpath: str
    status: str            # done | skipped (in place, hashed: --verify-existing) | kept (in place,
                           # its size and mtime only: not verified) | failed
    size: int | None
    path: Path | None
    checksum: str | None = None
    error: str | None = None


@dataclass(slots=True)
class Result:
    """What ``dtune.get`` returns: every file, and the summary ``dtune get --json`` prints last."""

    files: list[FileReport]
    summary: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Every file verified (now or by an earlier run)."""
        return all(f.status != "failed" for f in self.files)

    @property
    def exit_status(self) -> int:
        """What ``dtune get`` would exit with: 0 every file verified, 1 some file failed."""
        return 0 if self.ok else 1

    @property
    def failed(self) -> list[FileReport]:
        return [f for f in self.files if f.status == "failed"]

    def raise_for_status(self) -> Result:
        """Raise ``DtuneError`` naming the failed files (and why); return ``self`` otherwise."""
        failed = self.failed
        if failed:
            listed = "; ".join(f.error or f.relpath for f in failed[:5])
            more = f"; and {len(failed) - 5} more" if len(failed) > 5 else ""
            raise DtuneError(f"{len(failed)} of {len(self.files)} files failed: {listed}{more}")
        return self


def get(sources: str | os.PathLike | Sequence[str | os.PathLike], out: str | os.PathLike, *,
        progress: Progress | None = None, **options: Any) -> Result:
    """Fetch ``sources`` (URLs, URL-list or Metalink files) into ``out`` and verify every file.

    Runs its own event loop; inside a running loop (a coroutine, Jupyter) use ``await aget``.
    A failed file does not raise: look at ``Result.ok`` or call ``raise_for_status()``. Bad
    options raise ``UsageError`` (an unknown keyword ``TypeError``); a transfer that cannot
    start (nothing listed, the output directory locked) raises ``DtuneError``.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError("dtune.get() cannot run inside a running event loop: "
                           "use `await dtune.aget(...)` there")

    return run_quietly(aget(sources, out, progress=progress, **options))


async def aget(sources: str | os.PathLike | Sequence[str | os.PathLike], out: str | os.PathLike, *,
               progress: Progress | None = None, **options: Any) -> Result:
    """``get`` as a coroutine, on the caller's loop.

    ``cluster=`` takes a scheduler address ("tcp://host:8786", as ``--cluster``) or a
    synchronous ``distributed.Client`` already connected (an ``asynchronous=True`` one is
    refused); ``workers=N`` starts a local cluster of N processes for this transfer
    (docs/cluster.md).
    """
    client = None
    if options.get("cluster") is not None and not isinstance(options["cluster"], str):
        client = options.pop("cluster")  # a Client object cannot go through the option table
        if getattr(client, "asynchronous", False):
            raise TypeError("dtune.get(cluster=...): give a synchronous distributed.Client "
                            "(or the scheduler's address), not an asynchronous one")
        if options.get("workers") is not None:
            raise UsageError("cluster= and workers=: give one (an existing cluster, or a local one of N workers)")
    items = [sources] if isinstance(sources, (str, os.PathLike)) else list(sources)
    return await _aget([os.fspath(s) for s in items], out, progress, options, client)


async def _aget(items: list[str], out: str | os.PathLike, progress: Progress | None, options: dict[str, Any],
                client: Any = None, lists: dict[str, bytes] | None = None) -> Result:
    """``aget`` of ``items``; ``lists``: URL lists given as bytes, by the source that stands for
    them (as ``dtune get -i -`` gives standard input's)."""
    from dtune.transfer import request_from, run  # (the whole transfer: not for `import dtune`)
    from dtune.transfer.events import progress_event  # (with the transfer)

    values = resolve_options(options)
    outdir = os.fspath(out)
    request = request_from(items, outdir, values)
    request.lists = dict(lists or {})
    scale_out = None
    if client is not None or request.cluster is not None or request.workers is not None:
        from dtune.cluster import scale_out_for  # (Dask: only for a cluster)
        scale_out = scale_out_for(request, client)
    sink = _Events(progress, progress_event)
    result = await run(request, on_event=sink.event, on_progress=sink.progress, scale_out=scale_out)
    sink.raise_error()
    files = [FileReport(f.relpath, f.status, f.size,
                        None if f.status == "failed" else Path(outdir, f.relpath),
                        sink.checksums.get(f.relpath), f.error)
             for f in result.files]
    return Result(files, result.summary)


async def aget_files(targets: Sequence[tuple[str, str | os.PathLike]], *, progress: Progress | None = None,
                     **options: Any) -> Result:
    """Fetch each URL of ``targets`` (URL, path) to exactly its path, all in one transfer: what
    ``dtune.fsspec`` and ``dtune.pooch`` need, where the caller names every file.

    The files land in a ``dtune-`` directory next to the first path (a URL list names them
    0, 1, ... there, so that two URLs ending in the same name do not meet) and each verified
    one is moved to its path; the directory is removed at the end, partial files with it.
    ``Result.files`` are in the order of ``targets`` with ``path`` their final place.
    """
    if not targets:
        raise ValueError("no URL to fetch")
    for url, _ in targets:
        if "://" not in url or any(c.isspace() for c in url) or url.endswith("/"):
            raise ValueError(f"{url!r}: not the URL of one file")
    paths = [Path(os.fspath(path)) for _, path in targets]
    paths[0].parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="dtune-", dir=paths[0].parent))
    try:
        lists = {}
        if len(targets) > 1:
            # a URL list in memory, named by its first URL: the history records that, not a
            # staging file gone by the time anyone reads the row
            lists[targets[0][0]] = "".join(f"{url}\n  out={i}\n" for i, (url, _) in enumerate(targets)).encode()
        staged = await _aget([targets[0][0]], staging / "files", progress, options, lists=lists)
        if len(targets) == 1 and len(staged.files) > 1:
            raise DtuneError(f"{targets[0][0]}: a directory (it lists {len(staged.files)} files), not one file")
        files: list[FileReport | None] = [None] * len(targets)
        for f in staged.files:
            i = 0 if len(targets) == 1 else int(f.relpath) if f.relpath.isdigit() else len(targets)
            if i >= len(targets):
                continue
            if f.path is not None:
                paths[i].parent.mkdir(parents=True, exist_ok=True)
                shutil.move(f.path, paths[i])
            files[i] = dataclasses.replace(f, relpath=paths[i].name, path=None if f.path is None else paths[i])
        return Result([f or FileReport(paths[i].name, "failed", None, None, error=f"{targets[i][0]}: not fetched")
                       for i, f in enumerate(files)], staged.summary)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def resolve_options(options: dict[str, Any]) -> dict[str, Value]:
    """The values of every option of ``dtune get`` for these keywords, over the config file and
    the ``DTUNE_*`` variables (``dtune.config.resolve``). A keyword that is no option is a
    TypeError naming the closest one; a bad value a UsageError naming the keyword.

    ``headers={"Name": "value"}`` (the mapping requests, httpx, aiohttp and fsspec take) is
    ``header=["Name: value"]`` (the command line's ``--header``); both may be given.
    ``auth=(user, password)`` is ``headers={"Authorization": "Basic …"}``: it goes, as every
    ``--header`` does, to the origins named only, never to one reached through a redirect."""
    options = with_header_list(options)
    names = [opt.name for opt in OPTIONS]
    for name in options:
        if name in _CLI_ONLY:
            raise TypeError(f"dtune.get() got the keyword {name!r}, an option of the command line "
                            f"only: {_CLI_ONLY[name]}")
        if name not in names:
            close = difflib.get_close_matches(name, names, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise TypeError(f"dtune.get() got an unexpected keyword argument {name!r}{hint}")
    return resolve(OPTIONS, given=options, given_origin="argument")


def with_header_list(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with a ``headers`` mapping, and ``auth=(user, password)`` (basic auth, as
    requests takes it), turned into ``header`` lines after any given."""
    if "headers" not in options and "auth" not in options:
        return options
    options = dict(options)
    headers = dict(options.pop("headers", None) or {}) if isinstance(options.get("headers"), Mapping) \
        else options.pop("headers", None)
    auth = options.pop("auth", None)
    if auth is not None:
        if not (isinstance(auth, tuple | list) and len(auth) == 2 and all(isinstance(x, str) for x in auth)):
            raise TypeError("auth= takes (user, password), two str (HTTP basic auth)")
        if headers is None:
            headers = {}
        elif not isinstance(headers, Mapping):
            raise TypeError(f"headers= takes a mapping of names to values, not {type(headers).__name__}")
        headers["Authorization"] = basic_auth(*auth)
    if headers is None:
        return options
    if not isinstance(headers, Mapping):
        raise TypeError(f"headers= takes a mapping of names to values, not {type(headers).__name__} "
                        "(header= takes the command line's 'Name: value' lines)")
    lines = []
    for name, value in headers.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise TypeError(f"headers=: names and values are str, not {type(name).__name__}: "
                            f"{type(value).__name__}")
        lines.append(f"{name}: {value}")
    given = options.get("header")
    options["header"] = [*([given] if isinstance(given, str) else given or []), *lines]
    return options


class _Events:
    """Hands each event to the caller's ``progress`` and keeps what verified each file.

    A callback that raises is not called again and its exception is raised once the transfer
    is over (and recorded): a bug in the caller's display must not leave files half-written.
    """

    def __init__(self, progress: Progress | None, progress_event: Callable[[Snapshot], dict]) -> None:
        self._progress = progress
        self._progress_event = progress_event
        self._error: BaseException | None = None
        self.checksums: dict[str, str] = {}

    def event(self, event: dict) -> None:
        if event.get("event") == "file_done" and not event.get("kept"):  # (a kept file: not verified)
            checksum = event.get("checksum")  # "sha256 (SHA256SUMS)", or None: the size only
            if checksum:
                self.checksums[str(event.get("file"))] = str(checksum)
        if self._progress is None or self._error is not None:
            return
        try:
            self._progress(event)
        except Exception as exc:
            self._error = exc

    def progress(self, snap: Snapshot) -> None:
        if self._progress is not None and self._error is None:
            self.event(self._progress_event(snap))

    def raise_error(self) -> None:
        if self._error is not None:
            raise self._error
