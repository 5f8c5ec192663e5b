"""Committing complete files: verify, make durable and rename, in batches, in a worker thread.

Files that complete while one batch is being committed form the next batch
(one ``syncfs`` for a whole batch is what makes many small files cheap; see
``commit_batch``). While a batch runs, its files belong to the worker
thread: a transfer that stops meanwhile waits for that batch (``drain``)
before it syncs and closes anything, so no file is closed under the thread.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

from dtune.engine.files import FileState
from dtune.fileio import disk_error, syncfs

Done = Callable[[FileState, "str | None"], None]  # (file, None when committed, else the reason)


class Committer:
    """Queue of files to commit; ``run`` is the task that commits them, ``done`` hears each result."""

    def __init__(self, batch: int, done: Done) -> None:
        self.batch = batch
        self.done = done
        self._queue: list[FileState] = []
        self._wake = asyncio.Event()
        self._running: tuple[list[FileState], asyncio.Future[list[str | None]]] | None = None

    @property
    def busy(self) -> bool:
        """Files are queued or being committed (a large file's checksum can take minutes)."""
        return bool(self._queue) or self._running is not None

    def add(self, f: FileState) -> None:
        self._queue.append(f)
        self._wake.set()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queue:
                batch = self._queue[:self.batch]
                del self._queue[:self.batch]
                pending = loop.run_in_executor(None, commit_batch, batch)
                self._running = (batch, pending)
                errors = await asyncio.shield(pending)  # a stop waits for it in drain()
                self._running = None
                self._report(batch, errors)

    async def drain(self) -> None:
        """After ``run`` was cancelled: wait for the batch a worker thread still commits, report it."""
        if self._running is None:
            return
        batch, pending = self._running
        self._running = None
        try:
            errors = await pending
        except Exception as exc:  # noqa: BLE001 (each file of the batch fails with the reason)
            errors = [f"commit failed: {exc}"] * len(batch)
        self._report(batch, errors)

    def _report(self, batch: list[FileState], errors: list[str | None]) -> None:
        for f, error in zip(batch, errors, strict=True):
            self.done(f, error)


def commit_batch(files: list[FileState]) -> list[str | None]:
    """Verify, make durable, then rename each file into place. Blocking.

    One file: ``fsync``. Several: one ``syncfs`` for the whole batch (one
    journal commit instead of one per file — what makes many small files
    cheap), falling back to ``fsync`` each where syncfs is missing or fails.
    Data is durable before any rename, so a crash never leaves a final
    name on missing bytes. Returns per file None (done) or the reason it failed.
    """
    errors = [f.verify() for f in files]
    good = [f for f, e in zip(files, errors, strict=True) if e is None]
    synced = False
    if len(good) > 1:
        synced = syncfs(good[0].fd)
    for i, f in enumerate(files):
        if errors[i] is not None:
            continue
        if not synced:
            try:
                os.fsync(f.fd)
            except OSError as exc:
                f.close_files()
                errors[i] = str(disk_error(f.part_path, exc))
                continue
        errors[i] = f.finish()
    return errors
