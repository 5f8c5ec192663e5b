"""Throughput and energy surfaces over θ (docs/algorithms.md §2.3, Algorithm 2).

A surface is a polynomial in the tunable parameters θ = (cc, p, pp,
cpu_num, cpu_freq) fitted by least squares (scikit-learn
``PolynomialFeatures`` + ``LinearRegression``) over the logs a query
matched. Degree selection follows the same lab's earlier surface code: try
degrees 2, 3, 4 on a seeded 80/20 train/test split and keep the lowest whose
train *and* test R² exceed 0.7; if none does, keep the degree with the best
test R² and flag the surface ``ok=False``. The kept degree is then refitted on
all the matched logs.

Which θ columns enter (the *design* of a matched set): a column recorded in
every matched log with two or more values varies; a column recorded with one
value is held at it; a column missing in any matched log (the history's
NULL: "not applied") is left out and answered as None.

θ columns are standardised (mean 0, SD 1) before the polynomial features,
so that a degree-4 term of a frequency in kHz does not swamp a term in cc.
The fitted surface is kept as plain numbers — the standardisation, the
exponent matrix of every term and the coefficients — so a model file shows
exactly what was fitted, and prediction needs no scikit-learn object.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from sklearn.linear_model import LinearRegression
from sklearn.metrics import r2_score
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import PolynomialFeatures

from dtune.model import defaults
from dtune.model.columns import THETA


@dataclass(frozen=True, slots=True)
class Design:
    """Which θ columns vary (``columns``) and which are held (``fixed``: value, or None = not applied)."""

    columns: tuple[str, ...]
    fixed: dict[str, float | None]

    @classmethod
    def of(cls, theta: np.ndarray) -> Design:
        cols, fixed = [], {}
        for j, name in enumerate(THETA):
            v = theta[:, j]
            if v.size == 0 or np.isnan(v).any():
                fixed[name] = None
            elif np.ptp(v) == 0:
                fixed[name] = float(v[0])
            else:
                cols.append(name)
        return cls(tuple(cols), fixed)

    def index(self) -> list[int]:
        return [THETA.index(c) for c in self.columns]


@dataclass(slots=True)
class Surface:
    """A fitted polynomial ``outcome(θ)``; ``predict`` takes the ``columns`` of θ.

    ``tried`` holds ``(degree, r2_train, r2_test)`` for every degree tried;
    ``ok`` is False when no degree reached the R² threshold on both.
    """

    outcome: str
    columns: tuple[str, ...]
    degree: int
    mean: np.ndarray
    scale: np.ndarray
    powers: np.ndarray
    coef: np.ndarray
    intercept: float
    ok: bool
    n_logs: int
    tried: list[tuple[int, float, float]] = field(default_factory=list)
    note: str = ""

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Outcome at each row of ``x`` (n × len(columns), in ``columns`` order)."""
        x = np.asarray(x, dtype=float)
        if not self.columns or self.coef.size == 0:
            return np.full(x.shape[0] if x.ndim == 2 else 1, self.intercept)
        x = x.reshape(-1, len(self.columns))
        z = (x - self.mean) / self.scale
        top = int(self.powers.max()) if self.powers.size else 0
        pw = [z ** k for k in range(top + 1)]                 # pw[k][:, i] = z_i ** k
        out = np.full(x.shape[0], self.intercept)
        for term, c in zip(self.powers, self.coef, strict=True):
            f = np.ones(x.shape[0])
            for i, k in enumerate(term.tolist()):
                if k:
                    f = f * pw[k][:, i]
            out += c * f
        return out

    @property
    def r2(self) -> tuple[float, float] | None:
        """(train, test) R² of the kept degree, None for a constant surface."""
        return next(((tr, te) for d, tr, te in self.tried if d == self.degree), None)

    def to_dict(self) -> dict:
        return {"outcome": self.outcome, "columns": list(self.columns), "degree": self.degree,
                "mean": self.mean.tolist(), "scale": self.scale.tolist(), "powers": self.powers.tolist(),
                "coef": self.coef.tolist(), "intercept": self.intercept, "ok": self.ok,
                "n_logs": self.n_logs, "note": self.note,
                "tried": [[d, _finite(a), _finite(b)] for d, a, b in self.tried]}

    @classmethod
    def from_dict(cls, d: dict) -> Surface:
        n = len(d["columns"])
        return cls(d["outcome"], tuple(d["columns"]), int(d["degree"]), np.asarray(d["mean"], float),
                   np.asarray(d["scale"], float), np.asarray(d["powers"], int).reshape(-1, n),
                   np.asarray(d["coef"], float), float(d["intercept"]), bool(d["ok"]), int(d["n_logs"]),
                   [(int(a), _nan(b), _nan(c)) for a, b, c in d["tried"]], d.get("note", ""))


def _finite(v: float) -> float | None:
    return None if math.isnan(v) else v


def _nan(v: float | None) -> float:
    return math.nan if v is None else float(v)


def fit_surface(theta: np.ndarray, y: np.ndarray, design: Design, outcome: str, *,
                degrees: Sequence[int] = defaults.DEGREES, r2_threshold: float = defaults.R2_THRESHOLD,
                test_size: float = defaults.TEST_SIZE, random_state: int = defaults.RANDOM_STATE,
                min_logs: int = defaults.MIN_SURFACE_LOGS) -> Surface | None:
    """Fit ``outcome(θ)`` over the logs where ``y`` is known; None when fewer than ``min_logs``.

    ``theta`` is n × 5 (``THETA`` columns); only ``design.columns`` are used.
    """
    known = ~np.isnan(y)
    n = int(known.sum())
    if n < max(min_logs, 2):
        return None
    x = theta[known][:, design.index()]
    y = np.asarray(y, dtype=float)[known]
    cols = design.columns
    if not cols or np.ptp(y) == 0:
        why = "θ does not vary in the matched logs" if not cols else f"{outcome} is the same in every log"
        return Surface(outcome, cols, 0, np.zeros(len(cols)), np.ones(len(cols)),
                       np.zeros((0, len(cols)), int), np.zeros(0), float(y.mean()), True, n, [], why)
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale == 0] = 1.0       # a column that varies elsewhere but not among these logs
    z = (x - mean) / scale
    train, test = train_test_split(np.arange(n), test_size=test_size, random_state=random_state)
    tried: list[tuple[int, float, float]] = []
    chosen = None
    for degree in degrees:
        poly = PolynomialFeatures(degree, include_bias=False)
        f_train = poly.fit_transform(z[train])
        reg = LinearRegression().fit(f_train, y[train])
        r2_train = float(r2_score(y[train], reg.predict(f_train)))
        r2_test = float(r2_score(y[test], reg.predict(poly.transform(z[test])))) if len(test) >= 2 else float("nan")
        tried.append((degree, r2_train, r2_test))
        if r2_train > r2_threshold and r2_test > r2_threshold:
            chosen = degree
            break
    ok = chosen is not None
    note = ""
    if not ok:
        scores = [(-np.inf if np.isnan(te) else te, -d) for d, _, te in tried]
        chosen = tried[scores.index(max(scores))][0]
        note = (f"no degree of {list(degrees)} reached R² > {r2_threshold} on train and test; "
                f"kept degree {chosen}, the best on test")
    poly = PolynomialFeatures(chosen, include_bias=False)
    reg = LinearRegression().fit(poly.fit_transform(z), y)
    return Surface(outcome, cols, chosen, mean, scale, np.asarray(poly.powers_, dtype=int),
                   np.asarray(reg.coef_, dtype=float), float(reg.intercept_), ok, n, tried, note)
