"""Stopping a transfer while a worker thread commits a batch: the stop waits for the batch.

A batch's files (verified, synced and renamed in a worker thread) belong to
that thread until it ends; the engine's shutdown must not sync or close
them meanwhile (that raced: a journal closed by one thread and synced by the
other failed the whole run with "file descriptor cannot be a negative
integer"). Here the commit is held at its start until the transfer has been
cancelled, then let go.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from support.engine import FAST, MIB, blob, journal_file, part_file
from support.fakeserver import FakeServer

from dtune.dataset import FileSpec
from dtune.engine import Engine, commit
from dtune.engine.files import commit_batch
from dtune.http.memory import MemoryNetwork
from dtune.loop import run_async
from dtune.params import Params


def test_a_stop_during_a_commit_waits_for_the_batch_and_leaves_its_files_committed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = {"/big.bin": blob(MIB), "/small.bin": blob(1000)}      # one journalled, one not
    started, release, finished = threading.Event(), threading.Event(), threading.Event()
    held: list[str] = []

    def held_commit(batch):
        if started.is_set():
            return commit_batch(batch)
        held.extend(f.relpath for f in batch)
        started.set()
        release.wait(10)
        try:
            return commit_batch(batch)
        finally:
            finished.set()

    monkeypatch.setattr(commit, "commit_batch", held_commit)
    out = tmp_path / "out"
    with FakeServer(files, network=MemoryNetwork()) as server:
        specs = [FileSpec(url=server.url(p), relpath=p[1:], size=len(d)) for p, d in files.items()]

        async def main() -> bool:
            engine = Engine(specs, [out / s.relpath for s in specs], Params(2, 1, 1), options=FAST,
                            connect=server.connect)
            task = asyncio.create_task(engine.run())
            while not started.is_set():
                await asyncio.sleep(0.01)
            task.cancel()                                      # the stop, while the batch is held
            threading.Timer(0.3, release.set).start()
            with pytest.raises(asyncio.CancelledError):
                await task
            return finished.is_set()

        batch_done_before_the_stop_ended = run_async(main())
    assert batch_done_before_the_stop_ended, "shutdown returned while a worker thread still committed"
    assert held
    for rel in held:                                           # the held batch: verified and renamed
        assert (out / rel).read_bytes() == files["/" + rel]
        assert not part_file(out, rel).exists() and not journal_file(out, rel).exists()
    for path, data in files.items():                          # the rest: in place and exact, or not at all
        final = out / path[1:]
        assert not final.exists() or final.read_bytes() == data
