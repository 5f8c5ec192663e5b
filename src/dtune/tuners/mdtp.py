"""``--tuner mdtp | static-chunks``: multi-source range sizing by bin packing (docs/algorithms.md §3).

Pure code after Abdollah, Partridge and Shannigrahi's MDTP: every finished
range is an observation ``(replica, lane, bytes, seconds)``; ``size()``
answers how many bytes the next range of a lane on that replica should ask
for. ``MdtpTuner`` plans the connections per replica and drives the sizer
and the climber; ``StaticChunks`` is the paper's equal-ranges baseline.

The rule, per round:

1. **Probe** — until a replica has an estimate, its ranges are ``probe``
   bytes (reference: 5 MiB), or less on a file that is not large against
   the connections: at most ``file / (probe_share × connections)``.
2. **Estimate** — each replica's per-connection throughput is an EWMA of
   its finished ranges (``alpha`` on the newest; the reference used the last
   range only).
3. **Fast set** — the paper's replicas at or above the geometric mean of
   the estimates; not kept here: only the fastest matters (it sets the
   round time).
4. **Bin packing** — the fastest replica's range is ``LARGE`` =
   clamp(``bdp_rounds`` × its BDP, ``large_min``, ``large_max``) so that a
   round lasts many RTTs; the round time is ``T = LARGE / th_fastest`` and
   every replica's range is ``T · th_i``: all ranges of a round finish
   together.
5. **Last round** — when one more round would ask for more than is left,
   the sizes shrink to ``remaining · th_i / Σ th`` (over every connection),
   so the tail never waits on the slowest replica.

Connections per replica (``MdtpTuner.plan``, then ``LaneClimber``): one
connection's ceiling is its window, ``buf / RTT``. A replica whose connection runs at ≥ 70 % of that
ceiling is window-limited and may use more connections. Each replica starts
with enough connections to carry its share of the bandwidth through its window
(``ceil(rate · RTT / window)``, rate at least ``start_rate``, at least
``file_start_lanes`` for one file, ``start_lanes`` per group of a dataset: 4/4/4/6 at
20–60 ms, 45 at 520 ms for one file), and a file with
less than ``pipeline_windows`` windows per connection is fetched with pp 2;
``LaneClimber`` then doubles them while the replica's
aggregate rate keeps growing by ≥ 10 % per step, and takes the last step
back when it does not. A step lasts at least three round trips of the
slowest replica, so new connections are out of slow start when judged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dtune.accounting import Snapshot
from dtune.netfacts import NetworkFacts
from dtune.params import Params
from dtune.tuners.base import Decision, Fixed, RangePolicy, Tuner, TunerPlan, apply_fixed

MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class MdtpConstants:
    probe: int = 5 * MIB          # reference probe range (an upper bound: see probe_share)
    probe_share: int = 4          # probes ≤ file / (4 × connections): 128 MiB over 12 connections
                                  # → 2.7 MiB each, so srv4 of replicas4 ends its probes in time
    large_min: int = 16 * MIB     # the reference used 20–40 MiB; 16 MiB suits links ≤ 1 Gbit/s
    large_max: int = 64 * MIB
    bdp_rounds: float = 8.0       # LARGE ≥ 8·BDP of the fastest replica: a round spans many RTTs
    alpha: float = 0.5            # EWMA weight of the newest range
    min_range: int = 256 * 1024   # below this per-request overhead dominates
    window_share: float = 0.7     # per-connection rate ≥ 70 % of buf/RTT → window-limited
    grow_gain: float = 1.10       # keep an added connection only if the replica gained ≥ 10 %
    max_lanes: int = 64           # connections per replica: at 520 ms a 512 KiB window carries
                                  # ~5.6 Mbit/s, so a 400 Mbit/s replica needs ~70
    start_rate: float = 100e6 / 8 # bytes/s each replica is assumed to carry at the start, at least
                                  # (its share of the bandwidth when more): the first connections
                                  # are ceil(rate·RTT / window)
    probe_windows: float = 2.0    # a probe is at most 2 windows (~2 round trips of a connection)
    admit_ratio: float = 2.0      # a replica within 2× of the fastest per connection always takes work
    start_lanes: int = 3          # connections per replica at the start: one window-limited stream
                                  # (512 KiB at 20–60 ms) carries only 50–150 Mbit/s; measured on
                                  # replicas4: 3 → 3.2 s, 1 → 5.7 s, 4 → 3.9 s for 210 MB (a dataset
                                  # keeps 3 per group) …
    file_start_lanes: int = 4     # … one file 4: the fastest replica's 3 ran at 0.9 of their windows
                                  # (387 of srv1's 400 Mbit/s, which doubling to 6 gains < 10 % of, so
                                  # the climber takes back) and slow start took longer; 512 MiB on
                                  # replicas4 6.27 → 6.19 s, 128 MiB 1.85 → 1.83 s (4 runs each)
    dataset_files: int = 2        # more files than this are a dataset (see MdtpTuner.plan) …
    dataset_groups: int = 4       # … fetched by 4 groups, each with its connections to every replica
    pipeline_windows: float = 4.0 # a single file with less than 4 windows per connection is
                                  # fetched with pp 2 (a range lasts too few round trips to hide one)
    window_fraction: float = 0.7  # a connection's window is ~0.7 × the receive buffer (as
                                  # HeuristicConstants.window_fraction: Linux advertises rmem × its
                                  # scaling ratio, measured 0.69 here)


DEFAULT = MdtpConstants()


def geometric_mean(values: list[float]) -> float:
    positive = [v for v in values if v > 0]
    if not positive:
        return 0.0
    return math.exp(sum(math.log(v) for v in positive) / len(positive))


class MdtpSizer:
    """Range sizes per replica from per-connection throughput estimates (a RangePolicy)."""

    def __init__(self, constants: MdtpConstants = DEFAULT, *, rtt: dict[int, float] | None = None,
                 lanes: dict[int, int] | None = None, window: float | None = None) -> None:
        self.k = constants
        self.rtt = dict(rtt or {})          # seconds per replica, when measured
        self.window = window                # bytes one connection keeps in flight (0.7 × buffer), if known
        self.lanes = dict(lanes or {})      # connections per replica (kept current by the tuner)
        self.thr_: dict[int, float] = {}    # bytes/s per connection, per replica
        self.ranges_: dict[int, int] = {}   # finished ranges per replica
        self.bytes_: dict[int, int] = {}

    # ---- RangePolicy ---------------------------------------------------------
    def observe(self, replica: int, lane: int, nbytes: int, seconds: float, now: float) -> None:
        if nbytes <= 0 or seconds <= 0:
            return
        inst = nbytes / seconds
        old = self.thr_.get(replica)
        self.thr_[replica] = inst if old is None else self.k.alpha * inst + (1 - self.k.alpha) * old
        self.ranges_[replica] = self.ranges_.get(replica, 0) + 1
        self.bytes_[replica] = self.bytes_.get(replica, 0) + nbytes

    def forget(self, replica: int) -> None:
        self.thr_.pop(replica, None)

    def size(self, replica: int, unassigned: int, now: float) -> int | None:
        if unassigned <= 0:
            return 0
        k = self.k
        if replica not in self.thr_:
            probe = k.probe
            if self.window:  # a probe should end within a few round trips, whatever the RTT
                probe = min(probe, max(k.min_range, int(k.probe_windows * self.window)))
            # and be at most 1/probe_share of what each connection would get if the file were
            # split evenly: on a mid-size file a slow replica's probes must not outlast the
            # fast replicas' whole share
            if self.lanes:  # (known when MdtpTuner drives the sizer)
                conns = sum(max(1, n) for n in self.lanes.values())
                probe = max(k.min_range, min(probe, unassigned // (k.probe_share * conns)))
            return min(unassigned, probe)
        fastest = max(self.thr_, key=self.thr_.get)
        th_fast = self.thr_[fastest]
        large = self.large_range(fastest)
        round_time = large / th_fast
        size = round_time * self.thr_[replica]
        # every connection of every replica takes one range per round: a replica still probing
        # counts at the measured ones' typical rate (counting only the measured, the first replica
        # measured took 1/19 of the file per connection at +500 ms, and the rest were left crumbs)
        typical = geometric_mean(list(self.thr_.values()))
        rates = {r: self.thr_.get(r, typical) for r in {*self.lanes, *self.thr_}}
        capacity = sum(th * max(1, self.lanes.get(r, 1)) for r, th in rates.items())
        if round_time * capacity > unassigned:  # last round: split what is left by throughput
            size = unassigned * self.thr_[replica] / capacity
        size = int(min(unassigned, max(k.min_range, size)))
        return unassigned if unassigned - size < k.min_range else size  # no crumbs left behind

    def share(self, replica: int) -> float:
        """This replica's per-connection speed relative to the fastest.

        0.0 until its first range finishes: an unmeasured replica holds only
        its probe, never a pipeline full of whole files.
        """
        th = self.thr_.get(replica)
        if th is None:
            return 0.0
        return th / max(self.thr_.values())

    def rate(self, replica: int) -> float | None:
        return self.thr_.get(replica)

    def rtt_of(self, replica: int) -> float | None:
        return self.rtt.get(replica)

    def admits(self, replica: int, nbytes: int, remaining: int | None, lanes: dict[int, int]) -> bool:
        """May a connection of ``replica`` start a piece of ``nbytes`` now?

        Yes for an unmeasured replica (its first piece is its probe) and for
        one whose connections run at least ``1 / admit_ratio`` of the
        fastest's. A slower replica only while the transfer will last longer
        anyway: its time for the piece, ``nbytes / its per-connection rate``,
        must not exceed ``remaining / the rate of every connection`` (the
        time the whole transfer still needs). Near the end the slow replicas
        stop taking work instead of holding the last files.
        """
        th = self.thr_.get(replica)
        if th is None or remaining is None:
            return True
        fastest = max(self.thr_.values())
        if th * self.k.admit_ratio >= fastest:
            return True
        capacity = sum(t * max(1, lanes.get(r, self.lanes.get(r, 1))) for r, t in self.thr_.items())
        return nbytes / th <= remaining / capacity

    # ---- what the tuner and reports read -----------------------------------------
    def large_range(self, replica: int) -> int:
        th = self.thr_.get(replica, 0.0)
        rtt = self.rtt.get(replica)
        bdp = th * rtt if rtt else 0.0
        return int(min(self.k.large_max, max(self.k.large_min, self.k.bdp_rounds * bdp)))

    def window_limited(self, replica: int, buf: int) -> bool:
        rtt = self.rtt.get(replica)
        th = self.thr_.get(replica)
        if not rtt or th is None:
            return False
        return th >= self.k.window_share * buf / rtt


class LaneClimber:
    """Grows the connections of window-limited replicas while it pays (see module doc)."""

    def __init__(self, constants: MdtpConstants = DEFAULT) -> None:
        self.k = constants
        self._before: dict[int, float] = {}   # aggregate rate before the last added connections
        self._added: dict[int, int] = {}      # how many the last step added
        self.frozen_: set[int] = set()

    def step(self, lanes: dict[int, int], rates: dict[int, float], limited: dict[int, bool],
             active: set[int]) -> tuple[dict[int, int], list[str]]:
        """One decision period: returns new connections per replica and the reasons."""
        new = dict(lanes)
        why = []
        for r in sorted(active):
            rate = rates.get(r, 0.0)
            if r in self._before:
                before = self._before.pop(r)
                added = self._added.pop(r, 1)
                if rate < before * self.k.grow_gain:
                    tried = new[r]
                    new[r] = max(1, new[r] - added)
                    self.frozen_.add(r)
                    why.append(f"replica {r}: {tried} connections gave {rate * 8 / 1e6:.0f} Mbit/s, "
                               f"not {self.k.grow_gain:.2f}× {before * 8 / 1e6:.0f}: back to {new[r]}")
                    continue
            if r in self.frozen_ or not limited.get(r) or new[r] >= self.k.max_lanes:
                continue
            self._before[r] = rate
            self._added[r] = min(new[r], self.k.max_lanes - new[r])  # double, up to max_lanes
            new[r] += self._added[r]
            why.append(f"replica {r}: window-limited at {rate * 8 / 1e6:.0f} Mbit/s: {new[r]} connections")
        return new, why


class StaticChunks:
    """Baseline: equal ranges of ``chunk`` bytes from every replica (no adaptation)."""

    def __init__(self, chunk: int = 8 * MIB) -> None:
        self.chunk = chunk

    def observe(self, replica: int, lane: int, nbytes: int, seconds: float, now: float) -> None:
        pass

    def forget(self, replica: int) -> None:
        pass

    def size(self, replica: int, unassigned: int, now: float) -> int | None:
        return min(self.chunk, unassigned)

    def share(self, replica: int) -> float:
        return 1.0  # the baseline does not adapt

    def admits(self, replica: int, nbytes: int, remaining: int | None, lanes: dict[int, int]) -> bool:
        return True

    def rate(self, replica: int) -> float | None:
        return None  # the baseline never steals a tail

    def rtt_of(self, replica: int) -> float | None:
        return None


class MdtpTuner(Tuner):
    """MDTP (§3): one partition, every replica in use, bin-packed range sizes.

    Starts each replica with the connections its window needs for its share of
    the bandwidth, at least ``start_rate`` (their first ranges are the probes), sizes every later range with
    ``MdtpSizer`` and grows the connections of window-limited replicas with
    ``LaneClimber`` every ``period`` seconds (at least 3 round trips of the
    slowest replica).

    constants       MDTP's constants (``MdtpConstants``)
    period          seconds between climbing steps, at least
    static_chunks   bytes: the static-chunking baseline instead (equal ranges,
                    one connection per replica, no adaptation)
    fixed           the user's explicit cc / p / pp, never changed (a fixed p
                    is spread over the replicas and not climbed)
    """

    needs_facts = True
    sizes_connections = True

    def __init__(self, *, constants: MdtpConstants | None = None, period: float = 1.0,
                 static_chunks: int | None = None, fixed: Fixed | Mapping[str, int] | None = None) -> None:
        super().__init__(fixed=fixed)
        self.constants = constants or MdtpConstants()
        self.period = period
        self.static_chunks = static_chunks
        self.name = self.label = "static-chunks" if static_chunks else "mdtp"

    def plan(self, sizes: Sequence[int | None], facts: NetworkFacts) -> TunerPlan:
        replicas = max(1, len(facts.replica_origins))
        self.origins_ = list(facts.replica_origins) or [""]
        self.buf_ = facts.tcp_buffer
        k = self.constants
        window = facts.tcp_buffer * k.window_fraction  # what one connection keeps in flight
        rtts_s = list(facts.replica_rtt) or [facts.rtt]
        dataset = len(sizes) > k.dataset_files
        if self.static_chunks:
            start = [1] * replicas
        else:
            # each replica starts with the connections its window needs to carry its share of
            # the bandwidth (at least start_rate): at 20-60 ms that is 4/4/4/6 for one file on
            # replicas4, at 520 ms 45 each, where 18 each left MDTP slower than the fastest
            # replica alone (64)
            groups = k.dataset_groups if dataset else 1
            rate = max(k.start_rate, facts.bandwidth / (replicas * groups))
            least = k.start_lanes if dataset else k.file_start_lanes
            start = [min(k.max_lanes, max(least, math.ceil(rate * rtts_s[min(r, len(rtts_s) - 1)] / window)))
                     for r in range(replicas)]
        if dataset:
            # a dataset over replicas (docs/algorithms.md §3.9). pp 2 hides the
            # round trip between one file and the next, more groups give each replica more
            # connections from the start
            # (120 files of 0.5-8 MB on replicas4: cc 2, pp 1 6.57 s; cc 2, pp 2 6.35 s;
            # cc 4, pp 1 6.20 s; cc 4, pp 2 6.15 s, every byte sent once)
            cc, pp = k.dataset_groups, 2
        else:
            # pp 1: a range lasts many round trips by construction (LARGE ≥ 8 BDP of the fastest
            # replica), so a second one queued behind it only hoards work on one connection (the
            # 128 MiB file of replicas4: 2.6 s with pp 2, srv1 holding 75 % of the file; 2.1 s with pp 1)
            cc, pp = max(1, min(len(sizes), 2)), 1
            # … unless the ranges must be short: with fewer than pipeline_windows windows per
            # connection a range lasts only a round trip or two, and the round trip between one
            # range and the next idles the connection (128 MiB over 186 connections at 520 ms:
            # 265 KB ranges, 2 Mbit/s per connection; with pp 2 6.9 s instead of 8.2)
            total = sum(n for n in sizes if n)
            if not self.static_chunks and total < k.pipeline_windows * window * sum(start):
                pp = 2
        self.params_ = apply_fixed(Params(cc=cc, p=replicas, pp=pp).spread(start), self.fixed)
        self.lanes_ = dict(enumerate(self.params_.lanes_per_replica()))
        self.climber_ = LaneClimber(k)
        self.next_check_: float | None = None
        # a climbing step is judged after ≥ 3 round trips of the slowest replica
        self.step_ = max(self.period, 3 * max(rtts_s))
        if self.static_chunks:
            self.policy_: RangePolicy = StaticChunks(self.static_chunks)
        else:
            self.policy_ = MdtpSizer(k, rtt=dict(enumerate(facts.replica_rtt)), lanes=self.lanes_,
                                     window=window)
        rtts = ", ".join(f"{r * 1000:.1f} ms" for r in facts.replica_rtt)
        lanes = "/".join(map(str, self.lanes_.values()))
        note = (f"{self.label}: {replicas} replicas (RTT {rtts}); {lanes} connection(s) each to start"
                + ("" if self.static_chunks else ", probe ranges then bin-packed sizes"))
        return TunerPlan(["all"] * len(sizes), {"all": self.params_}, [note], range_policy=self.policy_)

    def update(self, now: float, snap: Snapshot) -> Decision | None:
        if self.static_chunks or self.fixed.p is not None or "all" not in snap.partitions:
            return None
        if self.next_check_ is None:
            self.next_check_ = now + self.step_
            return None
        if now < self.next_check_:
            return None
        self.next_check_ = now + self.step_
        sizer = self.policy_
        rates = {r: snap.origins[o].rate for r, o in enumerate(self.origins_) if o in snap.origins}
        limited = {r: sizer.window_limited(r, self.buf_) for r in self.lanes_}
        active = {r for r in self.lanes_ if r in sizer.thr_}
        lanes, why = self.climber_.step(self.lanes_, rates, limited, active)
        if lanes == self.lanes_:
            return None
        self.lanes_.clear()
        self.lanes_.update(lanes)  # the sizer shares this dict
        self.params_ = self.params_.spread([lanes[r] for r in sorted(lanes)])
        return Decision({"all": self.params_}, "; ".join(why))
