"""Model: both trees + surfaces + SLA search on a synthetic history; tables; save/load."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest

from dtune.model import Model, Theta

SCENARIOS = [  # (avg file size B, file count, TCP buffer B, bandwidth Mbit/s): HTML-, image-, video-like
    (100e3, 20000, 4e6, 1000),
    (2.4e6, 5000, 4e6, 1000),
    (220e6, 128, 4e6, 1000),
]
RTTS = (20, 38, 45)
IMAGES = dict(avg_file_size=2.4e6, file_count=5000, rtt=38, buf=4e6, bandwidth=1000)


def throughput(cc: int, p: int, pp: int, cpu_num: int, rtt: float) -> float:
    return min(950.0, 12 * cc * p * (1 + 0.05 * pp) * (40 / rtt) * (0.8 + 0.1 * cpu_num))


def energy(cc: int, p: int, pp: int, cpu_num: int) -> float:
    return 40 + 2.5 * cc * p + 15 * cpu_num + 0.2 * pp


def history(seed: int = 0) -> list[dict]:
    """Every θ of a small grid once per (scenario, RTT), with a little noise."""
    rng = np.random.default_rng(seed)
    rows = []
    for (size, count, buf, bw), rtt in itertools.product(SCENARIOS, RTTS):
        for cc, p, pp, cpu in itertools.product((1, 2, 4, 8, 16), (1, 2, 4), (1, 4, 16), (1, 2)):
            rows.append(dict(avg_file_size=size, file_count=count, rtt=rtt * (1 + 0.01 * rng.standard_normal()),
                             buf=buf, bandwidth=bw, cc=cc, p=p, pp=pp, cpu_num=cpu, cpu_freq=None,
                             throughput=throughput(cc, p, pp, cpu, rtt) * (1 + 0.02 * rng.standard_normal()),
                             energy=energy(cc, p, pp, cpu) + 0.5 * rng.standard_normal(),
                             energy_kind="estimated"))
    return rows


@pytest.fixture(scope="module")
def model() -> Model:
    return Model().fit(history())


def test_fit_builds_two_trees_and_tables(model: Model) -> None:
    assert model.tree_di_.criterion == "di" and model.tree_sd_.criterion == "sd"
    assert len(model.tables_) == 2 * len(SCENARIOS)          # both SLAs for every scenario
    assert model.build_times_["logs"] == len(history()) == 810
    assert model.energy_kinds_ == {"estimated": 810}


def test_max_throughput_answer_comes_from_a_good_surface(model: Model) -> None:
    a = model.answer(IMAGES, "max-throughput")
    assert a.basis == "surface" and a.fit_ok
    assert a.theta is not None and a.theta.cpu_freq is None     # never applied in the history
    assert a.throughput <= 1000 and a.throughput > 800
    assert all(len(path) >= 2 for path in a.matched)


@pytest.mark.parametrize(("limits"), [dict(max_streams=8), dict(max_streams=4, max_pp=4), dict(max_pp=1)])
def test_max_throughput_honours_streams_and_pipelining(model: Model, limits: dict) -> None:
    theta = model.query(IMAGES, "max-throughput", **limits)
    assert theta.cc * theta.p <= limits.get("max_streams", 10**9)
    assert theta.pp <= limits.get("max_pp", 10**9)


def test_max_throughput_never_exceeds_the_link(model: Model) -> None:
    slow_link = dict(IMAGES, bandwidth=300)
    a = model.answer(slow_link, "max-throughput")
    assert a.throughput <= 300
    # everything that reaches the link is equal: the cheapest of them is taken
    assert a.energy < model.answer(IMAGES, "max-throughput").energy


def test_energy_limit_and_throughput_floor_are_honoured(model: Model) -> None:
    a = model.answer(IMAGES, "max-throughput", max_energy=90)
    assert a.energy <= 90 and a.theta is not None
    b = model.answer(IMAGES, "min-energy", min_throughput=400)
    assert b.throughput >= 400 and b.theta is not None
    cheapest = model.answer(IMAGES, "min-energy")
    assert cheapest.energy <= b.energy and cheapest.theta.cpu_num == 1
    none = model.answer(IMAGES, "min-energy", min_throughput=5000)
    assert none.theta is None and "throughput >= 5000" in none.reason


def test_nothing_close_in_the_history_answers_none(model: Model) -> None:
    a = model.answer(dict(IMAGES, rtt=400), "max-throughput")       # > 4 × the 45 ms the history knows
    assert a.theta is None and "nothing close" in a.reason
    assert model.query(dict(IMAGES, avg_file_size=1e3), "min-energy") is None
    assert model.query(dict(IMAGES, rtt=120), "max-throughput") is not None   # within 4×: nearest logs answer


def test_attribute_not_given_stops_the_trees_where_it_is_needed(model: Model) -> None:
    attrs = {k: v for k, v in IMAGES.items() if k != "rtt"}
    a = model.answer(attrs, "max-throughput")
    assert a.theta is not None
    assert any("rtt not given" in note for note in a.notes)
    assert a.n_logs > model.answer(IMAGES, "max-throughput").n_logs     # a node above the leaves answers


def test_history_column_names_work_and_incomplete_rows_are_dropped() -> None:
    rows = [{"avg_file_size": r["avg_file_size"], "file_count": r["file_count"], "rtt_ms": r["rtt"],
             "tcp_buffer": r["buf"], "bandwidth_mbps": r["bandwidth"], "cc": r["cc"], "p": r["p"], "pp": r["pp"],
             "cpu_num": r["cpu_num"], "cpu_freq": None, "throughput_mbps": r["throughput"],
             "energy_j": r["energy"], "energy_kind": "measured"} for r in history()[:200]]
    rows.append(dict(rows[0], rtt_ms=None))
    m = Model().fit(rows)
    assert len(m.logs_) == 200 and m.logs_.dropped == 1
    assert m.query(dict(IMAGES, avg_file_size=100e3, file_count=20000), "max-throughput") is not None
    with pytest.raises(ValueError, match="no history row"):
        Model().fit([{"cc": 1}])


def test_history_as_an_array() -> None:
    rows = history()[:100]
    arr = np.array([[r[k] if r[k] is not None else math.nan for k in (
        "avg_file_size", "file_count", "rtt", "buf", "bandwidth", "cc", "p", "pp", "cpu_num", "cpu_freq",
        "throughput", "energy")] for r in rows])
    a = Model(max_tables=0).fit(arr).answer(dict(IMAGES, avg_file_size=100e3, file_count=20000))
    b = Model(max_tables=0).fit(rows).answer(dict(IMAGES, avg_file_size=100e3, file_count=20000))
    assert a.theta == b.theta and a.throughput == pytest.approx(b.throughput)


def test_build_times_come_from_the_given_clock() -> None:
    ticks = itertools.count()
    m = Model(max_tables=1).fit(history()[:270], clock=lambda: float(next(ticks)))
    b = m.build_times_
    assert b["tree_di_s"] == 1 and b["tree_sd_s"] == 1 and b["trees_s"] == 2
    assert b["tables"] == 2 and b["tables_s"] >= 2                  # each table also reads the clock twice
    assert all(t.build_seconds == 1 for t in m.tables_)


def test_table_lookup_by_rtt_and_outcome(model: Model) -> None:
    table = model.table_for(IMAGES, "max-throughput")
    assert table.rtt_bin_ms == 10 and table.bin_width == 100
    assert sorted(table.entries) == [1, 2, 3, 4]                    # RTT 20 ± 1 % spans bins 1 and 2; 38; 45
    row = table.entries[3]
    top = max(row)
    assert table.entry(38, 10_000).theta == row[top].theta          # nearest bin to a huge value: the top
    assert table.entry(38, 10_000).theta == model.query(IMAGES, "max-throughput")
    labels = sorted(row)
    assert table.lookup(38) == row[labels[(len(labels) - 1) // 2]].theta   # no throughput yet: median bin
    assert table.lookup(33) == table.lookup(38)                     # same 30–40 ms bin
    assert table.lookup(250, 10_000) == table.entries[4][max(table.entries[4])].theta   # nearest RTT bin
    for label, e in row.items():
        assert label - 100 < e.throughput <= label


def test_min_energy_table_is_keyed_by_energy(model: Model) -> None:
    table = model.table_for(IMAGES, "min-energy")
    assert table.outcome == "energy" and table.bin_width == 10
    e = table.entry(38, 0.0)
    assert e.energy <= min(x.energy for x in table.entries[3].values())
    assert model.table_for(IMAGES, "min-energy") is table


def test_a_new_scenario_gets_a_table_built_and_kept(model: Model) -> None:
    n = len(model.tables_)
    attrs = dict(IMAGES, file_count=4000)
    table = model.table_for(attrs)
    assert len(model.tables_) == n + 1 and model.table_for(attrs) is table and len(table) > 0


def test_save_load_round_trip(model: Model, tmp_path: Path) -> None:
    path = tmp_path / "model.json"
    model.answer(IMAGES, "min-energy", min_throughput=300)   # fit a surface before saving
    model.save(path)
    data = json.loads(path.read_text())
    assert data["format"] == "dtune-model" and data["version"] == 1
    assert data["params"] == model.get_params()
    surf = data["surfaces"][0]
    assert {"coef", "intercept", "powers", "mean", "scale", "degree", "tried"} <= set(surf["throughput"])
    back = Model.load(path)
    assert back.get_params() == model.get_params() and back.build_times_ == model.build_times_
    for attrs, sla, kw in [(IMAGES, "max-throughput", {}), (IMAGES, "min-energy", {"min_throughput": 300}),
                           (dict(IMAGES, rtt=21), "max-throughput", {"max_streams": 8}),
                           (dict(IMAGES, avg_file_size=220e6, file_count=128), "min-energy", {})]:
        a, b = model.answer(attrs, sla, **kw), back.answer(attrs, sla, **kw)
        assert a.theta == b.theta and a.matched == b.matched
        assert a.throughput == pytest.approx(b.throughput) and a.energy == pytest.approx(b.energy)
    assert [t.to_dict() for t in back.tables_] == [t.to_dict() for t in model.tables_]


def test_load_refuses_other_files_and_versions(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"format": "dtune-model", "version": 99}))
    with pytest.raises(ValueError, match="version 99"):
        Model.load(path)
    path.write_text(json.dumps({"format": "other"}))
    with pytest.raises(ValueError, match="not a dtune model"):
        Model.load(path)


def test_unfitted_model_says_so() -> None:
    with pytest.raises(RuntimeError, match="not fitted"):
        Model().query(IMAGES)
    assert repr(Model()) == "<Model [not fitted]>"


def test_theta_answers_are_values_the_history_used(model: Model) -> None:
    for sla in ("max-throughput", "min-energy"):
        t = model.query(IMAGES, sla)
        assert isinstance(t, Theta)
        assert t.cc in (1, 2, 4, 8, 16) and t.p in (1, 2, 4) and t.pp in (1, 4, 16) and t.cpu_num in (1, 2)
