"""``--tuner dtree``: online tuning from the history-learned model (docs/algorithms.md §2.4).

Theory of operation
-------------------
The offline model (``dtune.model``: two decision search trees, surfaces,
SLA search) has pre-computed, for a scenario — average file size, file
count, TCP buffer, bandwidth — a lookup table of θ = (cc, p, pp, cpu_num,
cpu_freq) by (RTT bin, outcome bin): throughput bins for the
max-throughput SLA, energy bins for min-energy. This tuner is the paper's
Algorithms 3 and 4 over that table:

1. **RTT.** The paper probes the RTT for 3 s. dtune measures it before
   every tuned transfer with concurrent TCP connects (``gather_facts``,
   one round trip); that figure is used, and the median connect time the
   engine keeps (``snapshot.rtt``) at every re-tune.
2. **Start.** θ from the table at (RTT bin, the median outcome bin) —
   ``LookupTable.entry(rtt)`` — as §2.4 step 2 says. One exception:
   min-energy with the online search on top (``online``, dtune's default)
   starts from the row's least-energy bin of a table built under the
   floor. The median is the paper's first guess for a descent of minutes;
   many transfers end before the first re-tune, so min-energy would spend
   the median's energy throughout, and the online search, which holds the
   throughput floor, keeps a lean start from starving. Max-throughput keeps
   the median: its best bins are often a surface's extrapolation (a
   one-stream θ "predicted" at the link rate); started there, it was
   slower than from the median in 3 of 6 cells and faster in 2
   (docs/algorithms.md §2.4).
3. **Re-tune** first after ``first_retune`` (10 s), then every 10 / 20 / 30 s
   for small / medium / large datasets. The paper keys this period on the
   average file size (Algorithm 3, ``getTimeout(Dataset.AvgFileSize)``);
   dtune's thresholds sit between the three datasets it was shaped on
   (HTML ≈ 100 kB, images ≈ 2.4 MB, video ≥ tens of MB): average file
   ≤ 1 MB small, ≤ 10 MB medium, else large (``CADENCE``).
4. **Lookup** with the measured RTT and the measured outcome of the period
   just ended: the throughput (max-throughput) or the approximated energy
   of the whole transfer, ``joules so far + power × remaining bytes /
   throughput`` (min-energy; power and throughput of the period), scaled to
   the byte count of the history's transfers for this scenario so that it
   compares with the table's joules.

   The paper does not say how the measured value selects a bin. dtune's
   reading: the ratio of the measured outcome to the outcome the table
   predicted for the current θ says how the path behaves against the
   history. Within ``tolerance`` of the prediction (or better) the path is
   as the history knew it, and the best bin of the RTT row is taken; a
   shortfall of more than that scales the best bin's outcome by the same
   ratio and takes the θ of the bin nearest to it: what the history found
   best at the level the path now gives. (That θ need not use fewer
   streams — each bin holds its level's best θ, whatever it costs.) A θ
   already tried in this transfer that measured worse than the current one
   is not taken again. For min-energy with a throughput floor, a period
   below the floor moves to the cheapest entry predicted faster than the
   current one.
5. θ is applied live: cc / p / pp to the one partition "all", cpu_num and
   cpu_freq through the Decision (``transfer.KernelKnobs`` applies them or
   records them as not applied). Each change is a ``params`` event with the
   reason.

When the model has nothing close (``Model.answer`` → None, or an empty
table), the tuner hands the whole transfer to ProMC and says so in the plan
notes. The user's explicit cc / p / pp are never changed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dtune.accounting import Snapshot
from dtune.errors import DtuneError
from dtune.model.paths import default_model_path, shipped_model_path
from dtune.netfacts import NetworkFacts
from dtune.params import Params
from dtune.tuners.base import Decision, Fixed, Tuner, TunerPlan, apply_fixed
from dtune.tuners.promc import HeuristicTuner

SLAS = ("max-throughput", "min-energy")
FIRST_RETUNE = 10.0                                     # s: Algorithm 3, "approximately 10 seconds"
CADENCE = ((1e6, 10.0), (10e6, 20.0), (math.inf, 30.0))  # (avg file size upper bound, re-tune period s)
TOLERANCE = 0.8        # measured/predicted at or above this: the path is as the history knew it


@dataclass(frozen=True, slots=True)
class DTreeConstants:
    """When the tree re-tunes and how it reads a period's outcome (the module docstring, steps 3–4)."""

    first_retune: float = FIRST_RETUNE
    cadence: tuple[tuple[float, float], ...] = CADENCE
    tolerance: float = TOLERANCE
