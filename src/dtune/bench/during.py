"""Mid-run link changes of a benchmark profile (``during = [...]``): when each is due, and applying it.

A profile's ``during`` entries change a link once a share (``at_fraction``)
of the dataset's bytes has crossed the links towards the client, as the
emulator counts them ("down" bytes, all links, headers included).
``ChangeSchedule`` decides from byte counts alone which changes are due (pure:
no clock, no testbed); ``ChangeWatcher`` polls the testbed's counters from a
thread while one client runs and hands each due change to the runner, which
sets the link. The runner sets the profile's own links again before and after
such a run, so no change leaks into the next one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from dtune.bench.config import LinkChange
from dtune.testbed import Testbed

# How often the watcher of mid-run link changes reads the emulator's counters:
# one stats request (a Unix-socket round trip of well under a millisecond) per
# poll, and a change lands within 50 ms of its byte count -- about 1 % of a
# 5 s run, finer than the run-to-run spread on the shared machine.
CHANGE_POLL_S = 0.05


def down_bytes(stats: Sequence[dict[str, Any]]) -> int:
    """Bytes the emulator passed towards the client, summed over links (``Testbed.link_stats()``)."""
    return sum(int((link.get("down") or {}).get("bytes", 0)) for link in stats)


class ChangeSchedule:
    """Which of a profile's mid-run changes are due, from the bytes observed (pure: no clock, no testbed).

    ``due(down_bytes)`` returns the changes whose ``at_fraction`` of
    ``total_bytes`` has crossed since ``start_bytes``, each once, in
    ``at_fraction`` order.
    """

    def __init__(self, changes: Sequence[LinkChange], total_bytes: int, start_bytes: int) -> None:
        self.changes = tuple(sorted(changes, key=lambda c: c.at_fraction))
        self.total_bytes = max(1, total_bytes)
        self.start_bytes = start_bytes
        self.fired = 0

    def fraction(self, down_bytes: int) -> float:
        return (down_bytes - self.start_bytes) / self.total_bytes

    def due(self, down_bytes: int) -> list[LinkChange]:
        fraction = self.fraction(down_bytes)
        out = []
        while self.fired < len(self.changes) and self.changes[self.fired].at_fraction <= fraction:
            out.append(self.changes[self.fired])
            self.fired += 1
        return out

    @property
    def done(self) -> bool:
        return self.fired == len(self.changes)

    def __repr__(self) -> str:
        return f"<ChangeSchedule {self.fired} of {len(self.changes)} fired | {self.total_bytes} bytes>"


class ChangeWatcher:
    """Applies mid-run link changes from a thread while a client runs (a context manager).

    ``start()`` reads the counters once (the run's baseline) and starts the
    thread; every ``interval`` seconds it makes one ``tb.link_stats()`` call
    and hands each due change to ``apply``. ``fired`` holds the seconds after
    ``start()`` at which changes took effect; ``error`` what stopped the
    thread early, if anything. ``stop()`` (also on leaving the ``with`` block,
    whatever happened to the client) ends the thread and waits for it: no
    change is applied after it returns.
    """

    def __init__(self, tb: Testbed, changes: Sequence[LinkChange], total_bytes: int,
                 apply: Callable[[LinkChange], None], *, interval: float = CHANGE_POLL_S,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.tb = tb
        self.changes = tuple(changes)
        self.total_bytes = total_bytes
        self.apply = apply
        self.interval = interval
        self.clock = clock
        self.fired: list[float] = []
        self.error = ""
        self._schedule: ChangeSchedule | None = None
        self._t0 = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> ChangeWatcher:
        self._schedule = ChangeSchedule(self.changes, self.total_bytes, down_bytes(self.tb.link_stats()))
        self._t0 = self.clock()
        self._thread = threading.Thread(target=self._loop, name="dtune-bench-during", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> list[float]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return list(self.fired)

    def __enter__(self) -> ChangeWatcher:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _loop(self) -> None:
        assert self._schedule is not None
        try:
            while not self._schedule.done and not self._stop.wait(self.interval):
                for change in self._schedule.due(down_bytes(self.tb.link_stats())):
                    if self._stop.is_set():
                        return  # the client is done: a late change would only leak
                    self.apply(change)
                    self.fired.append(self.clock() - self._t0)
        except Exception as exc:  # reported in the run's record, not lost in a thread
            self.error = f"mid-run link change: {exc}"

    def __repr__(self) -> str:
        alive = self._thread is not None and self._thread.is_alive()
        return f"<ChangeWatcher {len(self.fired)} of {len(self.changes)} fired | {'running' if alive else 'stopped'}>"
