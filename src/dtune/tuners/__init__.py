"""Tuners: pure decision objects that pick cc/p/pp (per partition) and revise them.

A tuner never touches a socket. ``plan()`` gets the file sizes and the
network facts and returns the partitions and their first parameters;
``update(now, snapshot)`` — called once a second, right after the engine's
accounting tick — gets the snapshot and returns
new parameters (with the reason) or None. ``transfer()`` applies them.

Like scikit-learn estimators: ``__init__`` stores settings unchanged,
``get_params()`` returns them (recorded with every result), learned state
ends in ``_``.

Values the user set explicitly (``fixed``) are never changed by a tuner.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from dtune.accounting import Snapshot
from dtune.netfacts import NetworkFacts
from dtune.params import DEFAULT_SPLIT_THRESHOLD, Params, default_params
from dtune.tuners.base import RangePolicy
from dtune.tuners.heuristic import (
    DEFAULTS as HEURISTIC_DEFAULTS,
)
from dtune.tuners.heuristic import (
    EtaTracker,
    HeuristicConstants,
    PartitionState,
    ProMCRebalancer,
    find_optimal_parameters,
    handover,
    mc_allocate,
    partition_files,
    promc_allocate,
)
from dtune.tuners.mdtp import LaneClimber, MdtpConstants, MdtpSizer, StaticChunks


@dataclass(slots=True)
class TunerPlan:
    partition_of: list[str]                 # partition name of each file
    params: dict[str, Params]               # first parameters per partition
    notes: list[str] = field(default_factory=list)
    range_policy: RangePolicy | None = None  # range sizes per replica (None: the engine's taper)


@dataclass(slots=True)
class Decision:
    params: dict[str, Params]
    reason: str


class Tuner:
    name = "tuner"
    label = "tuner"
    needs_facts = False  # whether plan() uses measured network facts

    def __init__(self, *, fixed: dict[str, int] | None = None) -> None:
        self.fixed = dict(fixed or {})

    def get_params(self) -> dict:
        return {"tuner": self.name, "fixed": dict(self.fixed)}

    def plan(self, sizes: Sequence[int | None], facts: NetworkFacts) -> TunerPlan:
        raise NotImplementedError

    def update(self, now: float, snap: Snapshot) -> Decision | None:
        return None

    def _fix(self, params: Params) -> Params:
        """Apply the user's explicit p/pp (cc is handled by each tuner)."""
        changes = {k: v for k, v in self.fixed.items() if k in ("p", "pp")}
        return params.with_(**changes) if changes else params


class StaticTuner(Tuner):
    """Fixed cc/p/pp for the whole transfer: the baseline every report compares against."""

    name = label = "static"

    def plan(self, sizes: Sequence[int | None], facts: NetworkFacts) -> TunerPlan:
        known = [s for s in sizes if s is not None]
        base = default_params(len(sizes), sum(known) / len(known) if known else None)
        params = base.with_(**{k: v for k, v in self.fixed.items() if k in ("cc", "p", "pp")})
        note = f"static: {params}" + ("" if len(self.fixed) == 3 else
                                      " (unset values from dtune's size rule)")
        return TunerPlan(["all"] * len(sizes), {"all": params}, [note])


GO_TABLE = (  # (upper bound of average file size in bytes, cc, p, pp)
    (50_000_000, 2, 2, 20),
    (250_000_000, 2, 4, 8),
    (float("inf"), 2, 8, 4),
)


