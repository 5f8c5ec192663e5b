"""The parent's watch on its shards: a shard that makes no progress for too long ends the transfer.

The parent waits for its shards' futures; a shard that never ends would hold it for ever. Every
event a shard's engine sends is shown to ``ShardWatch.heard``. A shard **progresses** when its
``node_progress`` shows more bytes, files or retries than before, or it is committing files
(verifying a large file moves no byte), or it reports an event of the transfer itself (a file or
piece done, an error, a retry, the engine's start). ``overdue`` names the first shard that has
been reporting without progress for ``limit`` seconds, or, when no shard has progressed for that
long, the shards still out (one that hangs before its first report). A shard whose worker no
longer runs it (the worker died: Dask runs it again elsewhere, maybe after that worker's own
shard) is ``forget``-ed by the caller, not given up. Pure: the clock is passed in.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

MIN_LIMIT = 60.0   # seconds without progress after which a shard is given up, at the least …
STALLS = 4         # … or this many --stall-timeout, if longer (the engine's own limits come first)
ALIVE = frozenset({"start", "file_done", "piece_done", "error", "retry", "replica_paused", "replica_dropped",
                    "link_renewed"})


def limit_for(stall_timeout: float) -> float:
    """Seconds a shard may go without progress: max(60 s, 4 × --stall-timeout)."""
    return max(MIN_LIMIT, STALLS * stall_timeout)


@dataclass
class Overdue:
    """A shard given up on: ``shard`` and ``node`` None when no shard at all progressed."""

    shard: int | None
    node: str | None
    reason: str


@dataclass
class Seen:
    """What one shard reported last, and when it last progressed."""

    node: str
    since: float                      # when it last progressed
    mark: tuple = ()                  # (bytes, resumed, files, failed, retries) of its last progress
    last: dict | None = None          # its last node_progress


class ShardWatch:
    """Per shard, when it last progressed (see the module docstring)."""

    def __init__(self, limit: float, now: float) -> None:
        self.limit = limit
        self.shards: dict[int, Seen] = {}
        self.latest = now             # when any shard last progressed (or the shards went out)

    def heard(self, event: dict, now: float) -> None:
        """One event of a shard's engine (with its ``node`` and ``shard``); others are ignored."""
        shard, node = event.get("shard"), event.get("node")
        if not isinstance(shard, int) or not isinstance(node, str):
            return
        seen = self.shards.get(shard)
        if seen is None or seen.node != node:   # its first report, or a rerun on another worker
            seen = self.shards[shard] = Seen(node, now)
            self.latest = now
        kind = event.get("event")
        if kind == "node_progress":
            mark = tuple(event.get(k) for k in ("bytes", "bytes_resumed", "files_done", "files_failed",
                                                "retries"))
            seen.last = event
            if mark != seen.mark or event.get("committing"):
                seen.mark, seen.since, self.latest = mark, now, now
        elif kind in ALIVE:
            seen.since = self.latest = now

    def finished(self, shard: int) -> None:
        """The shard's future is done, or its worker no longer runs it: nothing of it is watched
        until it reports again."""
        self.shards.pop(shard, None)

    forget = finished

    def overdue(self, now: float, pending: Iterable[int]) -> Overdue | None:
        """The shard still out (``pending``) to give up on, or None while all is well."""
        pending = sorted(pending)
        for shard in pending:
            seen = self.shards.get(shard)
            if seen is not None and now - seen.since > self.limit:
                return Overdue(shard, seen.node, f"shard {shard} on worker {seen.node} made no progress for "
                                                 f"{now - seen.since:.0f} s (it last reported {describe(seen.last)})")
        if pending and now - self.latest > self.limit:
            silent = [s for s in pending if s not in self.shards]
            names = ", ".join(str(s) for s in (silent or pending)[:5])
            return Overdue(None, None, f"no shard made progress for {now - self.latest:.0f} s "
                                       f"(still out: shard {names})")
        return None


def describe(progress: dict | None) -> str:
    """A shard's last ``node_progress`` in words: '1948576 of 3900000 bytes, 6 of 7 files, 1 connection'."""
    if not progress:
        return "no progress yet"
    got, total = progress.get("bytes"), progress.get("bytes_total")
    files, of = progress.get("files_done"), progress.get("files_total")
    conns = progress.get("connections")
    parts = [f"{got} of {total} bytes" if total is not None else f"{got} bytes",
             f"{files} of {of} files", f"{conns} connection{'' if conns == 1 else 's'}"]
    t = progress.get("t")
    if isinstance(t, int | float):
        parts.append(f"at {t:.0f} s into the shard")
    return ", ".join(parts)
