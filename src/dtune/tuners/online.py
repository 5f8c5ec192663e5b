"""The closed loop: how many connections the path needs now, searched while the transfer runs.

Theory of operation
-------------------
A paper tuner (ProMC, the decision tree, …) chooses θ once from facts
measured before the transfer and splits it between partitions; when the
path changes, θ stays. ``OnlineTuner`` (``tuners.online_tuner``) wraps any tuner: the tuner keeps
deciding *how to split* connections between partitions (its ``Params`` per
partition are the shape), and ``OnlineSearch`` decides *how many*
connections in all, N, from the goodput the transfer itself measures.

A step of the search is judged over one measurement window after a settle
time: ``settle_rtts`` round trips after a change (new connections are in
slow start), then ``measure_rtts`` round trips of bytes written (at least
``min_window`` s, so that a window holds enough ticks on a fast path, at most
``max_window``). The RTT is the kernel's estimate on the connections in use
(``Snapshot.rtt_live``). The search runs through four phases:

* **start** — measure the starting count (the tuner's θ; ``OnlineTuner``
  starts lower when θ is far above the windows the path's BDP needs, and
  higher when a given bandwidth needs more). If its connections are
  window-limited (each carries at least ``window_limited`` × window / RTT),
  more connections can help: probe **up**; else shed at once to what the
  windows need (after ``slow_start_rtts`` round trips; before, or when that
  is no more than one step, probe **down**).
* **up** — multiply N by ``grow``. A step is kept only if goodput rises by at
  least ``gain`` and the utility U = goodput / K^s does not fall (s: the
  connections beyond those whose full windows carry the goodput, ``utility``;
  a spare one only takes a share from other flows at the bottleneck, and must
  buy ``cost`` − 1 = 2 % more; docs/algorithms.md), and the next step is tried
  (a real gain that lowers U sheds to the windows' count); otherwise N goes back to the best, and the search probes down
  — unless ``shrink`` × N connections could not carry the best rate even with
  every window full (each carries more than ``shrink`` × window / RTT): then it
  holds, since a probe down could only lose rate. Re-probes from hold skip
  the down direction for the same reason.
* **down** — multiply N by ``shrink``. A step is kept if goodput falls by at
  most ``shed_loss``, or if U does not fall (on a shared bottleneck the run
  with more spare connections sheds them first, so runs converge): the rate is reached with fewer connections, and the
  next step down is tried unless ``shrink`` × N windows could not carry the
  rate. Otherwise N goes back and the search **holds**.
* **hold** — keep N and watch: a goodput ``change`` (±25 %) away from the
  reference for ``confirm`` windows in a row means the path changed. A drop
  on window-limited connections (the RTT grew) jumps straight to the count
  that restores the former rate, then probes up from there; a drop on
  connections that are not window-limited (less bandwidth) probes down; a
  rise probes up. Far more connections than the windows need (each carries
  less than ``slack`` × window / RTT for ``confirm`` windows: the RTT or the
  bandwidth fell while the goodput held) are **shed** at once to what the
  windows need, with a margin; a shed that costs goodput is undone, and
  no other is tried until the path changes (something else limits these
  connections); under a queue (a shared bottleneck) the shed is one
  ``shrink``, judged by U. Full windows with no queue for ``room`` windows:
  the path has room (the search shed for a stall that has passed): probe up
  at once. After ``reprobe`` quiet windows it tries one
  probe, up and down in turn; each probe that fails doubles the wait, so a
  stable path is not disturbed for long.

N never exceeds ``cap`` connections to one origin (``--max-connections-per-host``,
64 by default), and the search stops probing when less than ``tail_seconds``
of work is left at the current rate. Values the user fixed are never
changed: with cc and p both fixed there is nothing to search. Falcon
(Arifuzzaman et al.) searches concurrency with a utility that penalises each
connection and converges in about 20 s; FTS3's optimizer moves one or two
transfers a minute. Judging steps in round trips rather than seconds, and
growing multiplicatively, this search converges in a few seconds.

Pure: no clock or socket; every observation comes in with the snapshot.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from dtune.tuners.online_constants import OnlineConstants


@dataclass(slots=True)
class Step:
    """One move of the search: the new total ``n`` and why (with the measurement behind it)."""

    n: int
    reason: str
    event: dict = field(default_factory=dict)
    drain: bool = False   # the connections it sheds may finish what they hold (see ``OnlineSearch._back``)


class OnlineSearch:
    """The number of connections, searched from measured goodput (pure; see the module docstring)."""

    def __init__(self, start: int, *, cap: int, window: float, constants: OnlineConstants | None = None,
                 floor: int = 1, floor_rate: float = 0.0, realize: Callable[[int], int] | None = None) -> None:
        self.k = constants or OnlineConstants()
        # the count the connections can actually take for a wanted n (``OnlineTuner``: what the
        # partitions' shape gives; a partition keeps at least one lane per file in flight)
        self.realize = realize
        self.floor_rate = floor_rate             # bytes/s a step down must keep (--min-throughput)
        self.cap = max(1, cap)
        self.floor = max(1, min(floor, self.cap))
        self.limited = False                     # a cluster's cap is in force (``limit``)
        self.window = window                     # bytes one connection keeps in flight
        self.n = self._clamp(start)
        self.phase = "start"
        self.best: tuple[int, float] | None = None   # (connections, goodput) to beat
        self.ref: float | None = None            # hold: the goodput the path gives
        self.steps = 0
        self._changed_at: float | None = None
        self._mark: tuple[float, int] | None = None
        self._off = 0
        self._quiet = 0
        self._reprobe = self.k.reprobe
        self._probing = False      # a single re-probe from hold: on failure, straight back
        self._last_probe_up = False
        self._moved_from: int | None = None   # the count before the last move
        self._converged_at: float | None = None
        self._rtts: list[float] = []          # RTT samples of the window being measured
        self._slack = 0                       # hold: windows in a row with far too many connections
        self._shed_armed = True               # False: a shed failed on this path, none until it changes
        self._shedding = False
        self._room = 0                        # hold: windows in a row with room on the path
        self._room_armed = True               # False: a probe for room gained nothing, none until the path changes
        self._room_probe = False
        self.base_rtt: float | None = None    # the lowest window RTT seen on this path
        self._began: float | None = None      # the first observation
        self._least_rtt = math.inf            # the lowest RTT of any tick (before a queue built up)

    def __repr__(self) -> str:
        return f"<OnlineSearch n={self.n} {self.phase} best={self.best} ref={self.ref}>"

    def _clamp(self, n: float) -> int:
        n = max(self.floor, min(self.cap, int(n)))
        if self.realize is None:
            return n
        got = self.realize(n)
        while self.limited and got > self.cap and n > 1:
            # under a cluster's cap (``limit``) the shape's rounding must not take it over: the
            # engine's gate holds only the per-origin cap (which rounding may pass by a few: the
            # gate holds the extra lanes back)
            n -= 1
            got = self.realize(n)
        return got

    def cannot_shrink(self, n: int, goodput: float) -> bool:
        """Would a probe down from n (to ``shrink`` × n, as many as the partitions then open) lose
        more of ``goodput`` than a shed may (``shed_loss``) even with every window full? Then it
        can only lose rate (window-limited connections on a full link: 14 × 69 Mbit/s at 1 Gbit/s
        · 40 ms; 9 of them carried 605 Mbit/s, measured)."""
        if self.base_rtt is None or n < 1:
            return False
        # (the path's own RTT: fewer connections drain the queue that the windows' RTT includes;
        # judged by the windows' RTT, a mixed tree held 27 connections where 15 carry it)
        rtt = min(self.base_rtt, self._least_rtt)
        fewer = self._clamp(math.floor(n * self.k.shrink))   # (what the step would open: the shape's)
        return goodput * (1 - self.k.shed_loss) > fewer * self.window / rtt

    def windows(self, rtt: float) -> tuple[float, float]:
        """(settle, measure) seconds for a path of this RTT."""
        k = self.k
        return (max(k.min_settle, k.settle_rtts * rtt),
                min(k.max_window, max(k.min_window, k.measure_rtts * rtt)))

    @staticmethod
    def _not_need(need: float, bg: float, bn: int) -> str:
        if math.isinf(need):
            return f"a lower utility than {_mbps(bg)} with {bn}"
        return f"not {need:.2f}× {_mbps(bg)} with {bn}"

    def _queue_note(self, rtt: float) -> str:
        if not self.queued(rtt):
            return ""
        return f" (RTT {rtt * 1000:.0f} ms over {self.base_rtt * 1000:.0f}: a queue builds)"

    def _matches(self, connections: int) -> bool:
        """Have the open connections followed the last move (fewer: drained; more: opened)?"""
        if self._moved_from is None or self._moved_from == self.n:
            return True
        if self.n < self._moved_from:
            return connections <= self.n
        return connections >= 0.9 * self.n

    def window_limited(self, goodput: float, rtt: float) -> bool:
        """Does each connection carry about what its window allows over this RTT?"""
        per = goodput / max(1, self.n)
        return per >= self.k.window_limited * self.window / max(rtt, 1e-4)

    def observe(self, now: float, nbytes: int, rtt: float | None, *, connections: int | None = None,
                seconds_left: float | None = None, bytes_left: int | None = None,
                stalled: bool = False) -> Step | None:
        """Feed the bytes written so far at ``now`` (and the connections open); a ``Step`` when the
        search moves. A window starts only once the open connections match the count it judges.
        ``seconds_left`` (at the smoothed rate) or ``bytes_left`` (at the window's goodput) under
        ``tail_seconds``: no more probes. ``stalled``: nothing arrives from anywhere (an outage): the window being measured is
        dropped, and measuring starts afresh once bytes flow and the connections have settled."""
        if stalled:
            self._mark, self._rtts, self._changed_at, self._converged_at, self._off = None, [], None, None, 0
            return None
        rtt = rtt or self.k.default_rtt
        if self._began is None:
            self._began = now
        self._least_rtt = min(self._least_rtt, rtt)
        if self._changed_at is None:
            self._changed_at = now
        settle, measure = self.windows(rtt)
        if self._shedding:  # the connections kept grow their windows in congestion avoidance
            settle = max(settle, self.k.converge_rtts * rtt)
        if self._mark is None:
            if self._converged_at is None:
                late = now - self._changed_at >= max(1.0, self.k.converge_rtts * rtt)
                if connections is None or late or self._matches(connections):
                    self._converged_at = now
                return None
            if now - self._converged_at >= settle:
                self._mark = (now, nbytes)
            return None
        t0, b0 = self._mark
        self._rtts.append(rtt)
        if now - t0 < measure:
            return None
        goodput = (nbytes - b0) / (now - t0)
        samples = sorted(self._rtts)
        rtt = samples[len(samples) // 2]
        self._mark, self._rtts = (now, nbytes), []
        self.base_rtt = rtt if self.base_rtt is None else min(self.base_rtt, rtt)
        # the tail: less work left than ``tail_seconds`` at the smoothed rate, or at this window's
        # goodput (the smoothed rate has no value before the transfer's first second)
        tail = ((seconds_left is not None and seconds_left < self.k.tail_seconds)
                or (bytes_left is not None and bytes_left < self.k.tail_seconds * goodput))
        return self._decide(now, goodput, rtt, tail)

    def utility(self, n: int, goodput: float) -> float:
        """U(n) = goodput / K^s, K = ``cost``, s = the connections beyond those whose full windows
        would carry this goodput over the path's own RTT (docs/algorithms.md): what the search
        maximises. A connection whose window is full costs nothing; one the bottleneck holds back
        (it only takes a share from the other flows there) costs a factor K."""
        spare = max(0.0, n - goodput * self._path_rtt() / self.window)
        return goodput / self.k.cost ** spare

    def _path_rtt(self) -> float:
        """The path's own RTT (before any queue): the lowest seen."""
        return min(self.base_rtt or self.k.default_rtt, self._least_rtt)

    def better(self, n: int, goodput: float) -> bool:
        """Is U(n, goodput) at least U of the best count measured?"""
        bn, bg = self.best
        return self.utility(n, goodput) >= self.utility(bn, bg)

    def queued(self, rtt: float) -> bool:
        """Is this window's RTT well above the path's own (a queue at the bottleneck)?"""
        return self.base_rtt is not None and rtt > self.base_rtt * (1 + self.k.queue)

    def limit(self, now: float, cap: int, why: str, *, strict: bool = True) -> Step | None:
        """A new most connections (a cluster's parent caps each node, ``cluster.conduct``): above
        it, straight down to it (``strict``: no rounding of the partitions' shape takes it over),
        held there and measured afresh; a cap raised lets the search climb again from where it
        is."""
        old, self.cap = self.cap, max(1, cap)
        self.floor = min(self.floor, self.cap)
        self.limited = strict
        if self.n <= self.cap and self.cap > old and self.n >= old and self.ref:
            # held at the old cap, now raised (the other nodes are done): climb at once, not at
            # the next re-probe (the last node at work ran on 1 connection for 4 s)
            self.best, self._probing = (self.n, self.ref), False
            return self._up(now, self.ref, self.base_rtt or self.k.default_rtt, why)
        if self.n <= self.cap or self._clamp(self.cap) >= self.n:
            return None   # (under it already, or as few as the partitions can hold)
        g = self.ref or 0.0
        self._shedding, self._probing = False, False
        self.best, self.ref = None, None
        step = self._move(now, self.cap, g, self.base_rtt or self.k.default_rtt, why, phase="hold")
        if step is not None:
            step.drain = True   # (the lanes shed finish what they hold: nothing is judged on them)
        return step

    # ---- the phases ----------------------------------------------------------------------
    def _decide(self, now: float, g: float, rtt: float, tail: bool) -> Step | None:
        k = self.k
        if g <= 0:  # nothing arrived (every connection waits: a stall, a retry's backoff): no
            return None  # count of connections is judged on that; the engine's timeouts act
        if self.phase == "start":
            self.best = (self.n, g)
            self.ref = g
            if tail:
                self.phase = "hold"
                return None
            if self.window_limited(g, rtt):
                return self._up(now, g, rtt, f"{self.n} connections carry {_mbps(g)}, window-limited")
            return self._to_windows(now, g, rtt, f"{self.n} connections carry {_mbps(g)}, not window-limited")
        if self.phase == "up":
            bn, bg = self.best
            # a step up is kept for a real gain; one that also fills the bottleneck's queue must
            # gain twice as much (a few per cent of noise must not buy a queue)
            # (and the utility must not fall: U(n) ≥ U(best), docs/algorithms.md)
            need = 1 + (k.queue_gain * k.gain if self.queued(rtt) else k.gain)
            better = self.better(self.n, g)
            if not better and g >= bg * (1 + k.gain):
                # a real gain, but more connections than the windows need for it (a doubling
                # overshoots: 64 where 41 fill 1 Gbit/s at 120 ms): shed to the windows' count
                want = math.ceil(k.slack_margin * g * self._path_rtt() / self.window)
                if bn < want < self.n and not tail:
                    self.best = (self.n, g)
                    return self._move(now, want, g, rtt, f"{self.n} connections gave {_mbps(g)} (was "
                                      f"{_mbps(bg)} with {bn}), {want} windows carry it: shed", phase="down")
                need = math.inf
            elif bg * (1 + k.gain) <= g < bg * need:
                # a real gain that filled the queue too: the link is full — keep it, climb no further
                self.best = (self.n, g)
                return self._hold(g)
            if self._probing and g < bg * need:
                return self._back(now, g, rtt, f"re-probe: {self.n} connections gave {_mbps(g)}, "
                                               f"{self._not_need(need, bg, bn)}{self._queue_note(rtt)}")
            if g >= bg * need:
                self.best = (self.n, g)
                if self.n < self.cap and not tail:
                    return self._up(now, g, rtt, f"{self.n} connections gave {_mbps(g)} (was {_mbps(bg)} "
                                                 f"with {bn})")
                return self._hold(g)
            why = (f"{self.n} connections gave {_mbps(g)}, {self._not_need(need, bg, bn)}"
                   + self._queue_note(rtt))
            if tail or bn <= self.floor:
                return self._back(now, g, rtt, why)
            if self.cannot_shrink(bn, bg):
                return self._back(now, g, rtt, why + f"; {math.floor(bn * k.shrink)} could not carry "
                                                     f"{_mbps(bg)} through their windows")
            self.phase = "down"
            return self._move(now, math.floor(bn * k.shrink), g, rtt, f"{why}: try fewer than {bn}")
        if self.phase == "down":
            bn, bg = self.best
            loss = k.slack_loss if self._shedding else k.shed_loss
            # kept if the loss is within the shed's allowance, or if the utility did not fall:
            # U(n) ≥ U(best) (on a shared bottleneck the connections shed took only a share)
            if g >= self.floor_rate and (g >= bg * (1 - loss) or self.better(self.n, g)):
                self.best = (self.n, g)
                if self._shedding:  # the shed held the rate: the windows were the measure
                    self._shedding = False
                if self.n > self.floor and not tail and not self.cannot_shrink(self.n, g):
                    return self._down(now, g, rtt, f"{self.n} connections still give {_mbps(g)} "
                                                   f"(had {_mbps(bg)} with {bn})")
                # (fewer could not carry this rate through their windows: a probe there only
                # loses it, 2 × 73 Mbit/s where 3 carried 198, measured on a 200 Mbit/s node)
                return self._hold(g)
            return self._back(now, g, rtt, f"{self.n} connections gave {_mbps(g)}, less than "
                                           f"{1 - loss:.2f}× {_mbps(bg)} with {bn} and a lower utility")
        return self._in_hold(now, g, rtt, tail)

    def _in_hold(self, now: float, g: float, rtt: float, tail: bool) -> Step | None:
        k = self.k
        if self.ref is None:
            self.ref = g
            return None
        ratio = g / self.ref if self.ref > 0 else 1.0
        if tail:
            return None
        if abs(ratio - 1) > k.change:
            self._off += 1
            if self._off < k.confirm:
                return None
            self._off = 0
            self._quiet = 0
            self._reprobe = k.reprobe
            ref, self.best = self.ref, (self.n, g)
            self.ref = g
            self.base_rtt = self._least_rtt = rtt   # a new path: its own RTT from now on …
            self._shed_armed = True   # … and sheds judged afresh
            self._room_armed = True
            if ratio < 1 and self.window_limited(g, rtt):
                # the RTT grew: as many more connections as restore the former rate
                return self._move(now, math.ceil(self.n * ref / max(g, 1.0)), g, rtt,
                                  f"path changed: {_mbps(g)} instead of {_mbps(ref)} on window-limited "
                                  f"connections (RTT {rtt * 1000:.0f} ms)", phase="up")
            if ratio < 1:
                return self._down(now, g, rtt, f"path changed: {_mbps(g)} instead of {_mbps(ref)}, "
                                               "connections not window-limited")
            return self._up(now, g, rtt, f"path changed: {_mbps(g)} instead of {_mbps(ref)}")
        self._off = 0
        self.ref = 0.8 * self.ref + 0.2 * g
        self._quiet += 1
        if self.n > self.floor and g / max(1, self.n) < k.slack * self.window / max(rtt, 1e-4):
            self._slack += 1
        else:
            self._slack = 0
        if self._shed_armed and self._slack >= k.confirm:
            self._slack = 0
            self._quiet = 0
            self.best = (self.n, self.ref)
            self._shedding = True
            per_window = self.window / max(rtt, 1e-4)
            want = math.ceil(k.slack_margin * g / per_window)
            why = (f"{self.n} connections carry {_mbps(g / self.n)} each, a window allows "
                   f"{_mbps(per_window)} over {rtt * 1000:.0f} ms: shed")
            if self.queued(rtt):
                # a queue holds them back: the bottleneck is shared, and these connections take a
                # share from the other flows there; one step down at a time, each judged by U
                want = math.floor(self.n * k.shrink)
                why += " (a queue builds: one step)"
            return self._move(now, min(want, math.floor(self.n * k.shrink)), g, rtt, why, phase="down")
        room = (self.n < self.cap and self.base_rtt is not None and not self.queued(rtt)
                and g / max(1, self.n) >= k.room_fill * self.window / max(rtt, 1e-4))
        self._room = self._room + 1 if room else 0
        if self._room_armed and self._room >= k.room:
            # every connection carries what its window allows and no queue builds: the path has
            # room the search is not using (it shed for a stall that has passed): climb now
            self._room = self._quiet = 0
            self.best = (self.n, self.ref)
            self._probing = self._room_probe = self._last_probe_up = True
            return self._up(now, g, rtt, f"{self.n} window-limited connections carry {_mbps(g)} with no "
                                         f"queue (RTT {rtt * 1000:.0f} ms): the path has room")
        if self._quiet < self._reprobe:
            return None
        self._quiet = 0
        # back to k.reprobe after a kept probe; under a queue (a bottleneck others may share, whose
        # share changes as they come and go) no longer wait than that
        self._reprobe = k.reprobe if self.queued(rtt) else min(k.reprobe_max, self._reprobe * 2)
        self.best = (self.n, self.ref)
        self._probing = True
        # one direction at a time, alternating: up also when the connections are not window-limited
        # (a server may limit each connection), a probe up that gains nothing costs one window
        up = (not self._last_probe_up or self.cannot_shrink(self.n, self.ref)) and self.n < self.cap
        self._last_probe_up = up
        why = f"re-probe after a quiet {_mbps(self.ref)}"
        return self._up(now, g, rtt, why) if up else self._down(now, g, rtt, why)

    # ---- moves ------------------------------------------------------------------------------
    def _up(self, now: float, g: float, rtt: float, why: str) -> Step | None:
        self.phase = "up"
        step = self._move(now, math.ceil(self.n * self.k.grow), g, rtt, why + ": probe more")
        return step if step is not None else self._hold(g)

    def _to_windows(self, now: float, g: float, rtt: float, why: str) -> Step | None:
        """Connections that are not window-limited: shed at once to what their windows need (with
        ``slack_margin``), judged as a shed; a probe down when that is no more than one ``shrink``.
        (The tuner's θ on a mixed tree is 64 connections where 16 carry the link: seven probes
        down took 6 s, the median connection count of the run was 29–44.)"""
        k = self.k
        want = math.ceil(k.slack_margin * g / (self.window / max(rtt, 1e-4)))
        if want >= math.floor(self.n * k.shrink) or now - self._began < k.slow_start_rtts * self._least_rtt:
            # (before `slow_start_rtts` round trips the connections may still be opening their
            # windows: at 520 ms, 64 connections read 158 Mbit/s 3.7 s in, a shed to 30 lost 1.2 s)
            return self._down(now, g, rtt, why)
        self._shedding = True
        step = self._move(now, want, g, rtt, why + f": {want} windows carry it, shed", phase="down")
        if step is None:
            self._shedding = False
            return self._hold(g)
        return step

    def _down(self, now: float, g: float, rtt: float, why: str) -> Step | None:
        self.phase = "down"
        step = self._move(now, math.floor(self.n * self.k.shrink), g, rtt, why + ": probe fewer")
        return step if step is not None else self._hold(g)

    def _back(self, now: float, g: float, rtt: float, why: str) -> Step | None:
        bn, bg = self.best
        if self._shedding:  # the windows are not what limits these connections: no more sheds
            self._shed_armed = False  # on this path (a change of path re-arms them)
            self._shedding = False
        if self._room_probe:  # more connections bought nothing: the room was not the path's
            self._room_armed = False  # (none until it changes)
        self._room_probe = False
        self.phase = "hold"
        self.ref = bg
        self._quiet = 0
        self._probing = False
        step = self._move(now, bn, g, rtt, why + f": back to {bn}", phase="hold")
        if step is not None:  # back to a count already measured: no window waits on the connections
            step.drain = True  # shed, so they finish their ranges rather than drop what is on its way
        return step

    def _hold(self, g: float) -> None:
        self._shedding = False
        self.phase = "hold"
        self.ref = self.best[1] if self.best else g
        if self.best and self.best[0] != self.n:
            self.best = (self.n, g)
        if not self._probing:
            self._reprobe = self.k.reprobe
        self._probing = self._room_probe = False
        self._quiet = 0
        return None

    def _move(self, now: float, n: float, g: float, rtt: float, why: str, *, phase: str | None = None) -> Step | None:
        new = self._clamp(max(n, 1))
        if phase is not None:
            self.phase = phase
        if new == self.n:
            return None
        old, self.n = self.n, new
        self._changed_at, self._mark, self._converged_at, self._moved_from = now, None, None, old
        self.steps += 1
        return Step(new, f"online: {why} → {new} connections",
                    {"phase": self.phase, "from": old, "to": new, "goodput_mbps": round(g * 8 / 1e6, 1),
                     "rtt_ms": round(rtt * 1000, 1)})


def _mbps(rate: float) -> str:
    return f"{rate * 8 / 1e6:.0f} Mbit/s"
