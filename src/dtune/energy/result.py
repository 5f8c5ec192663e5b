"""What an energy meter reports, and the interface every meter has."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

KINDS = ("measured", "estimated")   # the history's energy_kind vocabulary


@dataclass(frozen=True, slots=True)
class EnergyResult:
    """Energy of one transfer.

    joules          the transfer's energy: for RAPL, the counters' energy less
                    the idle baseline × duration (never below 0); for the
                    estimate, the power model's energy
    kind            "measured" (RAPL) or "estimated" (CPU-time model)
    seconds         wall time between start() and stop()
    gross_joules    before the baseline was taken off (RAPL); = joules for the estimate
    baseline_watts  idle power subtracted (None: no baseline was measured)
    parts           joules per RAPL domain, or per term of the power model
    note            what the figure can and cannot be used for
    """

    joules: float
    kind: str
    seconds: float
    gross_joules: float
    baseline_watts: float | None = None
    parts: dict[str, float] = field(default_factory=dict)
    note: str = ""

    @property
    def watts(self) -> float:
        """Mean power of the transfer over its duration."""
        return self.joules / self.seconds if self.seconds > 0 else 0.0


class EnergyMeter(Protocol):
    """``RaplReader`` and ``CpuEnergyEstimate`` both look like this."""

    kind: str

    def idle_baseline(self, seconds: float = ...) -> float: ...

    def start(self) -> None: ...

    def sample(self) -> None: ...

    def stop(self) -> EnergyResult: ...
