"""``--tuner ditacchio-max`` / ``ditacchio-energy``: the Di Tacchio et al. baselines as tuners.

Theory of operation
-------------------
The decisions live in the pure machines of ``dtune.tuners.ditacchio``
(ALGORITHMS.md §2.6); this module feeds them from the engine's one-second
snapshots and turns their answers into ``Params``:

1. ``plan``: files are grouped by ``partition_files`` with 3 partitions
   (Small / Medium / Large, small ones merged); the first channel count and
   pp come from ``initial_parameters`` (bandwidth, RTT, buffer, average
   file size), p = 1, and the channels are split over the groups by their
   bytes (``split_channels``). A channel is one file in flight, so a
   group's channels are its cc.
2. After the first ``interval``: slow start, once
   (``numCh = min(numCh·BW/lastThroughput, maxCh)``).
3. Every later ``interval``: one reading into ``ChannelMachine`` —
   the interval's throughput (max-throughput; the machine smooths it with
   the EWMA of weight 0.8 on the newest interval) or the predicted energy
   ``average power × remaining bytes / average throughput`` over the
   interval (min-energy; power from the energy meter's reading in
   ``snapshot.energy``) — which answers INCREASE / WARNING / RECOVERY and the
   new channel count.
4. Every second: the process's CPU load (CPU-seconds used in the second ÷
   cores it may use) into ``cores_step``; a change becomes ``cpu_num`` in
   the Decision, which ``transfer.KernelKnobs`` applies (affinity) or
   records as not applied.
5. Whenever the channel count changes or a group finishes, the channels
   are split again over the groups that still have files, by their
   remaining bytes.

Interval: the reference implementation re-tunes every 30 s. dtune's testbed
transfers last seconds to tens of seconds, so the default here is **5 s**
(``DiTacchioConstants.interval``); pass ``constants=DiTacchioConstants(interval=30)``
for the reference value.

Two consequences of the reference rules, kept as they are:
- ``cores_step`` removes a core only while more than 2 remain, so on a
  2-core machine the core count never changes;
- the predicted energy shrinks as the remaining bytes do, so the energy
  machine reads most intervals as "better" and keeps adding channels.

dtune's engine fetches a file above ``DEFAULT_SPLIT_THRESHOLD`` as several
ranges; such groups get pp >= 2 so that a stream does not idle a round trip
between two ranges (the same refinement ProMC uses). Explicit user values
(cc, p, pp) are never changed.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from dtune.accounting import Snapshot
from dtune.netfacts import NetworkFacts
from dtune.params import DEFAULT_SPLIT_THRESHOLD, Params
from dtune.tuners import Decision, Tuner, TunerPlan
from dtune.tuners.ditacchio import (
    ChannelMachine,
    DiTacchioConstants,
    cores_step,
    initial_parameters,
    predicted_energy,
    split_channels,
)
from dtune.tuners.heuristic import HeuristicConstants, partition_files

SLAS = {"max-throughput": "ditacchio-max", "min-energy": "ditacchio-energy"}
GROUPS = 3            # file groups: Small / Medium / Large partitions (§1.1 with maxPartitions = 3)
CORE_PERIOD = 1.0     # seconds between core checks (§2.6)


def _process_cpu_time() -> float:
    from dtune.energy import process_cpu_time
    return process_cpu_time()


def _allowed_cores() -> int:
    get = getattr(os, "sched_getaffinity", None)
    return len(get(0)) if get else (os.cpu_count() or 1)


class DiTacchioTuner(Tuner):
    """Di Tacchio et al. (CLOUD 2019), max-throughput or min-energy (ALGORITHMS.md §2.6).

    sla         "max-throughput" (channels follow the smoothed throughput) or
                "min-energy" (channels follow the predicted energy)
    constants   α, β, Δcc, maxima, interval, EWMA weight, load thresholds
                (``DiTacchioConstants``; interval 5 s here, 30 s in the reference)
    groups      size partitions the channels are split over (3)
    cpu_time    CPU-seconds of this process so far (for the load); injectable for tests
    cores       cores the transfer may use at the start (default: the process's affinity)
    fixed       the user's explicit cc / p / pp, never changed
    """

    needs_facts = True

    def __init__(self, sla: str = "max-throughput", *, constants: DiTacchioConstants | None = None,
                 groups: int = GROUPS, cpu_time: Callable[[], float] = _process_cpu_time,
                 cores: Callable[[], int] = _allowed_cores, fixed: dict[str, int] | None = None) -> None:
        super().__init__(fixed=fixed)
        if sla not in SLAS:
            raise ValueError(f"ditacchio: sla must be one of {', '.join(SLAS)}, got {sla!r}")
        self.sla = sla
        self.constants = constants or DiTacchioConstants()
        self.groups = groups
        self.cpu_time = cpu_time
        self.cores = cores
        self.name = SLAS[sla]
        self.label = f"Di Tacchio {sla}"

    @property
    def energy(self) -> bool:
        return self.sla == "min-energy"

    def get_params(self) -> dict:
        k = self.constants
        return {**super().get_params(), "sla": self.sla, "groups": self.groups, "alpha": k.alpha,
                "beta": k.beta, "step_cc": k.step_cc, "max_pp": k.max_pp, "max_channels": k.max_channels,
                "interval": k.interval, "ewma_new": k.ewma_new, "load_add": k.load_add,
                "load_remove": k.load_remove_energy if self.energy else k.load_remove_tput}

    # -- plan -------------------------------------------------------------------------

    def plan(self, sizes: Sequence[int | None], facts: NetworkFacts) -> TunerPlan:
        k = self.constants
        known = [s for s in sizes if s is not None]
        avg = sum(known) / len(known) if known else 0.0
        filled = [s if s is not None else int(avg) for s in sizes]
        parts = partition_files(filled, facts.bandwidth, facts.bdp, self.groups, HeuristicConstants())
        channels, pp = initial_parameters(facts.bandwidth, facts.rtt, facts.tcp_buffer, avg, k)
        if "cc" in self.fixed:
            channels = self.fixed["cc"]
        self.bandwidth_ = facts.bandwidth
        self.pp_ = self.fixed.get("pp", pp)
        self.p_ = self.fixed.get("p", 1)
        self.avg_ = {p.name: p.avg for p in parts}
        self.totals_ = {p.name: p.total for p in parts}
        self.available_ = max(1, self.cores())
        self.cores_ = self.available_
        self.machine_ = ChannelMachine(channels, higher_is_better=not self.energy, k=k)
        self.slow_started_ = False
        self.state_: dict | None = None       # the last interval's (time, bytes, joules)
        self.cpu_mark_: tuple[float, float] | None = None
        self.next_interval_: float | None = None
        self.next_core_: float | None = None
        self.open_: set[str] = {p.name for p in parts}
        self.cc_ = split_channels(channels, dict(self.totals_))
        params = self._params()
        partition_of = [""] * len(sizes)
        for p in parts:
            for i in p.indices:
                partition_of[i] = p.name
        notes = [f"{self.label}: BW {facts.bandwidth * 8 / 1e6:.0f} Mbit/s ({facts.how.get('bandwidth')}), "
                 f"RTT {facts.rtt * 1000:.1f} ms ({facts.how.get('rtt')}), buffer {facts.tcp_buffer}; "
                 f"numCh = min(ceil(BW / (buf/RTT)), {k.max_channels}) = {channels}, pp = {self.pp_}, p = 1; "
                 f"re-tuned every {k.interval:g} s (reference 30 s, shortened for testbed transfers), "
                 f"cores every {CORE_PERIOD:g} s from {self.cores_}"]
        notes += [f"group {p.name}: {p.count} files, avg {p.avg:.0f} bytes, {self.cc_[p.name]} channels"
                  for p in parts]
        return TunerPlan(partition_of, params, notes)

    def _params(self) -> dict[str, Params]:
        out = {}
        for name, cc in self.cc_.items():
            pp = self.pp_
            if "pp" not in self.fixed and self.avg_[name] > DEFAULT_SPLIT_THRESHOLD:
                pp = max(pp, HeuristicConstants().range_pipeline)
            out[name] = Params(cc=cc, p=self.p_, pp=pp, cpu_num=self.cores_)
        return out

    def _split(self, snap: Snapshot) -> dict[str, int]:
        """Channels over the groups that still have files, by their remaining bytes."""
        remaining = {}
        for name in self.cc_:
            view = snap.partitions.get(name)
            if view is None:
                remaining[name] = self.totals_[name]
            elif view.files_done < view.files_total:
                remaining[name] = max(1, (view.bytes_total or 0) - view.bytes - view.bytes_resumed)
        alloc = {name: 0 for name in self.cc_}
        if remaining:
            alloc.update(split_channels(self.machine_.channels_, remaining))
        return alloc

    # -- update -----------------------------------------------------------------------

    def update(self, now: float, snap: Snapshot) -> Decision | None:
        if not snap.partitions:
            return None
        k = self.constants
        reasons: list[str] = []
        if self.next_interval_ is None:   # the first tick: marks only
            self.next_interval_ = now + k.interval
            self.next_core_ = now + CORE_PERIOD
            self.state_ = {"t": now, "bytes": snap.bytes, "joules": _joules(snap)}
            self.cpu_mark_ = (now, self.cpu_time())
            return None
        cores_before = self.cores_
        if now >= self.next_core_:
            self.next_core_ = now + CORE_PERIOD
            reasons += self._cores(now)
        if now >= self.next_interval_:
            self.next_interval_ = now + k.interval
            reasons += self._interval(now, snap)
        open_now = {n for n, v in snap.partitions.items() if v.files_done < v.files_total}
        alloc = self._split(snap)
        if open_now != self.open_ and not reasons:
            reasons.append(f"groups with files left: {', '.join(sorted(open_now)) or 'none'}; channels re-split")
        self.open_ = open_now
        if alloc == self.cc_ and self.cores_ == cores_before:
            return None
        self.cc_ = alloc
        return Decision(self._params(), "; ".join(reasons) or "channels re-split")

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
        if "cc" in self.fixed:
            return []
        before = self.machine_.channels_
        if not self.slow_started_:
            self.slow_started_ = True
            after = self.machine_.slow_start(self.bandwidth_, thr)
            return [f"slow start: {before} → {after} channels "
                    f"(BW {self.bandwidth_ * 8 / 1e6:.0f} Mbit/s / last {thr * 8 / 1e6:.1f} Mbit/s)"]
        if not self.energy:
            channels, why = self.machine_.step(thr * 8 / 1e6)
            return [f"{why} Mbit/s; {before} → {channels} channels" if channels != before else f"{why} Mbit/s"]
        if joules is None or state["joules"] is None:
            channels, why = self.machine_.step(thr * 8 / 1e6)
            return [f"no energy reading: throughput instead; {why}"]
        power = (joules - state["joules"]) / dt
        remaining = max(0, (snap.bytes_total or 0) - snap.bytes_resumed - snap.bytes)
        predicted = predicted_energy(power, remaining, thr)
        if predicted == float("inf"):
            return ["no bytes moved in the interval: no energy prediction"]
        channels, why = self.machine_.step(predicted)
        tail = f"; {before} → {channels} channels" if channels != before else ""
        return [f"{why} J predicted ({power:.1f} W, {remaining} bytes left at {thr * 8 / 1e6:.1f} Mbit/s){tail}"]


def _joules(snap: Snapshot) -> float | None:
    return None if not snap.energy else float(snap.energy.get("joules") or 0.0)
