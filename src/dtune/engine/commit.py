"""Committing complete files: verify, make durable and rename, in batches, in a worker thread.

Files that complete while one batch is being committed form the next batch
(one ``syncfs`` for a whole batch is what makes many small files cheap; see
``files.commit_batch``). While a batch runs, its files belong to the worker
thread: a transfer that stops meanwhile waits for that batch (``drain``)
before it syncs and closes anything, so no file is closed under the thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from dtune.engine.files import FileState, commit_batch

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