class GoLikeTuner(Tuner):
    """GO-like (approximation): one partition, parameters from a table by average size.

    Globus Online's exact values are not published; this table follows what
    the literature describes (cc 2, pipelining ≈ 20 for small files, up to
    ≈ 8 streams for large ones). It is labelled an approximation everywhere.
    """

    name = "golike"
    label = "GO-like (approximation)"

    def __init__(self, *, table: Sequence[tuple[float, int, int, int]] = GO_TABLE,
                 fixed: dict[str, int] | None = None) -> None:
        super().__init__(fixed=fixed)
        self.table = tuple(table)

    def get_params(self) -> dict:
        return {**super().get_params(), "table": [list(row) for row in self.table]}

    def plan(self, sizes: Sequence[int | None], facts: NetworkFacts) -> TunerPlan:
        known = [s for s in sizes if s is not None]
        avg = sum(known) / len(known) if known else 0
        row = next((r for r in self.table if avg < r[0]), self.table[-1])
        _, cc, p, pp = row
        params = self._fix(Params(cc=self.fixed.get("cc", cc), p=p, pp=pp))
        return TunerPlan(["all"] * len(sizes), {"all": params},
                         [f"{self.label}: average {avg:.0f} bytes → {params}"])


class HeuristicTuner(Tuner):
    """SC, MC or ProMC (§1.3–1.5) over size partitions with Algorithm 1 parameters.

    mode            "sc" (partitions one after another), "mc" (all at once,
                    round-robin channels, hand-over), "promc" (δ-weighted
                    channels, hand-over and online re-allocation)
    max_cc          the user's maximum concurrency (channels in total)
    max_partitions  1..4 (the paper found 2 best for large datasets)
    constants       every constant of §1, overridable
    """

    needs_facts = True

    def __init__(self, mode: str = "promc", *, max_cc: int = 16, max_partitions: int = 2,
                 constants: HeuristicConstants | None = None,
                 fixed: dict[str, int] | None = None) -> None:
        super().__init__(fixed=fixed)
        if mode not in ("sc", "mc", "promc"):
            raise ValueError(f"unknown heuristic mode {mode!r}")
        self.mode = mode
        self.max_cc = max_cc
        self.max_partitions = max_partitions
        self.constants = constants or HeuristicConstants()
        self.name = self.label = mode

    def get_params(self) -> dict:
        k = self.constants
        return {**super().get_params(), "mode": self.mode, "max_cc": self.max_cc,
                "max_partitions": self.max_partitions, "delta": dict(k.delta), "period": k.period}

    def plan(self, sizes: Sequence[int | None], facts: NetworkFacts) -> TunerPlan:
        k = self.constants
        self.replicas_ = max(1, len(facts.replica_origins))
        known = [s for s in sizes if s is not None]
        fallback = int(sum(known) / len(known)) if known else 0
        filled = [s if s is not None else fallback for s in sizes]
        parts = partition_files(filled, facts.bandwidth, facts.bdp, self.max_partitions, k)
        total_cc = self.fixed.get("cc", min(self.max_cc, len(sizes)))
        self.parts_ = {p.name: p for p in parts}
        self.alg1_ = {p.name: find_optimal_parameters(p.avg, p.count, facts.bdp, facts.tcp_buffer,
                                                      self.max_cc, k) for p in parts}
        names = [p.name for p in parts]
        if self.mode == "sc":
            self.order_ = names  # smallest average size first
            cc = {n: 0 for n in names}
            first = names[0]
            cc[first] = self.fixed.get("cc", self.alg1_[first].cc)
        elif self.mode == "mc":
            cc = mc_allocate(names, [p.count for p in parts], total_cc, k)
        else:
            cc = promc_allocate(names, [p.total for p in parts], [p.count for p in parts], total_cc, k)
        self.cc_ = cc
        params = {n: self._params_for(n, cc[n]) for n in names}
        partition_of = [""] * len(sizes)
        for p in parts:
            for i in p.indices:
                partition_of[i] = p.name
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
            # connections spread over the replicas with MDTP-sized ranges
            policy = MdtpSizer(rtt=dict(enumerate(facts.replica_rtt)))
            notes.append(f"{self.replicas_} replicas: each partition's streams spread over all of "
                         "them, ranges sized by MDTP bin packing")
        return TunerPlan(partition_of, params, notes, range_policy=policy)

    def _params_for(self, name: str, cc: int) -> Params:
        a = self.alg1_[name]
        pp = a.pp
        if self.parts_[name].avg > DEFAULT_SPLIT_THRESHOLD:  # its files travel as several ranges
            pp = max(pp, self.constants.range_pipeline)
        params = self._fix(Params(cc=cc, p=a.p, pp=pp))
        if self.replicas_ > 1:
            per = max(1, math.ceil(params.p / self.replicas_))
            params = params.spread([per] * self.replicas_)
        return params

    def _states(self, snap: Snapshot) -> dict[str, PartitionState]:
        states = {}
        for name, view in snap.partitions.items():
            remaining = max(0, (view.bytes_total or 0) - view.bytes - view.bytes_resumed)
            states[name] = PartitionState(remaining=remaining,
                                          files_left=view.files_total - view.files_done,
                                          channels=self.cc_.get(name, 0))
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
                    states[move.src].channels -= 1
                    states[move.dst].channels += 1
                    moves.append(move)
        if not moves:
            return None
        for name, st in states.items():
            self.cc_[name] = st.channels
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
            self.cc_[nxt] = self.fixed.get("cc", self.alg1_[nxt].cc)
            reason = f"SC: partition {current} finished; starting {nxt}"
        else:
            reason = f"SC: partition {current} finished"
        return Decision({n: self._params_for(n, self.cc_[n]) for n in self.cc_}, reason)


