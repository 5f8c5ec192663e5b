"""Energy: RAPL measurement, a CPU-time estimate where RAPL is absent, and the kernel knobs.

docs/algorithms.md §2.5. ``open_meter()`` gives the RAPL reader when its counters
can be read and the estimate otherwise, with the reason; both have
``idle_baseline()``, ``start()``, ``sample()``, ``stop() -> EnergyResult`` and a
``kind`` of "measured" or "estimated" that goes into the history's
``energy_kind``. ``apply_cpu_num`` / ``apply_cpu_freq`` turn the kernel knobs
and say whether they could. See ``docs/model.md``.
"""

from __future__ import annotations

from pathlib import Path

from dtune.energy.estimate import CpuEnergyEstimate, PowerModel, process_cpu_time
from dtune.energy.knobs import CpuKnobs, KnobResult, apply_cpu_freq, apply_cpu_num, default_knobs
from dtune.energy.rapl import POWERCAP, RaplReader, RaplZone, find_zones
from dtune.energy.result import KINDS, EnergyMeter, EnergyResult


def open_meter(powercap_root: str | Path = POWERCAP, *, model: PowerModel | None = None
               ) -> tuple[RaplReader | CpuEnergyEstimate, str]:
    """The best meter here and why: RAPL if its counters are readable, else the CPU-time estimate."""
    rapl = RaplReader(powercap_root)
    ok, why = rapl.available()
    if ok:
        return rapl, f"measured: {why}"
    return CpuEnergyEstimate(model), f"estimated from CPU time: {why}"


__all__ = [
    "KINDS", "POWERCAP",
    "CpuEnergyEstimate", "CpuKnobs", "EnergyMeter", "EnergyResult", "KnobResult", "PowerModel",
    "RaplReader", "RaplZone",
    "apply_cpu_freq", "apply_cpu_num", "default_knobs", "find_zones", "open_meter", "process_cpu_time",
]
