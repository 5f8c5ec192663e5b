"""The online decision-tree tuner on plain snapshots and a small synthetic model.

Proves: the start θ is the table's median bin (min-energy under the online
search: its least-energy bin); re-tunes come first after 10 s,
then every 10 / 20 / 30 s by average file size; a period as predicted moves
to the best bin, a shortfall to a lower one; min-energy reads the meter and
keeps the throughput floor; no model answer means ProMC, said in the notes;
explicit cc / p / pp are never overridden; ``auto`` picks the tree only when a
model file exists.
"""

from __future__ import annotations

import itertools
import math

import pytest

from dtune.accounting import PartitionView, Snapshot
from dtune.errors import DtuneError
from dtune.model import Model
from dtune.netfacts import NetworkFacts
from dtune.tuners import make_tuner
from dtune.tuners.dtree import CADENCE, DTreeTuner, default_model_path, period_for, shipped_model_path
from dtune.tuners.promc import HeuristicTuner

FACTS = NetworkFacts(rtt=0.040, bandwidth=12.5e6, tcp_buffer=460800, how={"rtt": "measured"})
HTML = [100_000] * 150
IMAGES = [2_400_000] * 12


def history_rows() -> list[dict]:
    """Three datasets on a 100 Mbit/s link at 38 and 45 ms; throughput grows with cc and pp."""
    out = []
    for avg, count in ((100_000, 150), (2_400_000, 12), (50_000_000, 4)):
        for rtt in (38.0, 45.0):
            for cc, pp, cpu in itertools.product((1, 2, 4, 8, 16), (1, 4, 16), (1, 2)):
                t = min(95.0, 8.0 * cc * math.sqrt(pp) * (40 / rtt))
                e = 2.0 * cpu * avg * count * 8 / (t * 1e6) + 0.05 * cc
                out.append({"avg_file_size": avg, "file_count": count, "rtt_ms": rtt, "tcp_buffer": 460800,
                            "bandwidth_mbps": 100.0, "cc": cc, "p": 1, "pp": pp, "cpu_num": cpu,
                            "throughput_mbps": t, "energy_j": e, "energy_kind": "estimated"})
    return out


@pytest.fixture(scope="module")
def model() -> Model:
    return Model().fit(history_rows())


@pytest.fixture(autouse=True)
def _no_user_model(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))


def snap(t: float, nbytes: int, total: int, joules: float | None = None, rtt: float = 0.040) -> Snapshot:
    view = PartitionView(bytes=nbytes, bytes_resumed=0, bytes_total=total, rate=0.0, eta=None, files_total=150,
                         files_done=0, lanes=0, params={})
    return Snapshot(elapsed=t, bytes=nbytes, bytes_resumed=0, bytes_total=total, rate=0.0, rate_inst=0.0,
                    eta=None, files_total=150, files_done=0, files_skipped=0, files_failed=0, retries=0,
                    connections=0, rtt=rtt, partitions={"all": view},
                    energy=None if joules is None else {"joules": joules, "watts": 0.0, "kind": "estimated"})


def mbps(rate: float, seconds: float) -> int:
    return int(rate * 1e6 / 8 * seconds)


def test_start_theta_is_the_median_bin_of_the_table(model):
    tuner = DTreeTuner(model=model)
    plan = tuner.plan(HTML, FACTS)
    table = model.table_for(tuner.attrs_, "max-throughput")
    start = table.entry(40.0)
    assert plan.partition_of == ["all"] * len(HTML)
    p = plan.params["all"]
    assert (p.cc, p.p, p.pp, p.cpu_num) == (start.theta.cc, start.theta.p, start.theta.pp, start.theta.cpu_num)
    assert start.theta != table.entries[table.rtt_bin(40.0)][max(table.entries[table.rtt_bin(40.0)])].theta
    assert any("median" in n for n in plan.notes) and any("3 s probe" in n for n in plan.notes)


def test_under_the_online_search_min_energy_starts_at_the_least_energy_bin_of_the_floor_table(model):
    floor = 30.0
    tuner = DTreeTuner("min-energy", model=model, min_throughput=floor, online=True)
    plan = tuner.plan(HTML, FACTS)
    table = model.build_table(tuner.attrs_, "min-energy", min_throughput=floor)
    row = table.entries[table.rtt_bin(40.0)]
    least, median = row[min(row)], table.entry(40.0)
    assert least.theta != median.theta                 # the two starts differ in this model
    p = plan.params["all"]
    assert (p.cc, p.p, p.pp, p.cpu_num) == (least.theta.cc, least.theta.p, least.theta.pp, least.theta.cpu_num)
    assert least.throughput >= floor
    assert any("least energy bin" in n for n in plan.notes)
    # the paper's tuner alone (--no-online) starts at the median, as does max-throughput either way
    alone = DTreeTuner("min-energy", model=model, min_throughput=floor).plan(HTML, FACTS).params["all"]
    assert (alone.cc, alone.pp, alone.cpu_num) == (median.theta.cc, median.theta.pp, median.theta.cpu_num)
    mt = model.table_for(tuner.attrs_, "max-throughput").entry(40.0).theta
    got = DTreeTuner(model=model, online=True).plan(HTML, FACTS).params["all"]
    assert (got.cc, got.pp, got.cpu_num) == (mt.cc, mt.pp, mt.cpu_num)


