"""`dtune history sweep`: the scenario format and the run plan (pure; a real sweep is in tests/system/)."""

from __future__ import annotations

import shutil
import sys
from collections import Counter

import pytest
from dtune_lab.bench.sweep import get_argv, pin_prefix, plan_runs, sweep_from_dict

from dtune.errors import DtuneError

BASE = {
    "sweep": {"sample": "random", "limit": 12, "seed": 3,
              "theta": {"cc": [1, 2, 4], "p": [1, 2], "pp": [1, 8], "cpu_num": [1, 2], "cpu_freq": []}},
    "profile": [{"name": "fast", "rate_mbit": 1000, "rtt_ms": 34, "tcp_buffer": 4194304},
                {"name": "slow", "rate_mbit": 100, "rtt_ms": 45, "tcp_buffer": 460800}],
    "dataset": [{"name": "html", "preset": "html", "files": 20}, {"name": "video", "preset": "video",
                                                                   "scale": 0.01}],
}


def config(**sweep):
    data = {**BASE, "sweep": {**BASE["sweep"], **sweep}}
    return sweep_from_dict(data, name="t")


def test_the_grid_is_the_product_of_the_theta_lists():
    cfg = config()
    grid = cfg.grid()
    assert len(grid) == 3 * 2 * 2 * 2
    assert all(g["cpu_freq"] is None for g in grid)                 # [] = not varied
    assert {g["cc"] for g in grid} == {1, 2, 4}


def test_random_sample_is_spread_evenly_over_profile_dataset_cells():
    plan = plan_runs(config())
    cells = Counter((r.profile, r.dataset) for r in plan)
    assert len(plan) == 12 and set(cells.values()) == {3}
    assert [r.profile for r in plan] == sorted((r.profile for r in plan), key=["fast", "slow"].index)
    for cell in cells:                                               # without replacement within a cell
        thetas = [tuple(r.theta.values()) for r in plan if (r.profile, r.dataset) == cell]
        assert len(set(thetas)) == len(thetas)


def test_plan_is_reproducible_and_seeded():
    assert plan_runs(config()) == plan_runs(config())
    assert plan_runs(config()) != plan_runs(config(seed=4))


def test_grid_runs_everything_and_repeats():
    plan = plan_runs(config(), sample="grid", runs=2)
    assert len(plan) == 24 * 4 * 2
    assert Counter(r.rep for r in plan) == {0: 96, 1: 96}
    assert len(plan_runs(config(), sample="grid", limit=10)) == 10


@pytest.mark.parametrize(("change", "words"), [
    ({"sweep": {**BASE["sweep"], "colour": 1}}, "unknown key 'colour'"),
    ({"sweep": {"theta": {"cc": []}}}, "cc needs at least one value"),
    ({"sweep": {"theta": {"cc": [1], "p": [1], "pp": [0]}}}, "pp must be an integer >= 1"),
    ({"sweep": {**BASE["sweep"], "sample": "all"}}, "sample must be one of"),
    ({"profile": [{"name": "x", "rate_mbit": 10, "tcp_buffer": 100}]}, "tcp_buffer must be an integer >= 4096"),
    ({"dataset": [{"preset": "movies"}]}, "unknown preset 'movies'"),
    ({"dataset": [{"preset": "html"}, {"preset": "html"}]}, "two datasets named 'html'"),
])
def test_bad_scenarios_name_the_key(change, words):
    data = {**BASE, **change}
    with pytest.raises(DtuneError, match=words.replace("(", r"\(").replace(")", r"\)")):
        sweep_from_dict(data, name="t")


def test_the_client_is_pinned_to_the_first_cpus():
    assert pin_prefix(None, [0, 1]) == []
    prefix = pin_prefix(1, [3, 1, 2])
    assert prefix[-1] == "1" or prefix[-1].endswith("1")
    if shutil.which("taskset"):
        assert prefix == ["taskset", "-c", "1"]


def test_the_run_is_a_static_dtune_get_with_the_link_given():
    cfg = config()
    argv = get_argv("http://10.77.0.2:8080/html/", "/tmp/o", {"cc": 4, "p": 2, "pp": 8}, cfg.profiles[1],
                    "sqlite:////tmp/r.db")
    assert argv[:4] == [sys.executable, "-m", "dtune", "get"]
    text = " ".join(argv)
    assert "--tuner static --cc 4 -p 2 --pp 8" in text
    assert "--bandwidth 100M --tcp-buffer 460800" in text and "--history sqlite:////tmp/r.db" in text
