"""SLA search: binning, the bin closest to a target, eq. 5 and eq. 6 constraints, ties."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from dtune.model import Theta
from dtune.model.defaults import energy_bin_width, throughput_bin_width
from dtune.model.search import (
    Candidates,
    Constraints,
    bin_labels,
    choose_label,
    grid,
    select,
    select_every_bin,
)


def candidates() -> Candidates:
    """cc 1..8 × p 1..4 × pp {1, 4, 16}: T = 40·cc·p + pp Mbit/s, E = 5·cc·p + pp/4 J."""
    pts = np.array([[cc, p, pp, math.nan, math.nan]
                    for cc, p, pp in itertools.product(range(1, 9), range(1, 5), (1, 4, 16))], dtype=float)
    streams = pts[:, 0] * pts[:, 1]
    return Candidates(pts, 40 * streams + pts[:, 2], 5 * streams + pts[:, 2] / 4, "surface")


def pick(k: Constraints, width: float = 100.0, target: float | None = None) -> tuple[Theta | None, int | None]:
    c = candidates()
    i, _, _ = select(c, k, bin_width=width, target=target)
    return (None, None) if i is None else (Theta.from_row(c.theta[i]), i)


@pytest.mark.parametrize(("values", "width", "labels"), [
    ([0, 50, 100, 100.5, 250], 100, [100, 100, 100, 200, 300]),   # 0–100 → bin 100, as in the paper
    ([999, 1000, 1001], 1000, [1000, 1000, 2000]),
    ([0.3, 1.2], 1, [1, 2]),
])
def test_bins_are_named_by_their_upper_edge(values: list[float], width: float, labels: list[float]) -> None:
    assert bin_labels(np.array(values), width).tolist() == labels


@pytest.mark.parametrize(("bandwidth", "width"), [(1000, 100), (10_000, 1000), (100, 10), (2500, 100), (None, 1.0)])
def test_throughput_bins_follow_the_link(bandwidth: float | None, width: float) -> None:
    assert throughput_bin_width(bandwidth) == width


def test_bins_without_bandwidth_follow_the_largest_value() -> None:
    assert throughput_bin_width(None, top=640) == 10
    assert energy_bin_width(22) == 1 and energy_bin_width(1500) == 100 and energy_bin_width(None) == 1


@pytest.mark.parametrize(("target", "sla", "label"), [
    (None, "max-throughput", 500), (None, "min-energy", 100),
    (260, "max-throughput", 300), (250, "max-throughput", 300),   # equally close: the better bin
    (250, "min-energy", 200), (10_000, "max-throughput", 500),
])
def test_bin_closest_to_target(target: float | None, sla: str, label: float) -> None:
    assert choose_label(np.array([100.0, 200, 300, 500, 500]), sla, target) == label


def test_max_throughput_without_limits_is_the_argmax() -> None:
    theta, _ = pick(Constraints("max-throughput"))
    assert theta == Theta(8, 4, 16)


def test_max_throughput_honours_streams_and_pipelining() -> None:
    theta, _ = pick(Constraints("max-throughput", max_streams=6, max_pp=4))
    assert theta.cc * theta.p == 6 and theta.pp == 4        # 244 Mbit/s, the most within the limits


def test_max_throughput_caps_at_bandwidth_and_takes_the_cheapest_of_equals() -> None:
    c = candidates()
    k = Constraints("max-throughput", bandwidth=300)
    i, label, _ = select(c, k, bin_width=100)
    theta = Theta.from_row(c.theta[i])
    assert label == 300
    # everything at or above 300 Mbit/s counts as 300: the least energy among them wins
    assert 40 * theta.cc * theta.p + theta.pp >= 300
    feasible_energy = [5 * cc * p + pp / 4 for cc, p, pp in itertools.product(range(1, 9), range(1, 5), (1, 4, 16))
                       if 40 * cc * p + pp >= 300]
    assert 5 * theta.cc * theta.p + theta.pp / 4 == min(feasible_energy)


def test_max_throughput_honours_an_energy_limit() -> None:
    theta, _ = pick(Constraints("max-throughput", max_energy=40))
    assert 5 * theta.cc * theta.p + theta.pp / 4 <= 40
    assert theta.cc * theta.p == 7 and theta.pp == 16       # 7 streams, pp 16: 39 J, 296 Mbit/s (8 streams cost >= 40.25 J)


def test_min_energy_honours_a_throughput_floor() -> None:
    theta, _ = pick(Constraints("min-energy", min_throughput=250), width=1)
    assert 40 * theta.cc * theta.p + theta.pp >= 250
    assert theta.cc * theta.p == 6 and theta.pp == 16       # 256 Mbit/s for 34 J (7 streams: 281 for 35.25 J)
    assert pick(Constraints("min-energy"), width=1)[0] == Theta(1, 1, 1)


def test_infeasible_sla_answers_none_with_the_reason() -> None:
    c = candidates()
    i, _, why = select(c, Constraints("min-energy", min_throughput=5000), bin_width=1)
    assert i is None and "throughput >= 5000" in why
    i, _, why = select(Candidates(c.theta, c.throughput, None, "logs"),
                       Constraints("max-throughput", max_energy=10), bin_width=100)
    assert i is None and "no energy figure" in why


def test_target_picks_the_best_point_of_the_nearest_bin() -> None:
    theta, _ = pick(Constraints("max-throughput"), target=200)
    t = 40 * theta.cc * theta.p + theta.pp
    assert t == 176         # the highest point of the bin 101–200 (4 streams, pp 16)


def test_every_bin_gets_its_best_point() -> None:
    c = candidates()
    best = select_every_bin(c, Constraints("max-throughput"), bin_width=100)
    # stream counts cc·p reachable with cc <= 8, p <= 4 leave no point in 1001–1100
    assert sorted(best) == [100, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 1200, 1300]
    for label, i in best.items():
        assert label - 100 < c.throughput[i] <= label


def test_grid_uses_values_from_the_logs_thinned_evenly() -> None:
    logs = np.array([[cc, 1, 4, 2, math.nan] for cc in range(1, 31)], dtype=float)
    g = grid(logs, ("cc",), max_values=5)
    assert g[:, 0].tolist() == [1, 8, 15, 23, 30]
    assert (g[:, 1] == 1).all() and (g[:, 3] == 2).all() and np.isnan(g[:, 4]).all()


def test_sla_name_is_checked() -> None:
    with pytest.raises(ValueError, match="sla must be"):
        select(candidates(), Constraints("fastest"), bin_width=1)


def test_theta_converts_to_params() -> None:
    p = Theta.from_row([4.0, 2.0, 8.0, math.nan, 1_800_000.0]).as_params()
    assert (p.cc, p.p, p.pp, p.cpu_num, p.cpu_freq) == (4, 2, 8, None, 1_800_000)
