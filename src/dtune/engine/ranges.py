"""Byte ranges of one file: what is done, what is left, how to cut the next range.

Pure code: plain integers in, plain integers out. Ranges are half-open
``[start, end)`` everywhere in dtune; only the HTTP Range header says
``bytes=start-(end-1)``.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator


class RangeSet:
    """A set of disjoint, sorted, non-adjacent half-open ranges."""

    __slots__ = ("_starts", "_ends")

    def __init__(self, ranges: Iterable[tuple[int, int]] = ()) -> None:
        # an empty set holds the shared empty tuple: a transfer holds one or two per file, a million
        # for a million files, most of them empty; the lists are made by the first ``add``
        self._starts: list[int] | tuple[()] = ()
        self._ends: list[int] | tuple[()] = ()
        for start, end in ranges:
            self.add(start, end)

    def add(self, start: int, end: int) -> None:
        if end <= start:
            return
        starts, ends = self._starts, self._ends
        if not starts:
            self._starts, self._ends = [start], [end]
            return
        # first range whose end >= start (touching or overlapping merges)
        i = bisect.bisect_left(ends, start)
        j = i
        while j < len(starts) and starts[j] <= end:
            start = min(start, starts[j])
            end = max(end, ends[j])
            j += 1
        starts[i:j] = [start]
        ends[i:j] = [end]

    def remove(self, start: int, end: int) -> None:
        if end <= start:
            return
        out: list[tuple[int, int]] = []
        for s, e in zip(self._starts, self._ends, strict=True):
            if e <= start or s >= end:
                out.append((s, e))
                continue
            if s < start:
                out.append((s, start))
            if e > end:
                out.append((end, e))
        self._starts = [s for s, _ in out]
        self._ends = [e for _, e in out]

    def first(self) -> tuple[int, int] | None:
        return (self._starts[0], self._ends[0]) if self._starts else None

    def pop_front(self, size: int) -> tuple[int, int] | None:
        """Take up to ``size`` bytes from the start of the first range."""
        if not self._starts:
            return None
        start, end = self._starts[0], self._ends[0]
        cut = min(end, start + size)
        if cut == end:
            del self._starts[0], self._ends[0]
        else:
            self._starts[0] = cut
        return start, cut

    def covers(self, start: int, end: int) -> bool:
        i = bisect.bisect_right(self._starts, start) - 1
        return i >= 0 and self._ends[i] >= end

    def total(self) -> int:
        return sum(e - s for s, e in zip(self._starts, self._ends, strict=True))

    def complement(self, size: int) -> RangeSet:
        """What [0, size) lacks."""
        gaps = RangeSet()
        pos = 0
        for s, e in self:
            if s > pos:
                gaps.add(pos, min(s, size))
            pos = max(pos, e)
        if pos < size:
            gaps.add(pos, size)
        return gaps

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return iter(zip(self._starts, self._ends, strict=True))

    def __len__(self) -> int:
        return len(self._starts)

    def __bool__(self) -> bool:
        return bool(self._starts)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RangeSet) and list(self) == list(other)

    def __repr__(self) -> str:
        return "RangeSet(" + ", ".join(f"[{s},{e})" for s, e in self) + ")"


def next_range_size(unassigned: int, streams: int, pipeline: int, *, min_range: int,
                    max_range: int) -> int:
    """Bytes for the next range of a file with ``unassigned`` bytes left to hand out.

    ``clamp(unassigned / (2·streams·pipeline), min_range, max_range)``: about
    half of what is left is spread over every request slot, so the ranges
    shrink geometrically towards the end and the streams finish together.
    """
    if unassigned <= 0:
        return 0
    slots = max(1, streams) * max(1, pipeline)
    size = max(min_range, min(max_range, unassigned // (2 * slots)))
    if unassigned - size < min_range // 2:
        size = unassigned  # no crumb of a range left behind for the tail
    return min(size, unassigned)
