"""Lookup table for the online phase (docs/algorithms.md §2.3–2.4, the paper's §III-E/F).

For one *scenario* — a dataset and link: average file size, file count,
TCP buffer, bandwidth — the table holds the θ that Algorithm 2 returns for
every (RTT bin, outcome bin) the history supports: RTT in 10 ms bins, the
outcome being throughput (Mbit/s) for the max-throughput SLA and energy (J)
for the min-energy SLA, each bin named by its upper edge.

Online (Algorithms 3 and 4) the tuner looks up the measured RTT and the
measured throughput (or the approximated transfer energy): the nearest RTT
bin, then the nearest outcome bin in it. Without an outcome yet — at the
start of a transfer — it gets the median bin, as §2.4 step 2 asks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from dtune.model.search import Theta


@dataclass(frozen=True, slots=True)
class TableEntry:
    theta: Theta
    throughput: float | None   # predicted (or observed) at θ, Mbit/s
    energy: float | None       # predicted (or observed) at θ, J
    basis: str                 # "surface" or "logs": what the prediction rests on

    def to_dict(self) -> dict:
        return {"theta": self.theta.as_dict(), "throughput": self.throughput, "energy": self.energy,
                "basis": self.basis}

    @classmethod
    def from_dict(cls, d: dict) -> TableEntry:
        basis = d["basis"] if "basis" in d else d["source"]  # (model files of earlier versions)
        return cls(Theta(**d["theta"]), d["throughput"], d["energy"], basis)


@dataclass(slots=True)
class LookupTable:
    """θ by (RTT bin, outcome bin) for one scenario and SLA; ``build_seconds`` is the Table III analog."""

    sla: str
    scenario: dict[str, float | None]
    rtt_bin_ms: float
    bin_width: float
    constraints: dict[str, float | None] = field(default_factory=dict)
    entries: dict[int, dict[float, TableEntry]] = field(default_factory=dict)
    build_seconds: float = 0.0

    @property
    def outcome(self) -> str:
        return "throughput" if self.sla == "max-throughput" else "energy"

    def __len__(self) -> int:
        return sum(len(v) for v in self.entries.values())

    def rtt_bin(self, rtt_ms: float) -> int:
        return math.floor(rtt_ms / self.rtt_bin_ms)

    def row(self, rtt_ms: float) -> dict[float, TableEntry]:
        """The entries by outcome bin of the RTT row nearest a measured RTT (ms); {} for an empty table."""
        if not self.entries:
            return {}
        want = self.rtt_bin(rtt_ms)
        return self.entries[min(self.entries, key=lambda b: (abs(b - want), b))]

    def entry(self, rtt_ms: float, value: float | None = None) -> TableEntry | None:
        """The entry for a measured RTT (ms) and outcome (throughput Mbit/s or energy J; None: median bin)."""
        row = self.row(rtt_ms)
        if not row:
            return None
        labels = sorted(row)
        if value is None:
            return row[labels[(len(labels) - 1) // 2]]
        better = max if self.sla == "max-throughput" else min
        dist = min(abs(lab - value) for lab in labels)
        return row[better(lab for lab in labels if abs(lab - value) == dist)]

    def lookup(self, rtt_ms: float, value: float | None = None) -> Theta | None:
        e = self.entry(rtt_ms, value)
        return None if e is None else e.theta

    def to_dict(self) -> dict:
        return {"sla": self.sla, "scenario": self.scenario, "rtt_bin_ms": self.rtt_bin_ms,
                "bin_width": self.bin_width, "constraints": self.constraints,
                "build_seconds": self.build_seconds,
                "entries": [{"rtt_bin": k, "bin": lab, **e.to_dict()}
                            for k, row in sorted(self.entries.items()) for lab, e in sorted(row.items())]}

    @classmethod
    def from_dict(cls, d: dict) -> LookupTable:
        t = cls(d["sla"], dict(d["scenario"]), float(d["rtt_bin_ms"]), float(d["bin_width"]),
                dict(d.get("constraints", {})), {}, float(d.get("build_seconds", 0.0)))
        for item in d["entries"]:
            t.entries.setdefault(int(item["rtt_bin"]), {})[float(item["bin"])] = TableEntry.from_dict(item)
        return t

    def __repr__(self) -> str:
        return (f"<LookupTable {self.sla}: {len(self.entries)} RTT bins × {self.outcome} bins of "
                f"{self.bin_width:g}, {len(self)} entries, built in {self.build_seconds:.3f} s>")
