"""An interrupted run's history row (``transfer.run.record_interrupted``): status 130, what was
moved, and never a wait longer than its bound for a database that does not answer."""

from __future__ import annotations

import importlib
import threading
import time

import pytest

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
