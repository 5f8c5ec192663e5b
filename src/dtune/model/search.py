"""SLA search over θ (docs/algorithms.md §2.3; the paper's eqs. 5, 6 and Algorithm 2).

Candidates are θ points with a throughput and/or energy figure each: either
the points of a grid evaluated on the fitted surfaces, or — when the
matched logs are too few for a surface — the matched logs themselves.

The grid is the product, over the θ columns that vary in the matched logs,
of the values those logs used (thinned evenly to at most
``GRID_MAX_VALUES`` per column, min and max always kept); held columns keep
their one value. So the search never proposes a value no transfer ever
ran with, and never extrapolates beyond the logs' θ ranges.

Selection, for ``sla``:

max-throughput  (eq. 5) argmax T subject to ``cc·p <= max_streams``,
                ``pp <= max_pp``, ``T <= bandwidth`` and ``E <= max_energy``
                when given. ``T <= b`` is read with Assumption 3 (throughput
                cannot exceed the link): a predicted T above b counts as b.
min-energy      (eq. 6) argmin E subject to ``T >= min_throughput`` when given
                (and the same stream/pipelining limits).

Then Algorithm 2's binning: the feasible outcomes are binned (throughput in
bins of ``throughput_bin_width``, energy in ``energy_bin_width``; a bin is
named by its upper edge, so 0–100 is bin 100 as in the paper), the bin
closest to the target is chosen — without a target, the best bin (highest
throughput, lowest energy) — and the best point of that bin is returned.
Ties go to the lower energy (or higher throughput), then to fewer streams
(cc·p), lower pp, fewer cores, lower frequency: the cheaper of equals.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from dtune.model.columns import THETA
from dtune.params import Params

SLAS = ("max-throughput", "min-energy")


@dataclass(frozen=True, slots=True)
class Theta:
    """θ = (cc, p, pp, cpu_num, cpu_freq); cpu_num/cpu_freq None = leave that knob alone. cpu_freq in kHz."""

    cc: int
    p: int
    pp: int
    cpu_num: int | None = None
    cpu_freq: int | None = None

    @classmethod
    def from_row(cls, row: np.ndarray | list[float | None]) -> Theta:
        vals = [None if v is None or math.isnan(float(v)) else int(round(float(v))) for v in row]
        cc, p, pp, cpu_num, cpu_freq = vals
        return cls(max(1, cc or 1), max(1, p or 1), max(1, pp or 1), cpu_num, cpu_freq)

    def as_params(self) -> Params:
        return Params(cc=self.cc, p=self.p, pp=self.pp, cpu_num=self.cpu_num, cpu_freq=self.cpu_freq)

    def as_dict(self) -> dict[str, int | None]:
        return {"cc": self.cc, "p": self.p, "pp": self.pp, "cpu_num": self.cpu_num, "cpu_freq": self.cpu_freq}

    def __str__(self) -> str:
        extra = "".join(f" {k}={v}" for k, v in (("cpu_num", self.cpu_num), ("cpu_freq", self.cpu_freq))
                        if v is not None)
        return f"cc={self.cc} p={self.p} pp={self.pp}{extra}"


@dataclass(slots=True)
class Candidates:
    """θ points (n × 5, NaN = not applied) and their throughput / energy (None: not known)."""

    theta: np.ndarray
    throughput: np.ndarray | None
    energy: np.ndarray | None
    basis: str                    # "surface" or "logs": what the prediction rests on


@dataclass(frozen=True, slots=True)
class Constraints:
    sla: str = "max-throughput"
    min_throughput: float | None = None
    max_energy: float | None = None
    max_streams: int | None = None      # N_streams of eq. 5: cc·p
    max_pp: int | None = None           # P of eq. 5
    bandwidth: float | None = None      # b of eq. 5 (Mbit/s)

    def check(self) -> None:
        if self.sla not in SLAS:
            raise ValueError(f"sla must be one of {', '.join(SLAS)}, got {self.sla!r}")


@dataclass(frozen=True, slots=True)
class Feasible:
    """The candidates that meet the constraints: their indices and objective values."""

    index: np.ndarray
    objective: np.ndarray     # throughput (max-throughput) or energy (min-energy) of each
    other: np.ndarray | None  # the other outcome, for tie-breaking
    reason: str | None = None  # why nothing is feasible


def grid(theta: np.ndarray, columns: tuple[str, ...], max_values: int) -> np.ndarray:
    """The search grid over ``columns`` from the values in ``theta`` (n × 5); other columns held."""
    base = np.array([_held(theta[:, j]) for j in range(len(THETA))], dtype=float)
    axes = []
    for name in columns:
        values = np.unique(theta[:, THETA.index(name)])
        values = values[~np.isnan(values)]
        if len(values) > max_values:
            values = values[np.unique(np.round(np.linspace(0, len(values) - 1, max_values)).astype(int))]
        axes.append(values)
    points = np.array(list(itertools.product(*axes)), dtype=float) if axes else np.zeros((1, 0))
    out = np.tile(base, (points.shape[0], 1))
    for i, name in enumerate(columns):
        out[:, THETA.index(name)] = points[:, i]
    return out


def _held(col: np.ndarray) -> float:
    if col.size == 0 or np.isnan(col).any():
        return math.nan
    return float(col[0])


def feasible(c: Candidates, k: Constraints) -> Feasible:
    """Apply eq. 5 / eq. 6 constraints to the candidates."""
    k.check()
    n = c.theta.shape[0]
    ok = np.ones(n, dtype=bool)
    cc, p, pp = c.theta[:, 0], c.theta[:, 1], c.theta[:, 2]
    if k.max_streams is not None:
        ok &= cc * p <= k.max_streams
    if k.max_pp is not None:
        ok &= pp <= k.max_pp
    t = None if c.throughput is None else np.maximum(c.throughput, 0.0)
    e = None if c.energy is None else np.maximum(c.energy, 0.0)
    if t is not None and k.bandwidth is not None and k.bandwidth > 0:
        t = np.minimum(t, k.bandwidth)            # th <= b (Assumption 3)
    if k.sla == "max-throughput":
        if t is None:
            return Feasible(np.zeros(0, int), np.zeros(0), None, "the matched logs have no throughput")
        ok &= ~np.isnan(t)
        objective, other = t, e
    else:
        if e is None:
            return Feasible(np.zeros(0, int), np.zeros(0), None, "the matched logs have no energy figure")
        ok &= ~np.isnan(e)
        objective, other = e, t
    if k.max_energy is not None:
        if e is None:
            return Feasible(np.zeros(0, int), np.zeros(0), None,
                            "an energy limit was given but the matched logs have no energy figure")
        ok &= e <= k.max_energy
    if k.min_throughput is not None:
        if t is None:
            return Feasible(np.zeros(0, int), np.zeros(0), None,
                            "a throughput floor was given but the matched logs have no throughput")
        ok &= t >= k.min_throughput
    idx = np.flatnonzero(ok)
    reason = None if idx.size else _why_none(k)
    return Feasible(idx, objective[idx], None if other is None else other[idx], reason)


def _why_none(k: Constraints) -> str:
    limits = [f"{name} {op} {v:g}" for name, op, v in (
        ("cc·p", "<=", k.max_streams), ("pp", "<=", k.max_pp), ("throughput", ">=", k.min_throughput),
        ("energy", "<=", k.max_energy)) if v is not None]
    return "no θ in the matched history meets " + (", ".join(limits) if limits else "the SLA")


def bin_labels(values: np.ndarray, width: float) -> np.ndarray:
    """Bin names: the upper edge of each value's bin (0–100 → 100, 101–200 → 200, … for width 100)."""
    return np.maximum(np.ceil(np.asarray(values, dtype=float) / width - 1e-9), 1.0) * width


