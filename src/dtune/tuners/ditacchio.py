"""``--tuner ditacchio-max | ditacchio-energy``: the Di Tacchio et al. baselines (docs/algorithms.md §2.6).

Theory of operation
-------------------
The decisions are pure state machines, fed one throughput (or predicted
energy) per interval: ``GroupMachine`` answers the next group count (cc),
``cores_step`` the next core count from the CPU load. ``DiTacchioTuner``
feeds them from the engine's snapshots and turns their answers into
``Params``:

1. ``plan``: files are split by ``partition_files`` into 3 partitions
   (Small / Medium / Large, small ones merged); the first group count and
   pp come from ``initial_parameters`` (bandwidth, RTT, buffer, average
   file size), p = 1, and the groups are split over the partitions by
   their bytes (``split_groups``). The paper calls a group a channel.
2. After the first ``interval``: slow start, once
   (``numCh = min(numCh·BW/lastThroughput, maxCh)``).
3. Every later ``interval``: one reading into ``GroupMachine`` — the
   interval's throughput (max-throughput; the machine smooths it with the
   EWMA of weight 0.8 on the newest interval) or the predicted energy
   ``average power × remaining bytes / average throughput`` over the
   interval (min-energy; power from the energy meter's reading in
   ``snapshot.energy``) — which answers INCREASE / WARNING / RECOVERY and
   the new group count.
4. Every ``core_period`` (1 s): the process's CPU load (CPU-seconds used ÷
   cores it may use) into ``cores_step``; a change becomes ``cpu_num`` in
   the Decision, which ``transfer.KernelKnobs`` applies (affinity) or
   records as not applied.
5. Whenever the group count changes or a partition finishes, the groups
   are split again over the partitions that still have files, by their
   remaining bytes.

Reading of the text where it is silent (documented, configurable):

- ``ref`` is the value at the last change of the group count; a reading
  above ``(1+β)·ref`` (below ``(1−β)·ref`` for energy, where lower is better)
  is an improvement: take another step and make it the new ``ref``;
- a reading below ``(1−α)·ref`` (above ``(1+α)·ref`` for energy) puts the
  machine in WARNING; a second one in a row steps back by ``Δcc``
  (RECOVERY) and makes that reading the new ``ref``;
- in between the machine holds.

Interval: the reference implementation re-tunes every 30 s. dtune's testbed
transfers last seconds to tens of seconds, so the default here is **5 s**
(``DiTacchioConstants.interval``); pass ``constants=DiTacchioConstants(interval=30)``
for the reference value.

Two consequences of the reference rules, kept as they are:

- ``cores_step`` removes a core only while more than 2 remain, so on a
  2-core machine the core count never changes;
- the predicted energy shrinks as the remaining bytes do, so the energy
  machine reads most intervals as "better" and keeps adding groups.

dtune's engine fetches a file above ``DEFAULT_SPLIT_THRESHOLD`` as several
ranges; such partitions get pp >= 2 so that a lane does not idle a round
trip between two ranges (the same refinement ProMC uses). Explicit user
values (cc, p, pp) are never changed.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from dtune.accounting import Snapshot
from dtune.energy import process_cpu_time
from dtune.netfacts import NetworkFacts
from dtune.params import DEFAULT_SPLIT_THRESHOLD, Params
from dtune.tuners.base import Decision, Fixed, Tuner, TunerPlan, apply_fixed
from dtune.tuners.heuristic import HeuristicConstants, names_of, partition_files

INCREASE, WARNING, RECOVERY = "INCREASE", "WARNING", "RECOVERY"


@dataclass(frozen=True, slots=True)
class DiTacchioConstants:
    alpha: float = 0.05
    beta: float = 0.05
    step_cc: int = 6
    max_pp: int = 32
    max_groups: int = 32
    interval: float = 5.0        # reference 30 s; shortened for minute-long testbed transfers
    ewma_new: float = 0.8        # weight of the newest interval in the throughput EWMA
    load_add: float = 0.8        # CPU load above this adds a core
    load_remove_tput: float = 0.35
    load_remove_energy: float = 0.30
    min_cores: int = 2           # cores are removed only while more than this remain
    core_period: float = 1.0     # seconds between core checks


DEFAULT = DiTacchioConstants()


def initial_parameters(bandwidth: float, rtt: float, buf: int, avg_file: float,
                       k: DiTacchioConstants = DEFAULT) -> tuple[int, int]:
    """(groups, pp): ``numCh = min(ceil(BW / (buf·8/RTT)), maxCh)``, ``pp = min(maxPP, ceil(BDP/avg))``.

    ``bandwidth`` in bytes/s, ``rtt`` in seconds, ``buf`` in bytes.
    """
    per_stream = buf / max(rtt, 1e-6)                  # bytes/s one window allows
    groups = min(math.ceil(bandwidth / per_stream), k.max_groups)
    pp = min(k.max_pp, math.ceil(bandwidth * rtt / max(avg_file, 1.0)))
    return max(1, groups), max(1, pp)


def split_groups(groups: int, partition_bytes: dict[str, int]) -> dict[str, int]:
    """Groups over partitions by their share of bytes (at least one each, largest remainders)."""
    total = sum(partition_bytes.values()) or 1
    names = list(partition_bytes)
    if groups <= len(names):
        ranked = sorted(names, key=lambda n: -partition_bytes[n])
        return {n: (1 if n in ranked[:groups] else 0) for n in names}
    exact = {n: groups * partition_bytes[n] / total for n in names}
    alloc = {n: max(1, math.floor(exact[n])) for n in names}
    while sum(alloc.values()) > groups:
        n = max((x for x in names if alloc[x] > 1), key=lambda x: alloc[x] - exact[x])
        alloc[n] -= 1
    while sum(alloc.values()) < groups:
        n = max(names, key=lambda x: exact[x] - alloc[x])
        alloc[n] += 1
    return alloc


class GroupMachine:
    """INCREASE / WARNING / RECOVERY over the group count.

    ``higher_is_better`` is True for throughput, False for predicted energy.
    """

    def __init__(self, groups: int, *, higher_is_better: bool = True,
                 k: DiTacchioConstants = DEFAULT) -> None:
        self.k = k
        self.higher = higher_is_better
        self.groups_ = groups
        self.state_ = INCREASE
        self.ref_: float | None = None
        self.smoothed_: float | None = None

    def slow_start(self, bandwidth: float, throughput: float) -> int:
        """After the first interval: ``numCh = min(numCh·BW/lastThroughput, maxCh)``."""
        if throughput > 0:
            self.groups_ = max(1, min(self.k.max_groups,
                                        math.ceil(self.groups_ * bandwidth / throughput)))
        return self.groups_

    def step(self, value: float) -> tuple[int, str]:
        """One interval's reading → (groups, reason)."""
        k = self.k
        if self.smoothed_ is None or not self.higher:
            smoothed = value  # energy predictions are already averages
        else:
            smoothed = k.ewma_new * value + (1 - k.ewma_new) * self.smoothed_
        self.smoothed_ = smoothed
        if self.ref_ is None:
            self.ref_ = smoothed
            return self.groups_, f"{self.state_}: first reading {smoothed:.4g}"
        better = smoothed > (1 + k.beta) * self.ref_ if self.higher else smoothed < (1 - k.beta) * self.ref_
        worse = smoothed < (1 - k.alpha) * self.ref_ if self.higher else smoothed > (1 + k.alpha) * self.ref_
        if better:
            reason = f"INCREASE: {smoothed:.4g} beats {self.ref_:.4g} by > β"
            self.state_ = INCREASE
            self.ref_ = smoothed
            self.groups_ = min(k.max_groups, self.groups_ + k.step_cc)
            return self.groups_, reason
        if worse:
            if self.state_ == WARNING:
                self.state_ = RECOVERY
                self.ref_ = smoothed
                self.groups_ = max(1, self.groups_ - k.step_cc)
                return self.groups_, f"RECOVERY: {smoothed:.4g} still worse than ref by > α"
            self.state_ = WARNING
            return self.groups_, f"WARNING: {smoothed:.4g} worse than ref {self.ref_:.4g} by > α"
        return self.groups_, f"{self.state_}: hold at {smoothed:.4g}"


