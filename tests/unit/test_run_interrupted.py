"""An interrupted run's history row (``transfer.run.record_interrupted``): the status the process
exits with (130, or 128 + the stop signal ``loop.run_async`` caught), what was moved, and never a
wait longer than its bound for a database that does not answer."""

from __future__ import annotations

import asyncio
import importlib
import os
import signal
import threading
import time

import pytest

from dtune.errors import Stopped
from dtune.loop import run_async, run_quietly, stop_status

run_module = importlib.import_module("dtune.transfer.run")  # (the module: the package exports its run function)


def test_the_row_holds_status_130_and_the_last_snapshot(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def fake_record(request, result, *, status, started_at):
        calls.append((request, result.snapshot, status, started_at))
        return {"event": "history", "id": 7}

    monkeypatch.setattr(run_module, "record", fake_record)
    snap = object()
    event = run_module.record_interrupted("request", snap, started_at=12.5)  # type: ignore[arg-type]
    assert event == {"event": "history", "id": 7}
    assert calls == [("request", snap, 130, 12.5)]


def test_a_history_that_does_not_answer_holds_the_exit_no_longer_than_the_bound(
        monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()
    monkeypatch.setattr(run_module, "record", lambda *a, **k: release.wait(30) and {})
    started = time.monotonic()
    event = run_module.record_interrupted("request", None, started_at=0.0, wait=0.2)  # type: ignore[arg-type]
    release.set()
    assert time.monotonic() - started < 2
    assert event == {"event": "warning", "reason": "transfer history not written: no answer within 0.2 s"}


def test_an_unexpected_error_while_recording_is_a_warning_not_a_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_args, **_kwargs):
        raise RuntimeError("no table")

    monkeypatch.setattr(run_module, "record", broken)
    event = run_module.record_interrupted("request", None, started_at=0.0)  # type: ignore[arg-type]
    assert event == {"event": "warning", "reason": "transfer history not written: RuntimeError: no table"}


def test_the_row_holds_the_status_it_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    monkeypatch.setattr(run_module, "record", lambda request, result, *, status, started_at: calls.append(status) or {})
    run_module.record_interrupted("request", None, started_at=0.0, status=143)  # type: ignore[arg-type]
    assert calls == [143]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_stop_status_inside_a_run_stopped_by_a_signal_is_128_plus_that_signal(signum: int) -> None:
    seen: list[int] = []

    async def work() -> None:
        async def inner() -> None:  # a task of its own, as the engine's are
            try:
                os.kill(os.getpid(), signum)
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                seen.append(stop_status())
                raise
        await asyncio.create_task(inner())

    with pytest.raises(Stopped) as stopped:
        run_async(work(), stop_signals=(signal.SIGTERM, signal.SIGHUP))
    assert stopped.value.signum == signum and seen == [128 + signum]


def test_stop_status_is_130_where_no_stop_signal_was_caught() -> None:
    async def ask() -> int:
        return stop_status()

    assert run_quietly(ask()) == 130
    assert run_async(ask(), stop_signals=(signal.SIGTERM,)) == 130
    assert stop_status() == 130  # outside any run
