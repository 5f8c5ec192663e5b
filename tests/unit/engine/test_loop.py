"""run_async: the value and the exception of the coroutine, and a main task that holds neither."""

from __future__ import annotations

import asyncio

import pytest

from dtune.loop import run_async


def test_run_async_returns_the_coroutines_value_and_raises_its_exception() -> None:
    async def value() -> list[int]:
        await asyncio.sleep(0)
        return [1, 2, 3]

    async def failing() -> None:
        raise ValueError("boom")

    assert run_async(value()) == [1, 2, 3]
    with pytest.raises(ValueError, match="boom"):
        run_async(failing())


def test_the_main_task_never_holds_the_result_whose_repr_the_runner_would_format() -> None:
    """asyncio.Runner formats its SIGINT handler's repr, which holds the main task; a done
    task's repr includes its result's, so a large result must not be that task's."""
    reprs = []

    class Large:
        def __repr__(self) -> str:
            reprs.append(1)
            return "<large>"

    async def main() -> Large:
        return Large()

    assert isinstance(run_async(main()), Large)
    assert reprs == []


def test_a_stop_signal_cancels_the_run_lets_every_finally_run_and_raises_stopped() -> None:
    import os
    import signal

    from dtune.errors import Stopped
    cleaned = []

    async def long_work() -> None:
        try:
            os.kill(os.getpid(), signal.SIGTERM)     # as `kill PID` would
            await asyncio.sleep(30)
        finally:
            await asyncio.sleep(0)                   # a finally may still await (the engine's does)
            cleaned.append(True)

    with pytest.raises(Stopped) as info:
        run_async(long_work(), stop_signals=(signal.SIGTERM,))
    assert info.value.signum == signal.SIGTERM and str(info.value) == "stopped by SIGTERM"
    assert cleaned == [True]
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL   # the handler went with the loop
