"""The engine's housekeeping tick: rates, tuner updates, stall checks, syncs.

One coroutine per engine run. Every ``control_tick`` it refreshes the live
RTT, tells the scheduler what is left and where lanes run, and hands a
snapshot to the control listeners (a tuner); every ``tick`` it advances the
accounting, feeds the progress listeners, closes
stalled connections, has lanes that would be the tail give their ranges
back (one replica, ``backlog_seconds``), wakes idle lanes (backoffs may have expired) and
syncs or writes back part files. A connection the rate limit paused (``engine.limiter``) is
neither stalled nor slow: the checks skip it. It reads the engine's state and calls
nothing but its public hooks and ``Connection.close``.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from dtune.errors import HTTPError
from dtune.stats import median

if TYPE_CHECKING:
    from dtune.accounting import Snapshot
    from dtune.engine.core import Engine


class StallError(HTTPError):
    """No byte arrived on a busy connection for ``stall_timeout`` seconds."""

    network = True


class HeadTimeout(HTTPError):
    """A response's status line and headers took longer than ``header_timeout`` seconds."""


class TooSlow(HTTPError):
    """A busy connection received less than ``speed_limit`` bytes/s over ``speed_time`` seconds.

    The bytes it did bring are kept, but they are no progress: the file's failures keep counting
    (``progress = False``), so a file that only ever trickles fails after ``retries`` windows."""

    progress = False


async def run_ticker(engine: Engine) -> None:
    opts = engine.options
    acct = engine.acct
    last_sync = last_tick = last_writeback = engine.now()
    while True:
        await asyncio.sleep(min(opts.control_tick, opts.tick))
        now = engine.now()
        rtt = live_rtt(engine)
        engine.scheduler.rtt = rtt or acct.rtt_median()
        acct.live(rtt, note_alive(engine, now, max(STALLED_MIN, STALLED_RTTS * (engine.scheduler.rtt or 0.0))))
        snap = acct.snapshot(now)
        note_remaining(engine, snap)  # (every control tick: the closing ranges follow the end closely)
        for listener in list(engine.control_listeners):
            listener(snap)
        if now - last_tick < opts.tick - opts.timer_slack:
            continue
        last_tick = now
        acct.tick(now)
        snap = None
        if engine.tick_listeners:
            snap = acct.snapshot(now)
            for listener in list(engine.tick_listeners):
                listener(snap)
        note_alive(engine, now, 0.0)
        check_connections(engine, now)
        if not engine.scheduler.multi_replica and engine.options.endgame:
            snap = snap or acct.snapshot(now)
            engine.shed_backlogs(snap.eta)  # lanes that would be the tail give their ranges back
        engine.wake_idle()  # backoffs may have expired
        if now - last_sync >= opts.sync_interval:
            last_sync = last_writeback = now
            open_files = [f for f in engine.files if f.fd >= 0]
            if open_files:
                await asyncio.to_thread(lambda fs=open_files: [f.sync() for f in fs])
        elif now - last_writeback >= opts.writeback_interval:
            last_writeback = now
            large = [f for f in engine.files if f.fd >= 0 and f.journaled]
            if large:
                await asyncio.to_thread(lambda fs=large: [f.write_back() for f in fs])


STALLED_MIN = 1.0    # s: requests out and nothing from any origin for this long (or 3 RTTs) is a stall
STALLED_RTTS = 3.0


def note_remaining(engine: Engine, snap: Snapshot) -> None:
    """Tell the scheduler the bytes still to come and the working lanes per replica (range sizing
    at the end of a transfer, replica admission)."""
    engine.scheduler.remaining = (None if snap.bytes_total is None else
                                  max(0, snap.bytes_total - snap.bytes_resumed - snap.bytes))
    lanes: dict[int, int] = {}
    for lane in engine.lanes():
        if not lane.retiring:
            lanes[lane.replica] = lanes.get(lane.replica, 0) + 1
    engine.scheduler.lanes_per_replica = lanes


def note_alive(engine: Engine, now: float, quiet: float) -> bool:
    """Mark the origins whose connections brought bytes since the last call; True when requests are
    out and no origin has sent anything for ``quiet`` seconds (the transfer is stalled)."""
    busy = False
    alive = engine.origin_alive
    for lane in engine.lanes():
        conn = lane.conn
        if conn is None:
            continue
        if conn.bytes_in != conn.seen_bytes:
            conn.seen_bytes = conn.bytes_in
            alive[conn.origin] = now
        busy = busy or (bool(conn.in_flight) and not conn.paused)  # (paused: the rate limit waits)
    return busy and bool(alive) and now - max(alive.values()) > quiet


def live_rtt(engine: Engine) -> float | None:
    """Median of the kernel's RTT estimates over the connections that are receiving."""
    rtts = [r for lane in engine.lanes() if lane.conn is not None and lane.conn.in_flight
            for r in (lane.conn.tcp_rtt(),) if r is not None]
    return median(rtts) if rtts else None


def check_connections(engine: Engine, now: float) -> None:
    """Drop busy connections that stalled, whose response head is too slow, or below the floor."""
    opts = engine.options
    stall, head, floor, window = opts.stall_timeout, opts.header_timeout, opts.speed_limit, opts.speed_time
    silent: dict = {}   # origin → its connections silent mid-body while the origin says nothing
    for lane in engine.lanes():
        conn = lane.conn
        if conn is None:
            continue
        if not conn.in_flight or conn.paused:
            # (a connection the rate limit paused is not silent: its clocks restart on resume)
            conn.floor_mark = None
            continue
        if now - conn.last_activity > stall:
            conn.close(StallError(f"{conn.origin}: no data for {stall:g} s"))
            continue
        if (now - conn.last_activity > opts.outage_probe and conn.current is not None
                and conn.head_started is None
                and now - engine.origin_alive.get(conn.origin, now) > opts.outage_probe):
            silent.setdefault(conn.origin, []).append(conn)
        elif conn.head_started is not None and now - conn.head_started > head:
            conn.close(HeadTimeout(f"{conn.origin}: response headers took longer than {head:g} s "
                                   f"(--header-timeout)"))
        elif floor:
            mark = conn.floor_mark
            if mark is None:
                conn.floor_mark = (now, conn.bytes_in)
            elif now - mark[0] >= window:
                rate = (conn.bytes_in - mark[1]) / (now - mark[0])
                if rate < floor:
                    conn.close(TooSlow(f"{conn.origin}: {rate:.0f} B/s for {now - mark[0]:.0f} s, below the "
                                       f"speed limit of {floor} B/s (--speed-limit, --speed-time)"))
                else:
                    conn.floor_mark = (now, conn.bytes_in)
    for origin, conns in silent.items():
        engine.outage.probe(origin, conns)
