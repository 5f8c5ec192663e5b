"""The offline model: two decision search trees, surfaces, SLA search, lookup tables.

``Model.fit(rows)`` builds tree 1 (diversity index) and tree 2 (standard
deviation) over the history's key attributes, then pre-computes lookup
tables for the most frequent scenarios, timing both (the paper's Table III).
``Model.query(attrs, sla)`` runs Algorithm 2 for one request:

1. both trees are descended with the request's key attributes and the logs
   of the two matched nodes are united (the "band of trees", §III-D3);
2. over those logs, throughput and energy surfaces are fitted (``surface``)
   — or, when the logs are too few for a surface, the logs themselves are
   the candidates;
3. the SLA search (``search``) picks θ.

It answers None when the history has nothing close — a key attribute more
than ``max_outside_ratio`` times beyond the range the history covers — or
when no θ in the matched history meets the SLA; ``Model.answer`` says which,
and what was matched and predicted.

Pure apart from ``save``/``load``; the build clock is passed to ``fit``.
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dtune.model import defaults
from dtune.model.columns import KEYS, LogTable, as_table, key_vector
from dtune.model.search import SLAS, Candidates, Constraints, Theta, grid, select, select_every_bin
from dtune.model.surface import Design, Surface, fit_surface
from dtune.model.table import LookupTable, TableEntry
from dtune.model.tree import DecisionSearchTree, TreeMatch

FORMAT = "dtune-model"
VERSION = 1
SCENARIO_KEYS = ("avg_file_size", "file_count", "buf", "bandwidth")   # a table's fixed attributes


@dataclass(frozen=True, slots=True)
class Match:
    """Where a request lands in both trees, and the united logs (row indices)."""

    di: TreeMatch
    sd: TreeMatch
    rows: np.ndarray
    close: bool
    why_not_close: str | None = None

    @property
    def key(self) -> tuple[int, int]:
        return (self.di.node.id, self.sd.node.id)


@dataclass(frozen=True, slots=True)
class Answer:
    """Algorithm 2's answer with what it rests on. ``theta`` None: ``reason`` says why."""

    sla: str
    theta: Theta | None
    throughput: float | None = None   # predicted at θ (surface) or observed (logs), Mbit/s
    energy: float | None = None       # likewise, J
    basis: str | None = None          # "surface" or "logs": what the prediction rests on
    fit_ok: bool | None = None        # the surfaces used reached the R² threshold (None: no surface)
    bin: float | None = None          # the outcome bin chosen
    matched: tuple[tuple[int, ...], tuple[int, ...]] = ((), ())   # node paths in tree 1 and tree 2
    n_logs: int = 0
    notes: tuple[str, ...] = ()
    reason: str | None = None


