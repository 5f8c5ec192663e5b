"""Heuristic protocol tuning: size partitions, Algorithm 1, SC / MC / ProMC.

Pure code after the seed paper ``promc-heuristic-tuning`` (Arslan et al.)
and ``ALGORITHMS.md`` §1: sizes, bandwidth, RTT and buffer in; partitions,
parameters and channel moves out. Nothing here reads a clock or a socket;
the online rules are fed ``(now, bytes)`` observations.

Words: a **partition** (the paper's "chunk") is a group of files of one
size class; a **channel** here is one unit of cc (a file in flight with its
p streams and pp pipelined requests).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

# size classes, ordered by file size
SMALL, MEDIUM, LARGE, HUGE = "small", "medium", "large", "huge"
CLASS_ORDER = (SMALL, MEDIUM, LARGE, HUGE)


@dataclass(frozen=True, slots=True)
class HeuristicConstants:
    """Every constant of §1, named once; all overridable."""

    small_divisor: float = 20.0          # Small: size <= BW/20 (what the link moves in 50 ms)
    medium_divisor: float = 5.0          # Medium: size <= BW/5
    huge_factor: float = 2.0             # Huge: size > 2·BW
    merge_min_files: int = 2             # a partition with fewer files is merged
    merge_min_bdps: float = 5.0          # … or with less than 5·BDP bytes
    pp_max: int = 100                    # Algorithm 1: pp = min(fill, 100)
    cc_min: int = 2                      # Algorithm 1: lower limit of concurrency
    mc_order: tuple[str, ...] = (HUGE, SMALL, LARGE, MEDIUM)  # MC round-robin order
    delta: tuple[tuple[str, float], ...] = ((SMALL, 6.0), (MEDIUM, 3.0), (LARGE, 2.0), (HUGE, 1.0))
    period: float = 5.0                  # seconds between ETA checks (MC, ProMC)
    ewma_old: float = 0.6                # thr = 0.6·thr + 0.4·inst
    periods_to_move: int = 3             # the same (slow, fast) pair for 3 periods …
    move_ratio: float = 2.0              # … and slow' >= 2·fast' moves one channel
    # dtune's refinements of Algorithm 1 (set window_fraction=1, range_pipeline=1 for the paper's):
    window_fraction: float = 0.7         # a stream's window is ~0.7 × the receive buffer (Linux ≥ 6.6
                                         # advertises rmem × its scaling ratio, measured 0.69 here)
    range_pipeline: int = 2              # files split into ranges keep ≥ 2 requests per connection,
                                         # so no stream idles a round trip between two ranges

    def delta_of(self, name: str) -> float:
        return dict(self.delta)[name]


DEFAULTS = HeuristicConstants()


@dataclass(slots=True)
class PartitionPlan:
    """One partition: its class, its files (indices into the dataset) and sizes."""

    name: str
    indices: list[int] = field(default_factory=list)
    total: int = 0

    @property
    def count(self) -> int:
        return len(self.indices)

    @property
    def avg(self) -> float:
        return self.total / self.count if self.indices else 0.0


def size_class(size: int, bw: float, max_partitions: int, k: HeuristicConstants = DEFAULTS) -> str:
    """§1.1: the class of one file of ``size`` bytes on a link of ``bw`` bytes/s."""
    if max_partitions <= 1 or size <= bw / k.small_divisor:
        return SMALL
    if max_partitions > 3 and size > k.huge_factor * bw:
        return HUGE
    if max_partitions > 2 and size <= bw / k.medium_divisor:
        return MEDIUM
    return LARGE


def partition_files(sizes: Sequence[int], bw: float, bdp: float, max_partitions: int,
                    k: HeuristicConstants = DEFAULTS) -> list[PartitionPlan]:
    """Classify files, merge partitions too small to matter, order by average size.

    Merge rule: a partition with fewer than ``merge_min_files`` files or less
    than ``merge_min_bdps``·BDP bytes joins the partition whose average file
    size is nearest to its own (repeated until none is too small, or one is
    left). The merged partition keeps the name of the one it joined.
    """
    if not 1 <= max_partitions <= 4:
        raise ValueError("max_partitions must be 1..4")
    parts: dict[str, PartitionPlan] = {}
    for i, size in enumerate(sizes):
        name = size_class(size, bw, max_partitions, k)
        part = parts.setdefault(name, PartitionPlan(name))
        part.indices.append(i)
        part.total += size
    plans = sorted(parts.values(), key=lambda p: CLASS_ORDER.index(p.name))
    while len(plans) > 1:
        small = [p for p in plans if p.count < k.merge_min_files or p.total < k.merge_min_bdps * bdp]
        if not small:
            break
        victim = min(small, key=lambda p: p.total)  # merge the lightest first
        others = [p for p in plans if p is not victim]
        target = min(others, key=lambda p: abs(p.avg - victim.avg))
        target.indices.extend(victim.indices)
        target.total += victim.total
        plans = others
    for p in plans:
        p.indices.sort()
    return sorted(plans, key=lambda p: p.avg)


@dataclass(frozen=True, slots=True)
class Algorithm1:
    """findOptimalParameters for one partition (§1.2)."""

    cc: int
    p: int
    pp: int


def find_optimal_parameters(avg_size: float, count: int, bdp: float, buf: float, max_cc: int,
                            k: HeuristicConstants = DEFAULTS) -> Algorithm1:
    """Algorithm 1 of the paper::

        fill  = round(BDP / avgFileSize)
        pFill = ceil(BDP / (buf·window_fraction));  pBuf = ceil(avgFileSize / buf)
        cc = min(max(fill, 2), fileCount, maxCC)
        pp = min(fill, 100);      p = max(min(pFill, pBuf), 1)

    ``pp`` is at least 1 here (a request must be sent at all). The paper
    divides by ``buf``; dtune divides by the window a stream really gets
    (``window_fraction`` × buf, see ``HeuristicConstants``).
    """
    avg = max(avg_size, 1.0)
    fill = round(bdp / avg)
    p_fill = math.ceil(bdp / (buf * k.window_fraction))
    p_buf = math.ceil(avg / buf)
    cc = min(max(fill, k.cc_min), max(count, 1), max_cc)
    pp = max(1, min(fill, k.pp_max))
    p = max(min(p_fill, p_buf), 1)
    return Algorithm1(cc=max(cc, 1), p=p, pp=pp)


def mc_allocate(names: Sequence[str], counts: Sequence[int], total_cc: int,
                k: HeuristicConstants = DEFAULTS) -> dict[str, int]:
    """§1.4: round-robin over {Huge, Small, Large, Medium}; never more channels than files."""
    order = [n for n in k.mc_order if n in names]
    cap = dict(zip(names, counts, strict=True))
    alloc = {n: 0 for n in names}
    left = total_cc
    while left > 0:
        given = False
        for name in order:
            if left == 0:
                break
            if alloc[name] < cap[name]:
                alloc[name] += 1
                left -= 1
                given = True
        if not given:
            break
    return alloc


def promc_allocate(names: Sequence[str], totals: Sequence[int], counts: Sequence[int], total_cc: int,
                   k: HeuristicConstants = DEFAULTS) -> dict[str, int]:
    """§1.5: ``cc_i = floor(totalCC · w_i / Σw)`` with ``w_i = δ_i · totalBytes_i``.

    Leftover channels go first to partitions with none, then one at a time
    to the partition with the fewest; no partition gets more channels than files.
    """
    weights = {n: k.delta_of(n) * t for n, t in zip(names, totals, strict=True)}
    cap = dict(zip(names, counts, strict=True))
    wsum = sum(weights.values()) or 1.0
    alloc = {n: min(cap[n], math.floor(total_cc * weights[n] / wsum)) for n in names}
    left = total_cc - sum(alloc.values())
    while left > 0:
        open_ = [n for n in names if alloc[n] < cap[n]]
        if not open_:
            break
        empty = [n for n in open_ if alloc[n] == 0]
        pick = empty[0] if empty else min(open_, key=lambda n: (alloc[n], names.index(n)))
        alloc[pick] += 1
        left -= 1
    return alloc


@dataclass(slots=True)
class PartitionState:
    """What the online rules observe of one partition each period."""

    remaining: int       # bytes not yet on disk
    files_left: int      # files not yet finished
    channels: int        # current cc


@dataclass(slots=True)
class Move:
    src: str
    dst: str
    channels: int
    reason: str


class EtaTracker:
    """Per-partition throughput EWMA and ETA, updated once a period (§1.4, §1.5)."""

    def __init__(self, k: HeuristicConstants = DEFAULTS) -> None:
        self.k = k
        self.thr_: dict[str, float] = {}
        self._last: dict[str, tuple[float, int]] = {}

    def observe(self, now: float, done_bytes: dict[str, int]) -> None:
        for name, done in done_bytes.items():
            if name in self._last:
                t0, b0 = self._last[name]
                if now > t0:
                    inst = (done - b0) / (now - t0)
                    old = self.thr_.get(name)
                    self.thr_[name] = inst if old is None else self.k.ewma_old * old + (1 - self.k.ewma_old) * inst
            self._last[name] = (now, done)

    def eta(self, name: str, remaining: int) -> float:
        if remaining <= 0:
            return 0.0
        thr = self.thr_.get(name, 0.0)
        return remaining / thr if thr > 0 else math.inf


def handover(states: dict[str, PartitionState], tracker: EtaTracker) -> list[Move]:
    """Channels a partition cannot use go to the partition with the largest ETA.

    The paper hands over when a partition finishes; dtune also hands over the
    surplus when a partition has fewer unfinished files than channels (those
    channels would idle until the partition ends).
    """
    moves: list[Move] = []
    for name, st in states.items():
        surplus = st.channels - st.files_left
        if surplus <= 0:
            continue
        takers = [n for n, s in states.items() if n != name and s.files_left > s.channels]
        if not takers:
            continue
        etas = {n: tracker.eta(n, states[n].remaining) for n in takers}
        dst = max(takers, key=lambda n: etas[n])
        give = min(surplus, states[dst].files_left - states[dst].channels)
        what = "finished" if st.files_left == 0 else f"has {st.files_left} files left"
        moves.append(Move(name, dst, give, f"partition {name} {what}: {give} channel(s) to {dst} "
                                           f"(largest ETA {etas[dst]:.1f} s)"))
        st.channels -= give
        states[dst].channels += give
    return moves


class ProMCRebalancer:
    """§1.5 online re-allocation: move one channel from fast to slow after 3 periods."""

    def __init__(self, k: HeuristicConstants = DEFAULTS) -> None:
        self.k = k
        self._pair: tuple[str, str] | None = None
        self._streak = 0

    def decide(self, states: dict[str, PartitionState], tracker: EtaTracker) -> Move | None:
        live = {n: s for n, s in states.items() if s.files_left > 0}
        etas = {n: tracker.eta(n, s.remaining) for n, s in live.items()}
        slow_c = [n for n, s in live.items() if s.files_left > s.channels]
        fast_c = [n for n, s in live.items() if s.channels > 1]
        if not slow_c or not fast_c:
            self._pair, self._streak = None, 0
            return None
        slow = max(slow_c, key=lambda n: etas[n])
        fast = min(fast_c, key=lambda n: etas[n])
        if slow == fast or math.isinf(etas[fast]):
            self._pair, self._streak = None, 0
            return None
        pair = (slow, fast)
        self._streak = self._streak + 1 if pair == self._pair else 1
        self._pair = pair
        if self._streak < self.k.periods_to_move:
            return None
        ns, nf = live[slow].channels, live[fast].channels
        slow_after = etas[slow] * ns / (ns + 1)
        fast_after = etas[fast] * nf / (nf - 1)
        if slow_after < self.k.move_ratio * fast_after:
            return None
        self._pair, self._streak = None, 0  # one move at a time: start counting again
        return Move(fast, slow, 1, f"ProMC: ETA {slow} {etas[slow]:.1f} s vs {fast} {etas[fast]:.1f} s "
                                   f"for {self.k.periods_to_move} periods; after a move "
                                   f"{slow_after:.1f} s >= {self.k.move_ratio:g} × {fast_after:.1f} s")
