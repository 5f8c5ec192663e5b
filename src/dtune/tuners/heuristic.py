"""Heuristic protocol tuning, the part every heuristic shares: size partitions and Algorithm 1.

Pure code after Arslan and Kosar's heuristic tuning (docs/algorithms.md
§1.1–1.2): sizes, bandwidth, RTT and buffer in; partitions and parameters
out. The tuners built on it are SC / MC / ProMC (``promc``) and the Di
Tacchio baselines (``ditacchio``).

Words: a **partition** (the paper's "chunk") is a set of files of one size
class; what the paper calls a channel — one unit of cc, a file in flight
with its p lanes and pp pipelined requests — is a **group** here.
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
    move_ratio: float = 2.0              # … and slow' >= 2·fast' moves one group
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


def names_of(parts: Sequence[PartitionPlan], count: int) -> list[str]:
    """The partition name of each of ``count`` files (a plan lists its files' indices)."""
    names = [""] * count
    for part in parts:
        for i in part.indices:
            names[i] = part.name
    return names


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