class Model:
    """History-learned θ for a throughput or energy SLA (docs/algorithms.md §2.2–2.3).

    cut_number, leaf_threshold, same_value, nearest_within
                        the trees' settings (``DecisionSearchTree``)
    degrees, r2_threshold, test_size, random_state, min_surface_logs
                        surface degree selection (``fit_surface``)
    grid_max_values     values per θ column on the search grid
    max_outside_ratio   how far beyond the history's range (as a factor) a
                        request may lie before the answer is None
    throughput_bin, energy_bin
                        bin widths in Mbit/s and J; None = automatic
                        (``defaults.throughput_bin_width``, ``energy_bin_width``)
    rtt_bin_ms          the lookup table's RTT bin (10 ms in the paper)
    max_streams, max_pp default N_streams (cc·p) and P (pp) of eq. 5; None: no limit
                        beyond the θ values the history used
    max_tables          lookup tables pre-built at fit time (0: none)
    """

    def __init__(self, *, cut_number: int = defaults.CUT_NUMBER, leaf_threshold: int = defaults.LEAF_THRESHOLD,
                 same_value: str = defaults.SAME_VALUE, nearest_within: float | None = defaults.NEAREST_WITHIN,
                 degrees: Sequence[int] = defaults.DEGREES, r2_threshold: float = defaults.R2_THRESHOLD,
                 test_size: float = defaults.TEST_SIZE, random_state: int = defaults.RANDOM_STATE,
                 min_surface_logs: int = defaults.MIN_SURFACE_LOGS,
                 grid_max_values: int = defaults.GRID_MAX_VALUES,
                 max_outside_ratio: float = defaults.MAX_OUTSIDE_RATIO,
                 throughput_bin: float | None = None, energy_bin: float | None = None,
                 rtt_bin_ms: float = defaults.RTT_BIN_MS, max_streams: int | None = None,
                 max_pp: int | None = None, max_tables: int = defaults.MAX_TABLES) -> None:
        self.cut_number = cut_number
        self.leaf_threshold = leaf_threshold
        self.same_value = same_value
        self.nearest_within = nearest_within
        self.degrees = degrees
        self.r2_threshold = r2_threshold
        self.test_size = test_size
        self.random_state = random_state
        self.min_surface_logs = min_surface_logs
        self.grid_max_values = grid_max_values
        self.max_outside_ratio = max_outside_ratio
        self.throughput_bin = throughput_bin
        self.energy_bin = energy_bin
        self.rtt_bin_ms = rtt_bin_ms
        self.max_streams = max_streams
        self.max_pp = max_pp
        self.max_tables = max_tables

    def get_params(self) -> dict:
        return {"cut_number": self.cut_number, "leaf_threshold": self.leaf_threshold,
                "same_value": self.same_value, "nearest_within": self.nearest_within,
                "degrees": list(self.degrees), "r2_threshold": self.r2_threshold,
                "test_size": self.test_size, "random_state": self.random_state,
                "min_surface_logs": self.min_surface_logs, "grid_max_values": self.grid_max_values,
                "max_outside_ratio": self.max_outside_ratio, "throughput_bin": self.throughput_bin,
                "energy_bin": self.energy_bin, "rtt_bin_ms": self.rtt_bin_ms,
                "max_streams": self.max_streams, "max_pp": self.max_pp, "max_tables": self.max_tables}

    # -- building -------------------------------------------------------------------

    def _tree(self, criterion: str) -> DecisionSearchTree:
        return DecisionSearchTree(criterion=criterion, cut_number=self.cut_number,
                                  leaf_threshold=self.leaf_threshold, same_value=self.same_value,
                                  nearest_within=self.nearest_within)

    def fit(self, rows: Iterable[Mapping[str, object]] | np.ndarray, *,
            clock: Callable[[], float] = time.perf_counter) -> Model:
        """Build both trees and the pre-computed tables from history rows (see ``columns``)."""
        logs = as_table(rows)
        if len(logs) == 0:
            raise ValueError(f"model: no history row has all of {', '.join(KEYS)} "
                             f"({logs.dropped} rows dropped)")
        self.logs_ = logs
        self._surfaces: dict[tuple[int, int], dict] = {}
        self._grids: dict[tuple[int, int], Candidates] = {}
        t0 = clock()
        self.tree_di_ = self._tree("di").fit(logs.keys)
        t1 = clock()
        self.tree_sd_ = self._tree("sd").fit(logs.keys)
        t2 = clock()
        self.tables_: list[LookupTable] = []
        for scenario in self.scenarios()[: self.max_tables]:
            for sla in self._slas():
                self.tables_.append(self.build_table(scenario, sla, clock=clock))
        t3 = clock()
        self.build_times_ = {"logs": len(logs), "tree_di_s": t1 - t0, "tree_sd_s": t2 - t1,
                             "trees_s": t2 - t0, "tables": len(self.tables_), "tables_s": t3 - t2}
        return self

    def _slas(self) -> list[str]:
        has_energy = bool((~np.isnan(self.logs_.energy)).any())
        return list(SLAS) if has_energy else ["max-throughput"]

    def scenarios(self) -> list[dict[str, float]]:
        """Distinct (avg_file_size, file_count, buf, bandwidth) in the history, most frequent first."""
        cols = [KEYS.index(k) for k in SCENARIO_KEYS]
        counts = Counter(tuple(row) for row in self.logs_.keys[:, cols].tolist())
        ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        return [dict(zip(SCENARIO_KEYS, key, strict=True)) for key, _ in ordered]

    @property
    def energy_kinds_(self) -> dict[str, int]:
        """How many logs carry a measured, an estimated or an unmarked energy figure."""
        return self.logs_.energy_kinds()

    # -- querying -------------------------------------------------------------------

    def match(self, attrs: Mapping[str, object]) -> Match:
        """Descend both trees with a request's key attributes and unite the matched logs."""
        x = key_vector(attrs)
        m1, m2 = self.tree_di_.match(x), self.tree_sd_.match(x)
        rows = np.union1d(m1.rows, m2.rows)
        why = self._far(x)
        return Match(m1, m2, rows, why is None, why)

    def _far(self, x: np.ndarray) -> str | None:
        keys, r = self.logs_.keys, self.max_outside_ratio
        for j, name in enumerate(KEYS):
            v = x[j]
            if math.isnan(v):
                continue
            lo, hi = float(keys[:, j].min()), float(keys[:, j].max())
            if v < 0 or (lo > 0 and v < lo / r) or (hi > 0 and v > hi * r) or (hi <= 0 and v > 0):
                return (f"{name}={v:g} is more than {r:g}× outside the history's range "
                        f"{lo:g}..{hi:g}: the history has nothing close")
        return None

    def _surfaces_for(self, m: Match) -> dict:
        cached = self._surfaces.get(m.key)
        if cached is None:
            theta = self.logs_.theta[m.rows]
            design = Design.of(theta)
            kw = dict(degrees=self.degrees, r2_threshold=self.r2_threshold, test_size=self.test_size,
                      random_state=self.random_state, min_logs=self.min_surface_logs)
            cached = {"design": design,
                      "throughput": fit_surface(theta, self.logs_.throughput[m.rows], design, "throughput", **kw),
                      "energy": fit_surface(theta, self.logs_.energy[m.rows], design, "energy", **kw)}
            self._surfaces[m.key] = cached
        return cached

    def surfaces(self, attrs: Mapping[str, object]) -> tuple[Surface | None, Surface | None]:
        """The (throughput, energy) surfaces over the logs a request matches (None: too few logs)."""
        s = self._surfaces_for(self.match(attrs))
        return s["throughput"], s["energy"]

    def _candidates(self, m: Match, k: Constraints) -> tuple[Candidates, bool | None]:
        s = self._surfaces_for(m)
        need = {"throughput"} if k.sla == "max-throughput" else {"energy"}
        if k.max_energy is not None:
            need.add("energy")
        if k.min_throughput is not None:
            need.add("throughput")
        if all(s[o] is not None for o in need):
            c = self._grids.get(m.key)
            if c is None:
                design: Design = s["design"]
                points = grid(self.logs_.theta[m.rows], design.columns, self.grid_max_values)
                cols = design.index()
                preds = {o: (None if s[o] is None else s[o].predict(points[:, cols]))
                         for o in ("throughput", "energy")}
                c = Candidates(points, preds["throughput"], preds["energy"], "surface")
                self._grids[m.key] = c
            fit_ok = all(s[o].ok for o in ("throughput", "energy") if s[o] is not None)
            return c, fit_ok
        rows = m.rows
        t, e = self.logs_.throughput[rows], self.logs_.energy[rows]
        return Candidates(self.logs_.theta[rows], None if np.isnan(t).all() else t,
                          None if np.isnan(e).all() else e, "logs"), None

    def _constraints(self, attrs: Mapping[str, object], sla: str, min_throughput: float | None,
                     max_energy: float | None, max_streams: int | None, max_pp: int | None) -> Constraints:
        bw = key_vector(attrs)[KEYS.index("bandwidth")]
        k = Constraints(sla, min_throughput, max_energy,
                        self.max_streams if max_streams is None else max_streams,
                        self.max_pp if max_pp is None else max_pp,
                        None if math.isnan(bw) else float(bw))
        k.check()
        return k

    def _bin_width(self, k: Constraints, c: Candidates) -> float:
        if k.sla == "max-throughput":
            if self.throughput_bin:
                return float(self.throughput_bin)
            top = None if c.throughput is None else float(np.nanmax(c.throughput, initial=0.0))
            return defaults.throughput_bin_width(k.bandwidth, top)
        if self.energy_bin:
            return float(self.energy_bin)
        return defaults.energy_bin_width(None if c.energy is None else float(np.nanmax(c.energy, initial=0.0)))

    def answer(self, attrs: Mapping[str, object], sla: str = "max-throughput", *,
               min_throughput: float | None = None, max_energy: float | None = None,
               target: float | None = None, max_streams: int | None = None,
               max_pp: int | None = None) -> Answer:
        """Algorithm 2 for one request, with what the answer rests on.

        attrs           the request's key attributes (``avg_file_size``,
                        ``file_count``, ``rtt``, ``buf``, ``bandwidth``; the
                        history's names work too); a missing one stops the
                        trees where they need it
        sla             "max-throughput" (eq. 5) or "min-energy" (eq. 6)
        min_throughput  T_sla (Mbit/s); max_energy: E_sla (J)
        target          T_es / E_es of Algorithm 2: pick the outcome bin
                        closest to it (None: the best bin)
        max_streams, max_pp
                        N_streams and P of eq. 5 (default: the model's)
        """
        self._fitted()
        k = self._constraints(attrs, sla, min_throughput, max_energy, max_streams, max_pp)
        m = self.match(attrs)
        paths = (m.di.path, m.sd.path)
        notes = tuple(f"tree {i}: {t.unseen}; node {t.node.id} answers" for i, t in ((1, m.di), (2, m.sd))
                      if t.unseen) + tuple(f"tree {i}: {', '.join(t.nearest)} outside every interval, "
                                           "took the nearest child" for i, t in ((1, m.di), (2, m.sd))
                                           if t.nearest)
        if not m.close:
            return Answer(sla, None, matched=paths, n_logs=len(m.rows), notes=notes, reason=m.why_not_close)
        c, fit_ok = self._candidates(m, k)
        s = self._surfaces_for(m)
        notes += tuple(f"{o} surface: {s[o].note}" for o in ("throughput", "energy") if s[o] and s[o].note)
        i, label, why = select(c, k, bin_width=self._bin_width(k, c), target=target)
        if i is None:
            return Answer(sla, None, basis=c.basis, fit_ok=fit_ok, matched=paths, n_logs=len(m.rows),
                          notes=notes, reason=why)
        t, e = _outcome(c, i, k)
        return Answer(sla, Theta.from_row(c.theta[i]), t, e, c.basis, fit_ok, label, paths, len(m.rows), notes)

    def query(self, attrs: Mapping[str, object], sla: str = "max-throughput",
              min_throughput: float | None = None, max_energy: float | None = None, **kw: object) -> Theta | None:
        """θ for a request (``answer`` without the explanation); None: the caller falls back."""
        return self.answer(attrs, sla, min_throughput=min_throughput, max_energy=max_energy, **kw).theta

    # -- lookup tables --------------------------------------------------------------

    def build_table(self, attrs: Mapping[str, object], sla: str = "max-throughput", *,
                    min_throughput: float | None = None, max_energy: float | None = None,
                    max_streams: int | None = None, max_pp: int | None = None,
                    clock: Callable[[], float] = time.perf_counter) -> LookupTable:
        """Pre-compute θ for every (RTT bin, outcome bin) of one scenario (``attrs`` without RTT)."""
        self._fitted()
        start = clock()
        scenario = {name: _plain(key_vector(attrs)[KEYS.index(name)]) for name in SCENARIO_KEYS}
        rtts = self.logs_.keys[:, KEYS.index("rtt")]
        w = self.rtt_bin_ms
        first, last = math.floor(rtts.min() / w), math.floor(rtts.max() / w)
        table = LookupTable(sla, scenario, w, 0.0, {"min_throughput": min_throughput, "max_energy": max_energy,
                                                     "max_streams": max_streams, "max_pp": max_pp})
        for b in range(first, last + 1):
            inside = rtts[(rtts >= b * w) & (rtts < (b + 1) * w)]
            rep = float(np.median(inside)) if inside.size else (b + 0.5) * w
            query = {**{k: v for k, v in scenario.items() if v is not None}, "rtt": rep}
            k = self._constraints(query, sla, min_throughput, max_energy, max_streams, max_pp)
            m = self.match(query)
            if not m.close:
                continue
            c, _ = self._candidates(m, k)
            width = self._bin_width(k, c)
            table.bin_width = max(table.bin_width, width)
            for label, i in select_every_bin(c, k, bin_width=width).items():
                t, e = _outcome(c, i, k)
                table.entries.setdefault(b, {})[label] = TableEntry(Theta.from_row(c.theta[i]), t, e, c.basis)
        table.build_seconds = clock() - start
        return table

    def table_for(self, attrs: Mapping[str, object], sla: str = "max-throughput") -> LookupTable:
        """The pre-built table of this scenario and SLA, built (and kept) now if there is none."""
        self._fitted()
        want = {name: _plain(key_vector(attrs)[KEYS.index(name)]) for name in SCENARIO_KEYS}
        for t in self.tables_:
            if t.sla == sla and t.scenario == want and not any(t.constraints.values()):
                return t
        table = self.build_table(attrs, sla)
        self.tables_.append(table)
        return table

    # -- persistence --------------------------------------------------------------------

    def _fitted(self) -> None:
        if not hasattr(self, "tree_di_"):
            raise RuntimeError("model: not fitted (call fit() or Model.load())")

    def to_dict(self) -> dict:
        self._fitted()
        surfaces = []
        for (a, b), s in sorted(self._surfaces.items()):
            d: Design = s["design"]
            surfaces.append({"nodes": [a, b], "design": {"columns": list(d.columns), "fixed": d.fixed},
                             "throughput": s["throughput"] and s["throughput"].to_dict(),
                             "energy": s["energy"] and s["energy"].to_dict()})
        return {"format": FORMAT, "version": VERSION, "params": self.get_params(),
                "build_times": self.build_times_, "energy_kinds": self.energy_kinds_,
                "logs": self.logs_.to_dict(), "trees": {"di": self.tree_di_.to_dict(),
                                                        "sd": self.tree_sd_.to_dict()},
                "surfaces": surfaces, "tables": [t.to_dict() for t in self.tables_]}

    @classmethod
    def from_dict(cls, data: Mapping) -> Model:
        if data.get("format") != FORMAT:
            raise ValueError(f"model: not a dtune model (format {data.get('format')!r})")
        if data.get("version") != VERSION:
            raise ValueError(f"model: file version {data.get('version')!r}, this dtune reads {VERSION}")
        params = dict(data["params"])
        params["degrees"] = tuple(params["degrees"])
        model = cls(**params)
        model.logs_ = LogTable.from_dict(data["logs"])
        model.tree_di_ = DecisionSearchTree.from_dict(data["trees"]["di"], model.logs_.keys)
        model.tree_sd_ = DecisionSearchTree.from_dict(data["trees"]["sd"], model.logs_.keys)
        model._surfaces, model._grids = {}, {}
        for item in data["surfaces"]:
            design = Design(tuple(item["design"]["columns"]), dict(item["design"]["fixed"]))
            model._surfaces[tuple(item["nodes"])] = {
                "design": design,
                "throughput": item["throughput"] and Surface.from_dict(item["throughput"]),
                "energy": item["energy"] and Surface.from_dict(item["energy"])}
        model.tables_ = [LookupTable.from_dict(t) for t in data["tables"]]
        model.build_times_ = dict(data["build_times"])
        return model

    def save(self, path: str | Path) -> None:
        """Write the model as JSON: settings, logs, trees, fitted surfaces (coefficients), tables."""
        Path(path).write_text(json.dumps(self.to_dict(), indent=1, allow_nan=False) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> Model:
        return cls.from_dict(json.loads(Path(path).read_text()))

    def __repr__(self) -> str:
        if not hasattr(self, "tree_di_"):
            return "<Model [not fitted]>"
        b = self.build_times_
        return (f"<Model: {b['logs']} logs | tree 1 (DI) {len(self.tree_di_.nodes_)} nodes, "
                f"tree 2 (SD) {len(self.tree_sd_.nodes_)} nodes in {b['trees_s']:.3f} s | "
                f"{len(self.tables_)} tables in {b['tables_s']:.3f} s>")


def _outcome(c: Candidates, i: int, k: Constraints) -> tuple[float | None, float | None]:
    t = None if c.throughput is None else float(max(c.throughput[i], 0.0))
    if t is not None and k.bandwidth:
        t = min(t, k.bandwidth)
    e = None if c.energy is None else float(max(c.energy[i], 0.0))
    return (None if t is None or math.isnan(t) else t), (None if e is None or math.isnan(e) else e)


def _plain(v: float) -> float | None:
    return None if math.isnan(v) else float(v)

