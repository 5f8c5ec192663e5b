"""The engine's housekeeping tick: rates, tuner updates, stall checks, syncs.

One ``Ticker`` per engine run. Every ``control_tick`` it refreshes the live
RTT, tells the scheduler what is left and where lanes run, and hands a
snapshot to the control listeners (a tuner); every ``tick`` it advances the
accounting, feeds the progress listeners, closes
stalled connections, has lanes that would be the tail give their ranges
back (one replica, ``backlog_seconds``), wakes idle lanes (backoffs may have expired) and
syncs or writes back part files. A connection the rate limit paused (``engine.limiter``) is
neither stalled nor slow: the checks skip it. What it keeps per connection between ticks is
the lane's ``Watch`` (``engine.watch``); of the engine it is given only what it reads and the
two things it asks (``LaneHousing``), and of a connection it calls nothing but ``close``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

from dtune.accounting import Accounting, Snapshot
from dtune.engine.files import FileState
from dtune.engine.options import EngineOptions
from dtune.engine.origins import OutageProbe
from dtune.engine.scheduler import Scheduler
from dtune.engine.state import Lane
from dtune.engine.watch import HeadTimeout, StallError, TooSlow, watch
from dtune.http.message import Origin
from dtune.stats import median

STALLED_MIN = 1.0    # s: requests out and nothing from any origin for this long (or 3 RTTs) is a stall
STALLED_RTTS = 3.0

Listener = Callable[[Snapshot], None]


class LaneHousing(Protocol):
    """What the ticker asks of the engine's lanes."""

    def lanes(self) -> Iterator[Lane]: ...
    def shed_backlogs(self, seconds_left: float | None) -> None: ...
    def wake_idle(self) -> None: ...


class Ticker:
    """The tick of one engine run (see the module docstring). ``control_listeners`` and
    ``tick_listeners`` are the engine's lists: listeners added later are called too."""

    def __init__(self, options: EngineOptions, acct: Accounting, scheduler: Scheduler,
                 outage: OutageProbe, files: list[FileState], lanes: LaneHousing, *,
                 clock: Callable[[], float], control_listeners: list[Listener],
                 tick_listeners: list[Listener], paced: Callable[[float], bool] | None = None) -> None:
        self.options = options
        self.acct = acct
        self.scheduler = scheduler
        self.outage = outage
        self.files = files
        self.housing = lanes
        self.clock = clock
        self.control_listeners = control_listeners
        self.tick_listeners = tick_listeners
        self.paced = paced   # does an origin's request rate hold requests back now (``politeness``)?

    async def run(self) -> None:
        opts, acct, scheduler, housing = self.options, self.acct, self.scheduler, self.housing
        alive = self.outage.alive
        last_sync = last_tick = last_writeback = self.clock()
        while True:
            await asyncio.sleep(min(opts.control_tick, opts.tick))
            now = self.clock()
            rtt = live_rtt(housing.lanes())
            scheduler.rtt = rtt or acct.rtt_median()
            acct.live(rtt, note_alive(housing.lanes(), alive, now,
                                      max(STALLED_MIN, STALLED_RTTS * (scheduler.rtt or 0.0))))
            acct.paced = self.paced is not None and self.paced(now)
            snap = acct.snapshot(now)
            self.note_remaining(snap)  # (every control tick: the closing ranges follow the end closely)
            for listener in list(self.control_listeners):
                listener(snap)
            if now - last_tick < opts.tick - opts.timer_slack:
                continue
            last_tick = now
            acct.tick(now)
            snap = None
            if self.tick_listeners:
                snap = acct.snapshot(now)
                for listener in list(self.tick_listeners):
                    listener(snap)
            note_alive(housing.lanes(), alive, now, 0.0)
            silent = check_connections(housing.lanes(), now, opts, alive)
            for origin, conns in silent.items():
                self.outage.probe(origin, conns)
            if not scheduler.multi_replica and opts.endgame:
                snap = snap or acct.snapshot(now)
                housing.shed_backlogs(snap.eta)  # lanes that would be the tail give their ranges back
            housing.wake_idle()  # backoffs may have expired
            if now - last_sync >= opts.sync_interval:
                last_sync = last_writeback = now
                open_files = [f for f in self.files if f.fd >= 0]
                if open_files:
                    await asyncio.to_thread(lambda fs=open_files: [f.sync() for f in fs])
            elif now - last_writeback >= opts.writeback_interval:
                last_writeback = now
                large = [f for f in self.files if f.fd >= 0 and f.journaled]
                if large:
                    await asyncio.to_thread(lambda fs=large: [f.write_back() for f in fs])

    def note_remaining(self, snap: Snapshot) -> None:
        """Tell the scheduler the bytes still to come and the working lanes per replica (range sizing
        at the end of a transfer, replica admission)."""
        self.scheduler.remaining = (None if snap.bytes_total is None else
                                    max(0, snap.bytes_total - snap.bytes_resumed - snap.bytes))
        self.scheduler.lanes_per_replica = lanes_per_replica(self.housing.lanes())


