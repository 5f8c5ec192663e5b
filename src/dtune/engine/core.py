"""The transfer engine: the only place in dtune that moves bytes.

Theory of operation
-------------------
Files are grouped into **partitions** (one, ``"all"``, unless a tuner says
otherwise), each with its own ``Params`` and queue. For ``Params(cc, p,
pp)`` the engine runs ``cc`` **groups** of ``p`` **lanes**; each lane is a
task that owns at most one connection and keeps up to ``pp`` requests on it
(``state``). The engine decides nothing itself; it performs what two pure
rooms answer:

* ``scheduler`` — what a lane fetches next (a ``Piece`` of a file, a
  ``Cut`` of a slow range in the endgame, or nothing), and which groups and
  lanes new ``Params`` need (``reshape``);
* ``outcomes`` — what a request's report means: the file's size, a server
  that ignores Range, a changed file, a redirect, success, or a failure
  mapped to retry after d | fail the file | pause the replica | restart the
  file.

What a request's report means is decided in ``outcomes``; what the engine
then does with the file (finish, retry, restart, fail, commit) is in
``reports.py``: a ``FileReports`` made for each run, which asks the engine's
lanes only what its ``LaneControl`` names. The housekeeping tick is a
``Ticker`` (``ticker.py``), given what it reads.

Live re-parameterisation: ``apply()`` reshapes partitions while running. A
retiring lane sends nothing new, lets its outstanding responses finish,
then closes; a retiring group hands the unassigned part of its files back to
the queue. Nothing already fetched is fetched again.

Three limits hold whatever the parameters ask: at most ``max_per_origin``
connections open or opening to one origin (a lane that would exceed it
waits for one to close, and an idle lane's keep-alive gives way to it),
with ``limit_rate`` one token bucket for every body byte (``limiter``), and
each origin's request rate once it answered a limit, or under ``--max-rps``
(``politeness``: a request the origin's bucket does not admit yet goes back
to its file, and its lane waits).

Connections come from ``connect`` (by default ``access.connect``: direct, or
through a proxy; ``http.memory`` gives in-memory ones for tests), and every
request's headers from ``access`` (``http.access``: credentials scoped per
origin). The clock is
``loop.time()``; accounting and tuners read ``snapshot()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

from dtune.accounting import Accounting, Snapshot
from dtune.dataset import FileSpec
from dtune.engine.files import FileState
from dtune.engine.limiter import RateLimiter
from dtune.engine.options import EngineOptions
from dtune.engine.origins import OriginGate, OutageProbe
from dtune.engine.outcomes import (
    Failed,
    ReplicaHealth,
)
from dtune.engine.politeness import Politeness, Refused
from dtune.engine.reports import FileReports
from dtune.engine.request import RangeJob
from dtune.engine.result import FileResult, TransferResult
from dtune.engine.resume import resume_all
from dtune.engine.scheduler import Cut, Piece, Scheduler, give_back, release, to_receive
from dtune.engine.state import Lane, Partition, iter_lanes
from dtune.engine.stream import Stream, StreamClosed, StreamedFile, prefix
from dtune.engine.ticker import Ticker
from dtune.errors import HTTPError, RangeCut
from dtune.http.access import DIRECT, Access
from dtune.http.connection import Connection
from dtune.http.message import Origin
from dtune.http.ratelimit import hint as rate_hint
from dtune.params import Params
from dtune.tuners.base import RangePolicy

EventSink = Callable[[dict], None]
STREAM_POLL = 0.005  # seconds between looks at a stream's file (its writer wakes the loop sooner)
Connector = Callable[..., Awaitable[Connection]]  # (origin, *, timeout) -> a connected Connection


class Engine:
    """Fetch ``files`` into their ``final_paths`` with per-partition ``Params``, live-tunable.

    ``final_paths`` gives each file's destination (already checked to lie
    inside the output directory); ``partition_of`` maps a file to a
    partition name (default: everything in the first partition).
    ``range_policy`` (set before ``run``) sizes ranges per replica.

    Its collaborators see it through small interfaces: ``release``, ``adopt``,
    ``wake_partition``, ``wake_idle`` and ``staffed`` are the ``reports.LaneControl`` its
    ``FileReports`` asks; ``lanes``, ``shed_backlogs`` and ``wake_idle`` the
    ``ticker.LaneHousing`` its ``Ticker`` asks.
    """

    def __init__(self, files: list[FileSpec], final_paths: list[Path],
                 params: Params | dict[str, Params], *, options: EngineOptions | None = None,
                 partition_of: Callable[[int, FileSpec], str] | None = None,
                 on_event: EventSink | None = None, connect: Connector | None = None,
                 access: Access = DIRECT, stream: Stream | None = None) -> None:
        self.options = options or EngineOptions()
        self._on_event = on_event
        self.access = access  # request headers (credentials, scoped per origin) and the route
        self._open = connect or access.connect
        if isinstance(params, Params):
            params = {"all": params}
        self.partitions: dict[str, Partition] = {name: Partition(name, p) for name, p in params.items()}
        self.files: list[FileState] = []
        for i, (spec, path) in enumerate(zip(files, final_paths, strict=True)):
            name = partition_of(i, spec) if partition_of else next(iter(self.partitions))
            if name not in self.partitions:
                raise ValueError(f"partition {name!r} has no parameters")
            f = FileState(i, spec, path, name) if stream is None else StreamedFile(i, spec, path, name)
            self.files.append(f)
            self.partitions[name].files.append(f)
        replicas = max((1 + len(f.spec.mirrors) for f in self.files), default=1)
        self.health = ReplicaHealth(replicas, self.options)
        self.scheduler = Scheduler(self.options, replicas=replicas)
        self.scheduler.paused = self.health.paused_until  # one dict: paused replicas take no work
        self.scheduler.ranges_ok = {f.replicas[0].origin for f in self.files if f.spec.ranges}
        self.stream = stream  # the one file, written in order to a descriptor (``engine.stream``)
        if stream is not None:
            if len(self.files) != 1:
                raise ValueError(f"a stream takes one file, not {len(self.files)}")
            self.files[0].stream = stream
            self.scheduler.horizon = stream.horizon
        self.outage = OutageProbe(self._open, self.now, self.options.outage_probe)
        self.origin_alive = self.outage.alive   # origin → when it last sent bytes (ticks, answers)
        self._loop: asyncio.AbstractEventLoop | None = None
        self.acct: Accounting | None = None
        self._lane_ids = 0
        self._finished: asyncio.Event | None = None
        self.reports: FileReports | None = None  # acts on requests' reports (one per run)
        self._remaining = 0
        self._idle: set[Lane] = set()
        self._fatal: BaseException | None = None
        self.limiter: RateLimiter | None = None   # --limit-rate: one bucket for every connection
        # origins a connection was opened to in this run (the engine's, discovery's: ``fetch`` adds
        # those): a refused connect to one of them is an outage, retried; to any other, final
        self.reached: set[Origin] = set()
        self.gate = OriginGate(self.options.max_per_origin)
        # each origin's request rate, once it answered a limit (429) or under --max-rps
        self.politeness = Politeness(self.options.max_rps, max_wait=self.options.retry_after_max)
        self._pace_timers: dict[Lane, asyncio.TimerHandle] = {}
        self.per_origin = self.gate.open           # connections open or being opened, per origin
        # called once a tick, right after the accounting tick, with a fresh snapshot
        # (progress display, samples): they see rates that include the last tick
        self.tick_listeners: list[Callable[[Snapshot], None]] = []
        # called every control tick with a fresh snapshot (tuners: cumulative bytes, live RTT)
        self.control_listeners: list[Callable[[Snapshot], None]] = []

    # ---- public ------------------------------------------------------------
    @property
    def range_policy(self) -> RangePolicy | None:
        return self.scheduler.policy

    @range_policy.setter
    def range_policy(self, policy: RangePolicy | None) -> None:
        self.scheduler.policy = policy

    def now(self) -> float:
        return self._loop.time() if self._loop else time.monotonic()

    def snapshot(self) -> Snapshot:
        assert self.acct is not None, "snapshot() before run()"
        return self.acct.snapshot(self.now())

    def emit(self, kind: str, **fields: object) -> None:
        """An NDJSON event of the transfer (with the engine's clock), for whoever drives it."""
        self._emit(kind, **fields)

    @property
    def committing(self) -> bool:
        """Complete files are being verified, made durable and renamed (no byte moves meanwhile)."""
        return self.reports is not None and self.reports.committer.busy

    def lanes(self) -> Iterator[Lane]:
        """Every lane of every partition (retiring ones included)."""
        return iter_lanes(self.partitions.values())

    def apply(self, params: Params | dict[str, Params], reason: str = "", *, drain: bool = False) -> None:
        """Change cc/p/pp (per partition) while running; safe to call at any time. ``drain``: under
        ``retire_cut``, lanes that retire finish up to ``retire_drain_max`` rather than
        ``retire_cut_min``."""
        if isinstance(params, Params):
            params = {name: params for name in self.partitions}
        for name, new in params.items():
            part = self.partitions[name]
            old = part.params
            part.params = new
            if self.acct is not None:
                self.acct.params_changed(name, new)
            if self._loop is not None:
                self._reshape(part, drain=drain)
            if new != old:
                self._emit("params", partition=name, old=old.as_dict(), new=new.as_dict(), reason=reason)

    async def run(self) -> TransferResult:
        self._loop = asyncio.get_running_loop()
        if self.options.limit_rate:
            self.limiter = RateLimiter(self.options.limit_rate, self.options.limit_burst,
                                       clock=self._loop.time, loop=self._loop)
        self.acct = acct = Accounting(start=self.now())
        acct.tick(self.now())  # rates start from zero bytes at the start, not at the first tick
        self._finished = asyncio.Event()
        self.reports = reports = FileReports(
            self.options, self.files, self.scheduler, self.health, self.outage, acct, self,
            clock=self.now, loop=self._loop, emit=self._emit, on_file_ended=self._file_ended,
            pace=self.politeness)
        await self._prepare()
        self._emit("start", files=len(self.files), bytes=acct.bytes_total,
                   bytes_resumed=acct.bytes_resumed,
                   params={n: p.params.as_dict() for n, p in self.partitions.items()})
        ticker = asyncio.create_task(Ticker(
            self.options, acct, self.scheduler, self.outage, self.files, self, clock=self.now,
            control_listeners=self.control_listeners, tick_listeners=self.tick_listeners,
            paced=self.politeness.binding).run())
        committer = asyncio.create_task(reports.committer.run())
        follower = asyncio.create_task(self._follow(self.stream)) if self.stream is not None else None
        try:
            if self._remaining:
                for part in self.partitions.values():
                    self._reshape(part)
                await self._finished.wait()
            if self._fatal is not None:
                raise self._fatal
        finally:
            ticker.cancel()
            for timer in self._pace_timers.values():
                timer.cancel()
            committer.cancel()
            if follower is not None:
                follower.cancel()
                self.stream.stop()
            self.outage.cancel()
            if self.limiter is not None:
                self.limiter.close()
            await self._shutdown()
        acct.tick(self.now())
        result = TransferResult(snapshot=self.snapshot())
        for f in self.files:
            status = {"done": "done", "skipped": "kept" if f.kept_by else "skipped"}.get(f.status, "failed")
            error = f.error if status == "failed" else None
            if status == "failed" and error is None:
                error = f"{f.relpath}: transfer did not finish"
            checksum = f.checksum.label() if f.checksum is not None and status in ("done", "skipped") else None
            result.files.append(FileResult(f.relpath, status, f.size, error, checksum, list(f.dropped),
                                           f.renewals()))
        return result

    # ---- a stream ------------------------------------------------------------------
    async def _follow(self, stream: Stream) -> None:
        """Tell the stream's writer how far its file is on disk; move the window as it writes.

        The file's bytes are looked at every ``STREAM_POLL`` seconds (the writer, in its thread,
        wakes the loop each time it wrote). A file that starts over after bytes were written
        (it changed on the server) stops the stream: the bytes written cannot be taken back."""
        f = self.files[0]
        loop = asyncio.get_running_loop()
        moved = asyncio.Event()
        stream.advanced = lambda: loop.call_soon_threadsafe(moved.set)
        stream.start(f)
        gen = f.gen
        while True:
            if f.status == "failed":
                stream.stop()
                return
            if f.gen != gen:
                if stream.delivered:
                    stream.stop("it started over (changed on the server)")
                gen = f.gen
            stream.offer(prefix(f.done, f.size), f.size)
            if stream.closed:
                self._fatal = StreamClosed()
                self._finished.set()
                return
            if stream.ended and stream.error is not None:  # the window would never move again
                if f.status in ("queued", "active"):
                    self.reports.fail(f, stream.verdict(f) or stream.error)
                return
            if self.scheduler.horizon != stream.horizon:
                self.scheduler.horizon = stream.horizon
                self.wake_idle()
            moved.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(STREAM_POLL):
                    await moved.wait()

    # ---- setup / teardown ------------------------------------------------------
    async def _prepare(self) -> None:
        acct = self.acct
        states, notes = await asyncio.to_thread(resume_all, self.files, self.options.update,
                                                self.options.verify_existing)
        for note in notes:  # (a journal set aside, an older dtune's partial not resumed)
            self._emit("warning", reason=note)
        sizes_known = all(f.size is not None for f in self.files)
        acct.dataset(sum(f.wanted or 0 for f in self.files) if sizes_known else None, len(self.files))
        for name, part in self.partitions.items():
            acct.partition(name, part.params, bytes_total=sum(f.wanted or 0 for f in part.files),
                           files=len(part.files))
        for f, state in zip(self.files, states, strict=True):
            if state == "skip":
                self.reports.in_place(f)
                continue
            if state == "resume":
                acct.resumed(f.partition, f.resumed)
            else:
                f.journaled = f.size is None or f.size > self.options.split_threshold or f.piece is not None
            f.plan()
            self._remaining += 1
            self.partitions[f.partition].queue.append(f)
            if f.complete:  # everything was on disk already; only the commit is missing
                f.status = "active"
                self.reports.commit(f)

    async def _shutdown(self) -> None:
        await self.reports.committer.drain()  # a batch's files are its worker thread's until it ends
        lanes = list(self.lanes())
        for lane in lanes:
            if lane.task is not None:
                lane.task.cancel()
            if lane.wake is not None:
                lane.wake.set()  # (a lane whose cancellation was lost still sees the end)
            if lane.conn is not None:
                lane.conn.close()  # in-flight requests journal their bytes when they fail
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
    def _reshape(self, part: Partition, *, drain: bool = False) -> None:
        shape = self.scheduler.reshape(part)
        for group, replica in shape.start:
            lane = Lane(self._lane_ids, group, self.acct.meter("", part.name), replica)
            self._lane_ids += 1
            lane.wake = asyncio.Event()
            group.lanes.append(lane)
            lane.task = asyncio.create_task(self._lane_main(lane))
        if self.options.retire_cut and not self.scheduler.multi_replica:
            # (with several replicas each range is sized to end with its round: a retiring lane
            # drains it, rather than drop a connection and what is on its way to it)
            least = self.options.retire_drain_max if drain else self.options.retire_cut_min
            for lane in shape.retired:
                self._stop_receiving(lane, least=least)
        for lane in shape.wake:
            lane.wake.set()

    def shed_backlogs(self, seconds_left: float | None) -> None:
        """Lanes that would be the tail (``Scheduler.backlogged``) give their ranges back and reconnect."""
        for lane in self.scheduler.backlogged(list(self.lanes()), self.now(), seconds_left):
            self._stop_receiving(lane, "its backlog would outlast the transfer")

    def _stop_receiving(self, lane: Lane, why: str = "its lane retires", least: int = 0) -> None:
        """A lane gives the unreceived rest of the range it reads back to its file and drops its
        connection; the requests pipelined behind go back without penalty (``retire_cut``, backlogs).
        A connection with less than ``least`` bytes to go, the range it reads and those pipelined
        behind it, is left to finish."""
        conn = lane.conn
        job = conn.current if conn is not None else None
        if (not isinstance(job, RangeJob) or not job.ranged or job.status != 206 or job.end is None
                or job.gen != job.file.gen):
            return
        if least and to_receive(lane) < least:
            return
        f = job.file
        give_back(f, job, job.pos)           # [pos, end) is unassigned again …
        job.end, job.cut = job.pos, True     # … and the response ends where it is
        self.adopt(f)
        conn.close(RangeCut(f"{job.describe()}: {why}", innocent=True))
        self.wake_partition(f)

    def adopt(self, f: FileState) -> None:
        """A file whose group retired (or that has none) and has bytes to fetch again goes back to
        the front of its queue: nobody else would ever take them (``pop_ready`` skips a second copy)."""
        if (f.group is None or f.group.retiring) and f.status == "active" and f.has_work():
            f.group = None
            self.partitions[f.partition].queue.appendleft(f)

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
                if self._finished.is_set():
                    break
                if lane.outstanding == 0:
                    self._idle.add(lane)
                    if lane.conn is not None and self.gate.wanted(lane.conn.origin):
                        self._free_idle(lane.conn.origin)   # a lane with work waits for a connection
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
                self.acct.connection_closed()
            self._drop_lane(lane)

    async def _fill(self, lane: Lane) -> None:
        scheduler = self.scheduler
        while lane.outstanding < scheduler.pipeline(lane) and not lane.retiring:
            action = scheduler.next(lane, self.now())
            if action is None:
                return
            job = self._request(action, lane)
            wait = self.politeness.admit(job.origin, self.now())
            if wait:
                self._defer(job, lane, wait)   # the origin's request rate: not yet
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
            scheduler.lead(job)
            conn.send(job)

    def _request(self, action: Piece | Cut, lane: Lane) -> RangeJob:
        """The request for what the scheduler handed out (cutting the victim first, for a Cut)."""
        piece = action.piece if isinstance(action, Cut) else action
        job = RangeJob(piece.file, lane, piece.start, piece.end, piece.ranged, report=self.reports.report,
                       journal_every=self.options.journal_every, small_body=self.options.small_error_body,
                       access=self.access, limiter=self.limiter, pace=self._pace)
        if piece.whole_stream:
            piece.file.full_job = job
        if isinstance(action, Cut):
            victim = action.victim
            old_end = victim.end
            victim.end = action.at
            victim.cut = True
            self._emit("steal", file=piece.file.relpath, replica=lane.replica,
                       victim_replica=victim.replica, start=action.at, end=old_end)
        return job

    def _defer(self, job: RangeJob, lane: Lane, wait: float) -> None:
        """The origin's pace does not admit ``job`` yet (``politeness``): it goes back to its file,
        and the lane is woken when a request may go. A pause (a second or more: Retry-After) also
        holds the file back, so that the lane takes another origin's file meanwhile. An origin
        given up fails the job's file with the reason."""
        if wait == math.inf:
            reason = self.politeness.refusal(job.origin) or f"{job.origin}: given up"
            self.reports.report(job, Failed(HTTPError(f"{job.file.relpath}: {reason}", retryable=False)))
            return
        self._unassign(job)
        now = self.now()
        if wait >= 1.0:
            job.file.not_before = max(job.file.not_before, now + wait)
        at = now + wait + self.options.timer_slack
        timer = self._pace_timers.get(lane)
        if timer is not None and timer.when() <= at:
            return   # (woken by then anyway: it asks again)
        if timer is not None:
            timer.cancel()
        self._pace_timers[lane] = self._loop.call_at(at, self._pace_wake, lane)

    def _pace_wake(self, lane: Lane) -> None:
        self._pace_timers.pop(lane, None)
        lane.wake.set()

    def _pace(self, job: RangeJob, status: int, headers: dict[str, str]) -> None:
        """An answer's head (``RangeJob.on_headers``): what it says of the origin's request limit."""
        hint = rate_hint(headers, time.time())
        change = self.politeness.answered(job.origin, status, hint, self.now(), job.t_sent)
        if change is None:
            return
        if isinstance(change, Refused):
            self._emit("warning", reason=change.reason)
            return
        self._emit("rate_limited", origin=str(job.origin),
                   rps=None if change.rate is None else round(change.rate, 2),
                   pause=None if change.pause is None else round(change.pause, 3), reason=change.reason)

    async def _connect(self, lane: Lane, job: RangeJob) -> bool:
        if lane.conn is not None:
            lane.conn.close()
            lane.conn = None
            self.acct.connection_closed()
        origin: Origin = job.origin
        if not self.gate.admit(lane, origin):  # at the cap: wait for a connection to close
            self._unassign(job)
            self._free_idle(origin)
            return False
        started = self.now()
        try:
            conn = await self._open(origin, timeout=self.options.connect_timeout)
        except BaseException as exc:
            self._connection_gone(origin)
            if not isinstance(exc, HTTPError):
                raise
            final = self._dead(origin, exc, job)
            failure = HTTPError(f"{job.file.relpath}: {exc}", retryable=exc.retryable and not final)
            failure.network = getattr(exc, "network", False)  # type: ignore[attr-defined]
            self.reports.report(job, Failed(failure))
            return False
        conn.closed.add_done_callback(lambda _done, o=origin: self._connection_gone(o))
        self.reached.add(origin)
        # (one opened ahead, by discovery, says how long its opening took: http.warm)
        self.acct.add_rtt(conn.connect_seconds if conn.connect_seconds is not None else self.now() - started)
        lane.conn = conn
        lane.meter.origin = str(origin)
        self.acct.connection_opened()
        if lane.retiring or job.file.status not in ("queued", "active"):
            self._unassign(job)
            return False
        return True

    def _dead(self, origin: Origin, exc: HTTPError, job: RangeJob) -> bool:
        """Is this failed connect final for the job's file? Its origin's name does not resolve or
        its port refuses (``Unreachable.dead``), no connection to it ever opened in this run
        (``reached``: an origin that answered and went away is an outage, retried), and the file
        has no other replica to take its bytes."""
        return getattr(exc, "dead", False) and origin not in self.reached and len(job.file.replicas) == 1

    def _free_idle(self, origin: Origin) -> None:
        """Close one idle lane's connection to ``origin`` (nothing in flight on it): its keep-alive
        is worth less than a lane with work waiting under ``max_per_origin``."""
        for lane in self._idle:
            conn = lane.conn
            if conn is not None and conn.origin == origin and not conn.in_flight:
                lane.conn = None
                self.acct.connection_closed()
                conn.close()
                return

    def _connection_gone(self, origin: Origin) -> None:
        """A connection to ``origin`` closed (or never opened): a lane waiting for one may go."""
        for lane in self.gate.gone(origin):
            lane.wake.set()

    def release(self, job: RangeJob, wake: bool = True) -> None:
        release(job.file, job.lane)
        if wake:
            job.lane.wake.set()

    def _unassign(self, job: RangeJob) -> None:
        """Give a job that was never sent back to its file (the lane is not woken: it chose so)."""
        self.release(job, wake=False)
        give_back(job.file, job, job.start)
        self.adopt(job.file)

    def wake_partition(self, f: FileState) -> None:
        for lane in list(self._idle):
            if lane.group.partition.name == f.partition:
                lane.wake.set()

    def _file_ended(self) -> None:
        """A file ended (done, skipped or failed: ``FileReports``); the last one ends the run."""
        self._remaining -= 1
        if self._remaining <= 0:
            self._finished.set()

    def wake_idle(self) -> None:
        """Wake every idle lane: a backoff may have expired."""
        for lane in list(self._idle):
            lane.wake.set()

    def staffed(self) -> set[int]:
        """The replicas the parameters of some partition give lanes to."""
        return {r for part in self.partitions.values()
                for r, n in enumerate(part.params.lanes_per_replica()) if n > 0}

    def _emit(self, kind: str, **fields: object) -> None:
        if self._on_event is not None:
            t = round(self.now() - (self.acct.start if self.acct else 0), 3)
            self._on_event({"event": kind, "t": t, **fields})