def period_for(avg_file_size: float, cadence: Sequence[tuple[float, float]] = CADENCE) -> tuple[str, float]:
    """("small" | "medium" | "large", re-tune period in s) for a dataset's average file size."""
    names = ("small", "medium", "large")
    for i, (upper, seconds) in enumerate(cadence):
        if avg_file_size <= upper:
            return names[min(i, 2)], seconds
    return "large", cadence[-1][1]


class DTreeTuner(Tuner):
    """Decision-tree tuning for a throughput or energy SLA (the seed paper's Algorithms 3 and 4).

    sla             "max-throughput" or "min-energy"
    model           a fitted ``dtune.model.Model``, or a model file path; None:
                    the default path (``default_model_path``), else the shipped demo model
    min_throughput  T_sla in Mbit/s (min-energy: the floor; max-throughput: ignored)
    max_energy      E_sla in J (max-throughput: the ceiling)
    constants       ``DTreeConstants``: seconds before the first re-tune (10), the re-tune
                    period by average file size after that (10/20/30 s), the
                    measured/predicted ratio that counts as "as predicted" (0.8)
    max_cc, max_partitions
                    for the ProMC fallback
    auto            chosen by ``--tuner auto``: label it so, and fall back quietly
    online          the online search runs on top: min-energy starts from the least-energy bin,
                    not the median (the module docstring, step 2)
    fixed           the user's explicit cc / p / pp, never changed
    """

    needs_facts = True

    def __init__(self, sla: str = "max-throughput", *, model: Any = None, min_throughput: float | None = None,
                 max_energy: float | None = None, constants: DTreeConstants | None = None,
                 max_cc: int = 16, max_partitions: int = 2, auto: bool = False, online: bool = False,
                 fixed: Fixed | Mapping[str, int] | None = None) -> None:
        super().__init__(fixed=fixed)
        if sla not in SLAS:
            raise ValueError(f"dtree: sla must be one of {', '.join(SLAS)}, got {sla!r}")
        self.sla = sla
        self.model = model
        self.min_throughput = min_throughput
        self.max_energy = max_energy
        self.constants = constants or DTreeConstants()
        self.max_cc = max_cc
        self.max_partitions = max_partitions
        self.auto = auto
        self.online = online
        self.name = "dtree"
        self.label = f"dtree {sla}"

    def get_params(self) -> dict:
        model = self.model if isinstance(self.model, str | Path | None) else "<Model>"
        out = {**super().get_params(), "model": str(getattr(self, "model_path_", model))}
        fallback = getattr(self, "fallback_", None)
        if fallback is not None:
            out["fallback"] = fallback.get_params()
        return out

    # -- the model ----------------------------------------------------------------------

    def _load(self) -> Any:
        from dtune.model import Model  # (NumPy: when the tree is used)
        if self.model is not None and not isinstance(self.model, str | Path):
            self.model_path_ = "<Model>"
            return self.model
        if self.model is not None:
            path = Path(self.model).expanduser()
        else:
            path = default_model_path()
            if not path.exists():
                path = shipped_model_path()
        self.model_path_ = str(path)
        try:
            return Model.load(path)
        except FileNotFoundError:
            raise DtuneError(f"model {path}: no such file (build one with `dtune model build`)") from None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise DtuneError(f"model {path}: cannot be read: {exc}") from None

    def _fallback(self, sizes: Sequence[int | None], facts: NetworkFacts, why: str) -> TunerPlan:
        self.fallback_ = HeuristicTuner("promc", max_cc=self.max_cc, max_partitions=self.max_partitions,
                                        fixed=self.fixed)
        self.label = "promc (dtree fallback)"
        tplan = self.fallback_.plan(sizes, facts)
        tplan.notes.insert(0, f"{'auto' if self.auto else 'dtree'}: {why}; falling back to ProMC")
        return tplan

    # -- plan -----------------------------------------------------------------------------

    def plan(self, sizes: Sequence[int | None], facts: NetworkFacts) -> TunerPlan:
        self.fallback_: HeuristicTuner | None = None
        known = [s for s in sizes if s is not None]
        avg = sum(known) / len(known) if known else 0.0
        self.total_ = sum(known)
        self.attrs_ = {"avg_file_size": avg, "file_count": len(sizes), "rtt": facts.rtt * 1000,
                       "buf": facts.tcp_buffer, "bandwidth": facts.bandwidth * 8 / 1e6}
        try:
            model = self._load()
        except DtuneError as exc:
            if not self.auto:
                raise
            return self._fallback(sizes, facts, str(exc))
        self.model_ = model
        floor = self.min_throughput if self.sla == "min-energy" else None
        ceiling = self.max_energy if self.sla == "max-throughput" else None
        ans = model.answer(self.attrs_, self.sla, min_throughput=floor, max_energy=ceiling)
        if ans.theta is None:
            return self._fallback(sizes, facts, f"the model has nothing close ({ans.reason})")
        if floor is None and ceiling is None:
            table = model.table_for(self.attrs_, self.sla)
        else:
            table = model.build_table(self.attrs_, self.sla, min_throughput=floor, max_energy=ceiling)
        start = self._start(table)
        if start is None:
            return self._fallback(sizes, facts, "the lookup table for this scenario is empty")
        self.table_ = table
        self.entry_ = start
        self.ref_bytes_ = self._reference_bytes(model)
        self.size_class_, self.period_ = period_for(avg, self.constants.cadence)
        self.tried_: dict[tuple, float] = {}
        self.next_: float | None = None
        self.mark_: dict | None = None
        self.retunes_ = 0
        params = self._params(start.theta)
        bin_label = self._label_of(start)
        notes = [f"{self.label}: key attributes avg {avg:.0f} bytes × {len(sizes)} files, "
                 f"RTT {facts.rtt * 1000:.1f} ms ({facts.how.get('rtt')}; measured by concurrent TCP "
                 f"connects in place of the paper's 3 s probe), buffer {facts.tcp_buffer}, "
                 f"BW {facts.bandwidth * 8 / 1e6:.0f} Mbit/s ({facts.how.get('bandwidth')})",
                 f"model {self.model_path_}: {ans.n_logs} matched logs (tree 1 path {list(ans.matched[0])}, "
                 f"tree 2 path {list(ans.matched[1])}); SLA answer {ans.theta} "
                 f"({_fmt(ans.throughput, 'Mbit/s')}, {_fmt(ans.energy, 'J')}, from {ans.basis})",
                 f"start: table {self.sla} at RTT bin {table.rtt_bin(self.attrs_['rtt'])}, "
                 f"{'least' if self._least_first() else 'median'} {table.outcome} bin {bin_label:g} → "
                 f"{start.theta} ({_fmt(start.throughput, 'Mbit/s')}, "
                 f"{_fmt(start.energy, 'J')} predicted)",
                 f"re-tune after {self.constants.first_retune:g} s, then every {self.period_:g} s "
                 f"({self.size_class_} files)"]
        notes += [f"model note: {n}" for n in ans.notes]
        return TunerPlan(["all"] * len(sizes), {"all": params}, notes)

    def _start(self, table: Any) -> Any:
        """The first entry: the RTT row's median bin (the paper), or its least-energy bin (``online``
        min-energy)."""
        if not self._least_first():
            return table.entry(self.attrs_["rtt"])
        row = table.row(self.attrs_["rtt"])
        return row[min(row)] if row else None

    def _least_first(self) -> bool:
        return self.online and self.sla == "min-energy"

    def _reference_bytes(self, model: Any) -> float | None:
        """Median dataset size (bytes) of the history's transfers this request matches."""
        try:
            import numpy as np  # (NumPy: when the tree is used)
            m = model.match(self.attrs_)
            keys = model.logs_.keys[m.rows]
            if keys.size == 0:
                return None
            return float(np.median(keys[:, 0] * keys[:, 1]))
        except (AttributeError, IndexError, ValueError):
            return None

    def _params(self, theta: Any) -> Params:
        return apply_fixed(Params(cc=theta.cc, p=theta.p, pp=theta.pp, cpu_num=theta.cpu_num,
                                  cpu_freq=theta.cpu_freq), self.fixed)

    def _label_of(self, entry: Any) -> float:
        for row in self.table_.entries.values():
            for label, e in row.items():
                if e is entry:
                    return label
        return math.nan

    def _row(self, rtt_ms: float) -> dict:
        return self.table_.row(rtt_ms)

    # -- online -----------------------------------------------------------------------------

    def update(self, now: float, snap: Snapshot) -> Decision | None:
        if self.fallback_ is not None:
            return self.fallback_.update(now, snap)
        mark = {"t": now, "bytes": snap.bytes, "joules": (snap.energy or {}).get("joules")}
        if self.next_ is None:
            self.next_ = now + self.constants.first_retune
            self.mark_ = mark
            return None
        if now < self.next_:
            return None
        self.next_ = now + self.period_
        prev, self.mark_ = self.mark_, mark
        dt = now - prev["t"]
        if dt <= 0:
            return None
        thr = (snap.bytes - prev["bytes"]) * 8 / dt / 1e6            # Mbit/s over the period
        rtt_ms = snap.rtt * 1000 if snap.rtt else self.attrs_["rtt"]
        remaining = max(0, (snap.bytes_total or self.total_) - snap.bytes_resumed - snap.bytes)
        self.retunes_ += 1
        if self.sla == "max-throughput":
            new, why = self._retune_throughput(rtt_ms, thr)
        else:
            new, why = self._retune_energy(rtt_ms, thr, prev, mark, remaining, dt)
        head = f"dtree {self.sla} re-tune {self.retunes_} at {snap.elapsed:.0f} s: RTT {rtt_ms:.1f} ms, "
        if new is None or new.theta == self.entry_.theta:
            self.entry_ = new or self.entry_
            return None
        old = self.entry_
        self.entry_ = new
        return Decision({"all": self._params(new.theta)}, f"{head}{why}: {old.theta} → {new.theta}")

    def _pick(self, row: dict, key: float, current_score: float | None, higher_better: bool) -> Any:
        """The entry of the bin nearest ``key``, unless it measured worse than the current θ already."""
        label = min(row, key=lambda lab: (abs(lab - key), -lab if higher_better else lab))
        cand = row[label]
        seen = self.tried_.get(_key(cand.theta))
        if seen is not None and current_score is not None and cand.theta != self.entry_.theta:
            worse = seen < current_score if higher_better else seen > current_score
            if worse:
                return None
        return cand

    def _retune_throughput(self, rtt_ms: float, thr: float) -> tuple[Any, str]:
        cur = self.entry_
        self.tried_[_key(cur.theta)] = thr
        row = self._row(rtt_ms)
        best_label = max(row)
        best = row[best_label]
        pred = cur.throughput if cur.throughput else self._label_of(cur)
        ratio = thr / pred if pred and pred > 0 else 1.0
        if ratio >= self.constants.tolerance:
            key, how = best_label, f"as predicted or better (×{ratio:.2f}): best bin {best_label:g}"
        else:
            key = (best.throughput or best_label) * ratio
            how = f"short of the prediction (×{ratio:.2f}): bin nearest {key:.0f} Mbit/s"
        new = self._pick(row, key, thr, higher_better=True)
        why = f"{thr:.0f} Mbit/s measured vs {_fmt(pred, 'Mbit/s')} predicted, {how}"
        if new is None:
            return None, why + "; that θ measured slower earlier: kept"
        return new, why

    def _retune_energy(self, rtt_ms: float, thr: float, prev: dict, mark: dict, remaining: int,
                       dt: float) -> tuple[Any, str]:
        cur = self.entry_
        row = self._row(rtt_ms)
        if prev["joules"] is None or mark["joules"] is None:
            return None, "no energy reading: θ kept"
        moved = max(1, mark["bytes"] - prev["bytes"])
        power = (mark["joules"] - prev["joules"]) / dt
        rate = moved / dt
        approx = mark["joules"] + power * remaining / rate        # the whole transfer's energy, J
        scale = (self.ref_bytes_ / self.total_) if self.ref_bytes_ and self.total_ else 1.0
        approx_ref = approx * scale
        per_byte = (mark["joules"] - prev["joules"]) / moved
        self.tried_[_key(cur.theta)] = per_byte
        pred = cur.energy if cur.energy else self._label_of(cur)
        ratio = approx_ref / pred if pred and pred > 0 else 1.0
        best_label = min(row)
        best = row[best_label]
        if self.min_throughput is not None and thr < self.min_throughput:
            faster = [e for e in row.values() if (e.throughput or 0) > (cur.throughput or 0)]
            why = f"{thr:.0f} Mbit/s is below the floor {self.min_throughput:g} Mbit/s"
            if not faster:
                return None, why + "; no faster entry: kept"
            return min(faster, key=lambda e: (e.energy if e.energy is not None else math.inf)), why
        if ratio <= 1 / self.constants.tolerance:
            key, how = best_label, f"as predicted or better (×{ratio:.2f}): best bin {best_label:g}"
        else:
            key = (best.energy or best_label) * ratio
            how = f"above the prediction (×{ratio:.2f}): bin nearest {key:.1f} J"
        new = self._pick(row, key, per_byte, higher_better=False)
        why = (f"approximated energy {approx:.1f} J ({approx_ref:.1f} J at the history's size) vs "
               f"{_fmt(pred, 'J')} predicted, {how}")
        if new is None:
            return None, why + "; that θ measured costlier earlier: kept"
        return new, why


def _key(theta: Any) -> tuple:
    return (theta.cc, theta.p, theta.pp, theta.cpu_num, theta.cpu_freq)


def _fmt(value: float | None, unit: str) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.1f} {unit}"