def predicted_energy(avg_power: float, remaining_bytes: int, avg_throughput: float) -> float:
    """Joules still to spend: ``average power × remaining bytes / average throughput``."""
    if avg_throughput <= 0:
        return math.inf
    return avg_power * remaining_bytes / avg_throughput


def cores_step(cores: int, load: float, available: int, *, energy: bool,
               k: DiTacchioConstants = DEFAULT) -> int:
    """Checked every second: load > 0.8 adds a core; a low load removes one while > 2 remain."""
    low = k.load_remove_energy if energy else k.load_remove_tput
    if load > k.load_add and cores < available:
        return cores + 1
    if load < low and cores > k.min_cores:
        return cores - 1
    return cores


# ---- the tuner
SLAS = {"max-throughput": "ditacchio-max", "min-energy": "ditacchio-energy"}
PARTITIONS = 3        # Small / Medium / Large (§1.1 with maxPartitions = 3)


def _process_cpu_time() -> float:
    return process_cpu_time()


def _allowed_cores() -> int:
    get = getattr(os, "sched_getaffinity", None)
    return len(get(0)) if get else (os.cpu_count() or 1)


class DiTacchioTuner(Tuner):
    """Di Tacchio et al. (CLOUD 2019), max-throughput or min-energy (docs/algorithms.md §2.6).

    sla         "max-throughput" (groups follow the smoothed throughput) or
                "min-energy" (groups follow the predicted energy)
    constants   α, β, Δcc, maxima, interval, EWMA weight, load thresholds
                (``DiTacchioConstants``; interval 5 s here, 30 s in the reference)
    partitions  size partitions the groups are split over (3)
    cpu_time    CPU-seconds of this process so far (for the load); injectable for tests
    cores       cores the transfer may use at the start (default: the process's affinity)
    fixed       the user's explicit cc / p / pp, never changed
    """

    needs_facts = True
    sizes_connections = True   # its machine counts the groups

    def __init__(self, sla: str = "max-throughput", *, constants: DiTacchioConstants | None = None,
                 partitions: int = PARTITIONS, cpu_time: Callable[[], float] = _process_cpu_time,
                 cores: Callable[[], int] = _allowed_cores,
                 fixed: Fixed | Mapping[str, int] | None = None) -> None:
        super().__init__(fixed=fixed)
        if sla not in SLAS:
            raise ValueError(f"ditacchio: sla must be one of {', '.join(SLAS)}, got {sla!r}")
        self.sla = sla
        self.constants = constants or DiTacchioConstants()
        self.partitions = partitions
        self.cpu_time = cpu_time
        self.cores = cores
        self.name = SLAS[sla]
        self.label = f"Di Tacchio {sla}"

    @property
    def energy(self) -> bool:
        return self.sla == "min-energy"

    # -- plan -------------------------------------------------------------------------

    def plan(self, sizes: Sequence[int | None], facts: NetworkFacts) -> TunerPlan:
        k = self.constants
        known = [s for s in sizes if s is not None]
        avg = sum(known) / len(known) if known else 0.0
        filled = [s if s is not None else int(avg) for s in sizes]
        parts = partition_files(filled, facts.bandwidth, facts.bdp, self.partitions, HeuristicConstants())
        groups, pp = initial_parameters(facts.bandwidth, facts.rtt, facts.tcp_buffer, avg, k)
        if self.fixed.cc is not None:
            groups = self.fixed.cc
        self.bandwidth_ = facts.bandwidth
        self.pp_ = pp
        self.avg_ = {p.name: p.avg for p in parts}
        self.totals_ = {p.name: p.total for p in parts}
        self.available_ = max(1, self.cores())
        self.cores_ = self.available_
        self.machine_ = GroupMachine(groups, higher_is_better=not self.energy, k=k)
        self.slow_started_ = False
        self.state_: dict | None = None       # the last interval's (time, bytes, joules)
        self.cpu_mark_: tuple[float, float] | None = None
        self.next_interval_: float | None = None
        self.next_core_: float | None = None
        self.open_: set[str] = {p.name for p in parts}
        self.cc_ = split_groups(groups, dict(self.totals_))
        params = self._params()
        partition_of = names_of(parts, len(sizes))
        notes = [f"{self.label}: BW {facts.bandwidth * 8 / 1e6:.0f} Mbit/s ({facts.how.get('bandwidth')}), "
                 f"RTT {facts.rtt * 1000:.1f} ms ({facts.how.get('rtt')}), buffer {facts.tcp_buffer}; "
                 f"numCh = min(ceil(BW / (buf/RTT)), {k.max_groups}) = {groups}, pp = {self.fixed.pp or self.pp_}, p = {self.fixed.p or 1}; "
                 f"re-tuned every {k.interval:g} s (reference 30 s, shortened for testbed transfers), "
                 f"cores every {k.core_period:g} s from {self.cores_}"]
        notes += [f"partition {p.name}: {p.count} files, avg {p.avg:.0f} bytes, {self.cc_[p.name]} groups"
                  for p in parts]
        return TunerPlan(partition_of, params, notes)

    def _params(self) -> dict[str, Params]:
        out = {}
        for name, cc in self.cc_.items():
            pp = self.pp_
            if self.avg_[name] > DEFAULT_SPLIT_THRESHOLD:
                pp = max(pp, HeuristicConstants().range_pipeline)
            out[name] = apply_fixed(Params(cc=cc, p=1, pp=pp, cpu_num=self.cores_), self.fixed, cc=False)
        return out

    def _split(self, snap: Snapshot) -> dict[str, int]:
        """Groups over the partitions that still have files, by their remaining bytes."""
        remaining = {}
        for name in self.cc_:
            view = snap.partitions.get(name)
            if view is None:
                remaining[name] = self.totals_[name]
            elif view.files_done < view.files_total:
                remaining[name] = max(1, (view.bytes_total or 0) - view.bytes - view.bytes_resumed)
        alloc = {name: 0 for name in self.cc_}
        if remaining:
            alloc.update(split_groups(self.machine_.groups_, remaining))
        return alloc

    # -- update -----------------------------------------------------------------------

    def update(self, now: float, snap: Snapshot) -> Decision | None:
        if not snap.partitions:
            return None
        k = self.constants
        reasons: list[str] = []
        if self.next_interval_ is None:   # the first tick: marks only
            self.next_interval_ = now + k.interval
            self.next_core_ = now + k.core_period
            self.state_ = {"t": now, "bytes": snap.bytes, "joules": _joules(snap)}
            self.cpu_mark_ = (now, self.cpu_time())
            return None
        cores_before = self.cores_
        if now >= self.next_core_:
            self.next_core_ = now + k.core_period
            reasons += self._cores(now)
        if now >= self.next_interval_:
            self.next_interval_ = now + k.interval
            reasons += self._interval(now, snap)
        open_now = {n for n, v in snap.partitions.items() if v.files_done < v.files_total}
        alloc = self._split(snap)
        if open_now != self.open_ and not reasons:
            reasons.append(f"partitions with files left: {', '.join(sorted(open_now)) or 'none'}; groups re-split")
        self.open_ = open_now
        if alloc == self.cc_ and self.cores_ == cores_before:
            return None
        self.cc_ = alloc
        return Decision(self._params(), "; ".join(reasons) or "groups re-split")

    def _cores(self, now: float) -> list[str]:
        t0, cpu0 = self.cpu_mark_
        cpu = self.cpu_time()
        self.cpu_mark_ = (now, cpu)
        if now <= t0:
            return []
        load = (cpu - cpu0) / (now - t0) / self.cores_
        new = cores_step(self.cores_, load, self.available_, energy=self.energy, k=self.constants)
        if new == self.cores_:
            return []
        why = f"cores {self.cores_} → {new}: CPU load {load:.2f}"
        self.cores_ = new
        return [why]

    def _interval(self, now: float, snap: Snapshot) -> list[str]:
        state = self.state_
        dt = now - state["t"]
        moved = snap.bytes - state["bytes"]
        joules = _joules(snap)
        self.state_ = {"t": now, "bytes": snap.bytes, "joules": joules}
        if dt <= 0:
            return []
        thr = moved / dt
        if self.fixed.cc is not None:
            return []
        before = self.machine_.groups_
        if not self.slow_started_:
            self.slow_started_ = True
            after = self.machine_.slow_start(self.bandwidth_, thr)
            return [f"slow start: {before} → {after} groups "
                    f"(BW {self.bandwidth_ * 8 / 1e6:.0f} Mbit/s / last {thr * 8 / 1e6:.1f} Mbit/s)"]
        if not self.energy:
            groups, why = self.machine_.step(thr * 8 / 1e6)
            return [f"{why} Mbit/s; {before} → {groups} groups" if groups != before else f"{why} Mbit/s"]
        if joules is None or state["joules"] is None:
            groups, why = self.machine_.step(thr * 8 / 1e6)
            return [f"no energy reading: throughput instead; {why}"]
        power = (joules - state["joules"]) / dt
        remaining = max(0, (snap.bytes_total or 0) - snap.bytes_resumed - snap.bytes)
        predicted = predicted_energy(power, remaining, thr)
        if predicted == float("inf"):
            return ["no bytes moved in the interval: no energy prediction"]
        groups, why = self.machine_.step(predicted)
        tail = f"; {before} → {groups} groups" if groups != before else ""
        return [f"{why} J predicted ({power:.1f} W, {remaining} bytes left at {thr * 8 / 1e6:.1f} Mbit/s){tail}"]


def _joules(snap: Snapshot) -> float | None:
    return None if not snap.energy else float(snap.energy.get("joules") or 0.0)
