"""Nodes that share a bottleneck: each node's connections capped from the aggregate rate.

Every node of a cluster transfer runs the online search on its own goodput, within its share
of the per-origin cap (``shard.cap_share``). Where the nodes' paths meet at one bottleneck (the
server's link, or the site's uplink), each node judges a step by what it alone gets, and that
misleads it both ways. A node that sheds connections loses rate to the others, which take up
what it freed: its shed looks like a loss, and it goes back up, though the aggregate lost
nothing. A node that adds connections gains by taking rate from the others. Measured on three
nodes behind one 300 Mbit/s link (``scenarios/cluster3-shared.toml``, 2.8 GB): the nodes held
36–45 connections where one node alone held 21, every shed undone within seconds.

``Conductor`` judges the nodes' connections by the aggregate instead. From what every node
reports (bytes, connections with requests in flight and the kernel's RTT, about once a second),
per window of ``window`` seconds it has C, the busy connections on all nodes, A, the aggregate
rate, and the RTT. It caps the nodes (the total shared out in proportion to their rates, and
again whenever the nodes at work change; each node's search going on below its cap) on two
signs of connections that add nothing:

* **a queue** — the RTT stands ``queue`` above the path's own (the least any node has seen) for
  ``confirm`` windows: more is in flight than the bottleneck carries. The total is cut to
  ``shrink`` × C and the aggregate judged after ``settle`` seconds: kept when it fell by at most
  ``probe_loss``, and cut again while the queue stays; otherwise the last total that held comes
  back and the probing stops on this path;
* **an excess** — C more than ``excess`` × the fewest connections that gave ``near`` × the best
  aggregate seen on this path, for ``confirm`` windows: the total is cut to ``margin`` × that
  fewest count.

Caps that cost the aggregate more than ``undo_loss`` for ``confirm`` windows are lifted and none
are tried until the path changes. An aggregate ``change`` away from the reference for
``confirm`` windows is a new path: the caps are lifted and what was learnt is forgotten. Caps
never rise above a node's share of the per-origin cap, so together the nodes never hold more
than ``--max-connections-per-host`` to one origin; nodes whose own links are the limit and keep
no queue gain aggregate with every connection, and nothing is capped.

Pure: no clock, no Dask; the parent (``run.Session``) feeds the reports and sends the caps.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field


@dataclass(slots=True)
class ConductConstants:
    window: float = 2.0      # s of reports per measurement (nodes report about once a second)
    settle: float = 3.0      # s after the caps change before a window counts (the nodes shed, drain)
    queue: float = 0.3       # the RTT this far above the path's own: a queue at the bottleneck
    shrink: float = 0.7      # a probe down cuts the connections to this fraction
    probe_loss: float = 0.05  # a probe down is kept when the aggregate fell by at most this
    near: float = 0.95       # a count whose aggregate reached this fraction of the best "reached" it
    excess: float = 1.5      # more than this × the fewest that reached it …
    confirm: int = 2         # … (or a queue) for this many windows in a row: connections that add nothing
    margin: float = 1.25     # excess: the caps keep this many more than that fewest count
    undo_loss: float = 0.10  # caps that cost more than this of the aggregate are lifted again
    change: float = 0.25     # the aggregate this far from the reference for `confirm` windows: a new path
    min_samples: int = 3     # windows on a path before any cap


@dataclass(slots=True)
class Caps:
    """A move of the conductor: every node's cap (its share when lifted) and why."""

    caps: dict[str, int]
    reason: str
    event: dict = field(default_factory=dict)


@dataclass(slots=True)
class _Node:
    seen: dict[int, tuple[float, int]] = field(default_factory=dict)   # shard → (node's t, bytes)
    moved: float = 0.0          # bytes in the window (from consecutive reports of one shard)
    seconds: float = 0.0        # node seconds they span
    connections: list[int] = field(default_factory=list)
    rtts: list[float] = field(default_factory=list)   # s, the kernel's RTT of its connections
    last: float = -math.inf     # parent time of the latest report