def lanes_per_replica(lanes: Iterable[Lane]) -> dict[int, int]:
    """The lanes that are not retiring, per replica."""
    count: dict[int, int] = {}
    for lane in lanes:
        if not lane.retiring:
            count[lane.replica] = count.get(lane.replica, 0) + 1
    return count


def note_alive(lanes: Iterable[Lane], alive: dict[Origin, float], now: float, quiet: float) -> bool:
    """Mark in ``alive`` the origins whose connections brought bytes since the last call; True when
    requests are out and no origin has sent anything for ``quiet`` seconds (the transfer is stalled)."""
    busy = False
    for lane in lanes:
        conn = lane.conn
        if conn is None:
            continue
        w = watch(lane)
        if conn.bytes_in != w.seen_bytes:
            w.seen_bytes = conn.bytes_in
            alive[conn.origin] = now
        busy = busy or (bool(conn.in_flight) and not conn.paused)  # (paused: the rate limit waits)
    return busy and bool(alive) and now - max(alive.values()) > quiet


def live_rtt(lanes: Iterable[Lane]) -> float | None:
    """Median of the kernel's RTT estimates over the connections that are receiving."""
    rtts = [r for lane in lanes if lane.conn is not None and lane.conn.in_flight
            for r in (lane.conn.tcp_rtt(),) if r is not None]
    return median(rtts) if rtts else None


def check_connections(lanes: Iterable[Lane], now: float, opts: EngineOptions,
                      alive: dict[Origin, float]) -> dict[Origin, list]:
    """Drop busy connections that stalled, whose response head is too slow, or below the floor.
    Returns, per origin, its connections silent mid-body while the origin says nothing (for an
    outage probe)."""
    stall, head, floor, window = opts.stall_timeout, opts.header_timeout, opts.speed_limit, opts.speed_time
    silent: dict[Origin, list] = {}
    for lane in lanes:
        conn = lane.conn
        if conn is None:
            continue
        w = watch(lane)
        if not conn.in_flight or conn.paused:
            # (a connection the rate limit paused is not silent: its clocks restart on resume)
            w.floor_mark = None
            continue
        if now - conn.last_activity > stall:
            conn.close(StallError(f"{conn.origin}: no data for {stall:g} s"))
            continue
        if (now - conn.last_activity > opts.outage_probe and conn.current is not None
                and conn.head_started is None
                and now - alive.get(conn.origin, now) > opts.outage_probe):
            silent.setdefault(conn.origin, []).append(conn)
        elif conn.head_started is not None and now - conn.head_started > head:
            conn.close(HeadTimeout(f"{conn.origin}: response headers took longer than {head:g} s "
                                   f"(--header-timeout)"))
        elif floor:
            mark = w.floor_start()
            if mark is None:
                w.floor_mark = (now, conn.bytes_in)
            elif now - mark[0] >= window:
                rate = (conn.bytes_in - mark[1]) / (now - mark[0])
                # (a window without a byte is silence, not slowness: the stall timeout and the
                # outage probe judge it, so a path that went down is not taken for a slow server)
                if rate < floor and conn.bytes_in > mark[1]:
                    conn.close(TooSlow(f"{conn.origin}: {rate:.0f} B/s for {now - mark[0]:.0f} s, below the "
                                       f"speed limit of {floor} B/s (--speed-limit, --speed-time)"))
                else:
                    w.floor_mark = (now, conn.bytes_in)
    return silent
