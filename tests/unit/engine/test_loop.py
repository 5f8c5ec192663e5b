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


def test_run_quietly_installs_no_signal_handler_and_returns_the_value() -> None:
    import signal

    from dtune.loop import run_quietly
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}

    async def main() -> dict:
        await asyncio.sleep(0)
        return {s: signal.getsignal(s) for s in before}

    assert run_quietly(main()) == before
    assert {s: signal.getsignal(s) for s in before} == before


def test_run_quietly_on_ctrl_c_runs_every_finally_then_raises_keyboardinterrupt() -> None:
    import time

    from dtune.loop import run_quietly
    cleaned = []

    def ctrl_c() -> None:
        raise KeyboardInterrupt                      # where Ctrl-C lands without a handler: anywhere

    async def lane(name: str) -> None:
        try:
            await asyncio.sleep(30)
        finally:
            await asyncio.sleep(0)                   # a finally may still await (the engine's does)
            cleaned.append(name)

    async def main() -> None:
        asyncio.get_running_loop().call_later(0.05, ctrl_c)
        await asyncio.gather(lane("a"), lane("b"))

    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        run_quietly(main())
    assert sorted(cleaned) == ["a", "b"] and time.monotonic() - started < 5
