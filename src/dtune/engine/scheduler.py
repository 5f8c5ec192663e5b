"""Which piece of which file a lane fetches next: pure decisions on the engine's state.

Theory of operation
-------------------
A lane asks its group for work (``Scheduler.next``). The answer is

1. a new range of a file the group already holds, if that file has bytes
   nobody is fetching and fewer than ``p`` lanes on it (or this lane is
   already one of them), else
2. the next ready file from the partition's queue (this is how pipelining
   overlaps the end of one file with the start of the next), else
3. with several replicas, the endgame (``steal``): unassigned bytes of a
   file another group holds, or the tail of a slow range being received on
   another lane, cut where victim and thief finish together, else nothing.

So ``cc`` bounds the files being worked on at once, ``p`` the lanes per
file, ``pp`` the requests in flight per lane (``pipeline``). Small files are
one request each; files above ``split_threshold`` are cut into ranges as
lanes ask (``carve``: the ``RangePolicy`` of the tuner, else the taper of
``ranges.next_range_size``). With replicas, ``admits`` keeps a slow replica
from starting a piece it would still be fetching after everyone else.

The answer is an action: a ``Piece`` to request, a ``Cut`` (end a victim's
range early and request its tail), or None. The scheduler keeps the books
that make the next answer right (which bytes are unassigned, which lanes
hold a file, which files a group holds); the engine turns the action into
a request and sends it. Nothing here does I/O; the clock is passed in.

``reshape`` is the other half: new ``Params`` for a partition become groups
and lanes to add or retire (retiring ones finish what they have and close).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dtune.engine.ranges import next_range_size
from dtune.engine.state import Group, Lane, Partition
from dtune.engine.stream import window_range, window_share

if TYPE_CHECKING:
    from dtune.engine.files import FileState
    from dtune.engine.options import EngineOptions
    from dtune.engine.request import RangeJob
    from dtune.tuners.base import RangePolicy


@dataclass(slots=True)
class Piece:
    """Bytes [start, end) of ``file`` for one request (``end`` None: until the server says).

    ``ranged`` says whether a Range header is sent; ``whole_stream`` marks the
    one whole-file response of a file whose server ignores Range.
    """

    file: FileState
    start: int
    end: int | None
    ranged: bool
    whole_stream: bool = False


@dataclass(slots=True)
class Cut:
    """End ``victim``'s range at ``at`` and fetch [at, its old end) as ``piece``."""

    victim: RangeJob
    at: int
    piece: Piece


@dataclass(slots=True)
class Shape:
    """What ``reshape`` decided: lanes to start (group, replica), lanes that retire now, lanes to wake."""

    start: list[tuple[Group, int]] = field(default_factory=list)
    retired: list[Lane] = field(default_factory=list)
    wake: list[Lane] = field(default_factory=list)


# ---- bookkeeping of requests per file and lane ------------------------------------------------
_NO_LANES: dict[int, int] = {}  # a file's ``lanes`` with no request out: shared, never written
def assign(f: FileState, lane: Lane) -> None:
    """A request for ``f`` is about to go out on ``lane``."""
    f.in_flight += 1
    lanes = f.lanes or {}  # (a file's own dict from its first request: none is shared)
    lanes[lane.id] = lanes.get(lane.id, 0) + 1
    f.lanes = lanes
    lane.outstanding += 1


def release(f: FileState, lane: Lane) -> None:
    """A request for ``f`` on ``lane`` has ended (or was never sent)."""
    f.in_flight -= 1
    left = f.lanes.get(lane.id, 1) - 1
    if left:
        f.lanes[lane.id] = left
    else:
        f.lanes.pop(lane.id, None)
        if not f.lanes:  # (an emptied dict keeps its table: a million ended files would hold one each)
            f.lanes = _NO_LANES
    lane.outstanding -= 1


