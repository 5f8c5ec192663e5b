"""The engine's working state as plain objects: partitions, groups and lanes.

A **partition** (files of one size class) has its own ``Params`` and a queue
of files. For ``Params(cc, p, pp)`` it runs ``cc`` **groups**; a group has
``p`` **lanes**; a lane is bound to one replica, holds at most one
connection and keeps up to ``pp`` requests outstanding on it.

Nothing here does I/O or reads a clock: the scheduler decides on these
objects, the engine (``core``) gives lanes their connection, their wake-up
event and their task.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from dtune.params import Params

if TYPE_CHECKING:
    from dtune.accounting import Meter
    from dtune.engine.files import FileState


class Lane:
    """One connection slot of a group, bound to one replica.

    ``conn`` is its connection (None until it connects), ``outstanding`` the
    requests it has sent or is about to send; a ``retiring`` lane sends
    nothing new and closes once its last answer is in. ``wake`` and
    ``task`` belong to the engine's event loop.
    """

    __slots__ = ("id", "group", "meter", "replica", "last_done", "conn", "outstanding", "retiring",
                 "wake", "task", "watch")

    def __init__(self, lane_id: int, group: Group, meter: Meter, replica: int = 0) -> None:
        self.id = lane_id
        self.group = group
        self.meter = meter
        self.replica = replica
        self.last_done = 0.0            # when the previous response on this lane completed
        self.conn: Any = None           # http.connection.Connection, or a stand-in in tests
        self.outstanding = 0
        self.retiring = False
        self.wake: Any = None           # asyncio.Event, set by the engine
        self.task: Any = None           # asyncio.Task running the lane
        self.watch: Any = None          # engine.watch.Watch: the tick's record of ``conn``

    def __repr__(self) -> str:
        return (f"<Lane {self.id} replica={self.replica} out={self.outstanding}"
                f"{' retiring' if self.retiring else ''}>")


class Group:
    """``p`` lanes working together on the files they took from the queue (one unit of cc)."""

    __slots__ = ("id", "partition", "lanes", "files", "retiring")

    def __init__(self, group_id: int, partition: Partition) -> None:
        self.id = group_id
        self.partition = partition
        self.lanes: list[Lane] = []
        self.files: list[FileState] = []
        self.retiring = False

    def __repr__(self) -> str:
        return f"<Group {self.id} lanes={len(self.lanes)} files={len(self.files)}>"


class Partition:
    """Files of one size class with their ``Params``, queue and groups."""

    def __init__(self, name: str, params: Params) -> None:
        self.name = name
        self.params = params
        self.queue: deque[FileState] = deque()
        self.groups: list[Group] = []
        self.files: list[FileState] = []

    def active_groups(self) -> list[Group]:
        return [g for g in self.groups if not g.retiring]

    def pop_ready(self, now: float, replica: int = 0) -> FileState | None:
        """Next queued file with work whose backoff has passed and that ``replica`` serves."""
        queue = self.queue
        for _ in range(len(queue)):
            f = queue.popleft()
            if f.status not in ("queued", "active") or f.group is not None:
                continue  # finished, failed, or already taken back by a group
            if f.not_before > now or not f.has_work() or not f.serves(replica):
                queue.append(f)
                continue
            return f
        return None

    def __repr__(self) -> str:
        return (f"<Partition {self.name} {self.params} groups={len(self.groups)} "
                f"queued={len(self.queue)} files={len(self.files)}>")


def iter_lanes(partitions: Iterable[Partition]) -> Iterator[Lane]:
    """Every lane of every group of ``partitions``, retiring ones included."""
    for part in partitions:
        for group in part.groups:
            yield from group.lanes