class Conductor:
    """Per-node connection caps from the aggregate rate (pure; see the module docstring).

    nodes   the workers' addresses
    share   each node's share of the per-origin cap: the most a node may ever be given
    """

    def __init__(self, nodes: list[str], share: int, constants: ConductConstants | None = None) -> None:
        self.k = constants or ConductConstants()
        self.share = max(1, share)
        self.nodes: dict[str, _Node] = {n: _Node() for n in nodes}
        self.samples: list[tuple[int, float]] = []   # (connections, aggregate bytes/s) on this path
        self.caps: dict[str, int] | None = None      # in force, or None (every node at its share)
        self.phase = "watch"                         # watch | probe (a cut being judged) | hold
        self.before: float | None = None             # the aggregate before the caps
        self.good: dict[str, int] | None = None      # the last caps that held the aggregate
        self.ref: float | None = None
        self.base_rtt = math.inf                     # s, the least RTT any node reported
        self.armed = True
        self.least: int | None = None                # the fewest the nodes could go to (their floors)
        self.total = 0                               # connections in all under the caps in force
        self._among: set[str] = set()                # the nodes at work the total is shared among
        self._start: float | None = None
        self._settle_until = -math.inf
        self._excess = self._queued = self._off = self._loss = self._stuck = 0

    def report(self, now: float, node: str, shard: int, t: float, nbytes: int, connections: int,
               rtt: float | None = None, base_rtt: float | None = None) -> None:
        """A node's progress: its shard's own elapsed ``t``, bytes so far, open connections, the
        kernel's RTT of them (``rtt``, s) and the RTT measured when they opened (``base_rtt``)."""
        state = self.nodes.setdefault(node, _Node())
        prev = state.seen.get(shard)
        state.seen[shard] = (t, nbytes)
        state.last = now
        state.connections.append(max(0, int(connections)))
        for value in (rtt, base_rtt):
            if value is not None and value > 0:
                self.base_rtt = min(self.base_rtt, value)
        if rtt is not None and rtt > 0:
            state.rtts.append(rtt)
        if prev is not None and t > prev[0] and nbytes >= prev[1]:
            state.moved += nbytes - prev[1]
            state.seconds += t - prev[0]

    def tick(self, now: float) -> Caps | None:
        """Close a window when one is due; ``Caps`` when the caps change."""
        if self._start is None:
            self._start = now
            return None
        if now - self._start < self.k.window:
            return None
        self._start = now
        active = {n: s for n, s in self.nodes.items() if s.seconds > 0 and now - s.last <= self.k.window}
        rates = {n: s.moved / s.seconds for n, s in active.items()}
        conns = sum(round(sum(s.connections) / len(s.connections)) for s in active.values() if s.connections)
        rtts = [statistics.median(s.rtts) for s in active.values() if s.rtts]
        for s in self.nodes.values():
            s.moved, s.seconds, s.connections, s.rtts = 0.0, 0.0, [], []
        if self.caps is not None:
            moved = self._reshare(rates)
            if moved is not None:
                return moved
        if len(active) < 2 or now < self._settle_until:
            return None   # (one node alone has no one to fight; a window in a settle does not count)
        return self._judge(sum(rates.values()), conns, rates, statistics.median(rtts) if rtts else None)

    def _reshare(self, rates: dict[str, float]) -> Caps | None:
        """The total in force shared out again when the nodes at work are others than those it was
        shared among (a node done with its shards leaves its part to those still at work: capped
        at its old part, the last node's tail ran 8 s instead of 4). A lone node is not capped."""
        assert self.caps is not None
        working = set(rates)
        if working == self._among:
            return None
        self._among = working
        if len(working) < 2:
            return self._lift(f"cluster: {len(working)} node at work", disarm=False, keep=True)
        caps = split_caps(self.total, rates, self.share)
        for node in self.nodes:
            caps.setdefault(node, self.share)
        if caps == self.caps:
            return None
        self.caps = caps
        if self.good is not None:
            self.good = dict(caps)
        return Caps(dict(caps), f"cluster: {self.total} in all shared again over {len(working)} nodes at work",
                    {"rule": "reshare", "total": self.total})

    # ---- the judgement -----------------------------------------------------------------------
    def _judge(self, agg: float, conns: int, rates: dict[str, float], rtt: float | None) -> Caps | None:
        k = self.k
        if agg <= 0 or conns <= 0:
            return None
        if self.ref is not None and abs(agg / self.ref - 1) > k.change and self.phase != "probe":
            self._off += 1
            if self._off >= k.confirm:
                return self._new_path(agg, conns)
        else:
            self._off = 0
        self.samples.append((conns, agg))
        if self.phase == "probe":
            return self._judge_probe(agg, conns, rates, rtt)
        self.ref = agg if self.ref is None else 0.8 * self.ref + 0.2 * agg
        if self.phase == "hold":
            if self.before is not None and agg < (1 - k.undo_loss) * self.before:
                self._loss += 1
                if self._loss >= k.confirm:
                    return self._lift(f"caps cost the aggregate: {_mbps(agg)} with {conns} connections, "
                                      f"{_mbps(self.before)} before", disarm=True)
            else:
                self._loss = 0
            if not (self.armed and self._queue(rtt)):
                return None
        if not self.armed or len(self.samples) < k.min_samples:
            return None
        if self._queue(rtt):
            self._excess = 0
            self._queued += 1
            if self._queued >= k.confirm:
                self._queued = 0
                return self._probe(agg, conns, rates, rtt)
            return None
        self._queued = 0
        top = sorted(a for _, a in self.samples)
        best = top[-min(3, len(top))]      # (the third best: one window can read high)
        fewest = min(c for c, a in self.samples if a >= k.near * best)
        if conns <= k.excess * fewest:
            self._excess = 0
            return None
        self._excess += 1
        if self._excess < k.confirm:
            return None
        self._excess = 0
        total = max(len(rates), math.ceil(k.margin * fewest))
        return self._set(split_caps(total, rates, self.share), "hold", agg,
                         f"cluster: {conns} connections on {len(rates)} nodes give {_mbps(agg)}; {fewest} "
                         f"gave {_mbps(best)}: capped at {total} in all",
                         {"rule": "excess", "connections": conns, "aggregate_mbps": _mb(agg), "fewest": fewest,
                          "best_mbps": _mb(best), "total": total})

    def _queue(self, rtt: float | None) -> bool:
        return rtt is not None and math.isfinite(self.base_rtt) and rtt > (1 + self.k.queue) * self.base_rtt

    def _probe(self, agg: float, conns: int, rates: dict[str, float], rtt: float | None) -> Caps | None:
        total = max(len(rates), math.floor(self.k.shrink * conns))
        if total >= conns or (self.least is not None and conns <= self.k.margin * self.least):
            self.phase = "hold" if self.caps is not None else "watch"
            return None
        if self.phase != "probe":
            self.before = agg
            self.good = self.caps
        return self._set(split_caps(total, rates, self.share), "probe", self.before or agg,
                         f"cluster: {conns} connections on {len(rates)} nodes give {_mbps(agg)} with the RTT at "
                         f"{_ms(rtt)} over {_ms(self.base_rtt)} (a queue at the bottleneck): try {total} in all",
                         {"rule": "queue", "connections": conns, "aggregate_mbps": _mb(agg),
                          "rtt_ms": _ms_n(rtt), "base_rtt_ms": _ms_n(self.base_rtt), "total": total})

    def _judge_probe(self, agg: float, conns: int, rates: dict[str, float], rtt: float | None) -> Caps | None:
        k = self.k
        before = self.before or agg
        if self.caps is not None and conns > (1 + k.queue) * sum(self.caps.values()):
            # above the caps: lanes retiring drain what they hold first (a few MiB each, seconds
            # on a shared link). Still there after `confirm` windows: the nodes cannot come down
            # (a node's partitions each keep a lane). The caps stay (they bound the nodes'
            # climbs), and no probe goes below this count again on this path
            self._stuck += 1
            if self._stuck < k.confirm:
                return None
            self._stuck = 0
            self.least, self.phase, self.ref = conns, "hold", agg
            self.good = self.caps
            return None
        self._stuck = 0
        if agg >= (1 - k.probe_loss) * before:
            self.good = self.caps
            if self._queue(rtt):
                return self._probe(agg, conns, rates, rtt)
            self.phase, self.ref = "hold", agg
            return None
        self.armed = False   # (the probing stops on this path)
        why = (f"cluster: {conns} connections gave {_mbps(agg)}, less than {1 - k.probe_loss:.2f}× "
               f"{_mbps(before)}")
        if self.good is None:
            return self._lift(why, disarm=True)
        self.phase, self.ref = "hold", before
        self.caps = dict(self.good)
        self.total = sum(v for n, v in self.good.items() if n in self._among) or self.total
        self._settle_until = (self._start or 0.0) + k.settle
        return Caps(dict(self.good), why + f": back to {sum(self.good.values())} in all",
                    {"rule": "queue", "back": True, "total": sum(self.good.values())})

    def _set(self, caps: dict[str, int], phase: str, before: float, why: str, event: dict) -> Caps:
        self.total, self._among = sum(caps.values()), set(caps)
        for node in self.nodes:
            caps.setdefault(node, self.share)   # (a node not transferring now keeps its share)
        self.caps, self.phase, self.before, self._loss = caps, phase, before, 0
        self._settle_until = (self._start or 0.0) + self.k.settle
        return Caps(dict(caps), why, event)

    def _lift(self, why: str, *, disarm: bool, keep: bool = False) -> Caps:
        self.caps, self.good, self.before, self._loss, self.phase = None, None, None, 0, "watch"
        self.armed = self.armed if keep else not disarm
        self._settle_until = (self._start or 0.0) + self.k.settle
        return Caps({n: self.share for n in self.nodes}, why + ": caps lifted", {"lifted": True})

    def _new_path(self, agg: float, conns: int) -> Caps | None:
        why = f"cluster: the aggregate moved to {_mbps(agg)} from {_mbps(self.ref or 0.0)} (a new path)"
        self.samples, self.ref, self._off, self._excess, self._queued = [(conns, agg)], agg, 0, 0, 0
        self.armed, self.least = True, None
        if self.caps is None:
            return None
        return self._lift(why, disarm=False)


def split_caps(total: int, rates: dict[str, float], share: int) -> dict[str, int]:
    """``total`` connections shared out over the nodes in proportion to their rates, at least one
    and at most ``share`` each (largest remainders first, one pass). Pure."""
    if not rates:
        return {}
    whole = sum(rates.values())
    want = {n: (total * r / whole if whole > 0 else total / len(rates)) for n, r in rates.items()}
    caps = {n: max(1, min(share, math.floor(w))) for n, w in want.items()}
    left = total - sum(caps.values())
    for n in sorted(want, key=lambda n: want[n] - math.floor(want[n]), reverse=True):
        if left <= 0:
            break
        if caps[n] < share:
            caps[n] += 1
            left -= 1
    return caps


def _mbps(rate: float) -> str:
    return f"{rate * 8 / 1e6:.0f} Mbit/s"


def _mb(rate: float) -> float:
    return round(rate * 8 / 1e6, 1)


def _ms(seconds: float | None) -> str:
    return "?" if seconds is None or not math.isfinite(seconds) else f"{seconds * 1000:.0f} ms"


def _ms_n(seconds: float | None) -> float | None:
    return None if seconds is None or not math.isfinite(seconds) else round(seconds * 1000, 1)
