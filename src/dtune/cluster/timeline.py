"""When each shard and each node of a cluster transfer did what: pure, on plain numbers.

A worker notes the wall-clock seconds of its shard's steps (``Stamps``: the task began, the
engine was built, the first byte and the last byte seen at a control tick, the task returned);
the parent puts them on its own time axis (seconds since it started) in a ``shard_timeline``
event, and ``nodes`` folds a transfer's shards into one row per node: when the node's first
shard began (its start-up), its first and last byte, its bytes, and the seconds between its
first and last byte it spent with no shard of its own running (waiting on the parent and Dask).
``benchmarks/cluster_timeline.py`` reads these from the ``--json`` logs (docs/cluster.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

STEPS = ("submitted", "started", "engine", "first_byte", "last_byte", "ended")


@dataclass(slots=True)
class Stamps:
    """A shard's steps on its worker, in wall-clock seconds (``note`` is fed each control tick)."""

    times: dict[str, float] = field(default_factory=dict)
    _bytes: int = 0

    def mark(self, step: str, now: float) -> None:
        self.times.setdefault(step, now)

    def note(self, now: float, nbytes: int) -> None:
        """The bytes the shard's engine has received by ``now``."""
        if nbytes > self._bytes:
            self._bytes = nbytes
            self.times.setdefault("first_byte", now)
            self.times["last_byte"] = now


def relative(times: dict[str, float], origin: float) -> dict[str, float]:
    """``times`` as seconds after ``origin`` (the parent's start), rounded to the millisecond."""
    return {k: round(v - origin, 3) for k, v in times.items() if k in STEPS}


def nodes(shards: list[dict]) -> dict[str, dict]:
    """One row per node from its shards' ``shard_timeline`` events (times relative to the
    parent's start): ``start`` (its first shard began), ``first_byte``, ``last_byte``, ``bytes``,
    ``shards``, and ``gap``: seconds between its first and last byte with none of its shards
    between engine and last byte (a node that waits for its next shard). Pure."""
    out: dict[str, dict] = {}
    by_node: dict[str, list[dict]] = {}
    for s in shards:
        by_node.setdefault(str(s.get("node")), []).append(s)
    for node, mine in sorted(by_node.items()):
        starts = [s["started"] for s in mine if "started" in s]
        firsts = [s["first_byte"] for s in mine if "first_byte" in s]
        lasts = [s["last_byte"] for s in mine if "last_byte" in s]
        busy = sorted((s.get("engine", s.get("started", 0.0)), s["last_byte"]) for s in mine
                      if "last_byte" in s)
        out[node] = {"start": min(starts) if starts else None,
                     "first_byte": min(firsts) if firsts else None,
                     "last_byte": max(lasts) if lasts else None,
                     "bytes": sum(int(s.get("bytes", 0)) for s in mine), "shards": len(mine),
                     "gap": round(_idle(busy), 3)}
    return out


def _idle(spans: list[tuple[float, float]]) -> float:
    """Seconds inside [first start, last end] of ``spans`` (sorted by start) covered by none."""
    if not spans:
        return 0.0
    idle, end = 0.0, spans[0][1]
    for s, e in spans[1:]:
        if s > end:
            idle += s - end
        end = max(end, e)
    return idle
