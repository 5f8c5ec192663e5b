"""The transfer engine: the only place in dtune that moves bytes.

Theory of operation
-------------------
Files are grouped into **partitions** (one, ``"all"``, unless a tuner says
otherwise). Each partition has its own ``Params`` and a queue of files.

For a partition with ``Params(cc, p, pp)`` the engine runs ``cc`` conn
**groups**; a group has ``p`` **lanes**; a lane owns at most one TCP
connection (a ``Connection``) and keeps up to ``pp`` requests outstanding on it.
A group works on the files it has taken from the queue: a lane asks its
group for the next piece of work, which is

1. a new range of a file the group already holds, if that file has bytes
   nobody is fetching and fewer than ``p`` lanes on it (or this lane is
   already one of them), else
2. the next ready file from the partition's queue (this is how pipelining
   overlaps the end of one file with the start of the next), else nothing.

So ``cc`` bounds the files being worked on at once, ``p`` the streams per
file, ``pp`` the requests in flight per connection. Small files are one
request each; files above ``split_threshold`` are cut into ranges as
lanes ask (see ``EngineOptions`` for the sizing rule).

Live re-parameterisation: ``apply()`` adds groups/lanes or marks them
*retiring*. A retiring lane sends nothing new, lets its outstanding
responses finish, then closes; a retiring group hands the unassigned part
of its files back to the queue. Nothing already fetched is fetched again.

Failure handling: a failed request gives its unfetched bytes back to the
file and the file waits out a backoff (``Retry-After`` honoured); a request
that lost its connection because of another request's failure is retried
without penalty. A file fails after ``retries`` consecutive failures that
brought no new bytes, or at once on a permanent error (404, size changed,
mismatched checksum, disk error).

The engine's clock is ``loop.time()``; accounting and tuners read
``snapshot()``.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from dtune.accounting import Accounting, Meter, Snapshot
from dtune.dataset import FileSpec
from dtune.engine.files import FileState, commit_batch
from dtune.engine.options import EngineOptions
from dtune.engine.ranges import next_range_size
from dtune.engine.request import RangeJob
from dtune.errors import DiskError, DtuneError, HTTPError
from dtune.http.connection import Connection, open_connection
from dtune.http.message import (
    Origin,
    resolve_location,
)
from dtune.params import Params

COMMIT_BATCH = 256          # files verified and synced together (one syncfs)
STEAL_MIN = 128 * 1024       # the least tail worth a new request (and the victim's reconnect)
TIMER_SLACK = 0.005         # seconds added to wake-up timers (uvloop fires up to 1 ms early)

EventSink = Callable[[dict], None]


class RangePolicy(Protocol):
    """Decides range sizes per replica (MDTP); fed every finished range."""

    def size(self, replica: int, unassigned: int, now: float) -> int | None: ...
    def observe(self, replica: int, lane: int, nbytes: int, seconds: float, now: float) -> None: ...
    def forget(self, replica: int) -> None: ...
    def share(self, replica: int) -> float: ...   # its speed relative to the fastest (1.0 = fastest)
    def rate(self, replica: int) -> float | None: ...   # bytes/s of one connection; None: not adapting
    def rtt_of(self, replica: int) -> float | None: ...
    # may a connection of ``replica`` start a piece of ``nbytes`` now? ``remaining`` is the
    # transfer's bytes still to come, ``lanes`` the connections per replica
    def admits(self, replica: int, nbytes: int, remaining: int | None, lanes: dict[int, int]) -> bool: ...


class StallError(HTTPError):
    """No byte arrived on a busy connection for ``stall_timeout`` seconds."""


# ---------------------------------------------------------------------------
# lanes, groups, partitions
# ---------------------------------------------------------------------------
class Lane:
    """One connection slot bound to one replica: a conn and the requests outstanding on it."""

    def __init__(self, lane_id: int, group: Group, meter: Meter, replica: int = 0) -> None:
        self.id = lane_id
        self.group = group
        self.meter = meter
        self.replica = replica
        self.last_done = 0.0  # when the previous response on this lane completed
        self.conn: Connection | None = None
        self.outstanding = 0
        self.retiring = False
        self.wake = asyncio.Event()
        self.task: asyncio.Task | None = None

    def __repr__(self) -> str:
        return f"<Lane {self.id} out={self.outstanding}{' retiring' if self.retiring else ''}>"


class Group:
    """``p`` lanes working together on the files they took from the queue."""

    def __init__(self, group_id: int, partition: Partition) -> None:
        self.id = group_id
        self.partition = partition
        self.lanes: list[Lane] = []
        self.files: list[FileState] = []
        self.retiring = False


class Partition:
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
            if f.not_before > now or not f.has_work() or replica >= len(f.sources):
                queue.append(f)
                continue
            return f
        return None


@dataclass(slots=True)
class FileResult:
    relpath: str
    status: str           # done | skipped | failed
    size: int | None
    error: str | None = None


@dataclass(slots=True)
class TransferResult:
    files: list[FileResult] = field(default_factory=list)
    snapshot: Snapshot | None = None
    # filled in by dtune.transfer: what was tuned how, and the per-second samples
    tuning: dict = field(default_factory=dict)
    samples: list[dict] = field(default_factory=list)
    energy: dict | None = None  # {"joules", "kind", "seconds", "watts", "note"} when metered

    @property
    def failed(self) -> list[FileResult]:
        return [f for f in self.files if f.status == "failed"]

    @property
    def ok(self) -> bool:
        return not self.failed


# ---------------------------------------------------------------------------
# the engine
# ---------------------------------------------------------------------------
class Engine:
    """Fetch ``files`` into ``outdir`` with per-partition ``Params``, live-tunable.

    ``final_paths`` gives each file's destination (already checked to lie
    inside the output directory); ``partition_of`` maps a file to a
    partition name (default: everything in ``"all"``).
    """

    def __init__(self, files: list[FileSpec], final_paths: list[Path],
                 params: Params | dict[str, Params], *, options: EngineOptions | None = None,
                 partition_of: Callable[[int, FileSpec], str] | None = None,
                 on_event: EventSink | None = None) -> None:
        self.options = options or EngineOptions()
        self._on_event = on_event
        if isinstance(params, Params):
            params = {"all": params}
        self.partitions: dict[str, Partition] = {name: Partition(name, p) for name, p in params.items()}
        self.files: list[FileState] = []
        for i, (spec, path) in enumerate(zip(files, final_paths, strict=True)):
            name = partition_of(i, spec) if partition_of else next(iter(self.partitions))
            if name not in self.partitions:
                raise ValueError(f"partition {name!r} has no parameters")
            f = FileState(i, spec, path, name)
            self.files.append(f)
            self.partitions[name].files.append(f)
        self._loop: asyncio.AbstractEventLoop | None = None
        self.acct: Accounting | None = None
        self._lane_ids = 0
        self._group_ids = 0
        self._finished: asyncio.Event | None = None
        self._commit_queue: list[FileState] = []
        self._commit_wake = asyncio.Event()
        self._remaining = 0
        self._idle: set[Lane] = set()
        self._fatal: BaseException | None = None
        # called once a second, right after the accounting tick, with a fresh snapshot
        # (progress display, tuners): they see rates that include the last second
        self.tick_listeners: list[Callable[[Snapshot], None]] = []
        # multi-source: per-replica health, and the range-size policy (None = taper rule)
        self.range_policy: RangePolicy | None = None
        self._replica_count = max((len(f.sources) for f in self.files), default=1)
        self._replica_failures: dict[int, int] = {}
        self._benched: dict[int, float] = {}
        self._bench_count: dict[int, int] = {}
        # refreshed every tick, read by range_policy.admits(): bytes still to come, and
        # connections per replica
        self._remaining_bytes: int | None = None
        self._lanes_per_replica: dict[int, int] = {}

    # ---- public ------------------------------------------------------------
    def now(self) -> float:
        return self._loop.time() if self._loop else time.monotonic()

    def snapshot(self) -> Snapshot:
        assert self.acct is not None, "snapshot() before run()"
        return self.acct.snapshot(self.now())

    def apply(self, params: Params | dict[str, Params], reason: str = "") -> None:
        """Change cc/p/pp (per partition) while running; safe to call at any time."""
        if isinstance(params, Params):
            params = {name: params for name in self.partitions}
        for name, new in params.items():
            part = self.partitions[name]
            old = part.params
            part.params = new
            if self.acct is not None:
                self.acct.partition_params[name] = new.as_dict()
            if self._loop is not None:
                self._reshape(part)
            if new != old:
                self._emit("params", partition=name, old=old.as_dict(), new=new.as_dict(), reason=reason)

    async def run(self) -> TransferResult:
        self._loop = asyncio.get_running_loop()
        self.acct = acct = Accounting(start=self.now())
        acct.tick(self.now())  # rates start from zero bytes at the start, not at the first tick
        self._finished = asyncio.Event()
        await self._prepare()
        self._emit("start", files=len(self.files), bytes=acct.bytes_total,
                   bytes_resumed=acct.bytes_resumed,
                   params={n: p.params.as_dict() for n, p in self.partitions.items()})
        ticker = asyncio.create_task(self._ticker())
        committer = asyncio.create_task(self._committer())
        try:
            if self._remaining:
                for part in self.partitions.values():
                    self._reshape(part)
                await self._finished.wait()
            if self._fatal is not None:
                raise self._fatal
        finally:
            ticker.cancel()
            committer.cancel()
            await self._shutdown()
        acct.tick(self.now())
        result = TransferResult(snapshot=self.snapshot())
        for f in self.files:
            status = {"done": "done", "skipped": "skipped"}.get(f.status, "failed")
            error = f.error if status == "failed" else None
            if status == "failed" and error is None:
                error = f"{f.relpath}: transfer did not finish"
            result.files.append(FileResult(f.relpath, status, f.size, error))
        return result

    # ---- setup / teardown ------------------------------------------------------
    async def _prepare(self) -> None:
        acct = self.acct
        states = await asyncio.to_thread(lambda: [f.resume_state() for f in self.files])
        sizes_known = all(f.size is not None for f in self.files)
        acct.bytes_total = sum(f.size or 0 for f in self.files) if sizes_known else None
        acct.files_total = len(self.files)
        for name, part in self.partitions.items():
            acct.partition_totals[name] = [sum(f.size or 0 for f in part.files), len(part.files), 0, 0]
            acct.partition_params[name] = part.params.as_dict()
        for f, state in zip(self.files, states, strict=True):
            totals = acct.partition_totals[f.partition]
            if state == "skip":
                f.status = "skipped"
                acct.files_skipped += 1
                acct.bytes_resumed += f.size or 0
                totals[2] += 1
                totals[3] += f.size or 0
                self._emit("file_done", file=f.relpath, size=f.size, skipped=True)
                continue
            if state == "resume":
                acct.bytes_resumed += f.resumed
                totals[3] += f.resumed
            else:
                f.journaled = f.size is None or f.size > self.options.split_threshold
            f.plan()
            self._remaining += 1
            self.partitions[f.partition].queue.append(f)
            if f.complete:  # everything was on disk already; only the commit is missing
                f.status = "active"
                self._commit(f)

    async def _shutdown(self) -> None:
        lanes = [lane for part in self.partitions.values() for g in part.groups for lane in g.lanes]
        for lane in lanes:
            if lane.task is not None:
                lane.task.cancel()
            if lane.conn is not None:
                lane.conn.close()  # in-flight requests journal their bytes in on_error
        for lane in lanes:
            if lane.task is not None:
                try:
                    await lane.task
                except (asyncio.CancelledError, Exception):
                    pass
        for f in self.files:
            if f.fd >= 0 or f.journal is not None:
                f.sync()
                f.close_files()

    # ---- shaping: params → groups and lanes -------------------------------------
    def _reshape(self, part: Partition) -> None:
        params = part.params
        active = part.active_groups()
        while len(active) < params.cc:
            group = Group(self._group_ids, part)
            self._group_ids += 1
            part.groups.append(group)
            active.append(group)
        for group in active[params.cc:]:
            self._retire_group(group)
        wanted = params.lanes_per_replica()
        for group in part.active_groups():
            for lane in group.lanes:
                if lane.replica >= len(wanted) and not lane.retiring:
                    lane.retiring = True
            for replica, want in enumerate(wanted):
                live = [lane for lane in group.lanes if not lane.retiring and lane.replica == replica]
                while len(live) < want:
                    lane = Lane(self._lane_ids, group, self.acct.meter("", part.name), replica)
                    self._lane_ids += 1
                    group.lanes.append(lane)
                    live.append(lane)
                    lane.task = asyncio.create_task(self._lane_main(lane))
                for lane in live[want:]:
                    lane.retiring = True
                    lane.wake.set()
        for group in part.groups:
            for lane in group.lanes:
                lane.wake.set()  # pp may have grown

    def _retire_group(self, group: Group) -> None:
        group.retiring = True
        part = group.partition
        for f in group.files:
            f.group = None
            if f.has_work():
                part.queue.appendleft(f)
        group.files.clear()
        for lane in group.lanes:
            lane.retiring = True
            lane.wake.set()

    def _drop_lane(self, lane: Lane) -> None:
        group = lane.group
        if lane in group.lanes:
            group.lanes.remove(lane)
        self._idle.discard(lane)
        self.acct.retire(lane.meter)
        if group.retiring and not group.lanes and group in group.partition.groups:
            group.partition.groups.remove(group)

    # ---- the lane loop ------------------------------------------------------------
    async def _lane_main(self, lane: Lane) -> None:
        try:
            while not self._finished.is_set():
                if lane.retiring and lane.outstanding == 0:
                    break
                lane.wake.clear()
                if not lane.retiring:
                    await self._fill(lane)
                if lane.outstanding == 0:
                    self._idle.add(lane)
                await lane.wake.wait()
                self._idle.discard(lane)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug: never leave the transfer hanging on it
            self._fatal = exc
            self._finished.set()
        finally:
            if lane.conn is not None:
                lane.conn.close()
                lane.conn = None
                self.acct.open_connections -= 1
            self._drop_lane(lane)

    def _pipeline(self, lane: Lane) -> int:
        """Requests this lane may keep in flight: pp, scaled down for slower replicas.

        With several replicas a slow one must not hoard whole files in its
        pipeline (the transfer would end waiting on it): its lanes get
        ``pp × its throughput / the fastest's``, at least 1.
        """
        pp = lane.group.partition.params.pp
        policy = self.range_policy
        if policy is None or self._replica_count < 2:
            return pp
        share = policy.share(lane.replica)
        return pp if share >= 1.0 else max(1, round(pp * share))

    async def _fill(self, lane: Lane) -> None:
        while lane.outstanding < self._pipeline(lane) and not lane.retiring:
            job = self._next_job(lane)
            if job is None:
                return
            conn = lane.conn
            if conn is None or not conn.usable or conn.origin != job.origin:
                if lane.outstanding > 1:  # (this job already counts as outstanding)
                    self._unassign(job)  # finish this connection's pipeline first
                    return
                if not await self._connect(lane, job):
                    return
                conn = lane.conn
            job.meter.requests += 1
            job.t_sent = self.now()
            conn.send(job)

    async def _connect(self, lane: Lane, job: RangeJob) -> bool:
        if lane.conn is not None:
            lane.conn.close()
            lane.conn = None
            self.acct.open_connections -= 1
        origin: Origin = job.origin
        started = self.now()
        try:
            conn = await open_connection(origin, timeout=self.options.connect_timeout)
        except HTTPError as exc:
            self._job_failed(job, HTTPError(f"{job.file.relpath}: {exc}", retryable=exc.retryable))
            return False
        self.acct.add_rtt(self.now() - started)
        lane.conn = conn
        lane.meter.source = str(origin)
        self.acct.open_connections += 1
        if lane.retiring or job.file.status not in ("queued", "active"):
            self._unassign(job)
            return False
        return True

    # ---- handing out work ---------------------------------------------------------
    def _next_job(self, lane: Lane) -> RangeJob | None:
        group = lane.group
        part = group.partition
        p = part.params.p
        now = self.now()
        replica = lane.replica
        if self._benched.get(replica, 0.0) > now:
            return None
        for f in group.files:
            if f.not_before > now or not f.has_work() or replica >= len(f.sources):
                continue
            if (lane.id in f.lanes or len(f.lanes) < p) and self._admits(lane, f, now):
                return self._carve(f, lane)
        f = part.pop_ready(now, replica)
        if f is None:
            return self._steal(lane, now)
        if not self._admits(lane, f, now):
            part.queue.appendleft(f)  # for a faster replica; this lane waits for a wake-up
            return None
        f.status = "active"
        f.group = group
        group.files.append(f)
        return self._carve(f, lane)

    def _steal(self, lane: Lane, now: float) -> RangeJob | None:
        """Multi-source endgame: help the partition's other groups finish.

        The queue is empty, so this idle lane first takes unassigned bytes of
        a file another group holds (no more than ``p`` lanes per file is a
        rule for the steady state, not for the end). Failing that it looks at
        the ranges being received on the other lanes: for each, with ``R``
        bytes to go at the victim's measured rate ``v``, the thief (rate
        ``t``: its replica's per-connection estimate; ``o`` = its RTT, twice
        if it must connect) could take the last ``R - x`` bytes where both
        finish together: ``x / v = o + (R - x) / t``. Only victims slower
        than ``t / 2`` are cut (a stalled connection, a slow replica), and
        only if the gain is worth a few round trips and the tail at least
        ``STEAL_MIN``; the slowest-to-finish goes first. The victim stops at the cut and drops
        its connection (``RangeJob.cut``); what it had pipelined behind goes
        back to the queue.
        """
        policy = self.range_policy
        if lane.retiring or policy is None or self._replica_count < 2:
            # One source: nothing. Measured interleaved on 100 × 2.4 MB files (6 runs) and on
            # MC with 16 conns (3 runs): cutting cost 25 % (slow connections there are
            # mostly in slow start) and helping with other groups' files cost ~10 % with
            # many conns (every idle lane scans every group's files).
            return None
        for group in lane.group.partition.groups:
            if group is lane.group:
                continue
            for f in group.files:
                if f.not_before <= now and f.has_work() and lane.replica < len(f.sources) \
                        and self._admits(lane, f, now):
                    return self._carve(f, lane)
        if lane.outstanding:  # cut only for an idle lane: its own queue would delay the tail
            return None
        t = policy.rate(lane.replica)
        if not t:
            return None
        rtt = policy.rtt_of(lane.replica) or 0.05  # unknown: assume a WAN-like round trip
        connected = lane.conn is not None and lane.conn.usable
        o = rtt if connected else 2 * rtt           # a request, or a connect and a request
        best: tuple[float, RangeJob, int] | None = None
        for group in lane.group.partition.groups:
            for other in group.lanes:
                ch = other.conn
                job = ch.current if ch is not None and other is not lane else None
                if (not isinstance(job, RangeJob) or not job.ranged or job.status != 206
                        or job.end is None or job.gen != job.file.gen or job.file.size is None
                        or lane.replica >= len(job.file.sources)):
                    continue
                elapsed = now - max(job.t_sent, other.last_done)  # (pipelined: from the answer before)
                got = job.pos - job.first
                left = job.end - job.pos
                if left < 2 * STEAL_MIN or elapsed <= 0 or got <= 0:
                    continue
                v = got / elapsed
                if 2 * v >= t:
                    continue
                keep = int(v * (o + left / t) / (1 + v / t))
                gain = left / v - keep / v
                if left - keep < STEAL_MIN or gain < max(3 * o, 0.05):
                    continue
                if best is None or gain > best[0]:
                    best = (gain, job, keep)
        if best is None:
            return None
        _, victim, keep = best
        f = victim.file
        cut = victim.pos + keep
        old_end = victim.end
        victim.end = cut
        victim.cut = True
        job = RangeJob(self, f, lane, cut, old_end, ranged=True)
        self._assign(job)
        self._emit("steal", file=f.relpath, replica=lane.replica, victim_replica=victim.replica,
                   start=cut, end=old_end)
        return job

    def _admits(self, lane: Lane, f: FileState, now: float) -> bool:
        """Multi-source: may this lane's replica start the next piece of ``f``?

        The piece is the whole file below the split threshold, else the range
        the policy would size for this replica. A slow replica must not start
        a piece it would still be fetching after the faster ones have finished
        everything else (see ``MdtpSizer.admits``).
        """
        policy = self.range_policy
        if policy is None or self._replica_count < 2 or f.size is None:
            return True
        unassigned = f.unassigned.total() if f.unassigned is not None else f.size
        if f.size <= self.options.split_threshold:
            piece = unassigned
        else:
            piece = policy.size(lane.replica, unassigned, now) or unassigned
        return policy.admits(lane.replica, piece, self._remaining_bytes, self._lanes_per_replica)

    def _carve(self, f: FileState, lane: Lane) -> RangeJob:
        opts = self.options
        if f.size is None:
            f.probing = True
            job = RangeJob(self, f, lane, 0, opts.first_range, ranged=True)
        elif f.size == 0 or (f.single_stream and f.full_job is None):
            job = RangeJob(self, f, lane, 0, f.size, ranged=False)
            if f.single_stream:
                f.full_job = job
                f.unassigned.remove(0, f.size)
        elif not f.done and f.size <= opts.split_threshold and f.unassigned.total() == f.size:
            f.unassigned.remove(0, f.size)
            job = RangeJob(self, f, lane, 0, f.size, ranged=False)
        else:
            params = f.group.partition.params if f.group else lane.group.partition.params
            unassigned = f.unassigned.total()
            size = None
            if self.range_policy is not None:
                size = self.range_policy.size(lane.replica, unassigned, self.now())
            if size is None:
                size = next_range_size(unassigned, params.p, min(params.pp, 4),
                                       min_range=opts.min_range, max_range=opts.max_range)
            start, end = f.unassigned.pop_front(max(1, size))
            job = RangeJob(self, f, lane, start, end, ranged=True)
        self._assign(job)
        return job

    def _assign(self, job: RangeJob) -> None:
        f, lane = job.file, job.lane
        f.in_flight += 1
        f.lanes[lane.id] = f.lanes.get(lane.id, 0) + 1
        lane.outstanding += 1

    def _release(self, job: RangeJob, wake: bool = True) -> None:
        f, lane = job.file, job.lane
        f.in_flight -= 1
        left = f.lanes.get(lane.id, 1) - 1
        if left:
            f.lanes[lane.id] = left
        else:
            f.lanes.pop(lane.id, None)
        lane.outstanding -= 1
        if wake:
            lane.wake.set()

    def _unassign(self, job: RangeJob) -> None:
        """Give a job that was never sent back to its file (the lane is not woken: it chose so)."""
        self._release(job, wake=False)
        self._give_back(job.file, job.start, job.end, job)

    def _give_back(self, f: FileState, start: int, end: int | None, job: RangeJob) -> None:
        if f.full_job is job:
            f.full_job = None
        if f.probing and job.ranged and f.size is None:
            f.probing = False
            return
        if f.size is None or f.unassigned is None:
            return
        if f.single_stream:
            f.unassigned = f.done.complement(f.size)
        elif end is not None and end > start:
            f.unassigned.add(start, end)
            for s, e in f.done:  # never hand out bytes already on disk
                f.unassigned.remove(s, e)
        if f.size == 0:
            f.done_zero = False

    # ---- outcomes -------------------------------------------------------------
    def _job_done(self, job: RangeJob) -> None:
        f = job.file
        if job.gen != f.gen:
            self._release(job)
            return
        if job.ranged is False and f.size == 0:
            f.done_zero = True
        job.save_progress()
        f.failures = 0
        now = self.now()
        lane = job.lane
        if self.range_policy is not None and job.pos > job.first:
            self.range_policy.observe(job.replica, lane.id, job.pos - job.first,
                                      now - max(job.t_sent, lane.last_done), now)
        lane.last_done = now
        self._replica_failures[job.replica] = 0
        if f.full_job is job:
            f.full_job = None
        self._release(job)
        if f.probing and f.size is not None:
            f.probing = False
        self._settle(f)

    def _settle(self, f: FileState) -> None:
        """Commit a file once all its bytes are on disk and no request for it is out."""
        if f.status == "active" and f.complete and f.in_flight == 0:
            self._commit(f)
        else:
            self._wake_partition(f)

    def _job_failed(self, job: RangeJob, exc: Exception) -> None:
        f = job.file
        if job.gen != f.gen:
            self._release(job)
            return
        before = f.done.total()
        try:
            job.save_progress()
        except DiskError as disk:
            exc = disk
        self._release(job)
        gained = f.done.total() > before
        if job.superseded:
            if f.full_job is job:
                f.full_job = None
            self._settle(f)
            return
        resume_from = job.pos if job.status in (200, 206) and not job.discard else job.start
        self._give_back(f, resume_from, job.end, job)
        if f.status != "active":
            return
        if f.complete:  # every byte is on disk: this request's fate no longer matters
            self._settle(f)
            return
        innocent = job.redirected or (getattr(exc, "innocent", False) and job.status == 0)
        if isinstance(exc, DiskError) or (isinstance(exc, HTTPError) and not exc.retryable):
            self._fail_file(f, str(exc))
            return
        if innocent:
            self._wake_partition(f)
            return
        job.lane.last_done = self.now()
        if len(f.sources) > 1 and self._replica_failed(job.replica, exc):
            # another replica can take these bytes now: no penalty for the file
            self._wake_partition(f)
            return
        if gained:
            f.failures = 0
        f.failures += 1
        self.acct.retries += 1
        if f.failures > self.options.retries:
            self._fail_file(f, f"{exc} (gave up after {self.options.retries} retries)")
            return
        delay = self._backoff(f.failures, getattr(exc, "retry_after", None))
        f.not_before = self.now() + delay
        # wake the lanes when the backoff ends (not at the next 1 s tick); uvloop may fire a
        # timer up to a millisecond early, so aim a little late
        self._loop.call_later(delay + TIMER_SLACK, self._wake_partition, f)
        self._emit("retry", file=f.relpath, attempt=f.failures, delay=round(delay, 3), reason=str(exc))
        if f.group is None or f.group.retiring:
            f.group = None
            self.partitions[f.partition].queue.appendleft(f)
        self._wake_partition(f)

    def _backoff(self, failures: int, retry_after: float | None) -> float:
        opts = self.options
        if retry_after is not None:
            return min(retry_after, opts.retry_after_max)
        return min(opts.backoff_max, opts.backoff_base * 2 ** (failures - 1)) * random.uniform(0.75, 1.25)

    def _learn_size(self, f: FileState, size: int, job: RangeJob) -> None:
        f.size = size
        if not f.done:
            f.journaled = size > self.options.split_threshold
        f.unassigned = f.done.complement(size)
        if job.end is not None:
            f.unassigned.remove(job.start, job.end)
        else:
            f.unassigned.remove(0, size)
        if self.acct.bytes_total is not None or all(x.size is not None for x in self.files):
            self.acct.bytes_total = sum(x.size or 0 for x in self.files)
        self.acct.partition_totals[f.partition][0] += size
        f.probing = False
        self._wake_partition(f)

    def _to_single_stream(self, f: FileState, job: RangeJob) -> None:
        if not f.single_stream:
            self._emit("retry", file=f.relpath, attempt=0, delay=0,
                       reason=f"{f.relpath}: server ignores Range requests; fetching it as one stream")
        f.single_stream = True
        f.full_job = job
        if f.unassigned is not None:
            f.unassigned = type(f.unassigned)()

    def _redirect(self, job: RangeJob, location: str) -> None:
        """Move the file's source to the redirect target (once per hop, not per request)."""
        f = job.file
        source = f.sources[job.replica]
        if source.url != job.url:
            return  # an earlier answer already moved this source; the job simply goes again
        f.redirects += 1
        if f.redirects > self.options.max_redirects:
            raise HTTPError(f"{f.relpath}: more than {self.options.max_redirects} redirects",
                            retryable=False)
        url = resolve_location(job.url, location)
        try:
            source.move(url)
        except DtuneError as exc:
            raise HTTPError(f"{f.relpath}: bad redirect: {exc}", retryable=False) from None

    def _replica_failed(self, replica: int, exc: Exception) -> bool:
        """Count a failure against a replica; bench it after a few in a row.

        Returns True while some other replica is still in service (so the
        file itself is not penalised).
        """
        opts = self.options
        count = self._replica_failures.get(replica, 0) + 1
        self._replica_failures[replica] = count
        now = self.now()
        if count >= opts.replica_failures:
            benched = self._bench_count.get(replica, 0)
            pause = min(opts.replica_pause_max, opts.replica_pause * 2 ** benched)
            self._bench_count[replica] = benched + 1
            self._benched[replica] = now + pause
            self._replica_failures[replica] = 0
            if self.range_policy is not None:
                self.range_policy.forget(replica)  # re-probe it when it comes back
            self._emit("replica_benched", replica=replica, seconds=round(pause, 1), reason=str(exc))
        in_service = [r for r in range(self._replica_count) if self._benched.get(r, 0.0) <= now]
        return any(r != replica for r in in_service)

    def _restart_file(self, f: FileState, reason: str) -> None:
        """The source changed under the file: forget every byte of it and start over."""
        f.restarts += 1
        if f.restarts > self.options.max_restarts:
            self._fail_file(f, f"{reason}; it keeps changing ({f.restarts} versions seen)")
            return
        f.journal_etag = None
        f.etag = None
        for source in f.sources:
            source.etag = None
        f.gen += 1
        f.close_files()
        f.done = type(f.done)()
        f.resumed = 0
        f.single_stream = False
        f.full_job = None
        f.plan()
        self._emit("retry", file=f.relpath, attempt=0, delay=0, reason=reason + "; starting it over")

    def _fail_file(self, f: FileState, reason: str) -> None:
        if f.status in ("done", "failed", "skipped"):
            return
        if not reason.startswith(f.relpath):
            reason = f"{f.relpath}: {reason}"  # every error names its file
        f.status = "failed"
        f.error = reason
        f.gen += 1
        f.sync()
        f.close_files()
        self.acct.files_failed += 1
        self._detach(f)
        self._emit("error", file=f.relpath, reason=reason)
        self._file_finished()

    def _commit(self, f: FileState) -> None:
        """Queue a complete file for verification, fsync and rename (in a worker thread)."""
        f.status = "verifying"
        self._detach(f)
        f.close_files()  # the queue can grow long: do not hold a descriptor per queued file
        self._commit_queue.append(f)
        self._commit_wake.set()

    async def _committer(self) -> None:
        """Commits in batches: files that complete while one batch syncs form the next."""
        while True:
            await self._commit_wake.wait()
            self._commit_wake.clear()
            while self._commit_queue:
                batch = self._commit_queue[:COMMIT_BATCH]
                del self._commit_queue[:COMMIT_BATCH]
                errors = await asyncio.to_thread(commit_batch, batch)
                for f, error in zip(batch, errors, strict=True):
                    self._committed(f, error)

    def _committed(self, f: FileState, error: str | None) -> None:
        if error is not None:
            f.status = "active"  # so that _fail_file records it
            self._fail_file(f, error)
            return
        f.status = "done"
        self.acct.files_done += 1
        self.acct.partition_totals[f.partition][2] += 1
        self._emit("file_done", file=f.relpath, size=f.size, sha256_verified=bool(f.sha256))
        self._file_finished()

    def _detach(self, f: FileState) -> None:
        group = f.group
        if group is not None and f in group.files:
            group.files.remove(f)
        f.group = None
        self._wake_partition(f)

    def _file_finished(self) -> None:
        self._remaining -= 1
        if self._remaining <= 0:
            self._finished.set()

    def _wake_partition(self, f: FileState) -> None:
        for lane in list(self._idle):
            if lane.group.partition.name == f.partition:
                lane.wake.set()

    # ---- housekeeping ---------------------------------------------------------
    async def _ticker(self) -> None:
        opts = self.options
        last_sync = self.now()
        while True:
            await asyncio.sleep(1.0)
            now = self.now()
            self.acct.tick(now)
            snap = None
            if self.tick_listeners:
                snap = self.acct.snapshot(now)
                for listener in list(self.tick_listeners):
                    listener(snap)
            if self.range_policy is not None and self._replica_count > 1:
                snap = snap or self.acct.snapshot(now)
                self._remaining_bytes = (None if snap.bytes_total is None else
                                         max(0, snap.bytes_total - snap.bytes_resumed - snap.bytes))
                lanes: dict[int, int] = {}
                for part in self.partitions.values():
                    for group in part.groups:
                        for one in group.lanes:
                            if not one.retiring:
                                lanes[one.replica] = lanes.get(one.replica, 0) + 1
                self._lanes_per_replica = lanes
            self._check_stalls(now)
            for lane in list(self._idle):
                lane.wake.set()  # backoffs may have expired
            if now - last_sync >= opts.sync_interval:
                last_sync = now
                open_files = [f for f in self.files if f.fd >= 0]
                if open_files:
                    await asyncio.to_thread(lambda fs=open_files: [f.sync() for f in fs])

    def _check_stalls(self, now: float) -> None:
        limit = self.options.stall_timeout
        for part in self.partitions.values():
            for group in part.groups:
                for lane in group.lanes:
                    ch = lane.conn
                    if ch is not None and ch.in_flight and now - ch.last_activity > limit:
                        ch.close(StallError(f"{ch.origin}: no data for {limit:g} s"))

    def _emit(self, kind: str, **fields: object) -> None:
        if self._on_event is not None:
            fields = {"event": kind, "t": round(self.now() - (self.acct.start if self.acct else 0), 3),
                      **fields}
            self._on_event(fields)


def iter_lanes(engine: Engine) -> Iterable[Lane]:
    for part in engine.partitions.values():
        for group in part.groups:
            yield from group.lanes
