"""The scheduler on plain objects: which piece a lane gets, admission, reshaping, the endgame cut.

No event loop, no socket, no disk: partitions, groups, lanes and file states
are built by hand, the clock is a number, and a stub stands for the range
policy and for a lane's connection.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from dtune.accounting import Meter
from dtune.dataset import FileSpec
from dtune.engine.files import FileState
from dtune.engine.options import EngineOptions
from dtune.engine.ranges import RangeSet
from dtune.engine.request import NEVER, RangeJob
from dtune.engine.scheduler import Cut, Piece, Scheduler, give_back, release
from dtune.engine.state import Lane, Partition
from dtune.params import Params

KIB = 1024
MIB = 1024 * KIB
OPTS = EngineOptions(split_threshold=256 * KIB, min_range=64 * KIB, max_range=512 * KIB,
                     first_range=64 * KIB, steal_min=64 * KIB)


def file_state(i: int, size: int | None, *, mirrors: int = 0, part: str = "all", ranges: bool = True) -> FileState:
    """``ranges``: the source said its server honours Range (a HEAD's Accept-Ranges)."""
    spec = FileSpec(url=f"http://a.test/f{i}", relpath=f"f{i}", size=size, ranges=ranges,
                    mirrors=[f"http://m{r}.test/f{i}" for r in range(1, mirrors + 1)])
    f = FileState(i, spec, Path(f"/nonexistent/f{i}"), part)
    f.plan()
    return f


def setup(params: Params, files: list[FileState], *, policy: object = None,
          options: EngineOptions = OPTS) -> tuple[Scheduler, Partition]:
    part = Partition("all", params)
    part.files = list(files)
    part.queue.extend(files)
    replicas = max((len(f.replicas) for f in files), default=1)
    sched = Scheduler(options, policy=policy, replicas=replicas)
    sched.ranges_ok = {f.replicas[0].origin for f in files if f.spec.ranges}  # as the engine seeds it
    shape = sched.reshape(part)
    ids = iter(range(1000))
    for group, replica in shape.start:
        group.lanes.append(Lane(next(ids), group, Meter("", "all"), replica))
    return sched, part


def lanes(part: Partition) -> list[Lane]:
    return [lane for g in part.groups for lane in g.lanes]


class Policy:
    """A range policy with fixed per-connection rates (bytes/s) per replica."""

    def __init__(self, rates: dict[int, float], *, size: int | None = None, rtt: float = 0.01,
                 refuse: set[int] = frozenset()) -> None:
        self.rates, self._size, self.rtt, self.refuse = rates, size, rtt, refuse

    def size(self, replica, unassigned, now):
        return None if self._size is None else min(self._size, unassigned)

    def observe(self, *a): pass
    def forget(self, replica): pass

    def share(self, replica):
        return self.rates.get(replica, 0.0) / max(self.rates.values())

    def rate(self, replica):
        return self.rates.get(replica)

    def rtt_of(self, replica):
        return self.rtt

    def admits(self, replica, nbytes, remaining, lanes):
        return replica not in self.refuse


class Conn:
    """A lane's connection as the endgame sees it: usable, and the response being read."""

    def __init__(self, current: RangeJob | None = None, behind: tuple[RangeJob, ...] = ()) -> None:
        self.current, self.usable = current, True
        self.queued = ([current] if current is not None else []) + list(behind)


# ---- the next piece ---------------------------------------------------------------------------------
def test_a_small_file_goes_whole_in_one_request_and_counts_on_the_lane():
    f = file_state(0, 100 * KIB)
    sched, part = setup(Params(1, 1, 1), [f])
    lane = lanes(part)[0]
    piece = sched.next(lane, now=0.0)
    assert piece == Piece(f, 0, 100 * KIB, ranged=False)
    assert (f.status, f.group, f.in_flight, f.lanes, lane.outstanding) == ("active", lane.group, 1, {lane.id: 1}, 1)
    assert not f.unassigned and sched.next(lane, now=0.0) is None   # nothing left anywhere


def test_a_lane_holds_at_most_range_pipeline_ranges_of_one_split_file():
    f, small = file_state(0, 64 * MIB), file_state(1, 1000)
    sched, part = setup(Params(1, 1, 8), [f, small])
    lane = lanes(part)[0]
    got = [sched.next(lane, now=0.0) for _ in range(3)]
    assert [g is not None for g in got] == [True, True, False]   # a deep pp does not deepen it …
    assert lane.outstanding == 2 and part.queue[0] is small       # … nor pull in another file
    release(f, lane)
    assert sched.next(lane, now=0.0).file is f                    # one ended: the next range


def test_a_split_file_on_an_origin_not_known_to_honour_range_waits_for_its_first_answer():
    big, other = file_state(0, 64 * MIB, ranges=False), file_state(1, 64 * MIB, ranges=False)
    sched, part = setup(Params(1, 2, 2), [big, other])
    a, b = lanes(part)
    first = sched.next(a, now=0.0)
    assert first.file is big and first.ranged
    assert sched.next(a, now=0.0).file is other    # not a second range of big: the lane starts another file
    assert sched.next(b, now=0.0) is None           # each has its one range out: nothing more until answers
    sched.ranges_ok.add(big.replicas[0].origin)    # a 206 came (RangeHonoured)
    assert sched.next(b, now=0.0).file is big


def test_an_origin_that_ignores_range_has_its_other_split_files_asked_whole():
    f = file_state(0, 64 * MIB, ranges=False)
    sched, part = setup(Params(1, 2, 2), [f])
    sched.no_ranges.add(f.replicas[0].origin)
    piece = sched.next(lanes(part)[0], now=0.0)
    assert not piece.ranged and (piece.start, piece.end) == (0, 64 * MIB) and f.single_stream
    assert sched.next(lanes(part)[1], now=0.0) is None


def test_a_large_file_is_cut_into_tapering_ranges_that_cover_it_once():
    f = file_state(0, 3 * MIB)
    sched, part = setup(Params(1, 2, 2), [f], options=replace(OPTS, range_pipeline=100))
    got = []
    while (piece := sched.next(lanes(part)[len(got) % 2], now=0.0)) is not None:
        assert piece.ranged and piece.file is f
        got.append((piece.start, piece.end))
    assert RangeSet(got) == RangeSet([(0, 3 * MIB)]) and sum(e - s for s, e in got) == 3 * MIB
    sizes = [e - s for s, e in got]
    assert sizes[0] == 384 * KIB        # 3 MiB / (2 · p · pp) = 3 MiB / 8, within [min_range, max_range]
    body = sizes[:-1]                   # (the last one takes what is left rather than leave a crumb)
    assert body == sorted(body, reverse=True) and min(sizes) >= OPTS.min_range // 2


def test_a_file_with_p_lanes_on_it_sends_a_third_lane_to_the_next_queued_file():
    a, b = file_state(0, 3 * MIB), file_state(1, 3 * MIB)
    sched, part = setup(Params(1, 2, 1), [a, b])    # one group, p = 2 … and a third lane by hand
    group = part.groups[0]
    extra = Lane(99, group, Meter("", "all"))
    group.lanes.append(extra)
    first, second = (sched.next(lane, 0.0) for lane in group.lanes[:2])
    assert first.file is a and second.file is a
    assert sched.next(extra, 0.0).file is b           # a has p lanes: the group takes b


def test_a_file_of_unknown_size_gets_one_probe_and_no_second_request_until_it_answers():
    f = file_state(0, None)
    sched, part = setup(Params(1, 2, 2), [f])
    one, two = lanes(part)
    assert sched.next(one, 0.0) == Piece(f, 0, OPTS.first_range, ranged=True) and f.probing
    assert sched.next(two, 0.0) is None


def test_a_file_waiting_out_a_backoff_is_skipped_until_its_time():
    f = file_state(0, 100 * KIB)
    sched, part = setup(Params(1, 1, 1), [f])
    f.not_before = 5.0
    lane = lanes(part)[0]
    assert sched.next(lane, now=4.9) is None
    assert sched.next(lane, now=5.0).file is f


def test_a_paused_replica_takes_no_work():
    f = file_state(0, 100 * KIB, mirrors=1)
    sched, part = setup(Params(1, 2, 1).spread([1, 1]), [f], policy=Policy({0: 1.0, 1: 1.0}))
    primary, mirror = sorted(lanes(part), key=lambda lane: lane.replica)
    sched.paused[1] = 10.0
    assert sched.next(mirror, now=9.0) is None
    assert sched.next(primary, now=9.0).file is f


def test_a_server_that_ignores_range_gets_one_whole_file_stream_and_nothing_more():
    f = file_state(0, 3 * MIB)
    f.single_stream = True
    sched, part = setup(Params(1, 2, 2), [f])
    one, two = lanes(part)
    piece = sched.next(one, 0.0)
    assert piece == Piece(f, 0, 3 * MIB, ranged=False, whole_stream=True)
    f.full_job = object()          # what the engine does with a whole-stream piece
    assert sched.next(two, 0.0) is None


# ---- multi-source: admission and pipelines ------------------------------------------------------
def test_a_replica_the_policy_refuses_leaves_the_file_queued_for_another():
    f = file_state(0, 100 * KIB, mirrors=1)
    sched, part = setup(Params(1, 2, 1).spread([1, 1]), [f], policy=Policy({0: 1.0, 1: 1.0}, refuse={1}))
    primary, mirror = sorted(lanes(part), key=lambda lane: lane.replica)
    assert sched.next(mirror, 0.0) is None and list(part.queue) == [f]
    assert sched.next(primary, 0.0).file is f


@pytest.mark.parametrize(("rates", "replica", "want"), [
    ({0: 8.0, 1: 8.0}, 1, 8),      # as fast as the fastest: full pp
    ({0: 8.0, 1: 2.0}, 1, 2),      # a quarter of the fastest: a quarter of pp
    ({0: 8.0, 1: 0.1}, 1, 1),      # never below one request
])
def test_a_slower_replica_keeps_a_proportionally_shorter_pipeline(rates, replica, want):
    f = file_state(0, 100 * KIB, mirrors=1)
    sched, part = setup(Params(1, 2, 8).spread([1, 1]), [f], policy=Policy(rates))
    lane = next(lane for lane in lanes(part) if lane.replica == replica)
    assert sched.pipeline(lane) == want


def test_one_source_keeps_the_full_pipeline_whatever_the_policy():
    f = file_state(0, 100 * KIB)
    sched, part = setup(Params(1, 1, 8), [f], policy=Policy({0: 1.0}))
    assert sched.pipeline(lanes(part)[0]) == 8


# ---- the endgame ------------------------------------------------------------------------------------
def receiving(f: FileState, lane: Lane, start: int, end: int, pos: int, *, sent_at: float) -> RangeJob:
    """A 206 response being read on ``lane``: bytes [start, pos) of [start, end) are in."""
    job = RangeJob(f, lane, start, end, True, report=lambda *_: None, journal_every=MIB, small_body=MIB)
    job.status, job.pos, job.t_sent = 206, pos, sent_at
    lane.conn = Conn(job)
    return job


def endgame(rates: dict[int, float], rtt: float = 0.01):
    f = file_state(0, 4 * MIB, mirrors=1)
    sched, part = setup(Params(1, 2, 2).spread([1, 1]), [f], policy=Policy(rates, rtt=rtt))
    fast, slow = sorted(lanes(part), key=lambda lane: lane.replica)
    f.status, f.group = "active", part.groups[0]
    part.queue.clear()
    f.unassigned = RangeSet()         # every byte handed out
    fast.conn = Conn()
    return sched, f, fast, slow


def test_an_idle_fast_lane_cuts_a_slow_range_where_both_finish_together():
    sched, f, fast, slow = endgame({0: 8 * MIB, 1: 256 * KIB})
    victim = receiving(f, slow, 0, 4 * MIB, 256 * KIB, sent_at=0.0)      # 256 KiB in 1 s: v = 256 KiB/s
    action = sched.next(fast, now=1.0)
    assert isinstance(action, Cut) and action.victim is victim
    v, t, o, left = 256 * KIB, 8 * MIB, 0.01, 4 * MIB - 256 * KIB
    keep = action.at - victim.pos
    assert keep == int(v * (o + left / t) / (1 + v / t))
    assert keep / v == pytest.approx(o + (left - keep) / t, rel=1e-3)    # victim and thief end together
    assert action.piece == Piece(f, action.at, 4 * MIB, ranged=True) and fast.outstanding == 1


@pytest.mark.parametrize(("slow_rate", "why"), [
    (5 * MIB, "the victim is more than half as fast as the thief"),
])
def test_no_cut_for_a_victim_that_is_not_much_slower(slow_rate, why):
    sched, f, fast, slow = endgame({0: 8 * MIB, 1: slow_rate})
    receiving(f, slow, 0, 4 * MIB, slow_rate, sent_at=0.0)
    assert sched.next(fast, now=1.0) is None, why


def test_no_cut_when_the_tail_is_below_the_least_worth_a_request():
    sched, f, fast, slow = endgame({0: 8 * MIB, 1: 256 * KIB})
    receiving(f, slow, 0, 4 * MIB, 4 * MIB - OPTS.steal_min, sent_at=0.0)
    assert sched.next(fast, now=1.0) is None


def test_across_replicas_a_cut_takes_at_least_steal_min_replicas():
    """A cut drops the victim's connection and what is on its way to it: across replicas it must
    take at least ``steal_min_replicas`` (the one-source ``steal_min`` is not enough)."""
    rates = {0: 8 * MIB, 1: 256 * KIB}
    for least, cut in ((2 * MIB, False), (256 * KIB, True)):
        sched, f, fast, slow = endgame(rates)
        sched.options = replace(OPTS, steal_min_replicas=least)
        receiving(f, slow, 0, 4 * MIB, 3 * MIB, sent_at=0.0)   # 1 MiB left: worth a cut of ~1 MiB
        assert isinstance(sched.next(fast, now=1.0), Cut) is cut, least


def test_across_replicas_a_lane_never_cuts_a_victim_on_its_own_replica():
    f = file_state(0, 4 * MIB, mirrors=1)
    sched, part = setup(Params(1, 3, 2).spread([2, 1]), [f], policy=Policy({0: 8 * MIB, 1: 8 * MIB}))
    thief, victim_lane = [lane for lane in lanes(part) if lane.replica == 0]
    f.status, f.group, f.unassigned = "active", part.groups[0], RangeSet()
    part.queue.clear()
    thief.conn = Conn()
    receiving(f, victim_lane, 0, 4 * MIB, 256 * KIB, sent_at=0.0)  # far below its replica's rate
    assert sched.next(thief, now=1.0) is None      # the same path is no faster for the thief


def one_source_endgame(options: EngineOptions = OPTS, rtt: float = 0.04):
    f = file_state(0, 4 * MIB)
    sched, part = setup(Params(1, 2, 1), [f], options=options)
    sched.rtt = rtt
    one, two = lanes(part)
    f.status, f.group, f.unassigned = "active", part.groups[0], RangeSet()
    part.queue.clear()
    one.conn = Conn()
    return sched, f, one, two


def test_with_one_source_a_warm_victims_remainder_is_split_in_two():
    sched, f, one, two = one_source_endgame()
    victim = receiving(f, two, 0, 4 * MIB, 512 * KIB, sent_at=0.0)   # 512 KiB in 1 s, 25 RTTs
    action = sched.next(one, now=1.0)
    assert isinstance(action, Cut) and action.victim is victim
    v, o, left = 512 * KIB, 0.04, 4 * MIB - 512 * KIB
    assert action.at - victim.pos == int((v * o + left) / 2)           # thief as fast as the victim


def test_with_one_source_many_idle_lanes_share_a_long_remainder_evenly():
    f = file_state(0, 64 * MIB)
    sched, part = setup(Params(1, 5, 1), [f])
    sched.rtt = 0.04
    thief, busy, *idle = lanes(part)
    f.status, f.group, f.unassigned = "active", part.groups[0], RangeSet()
    part.queue.clear()
    thief.conn = Conn()
    victim = receiving(f, busy, 0, 64 * MIB, 4 * MIB, sent_at=0.0)
    action = sched.next(thief, now=2.0)                               # 4 idle lanes, 1 long range
    assert isinstance(action, Cut) and action.victim is victim
    v, o, left = 2 * MIB, 0.04, 60 * MIB
    assert action.at - victim.pos == int((left * 4 + v * o) / 5)      # the thief takes a fifth
    assert (64 * MIB - action.at) == pytest.approx(left / 5, rel=0.01)


def test_with_one_source_a_victim_still_in_slow_start_is_not_cut():
    sched, f, one, two = one_source_endgame()
    receiving(f, two, 0, 4 * MIB, 64 * KIB, sent_at=0.0)
    assert sched.next(one, now=0.1) is None                           # 2.5 RTTs of receiving


def test_the_one_source_endgame_can_be_turned_off():
    sched, f, one, two = one_source_endgame(replace(OPTS, endgame=False))
    receiving(f, two, 0, 4 * MIB, 1, sent_at=0.0)
    assert sched.next(one, now=100.0) is None


def backlog_case(got: int, behind_mib: int, options: EngineOptions = OPTS):
    """Lane ``two`` reads 16 MiB (``got`` bytes in, in 2 s) with a 16 MiB range pipelined behind."""
    f = file_state(0, 256 * MIB)
    sched, part = setup(Params(1, 2, 2), [f], options=options)
    sched.rtt = 0.1
    one, two = lanes(part)
    job = receiving(f, two, 0, 16 * MIB, got, sent_at=0.0)
    queued = RangeJob(f, two, 16 * MIB, (16 + behind_mib) * MIB, True, report=lambda *_: None,
                      journal_every=MIB, small_body=MIB)
    two.conn = Conn(job, (queued,))
    return sched, one, two


def test_a_lane_whose_ranges_would_outlast_the_transfer_is_backlogged():
    sched, one, two = backlog_case(got=4 * MIB, behind_mib=16)     # 2 MiB/s: 28 MiB take 14 s
    assert sched.backlogged([one, two], now=2.0, seconds_left=5.0) == [two]
    assert sched.backlogged([one, two], now=2.0, seconds_left=8.0) == []       # 16 s left: in time
    assert sched.backlogged([one, two], now=2.0, seconds_left=None) == []


def test_a_fast_lane_or_one_still_in_slow_start_is_not_backlogged():
    sched, one, two = backlog_case(got=15 * MIB, behind_mib=1)     # 7.5 MiB/s: 2 MiB take 0.3 s
    assert sched.backlogged([one, two], now=2.0, seconds_left=0.1) == []
    sched, one, two = backlog_case(got=4 * MIB, behind_mib=16)
    assert sched.backlogged([one, two], now=0.3, seconds_left=0.1) == []       # 3 RTTs of receiving
    sched, one, two = backlog_case(got=4 * MIB, behind_mib=16, options=replace(OPTS, endgame=False))
    assert sched.backlogged([one, two], now=2.0, seconds_left=0.1) == []


def test_an_idle_lane_first_helps_another_groups_file_before_cutting_anything():
    a, b = file_state(0, 3 * MIB, mirrors=1), file_state(1, 3 * MIB, mirrors=1)
    sched, part = setup(Params(2, 1, 1).spread([1]), [a, b], policy=Policy({0: 1.0, 1: 1.0}))
    g0, g1 = part.groups
    assert sched.next(g0.lanes[0], 0.0).file is a
    assert sched.next(g1.lanes[0], 0.0).file is b
    a.unassigned = RangeSet()       # group 0 has nothing left of its own, b still has bytes
    helped = sched.next(g0.lanes[0], 0.0)
    assert isinstance(helped, Piece) and helped.file is b


# ---- reshaping --------------------------------------------------------------------------------------
def test_reshape_adds_groups_and_lanes_per_replica_and_retires_the_surplus():
    files = [file_state(i, 3 * MIB, mirrors=1) for i in range(4)]
    sched, part = setup(Params(2, 3, 1).spread([2, 1]), files)
    assert len(part.groups) == 2
    assert sorted(lane.replica for lane in part.groups[0].lanes) == [0, 0, 1]
    sched.next(part.groups[1].lanes[0], 0.0)          # group 1 takes a file
    part.params = Params(1, 1, 1).spread([1, 0])
    shape = sched.reshape(part)
    assert shape.start == [] and part.groups[1].retiring and not part.groups[1].files
    assert part.queue[0] is files[0]                  # its file went back to the front of the queue
    live = [lane for lane in part.groups[0].lanes if not lane.retiring]
    assert [lane.replica for lane in live] == [0]
    assert set(shape.wake) == set(lanes(part))         # every lane is woken to see the change


def test_reshape_to_more_lanes_asks_for_exactly_the_missing_ones():
    f = file_state(0, 3 * MIB)
    sched, part = setup(Params(1, 1, 1), [f])
    part.params = Params(3, 2, 4)
    shape = sched.reshape(part)
    assert len(part.groups) == 3
    assert sorted((g.id, r) for g, r in shape.start) == [(0, 0), (1, 0), (1, 0), (2, 0), (2, 0)]


# ---- giving bytes back -------------------------------------------------------------------------------
def test_bytes_given_back_never_include_bytes_already_on_disk():
    f = file_state(0, 3 * MIB)
    sched, part = setup(Params(1, 1, 1), [f])
    lane = lanes(part)[0]
    piece = sched.next(lane, 0.0)
    job = RangeJob(f, lane, piece.start, piece.end, True, report=lambda *_: None, journal_every=MIB,
                   small_body=MIB)
    f.done.add(0, 100)                 # the request wrote 100 bytes, then failed
    release(f, lane)
    give_back(f, job, 0)
    assert f.unassigned == RangeSet([(100, 3 * MIB)])    # [0, 100) is on disk: never handed out again
    assert (f.in_flight, lane.outstanding) == (0, 0)


def test_options_steal_ratio_is_what_decides_a_cut():
    strict = replace(OPTS, steal_ratio=64.0)           # cut only victims 64× slower than the thief
    f = file_state(0, 4 * MIB, mirrors=1)
    sched, part = setup(Params(1, 2, 2).spread([1, 1]), [f], policy=Policy({0: 8 * MIB, 1: 256 * KIB}),
                        options=strict)
    fast, slow = sorted(lanes(part), key=lambda lane: lane.replica)
    f.status, f.group, f.unassigned = "active", part.groups[0], RangeSet()
    part.queue.clear()
    fast.conn = Conn()
    receiving(f, slow, 0, 4 * MIB, 256 * KIB, sent_at=0.0)
    assert sched.next(fast, now=1.0) is None          # 32× slower is not enough at ratio 64


# ---- the closing taper: ranges at the end of the whole transfer -----------------------------------
def _closing(remaining: int | None, lanes: int, **options) -> Scheduler:
    sched = Scheduler(EngineOptions(**options))
    sched.remaining = remaining
    sched.lanes_per_replica = {0: lanes} if lanes else {}
    return sched


def test_far_from_the_end_the_closing_taper_leaves_ranges_alone() -> None:
    opts = EngineOptions()
    assert _closing(None, 16).closing_range() == opts.max_range          # nothing known yet
    assert _closing(10 * 2**30, 16).closing_range() == 10 * 2**30 // 64  # above max_range: no cap
    assert _closing(10 * 2**30, 0).closing_range() == opts.max_range      # no lane counted yet


def test_near_the_end_ranges_shrink_with_what_the_transfer_has_left_down_to_a_floor() -> None:
    assert _closing(64 * MIB, 16).closing_range() == MIB                  # 64 MiB over 16 lanes × 2 × 2
    assert _closing(32 * MIB, 16).closing_range() == MIB // 2
    assert _closing(1 * MIB, 16).closing_range() == EngineOptions().closing_min_range


def test_the_last_file_of_a_transfer_is_carved_in_closing_ranges_without_a_crumb() -> None:
    options = replace(OPTS, max_range=16 * MIB, min_range=1 * MIB, closing_min_range=256 * KIB)
    f = file_state(0, 64 * MIB)
    sched, part = setup(Params(1, 1, 2), [f], options=options)
    lane = lanes(part)[0]
    first = sched.next(lane, now=0.0)
    assert first.end - first.start == 16 * MIB                # nothing known of the rest: the file's taper
    sched.remaining, sched.lanes_per_replica = 8 * MIB, {0: 4}   # the transfer's end: 8 MiB over 4 lanes
    second = sched.next(lane, now=0.0)
    assert second.end - second.start == 512 * KIB             # 8 MiB / (2 · 4 lanes · 2 ranges each)
    f.unassigned = RangeSet([(f.size - 300 * KIB, f.size)])    # 300 KiB left: no 44 KiB crumb behind
    release(f, lane)
    sched.remaining = 300 * KIB
    last = sched.next(lane, now=0.0)
    assert (last.start, last.end) == (f.size - 300 * KIB, f.size) and not f.unassigned


# ---- one range at a time: the next asked for before this one ends ----------------------------------
class PipeConn(Conn):
    """A kept-alive connection that carries a pipeline."""

    one_at_a_time, origin, kept_alive = False, "http://a.test", True


def test_one_range_at_a_time_asks_for_the_next_a_round_trip_and_a_half_before_it_ends(tmp_path):
    import asyncio
    import os

    f = file_state(0, 64 * MIB, mirrors=1)
    sched, part = setup(Params(1, 2, 1).spread([1, 1]), [f], policy=Policy({0: 1.0 * MIB, 1: 0.25 * MIB}, rtt=0.1))
    fast, slow = sorted(lanes(part), key=lambda lane: lane.replica)
    job = RangeJob(f, fast, 0, 4 * MIB, True, report=lambda *_: None, journal_every=64 * MIB, small_body=MIB)
    sched.lead(job)
    assert job.lead_at == 4 * MIB - int(1.5 * 0.1 * MIB)   # 1.5 round trips at its replica's rate
    crawl = RangeJob(f, slow, 4 * MIB, 8 * MIB, True, report=lambda *_: None, journal_every=64 * MIB, small_body=MIB)
    sched.lead(crawl)
    assert crawl.lead_at == NEVER                          # a quarter of the fastest: never ahead
    fast.conn, fast.outstanding = PipeConn(job), 1
    assert sched.pipeline(fast) == 1
    # the bytes cross the mark: the job wakes its lane, which may now send a second request
    fast.wake = asyncio.Event()
    job.status, job.fd = 206, os.open(tmp_path / "part", os.O_RDWR | os.O_CREAT)
    try:
        job.on_body(b"x" * (job.lead_at - 1))
        assert not job.leading and not fast.wake.is_set()
        job.on_body(b"x")
        assert job.leading and fast.wake.is_set() and job.lead_at == NEVER
    finally:
        os.close(job.fd)
    assert sched.pipeline(fast) == 2
    fast.outstanding = 2
    assert sched.pipeline(fast) <= fast.outstanding        # and no third


def test_a_partition_that_pipelines_already_is_not_led():
    f = file_state(0, 64 * MIB, mirrors=1)
    sched, part = setup(Params(1, 2, 2).spread([1, 1]), [f], policy=Policy({0: 1.0 * MIB, 1: 1.0 * MIB}, rtt=0.1))
    lane = lanes(part)[0]
    job = RangeJob(f, lane, 0, 4 * MIB, True, report=lambda *_: None, journal_every=64 * MIB, small_body=MIB)
    sched.lead(job)
    assert job.lead_at == NEVER


def test_one_source_is_not_led():
    f = file_state(0, 64 * MIB)
    sched, part = setup(Params(1, 1, 1), [f], policy=Policy({0: 1.0 * MIB}, rtt=0.1))
    job = RangeJob(f, lanes(part)[0], 0, 4 * MIB, True, report=lambda *_: None, journal_every=64 * MIB,
                   small_body=MIB)
    sched.lead(job)
    assert job.lead_at == NEVER


def test_a_size_probe_that_became_a_whole_file_stream_is_asked_again_when_it_fails():
    # a server that ignores Range answers the probe with 200 and no size (chunked): the request
    # is then the whole-file stream, ranged no more; cut short, the file must still have work
    f = file_state(0, None)
    sched, part = setup(Params(1, 1, 1), [f])
    lane = lanes(part)[0]
    piece = sched.next(lane, 0.0)
    assert f.probing and not f.has_work()
    job = RangeJob(f, lane, piece.start, piece.end, True, report=lambda *_: None, journal_every=MIB,
                   small_body=MIB)
    f.stream_whole(job)
    job.ranged = False                 # as RangeJob._accept_full leaves it
    release(f, lane)
    give_back(f, job, 1000)
    assert not f.probing and f.full_job is None
    assert f.has_work()


def test_a_lane_below_the_speed_floor_is_left_to_the_floor_not_shed_as_a_backlog():
    # 10 bytes in 2 s: its backlog would outlast anything, but shedding it only restarts the floor's
    # window on a new connection to the same path, and a drip would never be judged
    sched, one, two = backlog_case(got=10, behind_mib=16)
    assert sched.backlogged([one, two], now=2.0, seconds_left=0.1) == []
    sched, one, two = backlog_case(got=10, behind_mib=16, options=replace(OPTS, speed_limit=0))
    assert sched.backlogged([one, two], now=2.0, seconds_left=0.1) == [two]       # no floor: shed