def choose_label(labels: np.ndarray, sla: str, target: float | None) -> float:
    """The bin closest to ``target``; without one, the best bin for the SLA."""
    present = np.unique(labels)
    if target is None:
        return float(present.max() if sla == "max-throughput" else present.min())
    dist = np.abs(present - target)
    best = np.flatnonzero(dist == dist.min())
    # equally close bins: the better one for the SLA
    return float(present[best].max() if sla == "max-throughput" else present[best].min())


def best_in(c: Candidates, f: Feasible, members: np.ndarray, sla: str) -> int:
    """Index (into the candidates) of the best feasible point among ``members`` (positions in ``f``)."""
    th = c.theta[f.index[members]]
    keys = [th[:, 4], th[:, 3], th[:, 2], th[:, 0] * th[:, 1]]   # lexsort: last key is primary
    keys = [np.nan_to_num(k, nan=0.0) for k in keys]
    if f.other is not None:
        other = np.nan_to_num(f.other[members], nan=np.inf if sla == "max-throughput" else -np.inf)
        keys.append(other if sla == "max-throughput" else -other)
    obj = f.objective[members]
    keys.append(-obj if sla == "max-throughput" else obj)
    order = np.lexsort(keys)
    return int(f.index[members[order[0]]])


def select(c: Candidates, k: Constraints, *, bin_width: float, target: float | None = None
           ) -> tuple[int | None, float | None, str | None]:
    """Algorithm 2 on the candidates: (index of the chosen θ, its bin, reason when None)."""
    f = feasible(c, k)
    if f.index.size == 0:
        return None, None, f.reason
    labels = bin_labels(f.objective, bin_width)
    label = choose_label(labels, k.sla, target)
    members = np.flatnonzero(labels == label)
    return best_in(c, f, members, k.sla), label, None


def select_every_bin(c: Candidates, k: Constraints, *, bin_width: float) -> dict[float, int]:
    """The best θ of every non-empty bin (what the lookup table stores); empty when nothing is feasible."""
    f = feasible(c, k)
    if f.index.size == 0:
        return {}
    labels = bin_labels(f.objective, bin_width)
    return {float(lab): best_in(c, f, np.flatnonzero(labels == lab), k.sla) for lab in np.unique(labels)}
