"""``OnlineTuner``: any tuner's θ as the start, then ``OnlineSearch`` (``tuners.online``) for how
many connections the path needs now; the tuner keeps deciding how to split them between partitions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from dtune.accounting import Snapshot
from dtune.netfacts import ASSUMED_BUFFER, NetworkFacts, os_receive_buffer_max
from dtune.params import DEFAULT_SPLIT_THRESHOLD, Params
from dtune.tuners.base import Decision, Fixed, Tuner, TunerPlan
from dtune.tuners.online import OnlineSearch
from dtune.tuners.online_constants import DEFAULT_CAP, OnlineConstants
from dtune.tuners.shaping import busiest_share, pipeline_for, shape, total_lanes


class OnlineTuner(Tuner):
    """Any tuner's θ as the start, then the number of connections the path needs now.

    base        the tuner whose split between partitions (its Params per partition) is kept
    search      False: no search, only the cap on connections to one origin (``--no-online``, and
                under ``--limit-rate``: the limit is the bottleneck, the goodput says nothing)
    cap         the most connections to one origin (``--max-connections-per-host``)
    constants   ``OnlineConstants`` (``constants_for(sla)``)
    fixed       the user's explicit cc / p / pp, never changed
    min_rate    bytes/s no step down may go below (``--min-throughput``)
    """

    def __init__(self, base: Tuner, *, search: bool = True, cap: int = DEFAULT_CAP,
                 constants: OnlineConstants | None = None,
                 fixed: Fixed | Mapping[str, int] | None = None, min_rate: float = 0.0) -> None:
        super().__init__(fixed=base.fixed if fixed is None else fixed)
        self.base = base
        self.search = search
        self.cap = cap
        self.constants = constants or OnlineConstants()
        self.min_rate = min_rate
        self.name = base.name
        self.needs_facts = base.needs_facts
        self.limit_: int | None = None       # a cluster's cap on this node's connections (``limit``)
        self.pending_limit_: tuple[int | None, str] | None = None

    def get_params(self) -> dict:
        out = super().get_params()
        out["base"] = self.base.get_params()
        return out

    def limit(self, cap: int | None, why: str, fresh: bool = False) -> bool:
        """At most ``cap`` connections in all from the next update on (None: the tuner's own cap
        again), as a cluster's parent asks of each node (``cluster.conduct``). ``fresh``: the node's
        conditions changed (the other shard on it ended), so the search starts again from the
        tuner's θ: what it learnt while it shared the node does not hold. False when there is
        nothing to limit: no search runs (the user fixed cc and p, or ``--no-online``)."""
        if not self.searching:
            return False
        self.pending_limit_ = (cap, why, fresh)
        return True

    @property
    def searching(self) -> bool:
        """Does the search run (after ``plan``)?"""
        return getattr(self, "search_", None) is not None and self.search_.phase != "off"

    def plan(self, sizes: Sequence[int | None], facts: NetworkFacts) -> TunerPlan:
        tplan = self.base.plan(sizes, facts)
        known = [s for s in sizes if s is not None]
        fallback = sum(known) / len(known) if known else 0
        totals: dict[str, list[float]] = {}
        for size, name in zip(sizes, tplan.partition_of, strict=True):
            acc = totals.setdefault(name, [0.0, 0])
            acc[0] += size if size is not None else fallback
            acc[1] += 1
        self.ranged_ = {n: (t / c if c else 0) > DEFAULT_SPLIT_THRESHOLD for n, (t, c) in totals.items()}
        whole = sum(t for t, _ in totals.values())
        self.bytes_share_ = {n: t / whole for n, (t, _) in totals.items()} if whole else {}
        self.base_ = dict(tplan.params)
        self.rtt_ = facts.rtt or self.constants.default_rtt
        buffer = facts.tcp_buffer or os_receive_buffer_max() or ASSUMED_BUFFER
        window = buffer * self.constants.window_fraction
        # whole files: no deeper pipeline than the windows need (the user's pp stays)
        self.pipeline_ = {n: pipeline_for(t / c, window, self.constants.pipeline_windows)
                          for n, (t, c) in totals.items() if c and not self.ranged_[n]}
        start = theta = total_lanes(self.base_)
        cap = self._cap(self.base_)
        searching = self.search and not self._all_fixed() and not self.base.sizes_connections
        k = self.constants
        need = math.ceil(facts.bdp / window) if facts.bdp > 0 else theta
        least = max(k.start_floor, math.ceil(k.start_windows * need))
        if searching and min(theta, cap) > least:
            start = least
            tplan.notes.append(f"online: the tuner's θ is {theta} connections; the path's BDP "
                               f"({facts.bdp / 1e3:.0f} KB) needs {need} window(s) of {window / 1e3:.0f} KB: "
                               f"starting from {start}")
        elif searching and theta < min(need, cap) and facts.how.get("bandwidth") == "given":
            # fewer windows than the given bandwidth needs cannot carry it: the search's first step
            # would be up anyway, one measurement window later (an assumed bandwidth lifts nothing)
            start = min(need, cap)
            tplan.notes.append(f"online: the tuner's θ is {theta} connection(s); the given bandwidth × RTT "
                               f"({facts.bdp / 1e3:.0f} KB) needs {need} window(s) of {window / 1e3:.0f} KB: "
                               f"starting from {start}")
        self.search_ = OnlineSearch(start, cap=cap, window=window, constants=self.constants,
                                    floor_rate=self.min_rate, realize=self._realize)
        if not searching:
            self.search_.phase = "off"
        tplan.params = self._shaped()
        if self.search_.phase != "off" and self.fixed.pp is None:
            for name, cap in sorted(self.pipeline_.items()):
                base_pp = self.base_[name].pp if name in self.base_ else 0
                if base_pp > cap:
                    avg = totals[name][0] / totals[name][1]
                    tplan.notes.append(f"online: partition {name}: pp {base_pp} → {cap}, the requests of "
                                       f"{avg / 1e3:.0f} KB that keep {self.constants.pipeline_windows:g} "
                                       f"windows of {window / 1e3:.0f} KB coming")
        self.label = self.base.label + (" + online" if self.search_.phase != "off" else "")
        n = total_lanes(tplan.params)
        if self.search_.phase != "off":
            whose = " (the tuner's θ)" if start == theta else ""
            tplan.notes.append(f"online: from {n} connections{whose}, at most {self.cap} to one origin; "
                               "searched on measured goodput")
        elif n < start:
            tplan.notes.append(f"at most {self.cap} connections to one origin: {start} → {n}")
        return tplan

    def update(self, now: float, snap: Snapshot) -> Decision | None:
        reasons: list[str] = []
        event = step = None
        pending = self.pending_limit_
        if pending is not None and self.search_.phase != "off":
            self.pending_limit_ = None
            self.limit_ = pending[0]
            if pending[2]:
                # (a shard that shared its node judged its connections by a goodput the other
                # shard took half of, and shed to 1-2; alone, it held there: 8 s for 150 MB)
                was = self.search_.n
                self._search_again(self._theta())
                reasons.append(f"{pending[1]}: the search starts again from the tuner's {self.search_.n} "
                               f"connections")
                event = {"phase": "restart", "from": was, "to": self.search_.n, "limit": self.limit_}
            else:
                step = self.search_.limit(now, self._cap(self.base_), pending[1], strict=self.limit_ is not None)
                if step is not None:
                    reasons.append(step.reason)
                    event = {**step.event, "limit": self.limit_}
        decision = self.base.update(now, snap)
        if decision is not None:
            before = self._theta()
            self.base_.update(decision.params)
            reasons.append(decision.reason)
            after = self._theta()
            self.search_.cap = self._cap(self.base_)
            if self.search_.phase != "off" and before and not 0.8 <= after / before <= 1.25:
                # a new workload (SC's next partition): search again from the tuner's θ
                self._search_again(after)
        if self.search_.phase != "off" and step is None:
            left = bytes_left = None
            if snap.bytes_total is not None:
                bytes_left = max(0, snap.bytes_total - snap.bytes_resumed - snap.bytes)
                left = bytes_left / snap.rate if snap.rate > 0 else None
            step = self.search_.observe(now, snap.bytes, snap.rtt_live or snap.rtt or self.rtt_,
                                        connections=snap.connections, seconds_left=left,
                                        bytes_left=bytes_left,
                                        # (a host's request limit sets the goodput while it holds
                                        # requests back: no window is judged on it, as in a stall)
                                        stalled=snap.stalled or snap.paced)
            if step is not None:
                reasons.append(step.reason)
                event = step.event
        if not reasons:
            return None
        return Decision(self._shaped(), "; ".join(reasons), event=event, drain=step is not None and step.drain)

    def _theta(self) -> int:
        """The tuner's own total: the connections of its partitions still at work."""
        return total_lanes({n: p for n, p in self.base_.items() if p.cc > 0})

    def _search_again(self, start: int) -> None:
        self.search_ = OnlineSearch(start, cap=self._cap(self.base_), window=self.search_.window,
                                    constants=self.constants, floor_rate=self.min_rate, realize=self._realize)

    def _shaped(self) -> dict[str, Params]:
        n = self.search_.n
        if self.search_.phase == "off":  # the tuner's own total, within the cap
            n = min(self._theta(), self.search_.cap)
        return self._shape(n, searching=self.search_.phase != "off")

    def _shape(self, n: int, *, searching: bool = True) -> dict[str, Params]:
        """``shape`` of the tuner's split for ``n`` connections in all, with the pipeline cap
        (without the search the tuner's split and pp are kept)."""
        out = shape(self.base_, n, ranged=self.ranged_, fixed=self.fixed,
                    bytes_share=self.bytes_share_ if searching else None)
        if searching and self.fixed.pp is None:
            for name, cap in self.pipeline_.items():
                if name in out and out[name].pp > cap:
                    out[name] = out[name].with_(pp=cap)
        return out

    def _realize(self, n: int) -> int:
        """How many connections the partitions take when ``n`` are wanted (``shape``'s rounding and
        floors), so that the search judges the count that is really open."""
        return max(1, total_lanes({k: p for k, p in self._shape(n).items() if p.cc > 0}))

    def _cap(self, params: Mapping[str, Params]) -> int:
        """Total connections such that no origin gets more than ``cap`` (and no more than the
        ``limit`` in force)."""
        cap = max(1, math.floor(self.cap / busiest_share(params)))
        return cap if self.limit_ is None else max(1, min(cap, self.limit_))

    def _all_fixed(self) -> bool:
        return self.fixed.cc is not None and self.fixed.p is not None
