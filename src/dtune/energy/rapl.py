"""Measured energy from Intel/AMD RAPL counters under ``/sys/class/powercap`` (docs/algorithms.md §2.5).

The kernel's powercap framework exposes one directory per RAPL zone, named
``intel-rapl:<package>`` with sub-zones ``intel-rapl:<package>:<n>`` (AMD
processors use the same driver and names on most kernels; ``amd-rapl:…``
is accepted too). Each holds ``name`` (``package-0``, ``core``, ``uncore``,
``dram``, ``psys``), ``energy_uj`` (a counter in microjoules) and
``max_energy_range_uj`` (where the counter wraps to 0).

dtune counts the **package** and **dram** domains: core and uncore are
parts of the package, and psys (the platform) contains it, so adding those
would count energy twice. ``intel-rapl-mmio`` zones repeat the package
zone through another interface and are used only when the MSR zones are
missing.

A counter that reads lower than before has wrapped once: the difference is
``now + max_energy_range_uj − before``. Two wraps between reads cannot be
told from one, so ``sample()`` should run at least every few minutes (a
package counter with a 262 kJ range, a common value, wraps after ~22 min
at 200 W).

The figure for a transfer is the counters' energy minus the idle baseline
(power measured just before the transfer, with ``idle_baseline()``) times
the transfer's duration — as the seed paper does (§IV: "we subtracted the
system baseline power consumption from the total power").

Since Linux 5.10 ``energy_uj`` is readable by root only; as another user
the reader reports itself unavailable and dtune falls back to the estimate.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from dtune.energy.result import EnergyResult

POWERCAP = "/sys/class/powercap"
ZONE = re.compile(r"^(intel|amd)-rapl(-mmio)?(:\d+)+$")


@dataclass(frozen=True, slots=True)
class RaplZone:
    """One RAPL powercap zone and its energy counter."""
    label: str           # directory name, e.g. intel-rapl:0
    name: str            # the zone's name file, e.g. package-0, dram
    path: Path
    max_range_uj: int

    @property
    def domain(self) -> str:
        return "package" if self.name.startswith("package") else self.name


def find_zones(root: str | Path = POWERCAP, domains: Sequence[str] = ("package", "dram")) -> list[RaplZone]:
    """The RAPL zones under ``root`` whose domain is one of ``domains`` (no double counting)."""
    base = Path(root)
    if not base.is_dir():
        return []
    zones = []
    for entry in sorted(base.iterdir()):
        if not ZONE.match(entry.name) or not (entry / "energy_uj").exists():
            continue
        try:
            name = (entry / "name").read_text().strip()
            top = int((entry / "max_energy_range_uj").read_text().strip())
        except (OSError, ValueError):
            continue
        zone = RaplZone(entry.name, name, entry, top)
        if zone.domain in domains:
            zones.append(zone)
    msr = {z.name for z in zones if "-mmio" not in z.label}
    return [z for z in zones if "-mmio" not in z.label or z.name not in msr]


class RaplReader:
    """Energy of a transfer from RAPL counters, less the idle baseline.

    root        the powercap directory (a parameter so tests can use a fake tree)
    domains     RAPL domains to add up ("package", "dram")
    clock       monotonic clock in seconds; sleep: how idle_baseline waits

        meter = RaplReader()
        meter.idle_baseline(2.0)   # just before the transfer
        meter.start(); …; meter.sample(); …; result = meter.stop()
    """

    kind = "measured"

    def __init__(self, root: str | Path = POWERCAP, *, domains: Sequence[str] = ("package", "dram"),
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.root = str(root)
        self.domains = tuple(domains)
        self.clock = clock
        self.sleep = sleep
        self.zones_ = find_zones(root, domains)
        self.baseline_watts_: float | None = None

    def get_params(self) -> dict:
        return {"root": self.root, "domains": list(self.domains)}

    def available(self) -> tuple[bool, str]:
        """Whether the counters can be read here, and if not why."""
        if not Path(self.root).is_dir():
            return False, f"no {self.root} (no RAPL: virtual machine, or the powercap driver is not loaded)"
        if not self.zones_:
            return False, f"no RAPL {'/'.join(self.domains)} zone under {self.root}"
        try:
            self.read()
        except PermissionError:
            return False, "RAPL energy_uj is readable by root only on this kernel"
        except (OSError, ValueError) as exc:
            return False, f"RAPL counters unreadable: {exc}"
        return True, f"RAPL zones {', '.join(f'{z.label} ({z.name})' for z in self.zones_)}"

    def read(self) -> dict[str, int]:
        """Raw counters (µJ) by zone label."""
        return {z.label: int((z.path / "energy_uj").read_text().strip()) for z in self.zones_}

    def _delta(self, before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
        out = {}
        for z in self.zones_:
            d = after[z.label] - before[z.label]
            out[z.label] = d + z.max_range_uj if d < 0 else d   # wrapped once
        return out

    def idle_baseline(self, seconds: float = 2.0) -> float:
        """Measure idle power (W) for ``seconds``; later results subtract it × their duration."""
        r0, t0 = self.read(), self.clock()
        self.sleep(seconds)
        r1, t1 = self.read(), self.clock()
        elapsed = t1 - t0
        self.baseline_watts_ = sum(self._delta(r0, r1).values()) / 1e6 / elapsed if elapsed > 0 else 0.0
        return self.baseline_watts_

    def start(self) -> None:
        self._last = self.read()
        self._t0 = self.clock()
        self._acc = {z.label: 0 for z in self.zones_}

    def sample(self) -> None:
        """Fold the counters in since the last read (call now and then so that no wrap is missed)."""
        now = self.read()
        for label, d in self._delta(self._last, now).items():
            self._acc[label] += d
        self._last = now

    def stop(self) -> EnergyResult:
        self.sample()
        seconds = self.clock() - self._t0
        parts: dict[str, float] = {}
        for z in self.zones_:
            parts[z.name] = parts.get(z.name, 0.0) + self._acc[z.label] / 1e6
        gross = sum(parts.values())
        base = self.baseline_watts_
        joules = gross if base is None else max(0.0, gross - base * seconds)
        note = ("RAPL package+dram energy" + ("" if base is None else f" less {base:.2f} W idle baseline")
                + "; whole machine, so other activity during the transfer counts too")
        return EnergyResult(joules, self.kind, seconds, gross, base, parts, note)

    def __repr__(self) -> str:
        zones = ", ".join(f"{z.label}={z.name}" for z in self.zones_) or "no zones"
        return f"<RaplReader {self.root}: {zones}>"