def give_back(f: FileState, job: RangeJob, start: int) -> None:
    """The unfetched bytes [start, job.end) of an ended request are unassigned again."""
    if f.full_job is job:
        f.full_job = None
    if f.size is None:
        # the probe ended without a size: asked again. (It may have become the whole-file stream
        # of a server that ignores Range, ranged no more: the probe all the same, else the file
        # would wait for ever for an answer that is not coming)
        f.probing = False
        return
    if f.unassigned is None:
        return
    end = job.end
    if f.single_stream:
        f.unassigned = f.done.complement(f.size)
    elif end is not None and end > start:
        f.unassigned.add(start, end)
        for s, e in f.done:  # never hand out bytes already on disk
            f.unassigned.remove(s, e)
    if f.size == 0:
        f.done_zero = False


def to_receive(lane: Lane) -> int:
    """Bytes the requests on ``lane``'s connection still have to bring (known ends only)."""
    conn = lane.conn
    if conn is None:
        return 0
    return sum(q.end - q.pos for q in conn.queued if getattr(q, "end", None) is not None)


class Scheduler:
    """Hands out work to lanes (see the module docstring).

    ``paused`` maps a replica to the engine time until which it takes no
    work; ``remaining`` (bytes still to come) and ``lanes_per_replica`` are
    refreshed by the engine every tick and read by the replica admission.
    """

    def __init__(self, options: EngineOptions, *, policy: RangePolicy | None = None,
                 replicas: int = 1) -> None:
        self.options = options
        self.policy = policy
        self.replicas = replicas
        self.paused: dict[int, float] = {}
        self.remaining: int | None = None
        self.lanes_per_replica: dict[int, int] = {}
        self.rtt: float | None = None   # the path's RTT, refreshed by the engine (one-source endgame)
        self.no_ranges: set = set()     # origins seen to ignore Range: their files go as one stream
        self.ranges_ok: set = set()     # origins seen (or said by HEAD) to honour Range
        self.no_pipeline: set = set()   # origins that close after each answer: pp 1
        self.pipelines: set = set()     # origins an answer showed keeping its connection: pp as planned
        # a stream (``engine.stream``): no range may start at or reach past this byte (None: no window)
        self.horizon: int | None = None
        self._group_ids = 0

    @property
    def multi_replica(self) -> bool:
        """Several replicas under a range policy: admission, short pipelines and the endgame apply."""
        return self.policy is not None and self.replicas > 1

    # ---- the pipeline of one lane ------------------------------------------------------
    def pipeline(self, lane: Lane) -> int:
        """Requests this lane may keep in flight: pp, scaled down for slower replicas.

        With several replicas a slow one must not hoard whole files in its
        pipeline (the transfer would end waiting on it): its lanes get
        ``pp × its throughput / the fastest's``, at least 1. At pp 1, a lane
        whose range has passed its ``lead`` mark may send one more.
        """
        pp = lane.group.partition.params.pp
        conn = lane.conn
        if conn is not None:
            if conn.one_at_a_time or (self.no_pipeline and conn.origin in self.no_pipeline):
                return 1  # a route that cannot carry a pipeline (a proxy), or an origin that closes
            if conn.origin not in self.pipelines:
                if not conn.kept_alive:
                    # one request until an answer shows the server keeps connections: an HTTP/1.0
                    # server closes after the first, and the reset its close sends (with requests
                    # unread) can take the end of that first answer with it
                    return 1
                self.pipelines.add(conn.origin)
        if not self.multi_replica:
            return pp
        share = self.policy.share(lane.replica)
        if pp == 1 and lane.outstanding == 1 and conn is not None:
            current = conn.current
            if current is not None and getattr(current, "leading", False):
                return 2  # its one range is about to end: ask for the next (``lead``)
        return pp if share >= 1.0 else max(1, round(pp * share))

    def lead(self, job: RangeJob) -> None:
        """Several replicas, one range at a time: mark where, in ``job``, the lane should ask for its
        next range, so that it arrives as this one ends instead of a round trip later.

        That is ``lead_rtts`` round trips of the replica's per-connection rate before the end. With
        one range in flight per connection (pp 1), each range otherwise costs a round trip of
        silence: 2-6 % of the rate at 20-60 ms with ranges a second long. A range shorter than
        that is marked at once, and the lane keeps two in flight. Only for a replica within
        ``1 / lead_share`` of the fastest per connection: a slower one's estimate is the least
        sure, and a second range queued behind a range that crawls held the end of a dataset
        for 1.5-4 s."""
        if (not self.multi_replica or not job.ranged or job.end is None
                or job.lane.group.partition.params.pp != 1):
            return
        policy = self.policy
        rate = policy.rate(job.replica)
        if not rate or policy.share(job.replica) < self.options.lead_share:
            return  # not measured yet, or a policy that does not adapt (static chunks), or slow
        rtt = policy.rtt_of(job.replica) or self.options.steal_rtt
        job.lead_at = max(job.start, job.end - int(self.options.lead_rtts * rtt * rate))

    # ---- the next piece -------------------------------------------------------------------
    def next(self, lane: Lane, now: float) -> Piece | Cut | None:
        """The lane's next request (see the module docstring), already counted on the lane."""
        group = lane.group
        part = group.partition
        p = part.params.p
        replica = lane.replica
        if self.paused.get(replica, 0.0) > now:
            return None
        for f in group.files:
            if (f.not_before > now or not f.has_work() or not f.serves(replica) or self.unproven(f, lane)
                    or self.held(f)):
                continue
            if (lane.id in f.lanes or len(f.lanes) < p) and self.admits(lane, f, now):
                if self.ranges_full(f, lane):
                    return None  # this lane holds enough of f; another file would only add more
                return self.carve(f, lane, now)
        f = part.pop_ready(now, replica)
        if f is None:
            return self.steal(lane, now)
        if self.held(f):
            part.queue.appendleft(f)  # the stream's window is full: a lane is woken when it moves
            return None
        if not self.admits(lane, f, now):
            part.queue.appendleft(f)  # for a faster replica; this lane waits for a wake-up
            return None
        f.status = "active"
        f.group = group
        group.files.append(f)
        return self.carve(f, lane, now)

    def unproven(self, f: FileState, lane: Lane) -> bool:
        """Is ``f`` a split file with a first request out to an origin not yet known to honour
        Range? Its other ranges wait for that answer: from a server that ignores Range, each
        would bring the whole file (python -m http.server). Not with replicas: there each
        connection's first range is a probe of a window or two, and waiting would cost every
        replica a round trip (a second at +500 ms)."""
        return (f.in_flight > 0 and not f.ranges_seen and not f.single_stream and not f.done
                and len(f.replicas) == 1 and f.size is not None and f.size > self.options.split_threshold
                and f.replicas[lane.replica].origin not in self.ranges_ok)

    def held(self, f: FileState) -> bool:
        """A stream's split file whose next unassigned byte lies past the window (``horizon``)."""
        if self.horizon is None or f.unassigned is None or f.single_stream or f.size is None \
                or f.size <= self.options.split_threshold:
            return False
        first = f.unassigned.first()
        return first is not None and first[0] >= self.horizon

    def ranges_full(self, f: FileState, lane: Lane) -> bool:
        """Does ``lane`` already hold ``range_pipeline`` ranges of the split file ``f``?"""
        return (f.size is not None and f.size > self.options.split_threshold
                and f.lanes.get(lane.id, 0) >= self.options.range_pipeline)

    def admits(self, lane: Lane, f: FileState, now: float) -> bool:
        """Several replicas: may this lane's replica start the next piece of ``f``?

        The piece is the whole file below the split threshold, else the range
        the policy would size for this replica. A slow replica must not start
        a piece it would still be fetching after the faster ones have finished
        everything else (see ``MdtpSizer.admits``). A file some replica no
        longer serves (``FileState.refused``: it refused the file, or serves
        another size) is admitted on every replica left: the faster ones the
        rule counts on may be the ones it lost.
        """
        policy = self.policy
        if not self.multi_replica or f.size is None or f.refused:
            return True
        unassigned = f.unassigned.total() if f.unassigned is not None else f.size
        if f.size <= self.options.split_threshold:
            piece = unassigned
        else:
            piece = policy.size(lane.replica, unassigned, now) or unassigned
        return policy.admits(lane.replica, piece, self.remaining, self.lanes_per_replica)

    def carve(self, f: FileState, lane: Lane, now: float) -> Piece:
        """Take the next piece of ``f`` for ``lane``: a size probe, the whole file, or a range."""
        opts = self.options
        if (self.no_ranges and f.size is not None and f.size > opts.split_threshold and not f.single_stream
                and not f.done and f.in_flight == 0 and f.replicas[lane.replica].origin in self.no_ranges):
            f.single_stream = True  # learnt once per origin: ranges would each bring the whole file
        if f.size is None:
            f.probing = True
            piece = Piece(f, 0, opts.first_range, ranged=True)
        elif f.size == 0 or (f.single_stream and f.full_job is None):
            piece = Piece(f, 0, f.size, ranged=False, whole_stream=f.single_stream)
            if f.single_stream:
                f.unassigned.remove(0, f.size)
        elif not f.done and f.size <= opts.split_threshold and f.unassigned.total() == f.size:
            f.unassigned.remove(0, f.size)
            piece = Piece(f, 0, f.size, ranged=False)
        else:
            params = f.group.partition.params if f.group else lane.group.partition.params
            unassigned = f.unassigned.total()
            size = None
            if self.policy is not None:
                size = self.policy.size(lane.replica, unassigned, now)
            if size is None:
                cap = self.closing_range()
                size = next_range_size(unassigned, params.p, min(params.pp, opts.range_pipeline_cap),
                                       min_range=min(opts.min_range, cap), max_range=min(opts.max_range, cap))
            if self.horizon is not None:  # a stream: inside the window, shared by its lanes
                lanes = sum(self.lanes_per_replica.values()) or params.p
                size = min(size, window_share(opts.stream_window, lanes, opts.range_pipeline, opts.min_range))
                size = window_range(f.unassigned.first()[0], size, self.horizon)
            start, end = f.unassigned.pop_front(max(1, size))
            piece = Piece(f, start, end, ranged=True)
        assign(f, lane)
        return piece

    def closing_range(self) -> int:
        """One replica: the largest range that lets every lane finish together at the end.

        The file's own taper (``next_range_size``) counts only the lanes on that file; at
        the end of a transfer the last files hold every lane, so ranges are also capped
        at what is left of the whole transfer spread over two ranges per lane
        (``remaining / (2·lanes·range_pipeline)``, at least ``closing_min_range``). The cap binds
        once less than ``2·lanes·range_pipeline·max_range`` is left (1 GiB for 16 lanes),
        and keeps unassigned bytes for idle lanes to take up to the end, instead of long
        ranges in flight that only a cut (a dropped connection) could shorten."""
        opts = self.options
        lanes = sum(self.lanes_per_replica.values())
        if self.multi_replica or self.remaining is None or lanes <= 0:
            return opts.max_range
        return max(opts.closing_min_range, self.remaining // (2 * lanes * max(1, opts.range_pipeline)))

    # ---- the endgame -----------------------------------------------------------------------
    def steal(self, lane: Lane, now: float) -> Piece | Cut | None:
        """The endgame: the queue is empty, so this lane helps the partition's other groups finish.

        It first takes unassigned bytes of a file another group holds (no
        more than ``p`` lanes per file is a rule for the steady state, not for
        the end). Failing that, an idle lane looks at the ranges being
        received on the other lanes: for each, with ``R`` bytes to go at the
        victim's measured rate ``v``, the thief (rate ``t``; ``o`` = its RTT,
        twice if it must connect) could take the last ``R - x`` bytes where
        both finish together: ``x / v = o + (R - x) / t``. A cut is made only
        if the gain is worth ``steal_gain_rtts`` round trips and the tail is
        at least ``steal_min``; the slowest-to-finish goes first. The victim
        stops at the cut and drops its connection (``RangeJob.cut``); what it
        had pipelined behind goes back to the queue.

        With several replicas, ``t`` is the thief's replica's per-connection
        estimate and only victims slower than ``t / steal_ratio`` are cut (a
        stalled connection, a slow replica). With one, every connection runs
        the same path at the victim's rate, so the idle lanes share the
        remainder evenly with the victim: with ``m`` idle lanes for each long
        range in flight, the thief takes ``1/(m+1)`` of it (``m = 1``: half),
        and only a victim that has been receiving for ``steal_warm_rtts``
        round trips (out of slow start: a rate measured in slow start says
        nothing) is cut. ``endgame=False`` turns the
        one-source endgame off; under ``limit_rate`` it only takes unassigned bytes.
        """
        policy = self.policy
        opts = self.options
        multi = self.multi_replica
        if lane.retiring or not (multi or opts.endgame):
            return None
        partition = lane.group.partition
        for group in partition.groups:
            if group is lane.group:
                continue
            for f in group.files:
                if f.not_before <= now and f.has_work() and f.serves(lane.replica) \
                        and not self.unproven(f, lane) and not self.ranges_full(f, lane) and not self.held(f) \
                        and self.admits(lane, f, now):
                    return self.carve(f, lane, now)
        if lane.outstanding:  # cut only for an idle lane: its own queue would delay the tail
            return None
        if opts.limit_rate and not multi:
            # one path under --limit-rate: the bucket, shared, sets the pace of every connection, so
            # a cut gains nothing and drops what the paused victim's buffers hold (1.3x the bytes sent)
            return None
        if multi:
            t = policy.rate(lane.replica)
            if not t:
                return None
            rtt = policy.rtt_of(lane.replica) or opts.steal_rtt
        else:
            t, rtt = None, self.rtt or opts.steal_rtt
        connected = lane.conn is not None and lane.conn.usable
        o = rtt if connected else 2 * rtt           # a request, or a connect and a request
        share = 1 if multi else self._thieves_per_victim(partition, lane)
        least = opts.steal_min_replicas if multi else opts.steal_min  # the least tail worth a cut
        best: tuple[float, RangeJob, int] | None = None
        for group in partition.groups:
            for other in group.lanes:
                conn = other.conn
                job = conn.current if conn is not None and other is not lane else None
                if (job is None or not getattr(job, "ranged", False) or job.status != 206
                        or job.end is None or job.gen != job.file.gen or job.file.size is None
                        or not job.file.serves(lane.replica)
                        or (multi and other.replica == lane.replica)):  # (the same path: no faster)
                    continue
                elapsed = now - max(job.t_sent, other.last_done)  # (pipelined: from the answer before)
                got = job.pos - job.first
                left = job.end - job.pos
                if left < 2 * opts.steal_min or elapsed <= 0 or got <= 0:
                    continue
                v = got / elapsed
                if multi and opts.steal_ratio * v >= t:
                    continue
                if not multi and elapsed < opts.steal_warm_rtts * rtt:
                    continue
                if multi:
                    keep = int(v * (o + left / t) / (1 + v / t))
                else:  # the same path: the idle lanes split the remainder evenly with the victim
                    keep = int((left * share + v * o) / (share + 1))
                gain = left / v - keep / v
                if left - keep < least or gain < max(opts.steal_gain_rtts * o, opts.steal_gain_min):
                    continue
                if best is None or gain > best[0]:
                    best = (gain, job, keep)
        if best is None:
            return None
        _, victim, keep = best
        cut = victim.pos + keep
        piece = Piece(victim.file, cut, victim.end, ranged=True)
        assign(victim.file, lane)
        return Cut(victim, cut, piece)

    def backlogged(self, lanes: Iterable[Lane], now: float, seconds_left: float | None) -> list[Lane]:
        """One replica: the lanes holding more work than they can finish in time (see ``backlog_seconds``).

        A lane's backlog is the rest of the range it reads plus the ranges
        pipelined behind it, at the rate that range has been arriving (once
        it has been receiving for ``steal_warm_rtts`` round trips).
        """
        opts = self.options
        if self.multi_replica or not opts.endgame or opts.limit_rate or seconds_left is None:
            return []   # (under --limit-rate the bucket sets every lane's pace: see steal)
        rtt = self.rtt or opts.steal_rtt
        limit = max(opts.backlog_seconds, 2 * seconds_left)
        out = []
        for lane in lanes:
            conn = lane.conn
            job = conn.current if conn is not None else None
            if (lane.retiring or job is None or not getattr(job, "ranged", False) or job.status != 206
                    or job.end is None):
                continue
            elapsed = now - max(job.t_sent, lane.last_done)
            got = job.pos - job.first
            if elapsed < opts.steal_warm_rtts * rtt or got <= 0:
                continue
            if got / elapsed < opts.speed_limit:
                continue  # below the speed floor: the floor's to judge (a new connection restarts its window)
            backlog = sum(q.end - q.pos for q in conn.queued
                          if getattr(q, "ranged", False) and q.end is not None)
            if backlog / (got / elapsed) > limit and backlog >= 2 * opts.steal_min:
                out.append(lane)
        return out

    def _thieves_per_victim(self, partition: Partition, lane: Lane) -> int:
        """One replica: how many idle lanes each long range in flight can feed (at least 1)."""
        idle = victims = 0
        for group in partition.groups:
            for other in group.lanes:
                if other.retiring:
                    continue
                job = other.conn.current if other.conn is not None else None
                if other is lane or (other.outstanding == 0 and job is None):
                    idle += 1
                elif job is not None and getattr(job, "ranged", False) and job.end is not None \
                        and job.end - job.pos >= 2 * self.options.steal_min:
                    victims += 1
        return max(1, idle // max(1, victims))

    # ---- params → groups and lanes ---------------------------------------------------------
    def reshape(self, part: Partition) -> Shape:
        """Groups and lanes for the partition's current ``Params``.

        Missing groups are created; surplus
        groups retire and hand the unassigned part of their files back to the
        queue; each active group gets the lanes per replica the params ask for
        (the new ones are returned for the engine to start), surplus lanes
        retire (returned too, for ``retire_cut``). Every lane is woken: pp
        may have grown.
        """
        params = part.params
        shape = Shape()
        was_retiring = {lane.id for group in part.groups for lane in group.lanes if lane.retiring}
        active = part.active_groups()
        while len(active) < params.cc:
            group = Group(self._group_ids, part)
            self._group_ids += 1
            part.groups.append(group)
            active.append(group)
        for group in active[params.cc:]:
            self.retire_group(group)
        wanted = params.lanes_per_replica()
        for group in part.active_groups():
            for lane in group.lanes:
                if lane.replica >= len(wanted) and not lane.retiring:
                    lane.retiring = True
            for replica, want in enumerate(wanted):
                live = [lane for lane in group.lanes if not lane.retiring and lane.replica == replica]
                shape.start += [(group, replica)] * max(0, want - len(live))
                for lane in live[want:]:
                    lane.retiring = True
        shape.wake = [lane for group in part.groups for lane in group.lanes]
        shape.retired = [lane for lane in shape.wake if lane.retiring and lane.id not in was_retiring]
        return shape

    @staticmethod
    def retire_group(group: Group) -> None:
        """The group takes no new work; its files' unassigned bytes go back to the queue."""
        group.retiring = True
        part = group.partition
        for f in group.files:
            f.group = None
            if f.has_work():
                part.queue.appendleft(f)
        group.files.clear()
        for lane in group.lanes:
            lane.retiring = True
