"""Estimated energy where RAPL is absent (virtual machines): a CPU-time power model.

The model (every term a constructor argument of ``PowerModel``)::

    P(t) = p_idle_per_core · active_cores
         + p_dyn_per_core · busy_cores(t) · (f / f_max) ** k

``active_cores`` is the number of CPUs the process may run on (its affinity,
i.e. cpu_num); ``busy_cores`` is CPU-seconds used per second — the process's
user + system time, its own and its waited-for children's
(``getrusage(RUSAGE_SELF)`` + ``getrusage(RUSAGE_CHILDREN)``), so
``busy_cores / active_cores`` is the utilisation. Over an interval Δt in which
the process used Δτ CPU-seconds the energy is therefore::

    ΔE = p_idle_per_core · active_cores · Δt + p_dyn_per_core · Δτ · (f / f_max) ** k

and ``sample()`` adds these up interval by interval, so a change of cpu_num
or frequency during the transfer is charged from when it happened.

Defaults and where they come from — assumptions, not measurements:

* ``p_idle_per_core = 2.0`` W and ``p_dyn_per_core = 8.0`` W: the seed's
  Chameleon client CPU (Xeon E5-2670 v3) has a TDP of 120 W for 12 cores,
  10 W per fully busy core; we split that into a static fifth (server
  packages idle at roughly a fifth of TDP) and a dynamic rest.
* ``k = 3``: dynamic CMOS power goes as C·V²·f and DVFS lowers V roughly
  with f, hence f³; real parts sit between 2 and 3 because voltage has a
  floor, so 3 flatters low clocks. ``f / f_max`` comes from cpufreq's
  ``scaling_cur_freq / cpuinfo_max_freq``; without cpufreq it is taken as 1.

What the estimate supports: comparing θ on *one* machine by the CPU work
dtune spends (more streams, more requests, more system calls → more CPU
time → more joules). What it does not: the NIC, DRAM, disk and every other
process (the server, the link emulator) are invisible to it; turbo, C-states
and real voltage curves are not modelled; the static term makes fewer cores
look cheaper by construction (cores outside the affinity are not actually
powered down); and its joules are model units, not comparable with RAPL
figures or with another machine. Every result is marked "estimated".

No idle baseline is subtracted: the process's CPU time already excludes
other activity, and the static term is the model's charge for the cores
the transfer holds. Set ``p_idle_per_core=0`` for a dynamic-only figure,
closer in spirit to a baseline-subtracted RAPL measurement.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from dtune.energy.knobs import CpuKnobs
from dtune.energy.result import EnergyResult


@dataclass(frozen=True, slots=True)
class PowerModel:
    """Constants of the CPU-time power model (module docstring gives the reasons)."""

    p_idle_per_core: float = 2.0    # W per core the process may use
    p_dyn_per_core: float = 8.0     # W per fully busy core at f_max
    k: float = 3.0                  # dynamic power ∝ (f / f_max) ** k

    def watts(self, active_cores: float, busy_cores: float, freq_ratio: float = 1.0) -> float:
        """P for a steady state: ``active_cores`` allowed, ``busy_cores`` busy, at ``f / f_max``."""
        return self.p_idle_per_core * active_cores + self.p_dyn_per_core * busy_cores * freq_ratio ** self.k

    def joules(self, seconds: float, cpu_seconds: float, active_cores: float, freq_ratio: float = 1.0
               ) -> tuple[float, float]:
        """(static, dynamic) energy of ``cpu_seconds`` of CPU work over ``seconds`` on ``active_cores``."""
        return (self.p_idle_per_core * active_cores * seconds,
                self.p_dyn_per_core * cpu_seconds * freq_ratio ** self.k)


def process_cpu_time() -> float:
    """User + system CPU seconds of this process and its waited-for children."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        r = resource.getrusage(who)
        total += r.ru_utime + r.ru_stime
    return total


def _affinity_size() -> int:
    get = getattr(os, "sched_getaffinity", None)
    return len(get(0)) if get else (os.cpu_count() or 1)


def _cpufreq_ratio() -> float | None:
    return CpuKnobs().freq_ratio()


class CpuEnergyEstimate:
    """Energy of a transfer estimated from CPU time with a ``PowerModel``; ``kind`` "estimated".

    model         the power model's constants
    cpu_time      CPU seconds so far (default: this process + children, getrusage)
    clock         monotonic clock in seconds
    active_cores  cores the process may use now (default: its affinity)
    freq_ratio    f / f_max now, or None when unknown (default: from cpufreq; None → 1)
    """

    kind = "estimated"

    def __init__(self, model: PowerModel | None = None, *, cpu_time: Callable[[], float] = process_cpu_time,
                 clock: Callable[[], float] = time.monotonic,
                 active_cores: Callable[[], int] = _affinity_size,
                 freq_ratio: Callable[[], float | None] = _cpufreq_ratio) -> None:
        self.model = model or PowerModel()
        self.cpu_time = cpu_time
        self.clock = clock
        self.active_cores = active_cores
        self.freq_ratio = freq_ratio
        self.baseline_watts_: float | None = None

    def get_params(self) -> dict:
        return {"model": asdict(self.model)}

    def idle_baseline(self, seconds: float = 0.0) -> float:
        """Nothing to measure: the process's CPU time already leaves other activity out. Returns 0."""
        return 0.0

    def _state(self) -> tuple[int, float, bool]:
        ratio = self.freq_ratio()
        return max(1, int(self.active_cores())), (1.0 if ratio is None else float(ratio)), ratio is not None

    def start(self) -> None:
        self._t, self._tau = self.clock(), self.cpu_time()
        self._t0, self._tau0 = self._t, self._tau
        self._cores, self._ratio, self._freq_known = self._state()
        self._static = self._dynamic = 0.0

    def sample(self) -> None:
        """Charge the interval since the last sample at the cores and frequency then in force."""
        t, tau = self.clock(), self.cpu_time()
        static, dynamic = self.model.joules(t - self._t, max(0.0, tau - self._tau), self._cores, self._ratio)
        self._static += static
        self._dynamic += dynamic
        self._t, self._tau = t, tau
        self._cores, self._ratio, known = self._state()
        self._freq_known = self._freq_known and known

    def stop(self) -> EnergyResult:
        self.sample()
        seconds = self._t - self._t0
        joules = self._static + self._dynamic
        m = self.model
        note = (f"estimated from CPU time ({self._tau - self._tau0:.2f} CPU-s) with P = {m.p_idle_per_core:g} W/core "
                f"idle + {m.p_dyn_per_core:g} W/busy core × (f/fmax)^{m.k:g}")
        if not self._freq_known:
            note += "; no cpufreq: f = f_max assumed"
        note += "; dtune's own CPU only, not comparable with RAPL"
        return EnergyResult(joules, self.kind, seconds, joules, None,
                            {"static": self._static, "dynamic": self._dynamic}, note)

    def __repr__(self) -> str:
        m = self.model
        return (f"<CpuEnergyEstimate: {m.p_idle_per_core} W/core idle, {m.p_dyn_per_core} W/busy core, "
                f"k={m.k}>")
