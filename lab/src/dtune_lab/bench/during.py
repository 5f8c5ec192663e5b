"""What happens during one benchmark run: a profile's mid-run link changes, and the run's trace.

A profile's ``during`` entries change a link once a share (``at_fraction``)
of the dataset's bytes has crossed the links towards the client, as the
emulator counts them ("down" bytes, all links, headers included).
``ChangeSchedule`` decides from byte counts alone which changes are due (pure:
no clock, no testbed); ``ChangeWatcher`` polls the testbed's counters from a
thread while one client runs and hands each due change to the runner, which
sets the link. The runner sets the profile's own links again before and after
such a run, so no change leaks into the next one.

The same watcher records the run's **trace** when asked: every poll, the
bytes crossed so far; every ``CONN_POLL_S``, the client's established TCP
connections (read from ``/proc/<pid>/net/tcp*`` of the client process, which
shows its namespace). From the trace come the **tail seconds** (from the
moment 95 % of the dataset's bytes had crossed to the client's exit), the
**tail pace** (the rate of those last 5 % up to the last byte, over the rate
from 10 % to 90 %) and the connection counts: the same measurement for every
tool.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from dtune_lab.bench.config import LinkChange
from dtune_lab.testbed import Testbed

# How often the watcher of mid-run link changes reads the emulator's counters:
# one stats request (a Unix-socket round trip of well under a millisecond) per
# poll, and a change lands within 50 ms of its byte count -- about 1 % of a
# 5 s run, finer than the run-to-run spread on the shared machine.
CHANGE_POLL_S = 0.05
# Connections are counted less often: one read of the namespace's socket table
# (a few hundred lines) every quarter second.
CONN_POLL_S = 0.25
# The share of the bytes after which a run is "in its tail".
TAIL_SHARE = 0.95


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


def established(pid: int) -> int | None:
    """Established TCP connections in the network namespace of process ``pid`` (None once it is gone)."""
    count = 0
    try:
        for table in ("tcp", "tcp6"):
            with open(f"/proc/{pid}/net/{table}") as f:
                next(f, None)  # the header
                for line in f:
                    fields = line.split(None, 4)
                    if len(fields) > 3 and fields[3] == "01":  # TCP_ESTABLISHED
                        count += 1
    except OSError:
        return None
    return count


@dataclass(frozen=True, slots=True)
class Sample:
    """One point of a run's trace: seconds since the client started, bytes crossed, connections."""

    t: float
    bytes: int
    connections: int | None = None


def tail_seconds(samples: Sequence[Sample], total_bytes: int, end: float,
                 share: float = TAIL_SHARE) -> float | None:
    """Seconds from the first sample with ``share`` of the bytes crossed to ``end`` (None: never reached).

    The bytes are ``total_bytes`` (the dataset) or what the trace counted in the end, whichever is
    more: the counters include headers and ranges cut short and asked again, and on a site the
    server link counted 1.17x the dataset for cluster3's one node (whose servers sent 1.03x:
    the rest is below HTTP, e.g. segments sent again), where 95 % of the dataset alone was
    reached 6 s before 95 % of the transfer.
    """
    final = samples[-1].bytes if samples else 0
    target = share * max(total_bytes, final)
    for s in samples:
        if s.bytes >= target:
            return max(0.0, end - s.t)
    return None


def tail_pace(samples: Sequence[Sample], share: float = TAIL_SHARE) -> float | None:
    """How fast the last ``1 - share`` of the bytes crossed, over the steady rate (10 % to 90 %).

    Both rates come from the same trace, up to the last byte (not the client's exit), in the
    bytes the trace counts (headers included): 1.0 is a transfer that ends at full pace, 0.5 one
    whose last 5 % took twice as long as the steady state would. None: too short a trace.
    """
    final = samples[-1].bytes if samples else 0
    if final <= 0:
        return None

    def at(fraction: float) -> float:  # when the fraction crossed, between the samples around it
        goal = fraction * final
        i = next(i for i, s in enumerate(samples) if s.bytes >= goal)
        if i == 0:
            return samples[0].t
        a, b = samples[i - 1], samples[i]
        return a.t + (b.t - a.t) * (goal - a.bytes) / (b.bytes - a.bytes)

    t10, t90, t_tail, t_end = at(0.10), at(0.90), at(share), at(1.0)
    if t90 <= t10 or t_end <= t_tail:
        return None
    return ((1 - share) / (t_end - t_tail)) / (0.8 / (t90 - t10))


def rate_series(samples: Sequence[Sample], window: float = 0.5) -> list[tuple[float, float]]:
    """(t, Mbit/s) over consecutive windows of about ``window`` seconds, for plots."""
    out: list[tuple[float, float]] = []
    last: Sample | None = None
    for s in samples:
        if last is None:
            last = s
            continue
        if s.t - last.t >= window:
            out.append((s.t, (s.bytes - last.bytes) * 8 / (s.t - last.t) / 1e6))
            last = s
    return out


class ChangeWatcher:
    """Applies mid-run link changes, and records the trace, from a thread while a client runs.

    A context manager. ``start()`` reads the counters once (the run's
    baseline) and starts the thread; every ``interval`` seconds it makes one
    ``tb.link_stats()`` call and hands each due change to ``apply``.
    ``fired`` holds the seconds after ``start()`` at which changes took
    effect; ``error`` what stopped the thread early, if anything. With
    ``trace``, it keeps polling after the last change and appends a
    ``Sample`` to ``samples`` every poll (connections, every ``CONN_POLL_S``,
    once ``client_pid`` is set). ``stop()`` (also on leaving the ``with``
    block, whatever happened to the client) ends the thread and waits for it:
    no change is applied after it returns.
    """

    def __init__(self, tb: Testbed, changes: Sequence[LinkChange], total_bytes: int,
                 apply: Callable[[LinkChange], None], *, interval: float = CHANGE_POLL_S,
                 clock: Callable[[], float] = time.perf_counter, trace: bool = False) -> None:
        self.tb = tb
        self.changes = tuple(changes)
        self.total_bytes = total_bytes
        self.apply = apply
        self.interval = interval
        self.clock = clock
        self.trace = trace
        self.client_pid: int | None = None  # set by whoever starts the client
        self.samples: list[Sample] = []
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
        sched = self._schedule
        assert sched is not None
        next_count = 0.0
        try:
            while (self.trace or not sched.done) and not self._stop.wait(self.interval):
                crossed = down_bytes(self.tb.link_stats())
                for change in sched.due(crossed):
                    if self._stop.is_set():
                        return  # the client is done: a late change would only leak
                    self.apply(change)
                    self.fired.append(self.clock() - self._t0)
                if self.trace:
                    t = self.clock() - self._t0
                    conns = None
                    if self.client_pid is not None and t >= next_count:
                        conns = established(self.client_pid)
                        next_count = t + CONN_POLL_S
                    self.samples.append(Sample(t, crossed - sched.start_bytes, conns))
        except Exception as exc:  # reported in the run's record, not lost in a thread
            self.error = f"{'mid-run link change' if self.changes else 'run trace'}: {exc}"

    def __repr__(self) -> str:
        alive = self._thread is not None and self._thread.is_alive()
        return f"<ChangeWatcher {len(self.fired)} of {len(self.changes)} fired | {'running' if alive else 'stopped'}>"
