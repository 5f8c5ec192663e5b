"""Throughput and energy surfaces over θ (docs/algorithms.md §2.3, Algorithm 2).

A surface is a polynomial in the tunable parameters θ = (cc, p, pp,
cpu_num, cpu_freq) fitted by least squares over the logs a query matched:
the terms, the fit, R² and the train/test split are scikit-learn's
``PolynomialFeatures`` (no bias column), ``LinearRegression``, ``r2_score``
and ``train_test_split``, computed with NumPy alone (the tests hold them to
scikit-learn's), because a transfer fits the surfaces of a query the model
file does not hold, and importing scikit-learn takes 0.6 s. Degree selection follows the same lab's earlier surface code: try
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

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

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
    train, test = split_train_test(n, test_size, random_state)
    tried: list[tuple[int, float, float]] = []
    chosen = None
    for degree in degrees:
        powers = poly_powers(len(cols), degree)
        f_train = features(z[train], powers)
        coef, intercept = least_squares(f_train, y[train])
        r2_train = r2(y[train], f_train @ coef + intercept)
        r2_test = (r2(y[test], features(z[test], powers) @ coef + intercept) if len(test) >= 2
                   else float("nan"))
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
    powers = poly_powers(len(cols), chosen)
    coef, intercept = least_squares(features(z, powers), y)
    return Surface(outcome, cols, chosen, mean, scale, powers, coef, intercept, ok, n, tried, note)


def poly_powers(n_features: int, degree: int) -> np.ndarray:
    """The exponent of every column in every term of degree 1..``degree``, in the order of
    scikit-learn's ``PolynomialFeatures(degree, include_bias=False).powers_``."""
    rows = []
    for d in range(1, degree + 1):
        for combo in itertools.combinations_with_replacement(range(n_features), d):
            row = [0] * n_features
            for i in combo:
                row[i] += 1
            rows.append(row)
    return np.asarray(rows, dtype=int).reshape(-1, n_features)


def features(z: np.ndarray, powers: np.ndarray) -> np.ndarray:
    """Each term of ``powers`` at each row of ``z``."""
    return np.prod(z[:, None, :] ** powers[None, :, :], axis=2)


def least_squares(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
    """(coefficients, intercept) of ordinary least squares with an intercept, as
    ``LinearRegression``: centred, then the minimum-norm solution."""
    x_mean, y_mean = x.mean(axis=0), float(y.mean())
    coef = np.linalg.lstsq(x - x_mean, y - y_mean, rcond=None)[0]
    return coef, y_mean - float(x_mean @ coef)


def r2(y: np.ndarray, pred: np.ndarray) -> float:
    """The coefficient of determination, as ``r2_score``: 1.0 for a perfect fit of a constant,
    0.0 for an imperfect one."""
    res = float(((y - pred) ** 2).sum())
    tot = float(((y - y.mean()) ** 2).sum())
    if tot == 0:
        return 1.0 if res == 0 else 0.0
    return 1 - res / tot


def split_train_test(n: int, test_size: float, random_state: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, test) row numbers as ``train_test_split(np.arange(n), test_size=…, random_state=…)``
    draws them: a seeded permutation, the first ceil(test_size × n) for the test."""
    perm = np.random.RandomState(random_state).permutation(n)
    n_test = math.ceil(test_size * n)
    return perm[n_test:], perm[:n_test]
