"""Running coroutines: uvloop when installed, the stdlib loop otherwise.

``run_async`` is for the ``dtune`` program, which owns the process and its
signals; ``run_quietly`` for a library call (``dtune.get``), whose caller does.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Coroutine
from typing import Any, TypeVar

from dtune.errors import Stopped

T = TypeVar("T")

INTERRUPTED = 130  # Ctrl-C's exit status (128 + SIGINT), the shell's
# the stop signal ``run_async`` caught, seen by every task of its run (a list shared with the
# handler: the handler runs outside the tasks' copies of the context)
_CAUGHT: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("dtune_stop_signal", default=None)


def stop_status() -> int:
    """The exit status of the run being stopped, as the shell gives it: 128 + the stop signal
    ``run_async`` caught (143 for SIGTERM, 129 for SIGHUP), else 130 (Ctrl-C, or a library
    call whose caller interrupted it). Call it from the run's tasks, where it is being stopped."""
    caught = _CAUGHT.get()
    return 128 + caught[0] if caught else INTERRUPTED

try:  # uvloop is optional (not on every platform)
    import uvloop
except ImportError:  # pragma: no cover - depends on the platform
    uvloop = None


def run_async(coro: Coroutine[Any, Any, T], *, stop_signals: tuple[int, ...] = ()) -> T:
    """Run ``coro`` to its end on a new loop and return its result.

    The main task itself returns nothing: on the way out, ``asyncio.Runner``
    (Python 3.11) formats the repr of its SIGINT handler, which holds the
    task, and a done task's repr includes its result's: twice 0.1 s for the
    result of a transfer of 100,000 files.

    ``stop_signals`` (SIGTERM, SIGHUP) stop the run as Ctrl-C does: the main
    task is cancelled, so every ``finally`` runs (the engine journals what it
    wrote), then ``Stopped`` is raised.
    """
    box: list[T] = []
    caught: list[int] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None

        def stop(signum: int) -> None:
            if not caught:
                caught.append(signum)
                task.cancel()
        _CAUGHT.set(caught)  # (before the coroutine starts: its tasks copy this context)
        for signum in stop_signals:
            loop.add_signal_handler(signum, stop, signum)
        try:
            box.append(await coro)
        finally:
            for signum in stop_signals:  # the signal's default again once the run is over
                loop.remove_signal_handler(signum)

    try:
        if uvloop is not None:
            uvloop.run(main())
        else:
            asyncio.run(main())
    except asyncio.CancelledError:
        if caught:
            raise Stopped(caught[0]) from None
        raise
    return box[0]


def run_quietly(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to its end on a new loop, as ``asyncio.run`` does, without installing any
    signal handler: the program that calls dtune keeps its own (``asyncio.run`` would put one
    on SIGINT while it runs).

    Ctrl-C still ends the run cleanly: the KeyboardInterrupt stops the loop, every task
    left is cancelled and run to its end (each ``finally`` runs: the engine journals what it
    wrote), then the KeyboardInterrupt goes on to the caller.
    """
    loop = uvloop.new_event_loop() if uvloop is not None else asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        try:
            _cancel_all(loop)
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            loop.close()


def _cancel_all(loop: asyncio.AbstractEventLoop) -> None:
    tasks = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
