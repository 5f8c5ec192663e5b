"""Surfaces: degree selection on known polynomials, the design of θ columns, persistence."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.linear_model import LinearRegression
from sklearn.preprocessing import PolynomialFeatures

from dtune.model import THETA, Design, Surface, fit_surface


def thetas(n: int, seed: int = 0) -> np.ndarray:
    """n random θ rows: cc 1..16, p 1..8, pp 1..16, cpu_num 1..4, cpu_freq 1.2–2.4 GHz in kHz."""
    rng = np.random.default_rng(seed)
    return np.column_stack([rng.integers(1, 17, n), rng.integers(1, 9, n), rng.integers(1, 17, n),
                            rng.integers(1, 5, n), rng.choice([1_200_000, 1_800_000, 2_400_000], n)]
                           ).astype(float)


def noise(n: int, scale: float, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, scale, n)


def test_quadratic_data_keeps_degree_2() -> None:
    th = thetas(300)
    cc, p, pp = th[:, 0], th[:, 1], th[:, 2]
    y = 50 + 30 * cc + 20 * p - 1.2 * cc**2 + 2 * cc * p + 0.5 * pp + noise(300, 2.0)
    s = fit_surface(th, y, Design.of(th), "throughput")
    assert s is not None and s.ok and s.degree == 2
    assert [d for d, _, _ in s.tried] == [2]
    tr, te = s.r2
    assert tr > 0.99 and te > 0.99
    truth = 50 + 30 * cc + 20 * p - 1.2 * cc**2 + 2 * cc * p + 0.5 * pp
    assert np.max(np.abs(s.predict(th) - truth)) < 3.0


def test_cubic_without_linear_part_needs_degree_3() -> None:
    th = thetas(300)
    u = (th[:, 0] - 8.5) / 7.5                 # cc scaled to about −1..1
    y = 400 * (u**3 - 0.6 * u) + noise(300, 1.0)   # u³ − 0.6u has no linear or quadratic part
    s = fit_surface(th, y, Design.of(th), "throughput")
    assert s is not None and s.ok and s.degree == 3
    (d2, _, te2), (d3, tr3, te3) = s.tried
    assert d2 == 2 and te2 < 0.7 and d3 == 3 and tr3 > 0.9 and te3 > 0.9


def test_noise_reaches_no_degree_and_is_flagged() -> None:
    th = thetas(120)
    y = noise(120, 10.0, seed=7)
    s = fit_surface(th, y, Design.of(th), "energy")
    assert s is not None and not s.ok
    assert [d for d, _, _ in s.tried] == [2, 3, 4]
    best_test = max(s.tried, key=lambda t: t[2])
    assert s.degree == best_test[0]
    assert "no degree" in s.note


def test_too_few_logs_give_no_surface() -> None:
    th = thetas(9)
    assert fit_surface(th, np.arange(9.0), Design.of(th), "throughput") is None
    y = np.arange(20.0)
    y[:12] = math.nan                               # 8 known outcomes of 20
    th = thetas(20)
    assert fit_surface(th, y, Design.of(th), "throughput") is None


def test_design_varies_holds_or_leaves_out_each_column() -> None:
    th = thetas(30)
    th[:, 3] = 2                      # cpu_num the same in every log: held
    th[5, 4] = math.nan               # cpu_freq not applied in one log: left out
    d = Design.of(th)
    assert d.columns == ("cc", "p", "pp")
    assert d.fixed == {"cpu_num": 2.0, "cpu_freq": None}
    assert d.index() == [0, 1, 2]


def test_constant_outcome_or_theta_gives_a_flat_surface() -> None:
    th = thetas(30)
    s = fit_surface(th, np.full(30, 7.0), Design.of(th), "energy")
    assert s.degree == 0 and s.ok and np.allclose(s.predict(th[:4]), 7.0)
    same = np.tile(th[0], (30, 1))
    s = fit_surface(same, np.arange(30.0), Design.of(same), "energy")
    assert s.columns == () and s.predict(np.zeros((3, 0))).tolist() == [14.5] * 3


def test_prediction_from_stored_numbers_equals_scikit_learn() -> None:
    th = thetas(200, seed=4)
    y = 3 * th[:, 0] ** 2 - th[:, 1] * th[:, 2] + 1e-5 * th[:, 4] + noise(200, 0.5)
    d = Design.of(th)
    s = fit_surface(th, y, d, "throughput", degrees=(4,))
    z = (th - s.mean) / s.scale
    poly = PolynomialFeatures(4, include_bias=False)
    ref = LinearRegression().fit(poly.fit_transform(z), y)
    assert np.allclose(s.predict(th), ref.predict(poly.transform(z)), rtol=1e-6, atol=1e-6)


def test_surface_round_trip_keeps_predictions() -> None:
    th = thetas(100)
    y = th[:, 0] * th[:, 1] + noise(100, 0.1)
    s = fit_surface(th, y, Design.of(th), "throughput")
    back = Surface.from_dict(s.to_dict())
    assert back.columns == s.columns and back.degree == s.degree and back.tried == s.tried
    assert np.allclose(back.predict(th), s.predict(th))


def test_theta_columns_are_named_as_in_algorithms_md() -> None:
    assert THETA == ("cc", "p", "pp", "cpu_num", "cpu_freq")


@pytest.mark.parametrize("seed", [0, 1])
def test_split_is_seeded(seed: int) -> None:
    th = thetas(80)
    y = th[:, 0] + noise(80, 3.0)
    a = fit_surface(th, y, Design.of(th), "throughput", random_state=seed)
    b = fit_surface(th, y, Design.of(th), "throughput", random_state=seed)
    assert a.tried == b.tried


@pytest.mark.parametrize(("n_features", "degree"), [(1, 2), (2, 3), (3, 4), (5, 2)])
def test_terms_split_fit_and_r2_are_scikit_learns(n_features: int, degree: int) -> None:
    from sklearn.metrics import r2_score
    from sklearn.model_selection import train_test_split

    from dtune.model.surface import features, least_squares, poly_powers, r2, split_train_test
    rng = np.random.default_rng(n_features * 10 + degree)
    n = 37
    z = rng.normal(size=(n, n_features))
    y = rng.normal(size=n) + z[:, 0] ** 2
    poly = PolynomialFeatures(degree, include_bias=False)
    want = poly.fit_transform(z)
    assert poly_powers(n_features, degree).tolist() == poly.powers_.tolist()
    got = features(z, poly_powers(n_features, degree))
    np.testing.assert_allclose(got, want, rtol=1e-12)
    reg = LinearRegression().fit(want, y)
    coef, intercept = least_squares(got, y)
    np.testing.assert_allclose(got @ coef + intercept, reg.predict(want), rtol=1e-8, atol=1e-8)
    assert r2(y, got @ coef + intercept) == pytest.approx(r2_score(y, reg.predict(want)), abs=1e-10)
    assert r2(np.ones(4), np.ones(4)) == r2_score(np.ones(4), np.ones(4)) == 1.0
    assert r2(np.ones(4), np.zeros(4)) == r2_score(np.ones(4), np.zeros(4)) == 0.0
    for size in (2, 3, 7, 37, 101):
        train, test = train_test_split(np.arange(size), test_size=0.2, random_state=42)
        mine = split_train_test(size, 0.2, 42)
        assert mine[0].tolist() == train.tolist() and mine[1].tolist() == test.tolist()


def test_a_rank_deficient_fit_predicts_as_scikit_learn() -> None:
    # two θ columns that move together: many coefficient vectors fit; the prediction is the same
    from dtune.model.surface import features, least_squares, poly_powers
    rng = np.random.default_rng(5)
    a = rng.normal(size=30)
    z = np.column_stack([a, 2 * a, rng.normal(size=30)])
    y = 3 * a + rng.normal(size=30) * 0.1
    poly = PolynomialFeatures(3, include_bias=False)
    want = LinearRegression().fit(poly.fit_transform(z), y).predict(poly.fit_transform(z))
    f = features(z, poly_powers(3, 3))
    coef, intercept = least_squares(f, y)
    np.testing.assert_allclose(f @ coef + intercept, want, rtol=1e-6, atol=1e-6)


def test_a_transfer_that_fits_a_surface_does_not_import_scikit_learn() -> None:
    # the decision tree answers a query the model file holds no surface for by fitting one:
    # importing scikit-learn (and SciPy) for that took 0.6 s of every such transfer's start
    import subprocess
    import sys

    from dtune.model.paths import shipped_model_path
    code = ("import sys; from dtune.model import Model; "
            f"m = Model.load({str(shipped_model_path())!r}); "
            "attrs = {'avg_file_size': 2.4e6, 'file_count': 12, 'rtt': 34.0, 'buf': 4194304, "
            "'bandwidth': 1000.0}; "
            "a = m.answer(attrs); "
            "print(m.match(attrs).key in m._surfaces, a.basis, 'sklearn' in sys.modules, 'scipy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "surface", "False", "False"]