TUNERS = ("auto", "promc", "mc", "sc", "golike", "static", "mdtp", "static-chunks",
          "dtree", "ditacchio-max", "ditacchio-energy")


def make_tuner(name: str, *, fixed: dict[str, int], max_cc: int, max_partitions: int,
               replicas: int = 1, files: int = 1, sla: str | None = None,
               min_throughput: float | None = None, max_energy: float | None = None,
               model: str | None = None) -> Tuner:
    """``auto`` is MDTP for one or two files with replicas; else the decision-tree tuner
    when a model file exists at the default path (it falls back to ProMC when the
    model has nothing close); else ProMC.

    ``sla``, ``min_throughput`` (Mbit/s), ``max_energy`` (J) and ``model`` (a
    model file) are the decision-tree tuner's.
    """
    if name == "static":
        return StaticTuner(fixed=fixed)
    if name == "mdtp" or (name == "auto" and replicas > 1 and files <= 2):
        return MdtpTuner(fixed=fixed)
    if name == "static-chunks":
        return MdtpTuner(static_chunks=8 << 20, fixed=fixed)
    if name == "golike":
        return GoLikeTuner(fixed=fixed)
    if name in ("ditacchio-max", "ditacchio-energy"):
        from dtune.tuners.ditacchio_tuner import DiTacchioTuner
        return DiTacchioTuner("max-throughput" if name == "ditacchio-max" else "min-energy", fixed=fixed)
    if name == "dtree" or name == "auto":
        from pathlib import Path

        from dtune.tuners.dtree import DTreeTuner, default_model_path
        if name == "dtree" or Path(model or default_model_path()).expanduser().exists():
            return DTreeTuner(sla or "max-throughput", model=model, min_throughput=min_throughput,
                              max_energy=max_energy, max_cc=max_cc, max_partitions=max_partitions,
                              auto=name == "auto", fixed=fixed)
    mode = "promc" if name == "auto" else name
    return HeuristicTuner(mode, max_cc=max_cc, max_partitions=max_partitions, fixed=fixed)