def test_make_tuner_tells_the_tree_whether_the_online_search_runs(model, tmp_path):
    path = tmp_path / "model.json"
    model.save(path)
    on = make_tuner("dtree", sla="min-energy", model=str(path), online=True)
    off = make_tuner("auto", sla="min-energy", model=str(path))
    assert (on.online, off.online) == (True, False)


@pytest.mark.parametrize(("avg", "size_class", "period"), [
    (100_000, "small", 10.0), (1_000_000, "small", 10.0), (2_400_000, "medium", 20.0),
    (10_000_000, "medium", 20.0), (10_000_001, "large", 30.0), (223_000_000, "large", 30.0)])
def test_period_by_average_file_size(avg, size_class, period):
    assert period_for(avg, CADENCE) == (size_class, period)


@pytest.mark.parametrize(("sizes", "period"), [(HTML, 10.0), (IMAGES, 20.0), ([60_000_000] * 4, 30.0)])
def test_first_retune_after_10_s_then_every_period(model, sizes, period):
    tuner = DTreeTuner(model=model)
    tuner.plan(sizes, FACTS)
    total = sum(sizes)
    times = [0.0, 1.0, 9.0, 10.0, 10.0 + period - 1, 10.0 + period, 10.0 + 2 * period]
    seen = []
    for t in times:
        before = tuner.retunes_
        tuner.update(t, snap(t, mbps(50, t), total))
        if tuner.retunes_ > before:
            seen.append(t)
    assert seen == [10.0, 10.0 + period, 10.0 + 2 * period]


def test_as_predicted_moves_to_the_best_bin_with_the_reason(model):
    tuner = DTreeTuner(model=model)
    tuner.plan(HTML, FACTS)
    row = tuner._row(40.0)
    best = row[max(row)].theta
    pred = tuner.entry_.throughput
    tuner.update(0.0, snap(0, 0, 15_000_000))
    d = tuner.update(10.0, snap(10, mbps(pred, 10), 15_000_000))
    assert d is not None
    p = d.params["all"]
    assert (p.cc, p.p, p.pp, p.cpu_num) == (best.cc, best.p, best.pp, best.cpu_num)
    assert "best bin" in d.reason and "re-tune 1" in d.reason


def test_a_shortfall_takes_a_lower_bin(model):
    tuner = DTreeTuner(model=model)
    tuner.plan(HTML, FACTS)
    row = tuner._row(40.0)
    pred = tuner.entry_.throughput
    tuner.update(0.0, snap(0, 0, 15_000_000))
    d = tuner.update(10.0, snap(10, mbps(pred * 0.3, 10), 15_000_000))
    assert d is not None and "short of the prediction" in d.reason
    new = next(e for e in row.values() if e.theta.cc == d.params["all"].cc and e.theta.pp == d.params["all"].pp)
    assert (new.throughput or 0) < row[max(row)].throughput


def test_a_theta_that_measured_slower_is_not_taken_again(model):
    tuner = DTreeTuner(model=model)
    tuner.plan(HTML, FACTS)
    start = tuner.entry_
    tuner.update(0.0, snap(0, 0, 150_000_000))
    tuner.update(10.0, snap(10, mbps(start.throughput, 10), 150_000_000))       # → best bin
    assert tuner.entry_.theta != start.theta
    got = mbps(start.throughput, 10)
    # the best θ runs far below its prediction: the bin picked is the start's, which measured faster
    tuner.tried_[(start.theta.cc, start.theta.p, start.theta.pp, start.theta.cpu_num, None)] = 1e9
    d = tuner.update(20.0, snap(20, got + mbps(1.0, 10), 150_000_000))
    assert d is None or "measured slower" not in d.reason


