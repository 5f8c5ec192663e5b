"""``--tuner promc | mc | sc``: size partitions, Algorithm 1, and how groups are shared (docs/algorithms.md §1.3–1.5).

Theory of operation
-------------------
``plan`` splits the dataset into size partitions (``heuristic.partition_files``)
and runs Algorithm 1 on each (``heuristic.find_optimal_parameters``), which
gives every partition its p and pp. What differs between the three modes is
how the total cc — ``max_cc`` groups (files in flight), or the user's
``--cc`` — is shared between the partitions:

* **SC** runs one partition at a time, smallest files first, each with
  Algorithm 1's cc; the next starts when one finishes (``_update_sc``).
* **MC** runs all at once and deals the groups out round-robin in the order
  Huge, Small, Large, Medium (``mc_allocate``).
* **ProMC** runs all at once and shares the groups by ``δ_i × bytes_i``
  (``promc_allocate``), then re-allocates them while the transfer runs.

The online rules of MC and ProMC, all in this module:

* **Hand-over** (``handover``, at every update): a partition with more groups
  than unfinished files gives the surplus to the partition with the largest
  ETA that can use them.
* **ProMC's re-allocation** (``ProMCRebalancer``): every ``period`` seconds
  (5) ``EtaTracker`` updates each partition's throughput EWMA and ETA; when
  the same (slowest, fastest) pair has held for ``periods_to_move`` checks
  (3) and the slow partition's ETA with one more group would still be at
  least ``move_ratio`` (2) × the fast one's with one fewer, one group moves
  from the fast partition to the slow one. The trigger is the period check
  in ``HeuristicTuner.update``; the effect is the ``Decision`` it returns (new
  cc per partition), which the engine applies live.

Everything is pure: the clock comes in with each snapshot.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dtune.accounting import Snapshot
from dtune.netfacts import NetworkFacts
from dtune.params import DEFAULT_SPLIT_THRESHOLD, Params
from dtune.tuners.base import Decision, Fixed, Tuner, TunerPlan, apply_fixed
from dtune.tuners.heuristic import (
    DEFAULTS,
    HeuristicConstants,
    find_optimal_parameters,
    names_of,
    partition_files,
)

MODES = ("sc", "mc", "promc")


# ---- sharing the groups ------------------------------------------------------------------------
def mc_allocate(names: Sequence[str], counts: Sequence[int], total_cc: int,
                k: HeuristicConstants = DEFAULTS) -> dict[str, int]:
    """§1.4: round-robin over {Huge, Small, Large, Medium}; never more groups than files."""
    order = [n for n in k.mc_order if n in names]
    cap = dict(zip(names, counts, strict=True))
    alloc = {n: 0 for n in names}
    left = total_cc
    while left > 0:
        given = False
        for name in order:
            if left == 0:
                break
            if alloc[name] < cap[name]:
                alloc[name] += 1
                left -= 1
                given = True
        if not given:
            break
    return alloc


def promc_allocate(names: Sequence[str], totals: Sequence[int], counts: Sequence[int], total_cc: int,
                   k: HeuristicConstants = DEFAULTS) -> dict[str, int]:
    """§1.5: ``cc_i = floor(totalCC · w_i / Σw)`` with ``w_i = δ_i · totalBytes_i``.

    Leftover groups go first to partitions with none, then one at a time
    to the partition with the fewest; no partition gets more groups than files.
    """
    weights = {n: k.delta_of(n) * t for n, t in zip(names, totals, strict=True)}
    cap = dict(zip(names, counts, strict=True))
    wsum = sum(weights.values()) or 1.0
    alloc = {n: min(cap[n], math.floor(total_cc * weights[n] / wsum)) for n in names}
    left = total_cc - sum(alloc.values())
    while left > 0:
        open_ = [n for n in names if alloc[n] < cap[n]]
        if not open_:
            break
        empty = [n for n in open_ if alloc[n] == 0]
        pick = empty[0] if empty else min(open_, key=lambda n: (alloc[n], names.index(n)))
        alloc[pick] += 1
        left -= 1
    return alloc


# ---- the online rules -------------------------------------------------------------------------------
@dataclass(slots=True)
class PartitionState:
    """What the online rules observe of one partition each period."""

    remaining: int       # bytes not yet on disk
    files_left: int      # files not yet finished
    groups: int          # current cc


@dataclass(slots=True)
class Move:
    """Channels moved from one partition to another."""
    src: str
    dst: str
    groups: int
    reason: str


class EtaTracker:
    """Per-partition throughput EWMA and ETA, updated once a period (§1.4, §1.5)."""

    def __init__(self, k: HeuristicConstants = DEFAULTS) -> None:
        self.k = k
        self.thr_: dict[str, float] = {}
        self._last: dict[str, tuple[float, int]] = {}

    def observe(self, now: float, done_bytes: dict[str, int]) -> None:
        for name, done in done_bytes.items():
            if name in self._last:
                t0, b0 = self._last[name]
                if now > t0:
                    inst = (done - b0) / (now - t0)
                    old = self.thr_.get(name)
                    self.thr_[name] = inst if old is None else self.k.ewma_old * old + (1 - self.k.ewma_old) * inst
            self._last[name] = (now, done)

    def eta(self, name: str, remaining: int) -> float:
        if remaining <= 0:
            return 0.0
        thr = self.thr_.get(name, 0.0)
        return remaining / thr if thr > 0 else math.inf


def handover(states: dict[str, PartitionState], tracker: EtaTracker) -> list[Move]:
    """Groups a partition cannot use go to the partition with the largest ETA.

    The paper hands over when a partition finishes; dtune also hands over the
    surplus when a partition has fewer unfinished files than groups (those
    groups would idle until the partition ends).
    """
    moves: list[Move] = []
    for name, st in states.items():
        surplus = st.groups - st.files_left
        if surplus <= 0:
            continue
        takers = [n for n, s in states.items() if n != name and s.files_left > s.groups]
        if not takers:
            continue
        etas = {n: tracker.eta(n, states[n].remaining) for n in takers}
        dst = max(takers, key=lambda n: etas[n])
        give = min(surplus, states[dst].files_left - states[dst].groups)
        what = "finished" if st.files_left == 0 else f"has {st.files_left} files left"
        moves.append(Move(name, dst, give, f"partition {name} {what}: {give} group(s) to {dst} "
                                           f"(largest ETA {etas[dst]:.1f} s)"))
        st.groups -= give
        states[dst].groups += give
    return moves


class ProMCRebalancer:
    """§1.5 online re-allocation: move one group from fast to slow after 3 periods (module doc)."""

    def __init__(self, k: HeuristicConstants = DEFAULTS) -> None:
        self.k = k
        self._pair: tuple[str, str] | None = None
        self._streak = 0

    def decide(self, states: dict[str, PartitionState], tracker: EtaTracker) -> Move | None:
        live = {n: s for n, s in states.items() if s.files_left > 0}
        etas = {n: tracker.eta(n, s.remaining) for n, s in live.items()}
        slow_c = [n for n, s in live.items() if s.files_left > s.groups]
        fast_c = [n for n, s in live.items() if s.groups > 1]
        if not slow_c or not fast_c:
            self._pair, self._streak = None, 0
            return None
        slow = max(slow_c, key=lambda n: etas[n])
        fast = min(fast_c, key=lambda n: etas[n])
        if slow == fast or math.isinf(etas[fast]):
            self._pair, self._streak = None, 0
            return None
        pair = (slow, fast)
        self._streak = self._streak + 1 if pair == self._pair else 1
        self._pair = pair
        if self._streak < self.k.periods_to_move:
            return None
        ns, nf = live[slow].groups, live[fast].groups
        slow_after = etas[slow] * ns / (ns + 1)
        fast_after = etas[fast] * nf / (nf - 1)
        if slow_after < self.k.move_ratio * fast_after:
            return None
        self._pair, self._streak = None, 0  # one move at a time: start counting again
        return Move(fast, slow, 1, f"ProMC: ETA {slow} {etas[slow]:.1f} s vs {fast} {etas[fast]:.1f} s "
                                   f"for {self.k.periods_to_move} periods; after a move "
                                   f"{slow_after:.1f} s >= {self.k.move_ratio:g} × {fast_after:.1f} s")


# ---- the tuner ------------------------------------------------------------------------------------
class HeuristicTuner(Tuner):
    """SC, MC or ProMC (§1.3–1.5) over size partitions with Algorithm 1 parameters.

    mode            "sc" (partitions one after another), "mc" (all at once,
                    round-robin groups, hand-over), "promc" (δ-weighted
                    groups, hand-over and online re-allocation)
    max_cc          the most groups (files in flight) in all
    max_partitions  1..4 (the paper found 2 best for large datasets)
    constants       every constant of §1, overridable
    fixed           the user's explicit cc (the total) / p / pp, never changed
    """

    needs_facts = True

    def __init__(self, mode: str = "promc", *, max_cc: int = 16, max_partitions: int = 2,
                 constants: HeuristicConstants | None = None,
                 fixed: Fixed | Mapping[str, int] | None = None) -> None:
        super().__init__(fixed=fixed)
        if mode not in MODES:
            raise ValueError(f"unknown heuristic mode {mode!r}")
        self.mode = mode
        self.max_cc = max_cc
        self.max_partitions = max_partitions
        self.constants = constants or HeuristicConstants()
        self.name = self.label = mode

    def plan(self, sizes: Sequence[int | None], facts: NetworkFacts) -> TunerPlan:
        k = self.constants
        self.replicas_ = max(1, len(facts.replica_origins))
        known = [s for s in sizes if s is not None]
        fallback = int(sum(known) / len(known)) if known else 0
        filled = [s if s is not None else fallback for s in sizes]
        parts = partition_files(filled, facts.bandwidth, facts.bdp, self.max_partitions, k)
        total_cc = self.fixed.cc if self.fixed.cc is not None else min(self.max_cc, len(sizes))
        self.parts_ = {p.name: p for p in parts}
        self.alg1_ = {p.name: find_optimal_parameters(p.avg, p.count, facts.bdp, facts.tcp_buffer,
                                                      self.max_cc, k) for p in parts}
        names = [p.name for p in parts]
        if self.mode == "sc":
            self.order_ = names  # smallest average size first
            cc = {n: 0 for n in names}
            cc[names[0]] = self._sc_cc(names[0])
        elif self.mode == "mc":
            cc = mc_allocate(names, [p.count for p in parts], total_cc, k)
        else:
            cc = promc_allocate(names, [p.total for p in parts], [p.count for p in parts], total_cc, k)
        self.cc_ = cc
        params = {n: self._params_for(n, cc[n]) for n in names}
        partition_of = names_of(parts, len(sizes))
        notes = [f"{self.mode}: BW {facts.bandwidth * 8 / 1e6:.0f} Mbit/s ({facts.how.get('bandwidth')}), "
                 f"RTT {facts.rtt * 1000:.1f} ms ({facts.how.get('rtt')}), buffer {facts.tcp_buffer} "
                 f"({facts.how.get('tcp_buffer')}), BDP {facts.bdp:.0f} bytes"]
        for p in parts:
            a = self.alg1_[p.name]
            notes.append(f"partition {p.name}: {p.count} files, avg {p.avg:.0f} bytes; Algorithm 1 "
                         f"cc={a.cc} p={a.p} pp={a.pp}; gets {params[p.name]}")
        self.tracker_ = EtaTracker(k)
        self.rebalancer_ = ProMCRebalancer(k)
        self.next_check_ = None
        policy = None
        if self.replicas_ > 1:
            # dtune's own ground: partitions from the heuristic, and every partition's
            # lanes spread over the replicas with MDTP-sized ranges
            from dtune.tuners.mdtp import MdtpSizer  # (only with replicas: start-up time)

            policy = MdtpSizer(rtt=dict(enumerate(facts.replica_rtt)))
            notes.append(f"{self.replicas_} replicas: each partition's lanes spread over all of "
                         "them, ranges sized by MDTP bin packing")
        return TunerPlan(partition_of, params, notes, range_policy=policy)

    def _sc_cc(self, name: str) -> int:
        """SC runs one partition at a time: it gets the user's cc, else Algorithm 1's."""
        return self.fixed.cc if self.fixed.cc is not None else self.alg1_[name].cc

    def _params_for(self, name: str, cc: int) -> Params:
        a = self.alg1_[name]
        pp = a.pp
        if self.parts_[name].avg > DEFAULT_SPLIT_THRESHOLD:  # its files travel as several ranges
            pp = max(pp, self.constants.range_pipeline)
        params = Params(cc=cc, p=a.p, pp=pp)
        if self.replicas_ > 1:
            per = max(1, math.ceil(params.p / self.replicas_))
            params = params.spread([per] * self.replicas_)
        return apply_fixed(params, self.fixed, cc=False)

    def _states(self, snap: Snapshot) -> dict[str, PartitionState]:
        states = {}
        for name, view in snap.partitions.items():
            remaining = max(0, (view.bytes_total or 0) - view.bytes - view.bytes_resumed)
            states[name] = PartitionState(remaining=remaining,
                                          files_left=view.files_total - view.files_done,
                                          groups=self.cc_.get(name, 0))
        return states

    def update(self, now: float, snap: Snapshot) -> Decision | None:
        if not snap.partitions:
            return None
        if self.mode == "sc":
            return self._update_sc(snap)
        k = self.constants
        states = self._states(snap)
        if self.next_check_ is None:
            self.next_check_ = now + k.period
            self.tracker_.observe(now, {n: v.bytes for n, v in snap.partitions.items()})
        moves = handover(states, self.tracker_)  # hand-over is immediate, not periodic
        if now >= self.next_check_:
            self.next_check_ = now + k.period
            self.tracker_.observe(now, {n: v.bytes for n, v in snap.partitions.items()})
            if self.mode == "promc" and not moves:
                move = self.rebalancer_.decide(states, self.tracker_)
                if move is not None:
                    states[move.src].groups -= 1
                    states[move.dst].groups += 1
                    moves.append(move)
        if not moves:
            return None
        for name, st in states.items():
            self.cc_[name] = st.groups
        return Decision({n: self._params_for(n, self.cc_[n]) for n in self.cc_},
                        "; ".join(m.reason for m in moves))

    def _update_sc(self, snap: Snapshot) -> Decision | None:
        active = [n for n in self.order_ if self.cc_[n] > 0]
        if not active:
            return None
        current = active[0]
        view = snap.partitions.get(current)
        if view is None or view.files_done < view.files_total:
            return None
        later = [n for n in self.order_[self.order_.index(current) + 1:]
                 if snap.partitions[n].files_done < snap.partitions[n].files_total]
        self.cc_[current] = 0
        if later:
            nxt = later[0]
            self.cc_[nxt] = self._sc_cc(nxt)
            reason = f"SC: partition {current} finished; starting {nxt}"
        else:
            reason = f"SC: partition {current} finished"
        return Decision({n: self._params_for(n, self.cc_[n]) for n in self.cc_}, reason)