class MdtpTuner(Tuner):
    """MDTP (§3): one partition, every replica in use, bin-packed range sizes.

    Starts with ``start_lanes`` connections per replica (their first ranges
    are the probes), sizes every later range with ``MdtpSizer`` and grows
    the connections of window-limited replicas with ``LaneClimber`` every
    ``period`` seconds.
    ``chunks`` switches to the static-chunking baseline (equal ranges, one
    connection per replica, no adaptation).
    """

    needs_facts = True

    def __init__(self, *, constants: MdtpConstants | None = None, period: float = 1.0,
                 static_chunks: int | None = None, fixed: dict[str, int] | None = None) -> None:
        super().__init__(fixed=fixed)
        self.constants = constants or MdtpConstants()
        self.period = period
        self.static_chunks = static_chunks
        self.name = self.label = "static-chunks" if static_chunks else "mdtp"

    def get_params(self) -> dict:
        k = self.constants
        return {**super().get_params(), "period": self.period, "static_chunks": self.static_chunks,
                "probe": k.probe, "large_min": k.large_min, "large_max": k.large_max,
                "alpha": k.alpha, "bdp_rounds": k.bdp_rounds}

    def plan(self, sizes: Sequence[int | None], facts: NetworkFacts) -> TunerPlan:
        replicas = max(1, len(facts.replica_origins))
        self.origins_ = list(facts.replica_origins) or [""]
        self.buf_ = facts.tcp_buffer
        k = self.constants
        window = facts.tcp_buffer * HEURISTIC_DEFAULTS.window_fraction  # what one stream gets
        rtts_s = list(facts.replica_rtt) or [facts.rtt]
        if self.static_chunks:
            start = [1] * replicas
        else:  # enough connections for start_rate through each replica's window
            start = [min(k.max_lanes, max(k.start_lanes, math.ceil(k.start_rate * rtts_s[min(r, len(rtts_s) - 1)]
                                                                     / window)))
                     for r in range(replicas)]
        self.lanes_ = dict(enumerate(start))
        self.climber_ = LaneClimber(k)
        self.next_check_: float | None = None
        # a climbing step is judged after ≥ 3 round trips of the slowest replica
        self.step_ = max(self.period, 3 * max(rtts_s))
        if self.static_chunks:
            self.policy_: RangePolicy = StaticChunks(self.static_chunks)
        else:
            self.policy_ = MdtpSizer(k, rtt=dict(enumerate(facts.replica_rtt)), lanes=self.lanes_,
                                     window=window)
        cc = self.fixed.get("cc", max(1, min(len(sizes), 2)))
        # pp 1: a range lasts many round trips by construction (LARGE ≥ 8 BDP of the fastest
        # replica), so a second one queued behind it only hoards work on one connection (the
        # 128 MiB file of replicas4: 2.6 s with pp 2, srv1 holding 75 % of the file; 2.1 s with pp 1)
        params = self._fix(Params(cc=cc, p=replicas, pp=1)).spread(start)
        rtts = ", ".join(f"{r * 1000:.1f} ms" for r in facts.replica_rtt)
        note = (f"{self.label}: {replicas} replicas (RTT {rtts}); {'/'.join(map(str, start))} "
                "connection(s) each to start"
                + ("" if self.static_chunks else ", probe ranges then bin-packed sizes"))
        return TunerPlan(["all"] * len(sizes), {"all": params}, [note], range_policy=self.policy_)

    def update(self, now: float, snap: Snapshot) -> Decision | None:
        if self.static_chunks or "all" not in snap.partitions:
            return None
        if self.next_check_ is None:
            self.next_check_ = now + self.step_
            return None
        if now < self.next_check_:
            return None
        self.next_check_ = now + self.step_
        sizer = self.policy_
        rates = {r: snap.sources[o].rate for r, o in enumerate(self.origins_) if o in snap.sources}
        limited = {r: sizer.window_limited(r, self.buf_) for r in self.lanes_}
        active = {r for r in self.lanes_ if r in sizer.thr_}
        lanes, why = self.climber_.step(self.lanes_, rates, limited, active)
        if lanes == self.lanes_:
            return None
        self.lanes_.clear()
        self.lanes_.update(lanes)  # the sizer shares this dict
        view = snap.partitions["all"].params
        base = Params(cc=view.cc, p=1, pp=view.pp)
        return Decision({"all": base.spread([lanes[r] for r in sorted(lanes)])}, "; ".join(why))