def test_min_energy_reads_the_meter_and_moves_to_the_cheapest_bin(model):
    tuner = DTreeTuner("min-energy", model=model)
    plan = tuner.plan(HTML, FACTS)
    assert tuner.label == "dtree min-energy"
    pred = tuner.entry_.energy
    total = 15_000_000
    tuner.update(0.0, snap(0, 0, total, joules=0.0))
    # half the dataset in 10 s for half the predicted energy: as predicted
    d = tuner.update(10.0, snap(10, total // 2, total, joules=pred / 2))
    row = tuner._row(40.0)
    assert d is not None and "approximated energy" in d.reason
    assert d.params["all"].cc == row[min(row)].theta.cc
    assert plan.params["all"] is not None


def test_min_energy_below_the_floor_moves_to_a_faster_entry(model):
    tuner = DTreeTuner("min-energy", model=model, min_throughput=30.0)
    tuner.plan(HTML, FACTS)
    cur = tuner.entry_
    total = 15_000_000
    tuner.update(0.0, snap(0, 0, total, joules=0.0))
    d = tuner.update(10.0, snap(10, mbps(5.0, 10), total, joules=1.0))
    assert d is not None and "below the floor" in d.reason
    row = tuner._row(40.0)
    new = next(e for e in row.values() if e.theta.cc == d.params["all"].cc and e.theta.pp == d.params["all"].pp
               and e.theta.cpu_num == d.params["all"].cpu_num)
    assert new.throughput > cur.throughput


def test_nothing_close_falls_back_to_promc_and_says_so(model):
    tuner = DTreeTuner(model=model)
    plan = tuner.plan([5_000_000_000] * 3, FACTS)          # 5 GB files: far outside the history
    assert isinstance(tuner.fallback_, HeuristicTuner)
    assert "falling back to ProMC" in plan.notes[0] and "nothing close" in plan.notes[0]
    assert tuner.label == "promc (dtree fallback)"
    assert tuner.get_params()["fallback"]["mode"] == "promc"
    view = PartitionView(bytes=0, bytes_resumed=0, bytes_total=15_000_000_000, rate=0.0, eta=None, files_total=3,
                         files_done=0, lanes=0, params={})
    s = snap(0, 0, 15_000_000_000)
    s.partitions = {name: view for name in plan.params}
    assert tuner.update(0.0, s) is None                     # ProMC answers from now on


def test_explicit_values_are_never_overridden(model):
    tuner = DTreeTuner(model=model, fixed={"cc": 3, "p": 2, "pp": 5})
    plan = tuner.plan(HTML, FACTS)
    assert (plan.params["all"].cc, plan.params["all"].p, plan.params["all"].pp) == (3, 2, 5)
    tuner.update(0.0, snap(0, 0, 15_000_000))
    for t, rate in ((10.0, 90.0), (20.0, 5.0), (30.0, 90.0)):
        d = tuner.update(t, snap(t, mbps(rate, t), 15_000_000))
        assert d is None or (d.params["all"].cc, d.params["all"].p, d.params["all"].pp) == (3, 2, 5)


def test_auto_is_promc_without_a_model_file_and_dtree_with_one(model, tmp_path):
    kw = {"fixed": {}, "max_cc": 16, "max_partitions": 2}
    assert isinstance(make_tuner("auto", **kw), HeuristicTuner)
    path = default_model_path()
    assert str(path).startswith(str(tmp_path))
    path.parent.mkdir(parents=True)
    model.save(path)
    tuner = make_tuner("auto", **kw)
    assert isinstance(tuner, DTreeTuner) and tuner.auto and tuner.sla == "max-throughput"
    tuner.plan(HTML, FACTS)
    assert tuner.fallback_ is None and tuner.model_path_ == str(path)
    far = make_tuner("auto", **kw)
    far.plan([5_000_000_000] * 3, FACTS)                    # the model has nothing close: ProMC
    assert far.fallback_ is not None


def test_auto_with_an_unreadable_model_falls_back_but_dtree_says_why(tmp_path):
    path = default_model_path()
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    kw = {"fixed": {}, "max_cc": 16, "max_partitions": 2}
    auto = make_tuner("auto", **kw)
    plan = auto.plan(HTML, FACTS)
    assert "cannot be read" in plan.notes[0] and "ProMC" in plan.notes[0]
    with pytest.raises(DtuneError, match="cannot be read"):
        make_tuner("dtree", **kw).plan(HTML, FACTS)
    with pytest.raises(DtuneError, match="no such file"):
        make_tuner("dtree", model=str(tmp_path / "missing.json"), **kw).plan(HTML, FACTS)


def test_dtree_without_a_user_model_uses_the_shipped_demo(tmp_path):
    if not shipped_model_path().exists():
        pytest.skip("no shipped demo model in this tree")
    tuner = DTreeTuner()
    tuner.plan(HTML, FACTS)
    assert tuner.model_path_ == str(shipped_model_path())


def test_unknown_sla_is_refused():
    with pytest.raises(ValueError, match="sla"):
        DTreeTuner("cheapest")
