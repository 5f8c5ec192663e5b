"""``run``: the one way from a ``TransferRequest`` to verified files and a ``TransferResult``.

The CLI, ``dtune.get``, fsspec, pooch and a cluster's workers all come through here:

    warnings → (dry run: list and stop) → lock DIR → list → place → fetch → history → summary

A stream (``request.stream``, ``-o -``) takes a private temporary directory in place of
DIR, whose one file goes to the descriptor in order (``engine.stream``); ``--cookies`` is
saved back at the end. A request with a ``Shard`` (a cluster worker's share) skips to
fetch: its parent listed,
placed, locked and records. A ``ScaleOut`` (``dtune.cluster``) takes the listing and the
fetch to a cluster's workers; the front end picks it, this module never imports it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Protocol

from dtune.accounting import Snapshot
from dtune.engine.result import TransferResult
from dtune.engine.stream import Stream
from dtune.errors import DiskError, DtuneError, UsageError
from dtune.fileio import lock_directory
from dtune.history.lite import sqlite_path
from dtune.history.record import save_transfer
from dtune.loop import INTERRUPTED, stop_status
from dtune.statedir import remove_if_empty
from dtune.transfer import dryrun
from dtune.transfer.driver import fetch
from dtune.transfer.events import Clock, EventSink, summary_event
from dtune.transfer.listing import MirrorProbes, add_unfetched, list_sources, placed
from dtune.transfer.request import TransferRequest

ProgressSink = Callable[[Snapshot], None]


class ScaleOut(Protocol):
    """Lists and fetches a request on other hosts (``dtune.cluster.Cluster``), once ``run`` has
    made and locked the output directory."""

    async def fetch(self, request: TransferRequest, emit: EventSink,
                    on_progress: ProgressSink | None) -> TransferResult: ...


async def run(request: TransferRequest, *, on_event: EventSink | None = None,
              on_progress: ProgressSink | None = None, scale_out: ScaleOut | None = None) -> TransferResult:
    """List ``request.sources``, fetch them into ``request.outdir`` and verify every file.

    Every event goes to ``on_event`` (what ``--json`` prints), the last one the summary, which
    the result also holds (``TransferResult.summary``). The output directory is locked for
    the whole transfer (``fileio.lock_directory``): a second transfer into it is refused with
    DiskError before anything is fetched. ``request.dry_run``: list and report only, before
    the directory is even created. The transfer is recorded in the history (its
    ``record()``, never its credentials) unless ``request.record_history`` is off.
    """
    def emit(event: dict) -> None:
        if on_event is not None:
            on_event(event)

    if request.shard is not None:
        shard = request.shard
        return await fetch(request, shard.specs, shard.paths, emit, on_progress,
                           on_engine=shard.on_engine, limits=shard.limits)
    if scale_out is not None and request.dry_run:
        raise UsageError("--dry-run lists on this host: it takes no --cluster, --workers or client")
    clock = Clock()
    for reason in request.access.warnings:  # before any connection: certificates not checked, a bad .netrc
        emit({"event": "warning", "reason": reason})
    if request.dry_run:
        result = await dryrun.dry_run(request, emit)
        _save_cookies(request, emit)
        result.summary = dryrun.summary_event(result)
        emit(result.summary)
        return result
    if request.stream is not None and scale_out is not None:
        raise UsageError("-o - writes one file to standard output on this host: it takes no --cluster or --workers")
    if request.record_history and sqlite_path(request.history) is None:
        # recording into another database needs SQLAlchemy (~0.1 s to import): load it while
        # the transfer waits on the network (a SQLite history needs only sqlite3)
        threading.Thread(target=_preload_history, name="dtune-history-import", daemon=True).start()
    seen: list[Snapshot] = []  # the engine's last snapshot: what an interrupted run had moved

    def progress(snap: Snapshot) -> None:
        seen[:] = [snap]
        if on_progress is not None:
            on_progress(snap)

    try:
        result = await _run_locked(request, emit, progress, scale_out)
    except (asyncio.CancelledError, KeyboardInterrupt):  # Ctrl-C, SIGTERM, SIGHUP
        if request.record_history:
            emit(record_interrupted(request, seen[-1] if seen else None, started_at=clock.started_at,
                                    status=stop_status()))
        raise
    unverified = [f.relpath for f in result.files if f.status == "kept"]
    if request.options.verify_existing and unverified:  # (a checksum would have been hashed)
        emit({"event": "warning", "reason": f"--verify-existing: {len(unverified)} file(s) in place kept "
              f"unverified: no checksum is published for them (first: {unverified[0]})"})
    _save_cookies(request, emit)
    seconds = clock.elapsed()
    if request.record_history:
        emit(await asyncio.to_thread(record, request, result, status=0 if result.ok else 1,
                                     started_at=clock.started_at))
    result.summary = summary_event(result, seconds)
    emit(result.summary)
    return result


async def _run_locked(request: TransferRequest, emit: EventSink, on_progress: ProgressSink,
                      scale_out: ScaleOut | None) -> TransferResult:
    """``run`` from its output directory on: made (or a stream's private one) and locked, the
    sources listed and fetched; the directories made are removed again when the run fails and
    left them empty (``remove_empty_dirs``)."""
    if request.stream is not None:
        return await _streamed(request, emit, on_progress)
    made = _missing_dirs(request.outdir)
    try:
        os.makedirs(request.outdir, exist_ok=True)
        lock = lock_directory(request.outdir)  # two transfers into one directory would mix their part files
    except OSError as exc:
        if made:
            remove_empty_dirs(made)
        raise DiskError(f"output directory {request.outdir}: {exc.strerror or exc}") from None
    if lock is None:
        emit({"event": "warning", "reason": f"output directory {request.outdir}: cannot be locked "
                                             f"here; do not run two transfers into it at once"})
    ok = False
    try:
        if scale_out is not None:
            result = await scale_out.fetch(request, emit, on_progress)
        else:
            result = await _list_and_fetch(request, emit, on_progress)
        ok = result.ok
    finally:
        remove_if_empty(request.outdir)  # dtune's state directory, when nothing is left in it
        if lock is not None:
            os.close(lock)
        if not ok and made:
            remove_empty_dirs(made)
    return result


async def _streamed(request: TransferRequest, emit: EventSink, on_progress: ProgressSink | None) -> TransferResult:
    """``run`` for a stream (``request.stream``): the one file's bytes pass through a private
    temporary directory (``dtune-stream-*``, removed at the end) on their way to the descriptor."""
    tmp = await asyncio.to_thread(tempfile.mkdtemp, prefix="dtune-stream-")
    try:
        inner = dataclasses.replace(request, outdir=tmp)
        return await _list_and_fetch(inner, emit, on_progress, stream=Stream(request.stream,
                                                                             request.options.stream_window))
    finally:
        await asyncio.to_thread(shutil.rmtree, tmp, True)


def _missing_dirs(outdir: str) -> list[str]:
    """The directories ``os.makedirs(outdir)`` would create, deepest first (none when it exists)."""
    missing = []
    path = os.path.abspath(outdir)
    while not os.path.lexists(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return missing


def remove_empty_dirs(made: list[str]) -> None:
    """After a failed run, remove the directories it created (``made``, deepest first) that it left
    empty: the empty directories under the output directory first (all made by this run, which held
    its lock), then the output directory and the parents made for it. ``rmdir`` only: a directory
    holding anything (a part file kept for a resume, a file done) stays, and so do its parents."""
    top = made[0]
    for dirpath, _dirs, _files in os.walk(top, topdown=False):  # (symlinks not followed)
        if dirpath != top:
            with contextlib.suppress(OSError):
                os.rmdir(dirpath)
    for path in made:
        try:
            os.rmdir(path)
        except OSError:
            return


def _save_cookies(request: TransferRequest, emit: EventSink) -> None:
    """``--cookies FILE``: the jar, with what the servers set, written back (a warning if it cannot be)."""
    jar = request.access.jar
    if jar is None or jar.save_to is None:
        return
    try:
        jar.save(time.time())
    except OSError as exc:
        emit({"event": "warning", "reason": f"--cookies {jar.save_to}: cannot save the cookies: "
                                             f"{exc.strerror or exc}"})


async def _list_and_fetch(request: TransferRequest, emit: EventSink,
                          on_progress: ProgressSink | None, stream: Stream | None = None) -> TransferResult:
    """``run`` once its output directory is there and locked (``stream``: its one file goes there)."""
    probes = MirrorProbes(request)  # the mirrors' RTTs, while discovery asks the primary
    try:
        found = await list_sources(request, warm=True)
    except BaseException:
        probes.close()
        raise
    warm = found.warm
    assert warm is not None  # (asked for with warm=True)
    try:
        try:
            specs, paths = placed(request, found.dataset, emit, text=True)
            if stream is not None and (len(specs) != 1 or found.dataset.unlisted):
                raise UsageError(f"-o - writes one file to standard output, but the sources list "
                                 f"{len(specs) + len(found.dataset.unlisted)}: give a directory with -o DIR "
                                 f"(or select one file with --include)")
            if probes.tasks:  # (the tuner waits for them anyway; their connections go to the engine)
                await asyncio.wait(probes.tasks.values())
        except BaseException:
            probes.close()
            raise
        warm.adopt(probes.kept)
        result = await fetch(request, specs, paths, emit, on_progress,
                             connect_times=found.connect_times, early=probes.tasks, warm=warm, stream=stream)
    finally:
        warm.close()
    add_unfetched(result, found.dataset, specs)
    return result


def record(request: TransferRequest, result: TransferResult, *, status: int, started_at: float) -> dict:
    """Record a finished transfer (``request.record()``, never its credentials) and return the
    event that says so: ``history`` with the row id, or a ``warning`` when the database cannot
    be written, which does not fail the transfer."""
    info = {**request.record(), "exit_status": status, "started_at": started_at}
    if result.energy:
        info.update(energy_j=result.energy["joules"], energy_kind=result.energy["kind"])
    try:
        return {"event": "history", "id": save_transfer(result, info, request.history)}
    except DtuneError as exc:
        return {"event": "warning", "reason": f"transfer history not written: {exc}"}


RECORD_WAIT = 5.0  # seconds an interrupted run waits for its history row before it exits anyway


def record_interrupted(request: TransferRequest, snapshot: Snapshot | None, *, started_at: float,
                       status: int = INTERRUPTED, wait: float = RECORD_WAIT) -> dict:
    """Record an interrupted transfer with the status the process exits with (``status``: 130
    for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP: ``loop.stop_status``) and what it had moved (the engine's
    last ``snapshot``; a row of its request alone when there is none) and return the event that
    says so. Bounded: the row is written in a thread waited for at most ``wait`` seconds (a
    database that does not answer must not hold the exit), then a warning says it was not."""
    box: list[dict] = []
    result = TransferResult(snapshot=snapshot)

    def write() -> None:
        try:
            box.append(record(request, result, status=status, started_at=started_at))
        except Exception as exc:  # (a thread's traceback must not be the last word of a stopped run)
            box.append({"event": "warning", "reason": f"transfer history not written: {type(exc).__name__}: {exc}"})

    thread = threading.Thread(target=write, name="dtune-history-interrupted", daemon=True)
    thread.start()
    thread.join(wait)
    if box:
        return box[0]
    return {"event": "warning", "reason": f"transfer history not written: no answer within {wait:g} s"}


def _preload_history() -> None:
    with contextlib.suppress(Exception):  # the real import, after the transfer, reports any error
        importlib.import_module("dtune.history.record")
