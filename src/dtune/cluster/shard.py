"""Packing a dataset into shards of about equal bytes: pure, on sizes alone.

Rules (docs/cluster.md):

* about ``per_node × nodes`` shards, so that the queue balances a slow node: a node that
  finishes early takes the next shard;
* a file larger than ``total / nodes`` (and than two ``min_piece``) is split by byte range
  into pieces of about one shard each; every other file stays whole;
* pieces and whole files are placed largest first, each into the shard with the fewest bytes
  so far (longest processing time first): small files fill the gaps, grouped.

Files of unknown size are never split; they weigh the mean known size (1 byte when no size is
known, so that they are spread by count).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

MIB = 1 << 20
PER_NODE = 2          # shards per node: a node that finishes early takes the next shard; each shard is one
                      # more start and tail of an engine (docs/scale.md: 3 per node ran at 0.94x the rate of 1, 2 at 0.985x)
MIN_PIECE = 8 * MIB   # a piece smaller than this costs more in requests and journals than it balances


@dataclass(frozen=True, slots=True)
class Unit:
    """One file of a shard (``start``/``end`` None) or one byte range of it."""

    index: int            # the file's position in the dataset
    start: int | None = None
    end: int | None = None

    def bytes(self, sizes: list[int | None]) -> int:
        if self.start is not None and self.end is not None:
            return self.end - self.start
        return sizes[self.index] or 0


@dataclass(slots=True)
class ShardPlan:
    id: int
    units: list[Unit] = field(default_factory=list)
    bytes: int = 0


def split_points(size: int, pieces: int) -> list[tuple[int, int]]:
    """[start, end) of ``pieces`` ranges of about equal length covering [0, size)."""
    pieces = max(1, min(pieces, size))
    bounds = [size * i // pieces for i in range(pieces + 1)]
    return [(bounds[i], bounds[i + 1]) for i in range(pieces)]


def pack(sizes: list[int | None], nodes: int, *, per_node: int = PER_NODE,
         min_piece: int = MIN_PIECE, whole: list[bool] | None = None) -> list[ShardPlan]:
    """Shards for files of ``sizes`` (bytes; None: unknown) on ``nodes`` nodes, by the rules above;
    ``whole[i]``: file i is never split (it is complete in place: the engine judges it whole).
    Every byte of every file is in exactly one unit; no shard is empty."""
    if not sizes:
        return []
    nodes = max(1, nodes)
    total = sum(s or 0 for s in sizes)
    count = per_node * nodes
    target = max(1, -(-total // count))
    units: list[Unit] = []
    for i, size in enumerate(sizes):
        if nodes > 1 and size and size > total / nodes and size >= 2 * min_piece and not (whole and whole[i]):
            pieces = max(2, min(-(-size // target), size // min_piece))
            units.extend(Unit(i, s, e) for s, e in split_points(size, pieces))
        else:
            units.append(Unit(i))
    known = [s for s in sizes if s is not None]
    guess = max(1, sum(known) // len(known)) if known else 1  # what a file of unknown size weighs

    def weight(u: Unit) -> int:
        return u.bytes(sizes) if sizes[u.index] is not None else guess

    units.sort(key=lambda u: (-weight(u), u.index, u.start or 0))
    shards = [ShardPlan(n) for n in range(min(count, len(units)))]
    heap = [(0, n) for n in range(len(shards))]
    for unit in units:
        load, n = heapq.heappop(heap)
        shards[n].units.append(unit)
        shards[n].bytes += unit.bytes(sizes)
        heapq.heappush(heap, (load + weight(unit), n))
    return [s for s in shards if s.units]


def pieces_of(shards: list[ShardPlan]) -> dict[int, list[tuple[int, int, int]]]:
    """File index → its (start, end, shard id) for every file split by range."""
    out: dict[int, list[tuple[int, int, int]]] = {}
    for shard in shards:
        for u in shard.units:
            if u.start is not None and u.end is not None:
                out.setdefault(u.index, []).append((u.start, u.end, shard.id))
    for ranges in out.values():
        ranges.sort()
    return out


def cap_share(cap: int, nodes: int) -> int:
    """Connections to one origin each node may open so that all nodes together stay within ``cap``."""
    return max(1, cap // max(1, nodes))


def place(waiting: list[int], free: list[str], busy: dict[str, float], rates: dict[str, float], *,
          margin: float = 0.1) -> dict[str, int]:
    """Which of the ``waiting`` shards (their bytes, in queue order) each ``free`` node should take
    now: position in ``waiting`` → node. Pure.

    Every waiting shard goes, in order, to the node that would finish it first: a free node can
    start at once, a busy one once its current shard is done (``busy``: its bytes left); a node
    takes a shard in ``rates[node]`` (bytes/s; a node not yet measured counts at the mean of the
    measured, and with none measured every node is alike). A free node that gets nothing in that
    plan waits: a faster node, busy now, will finish the shard sooner (a node at half the rate of
    the others, given the last shard as the others finished theirs, held the end by 6 s). A busy
    node is preferred only when it finishes sooner by more than ``margin`` (rates are estimates).
    """
    known = [r for r in rates.values() if r > 0]
    default = sum(known) / len(known) if known else 1.0
    nodes = {n: 0.0 for n in free}
    for n, left in busy.items():
        nodes.setdefault(n, left / (rates.get(n) or default))
    out: dict[str, int] = {}
    for i, size in enumerate(waiting):
        if not nodes:
            break
        finish = {n: at + size / (rates.get(n) or default) for n, at in nodes.items()}
        # earliest finish; among equals, a free node first (it starts now), then by name
        best = min(nodes, key=lambda n: (finish[n], n not in free, n))
        idle = [n for n in free if n not in out.values()]
        if best not in free and idle:
            first = min(idle, key=lambda n: (finish[n], n))
            if finish[first] <= (1 + margin) * finish[best]:
                best = first
        if best in free and best not in out.values():
            out[i] = best
            free = [n for n in free if n != best]
        nodes[best] += size / (rates.get(best) or default)
    return out
