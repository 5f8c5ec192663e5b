"""Energy: RAPL on a fake powercap tree (with a wrap), the CPU-time estimate, open_meter."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from dtune.energy import CpuEnergyEstimate, PowerModel, RaplReader, find_zones, open_meter, process_cpu_time

RANGE = 262_143_328_850   # a common max_energy_range_uj


def zone(root: Path, label: str, name: str, energy: int, top: int = RANGE) -> Path:
    d = root / label
    d.mkdir(parents=True)
    (d / "name").write_text(name + "\n")
    (d / "energy_uj").write_text(f"{energy}\n")
    (d / "max_energy_range_uj").write_text(f"{top}\n")
    return d


def set_energy(root: Path, label: str, energy: int) -> None:
    (root / label / "energy_uj").write_text(f"{energy}\n")


@pytest.fixture
def powercap(tmp_path: Path) -> Path:
    root = tmp_path / "powercap"
    (root / "intel-rapl").mkdir(parents=True)               # the control type, not a zone
    (root / "intel-rapl" / "enabled").write_text("1\n")
    zone(root, "intel-rapl:0", "package-0", 1_000_000)
    zone(root, "intel-rapl:0:0", "core", 500_000)           # part of the package: not added
    zone(root, "intel-rapl:0:1", "dram", 2_000_000)
    zone(root, "intel-rapl:1", "package-1", RANGE - 1_000_000)   # about to wrap
    zone(root, "intel-rapl:2", "psys", 9_000_000)           # the platform contains the packages: not added
    zone(root, "intel-rapl-mmio:0", "package-0", 7)         # the same package again: not added
    return root


class FakeTime:
    """A clock that only moves when sleep() is called; sleeping runs ``on_sleep``."""

    def __init__(self, on_sleep=None) -> None:
        self.now = 100.0
        self.on_sleep = on_sleep

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        if self.on_sleep:
            self.on_sleep(seconds)


def test_zones_are_package_and_dram_without_double_counting(powercap: Path) -> None:
    zones = find_zones(powercap)
    assert [(z.label, z.name) for z in zones] == [("intel-rapl:0", "package-0"), ("intel-rapl:0:1", "dram"),
                                                  ("intel-rapl:1", "package-1")]
    assert all(z.max_range_uj == RANGE for z in zones)


def test_mmio_zone_is_used_when_it_is_the_only_one(tmp_path: Path) -> None:
    zone(tmp_path, "intel-rapl-mmio:0", "package-0", 5)
    zone(tmp_path, "amd-rapl:0", "dram", 5)
    assert [z.label for z in find_zones(tmp_path)] == ["amd-rapl:0", "intel-rapl-mmio:0"]


def test_energy_across_a_counter_wrap(powercap: Path) -> None:
    t = FakeTime()
    meter = RaplReader(powercap, clock=t.clock, sleep=t.sleep)
    assert meter.available()[0]
    meter.start()
    t.now += 10
    set_energy(powercap, "intel-rapl:0", 31_000_000)        # +30 J
    set_energy(powercap, "intel-rapl:0:1", 7_000_000)       # +5 J
    set_energy(powercap, "intel-rapl:1", 4_000_000)         # wrapped: +1 J to the top, +4 J after
    r = meter.stop()
    assert r.kind == "measured" and r.seconds == 10
    assert r.parts == pytest.approx({"package-0": 30.0, "dram": 5.0, "package-1": 5.0})
    assert r.joules == r.gross_joules == pytest.approx(40.0)
    assert r.baseline_watts is None and r.watts == pytest.approx(4.0)


def test_sampling_folds_in_each_wrap(powercap: Path) -> None:
    t = FakeTime()
    meter = RaplReader(powercap, domains=("package",), clock=t.clock, sleep=t.sleep)
    meter.start()
    for _ in range(3):          # three full laps from RANGE − 1 J, each wrap seen by a sample
        set_energy(powercap, "intel-rapl:1", RANGE - 2_000_000)    # lower: wrapped, RANGE − 1 J on
        meter.sample()
        set_energy(powercap, "intel-rapl:1", RANGE - 1_000_000)    # + 1 J: back where it started
        meter.sample()
    r = meter.stop()
    assert r.parts["package-1"] == pytest.approx(3 * RANGE / 1e6, rel=1e-12)


def test_idle_baseline_is_subtracted_times_duration(powercap: Path) -> None:
    counters = {"intel-rapl:0": 1_000_000, "intel-rapl:0:1": 2_000_000, "intel-rapl:1": RANGE - 1_000_000}

    def burn(watts: dict[str, float], seconds: float) -> None:
        for label, w in watts.items():
            counters[label] = (counters[label] + int(w * seconds * 1e6)) % RANGE
            set_energy(powercap, label, counters[label])

    t = FakeTime(on_sleep=lambda s: burn({"intel-rapl:0": 10, "intel-rapl:0:1": 2, "intel-rapl:1": 8}, s))
    meter = RaplReader(powercap, clock=t.clock, sleep=t.sleep)
    assert meter.idle_baseline(2.0) == pytest.approx(20.0)          # 10 + 2 + 8 W idle, across the wrap
    meter.start()
    t.on_sleep = lambda s: burn({"intel-rapl:0": 25, "intel-rapl:0:1": 3, "intel-rapl:1": 8}, s)
    t.sleep(5.0)
    r = meter.stop()
    assert r.gross_joules == pytest.approx(36 * 5)
    assert r.joules == pytest.approx((36 - 20) * 5) and r.baseline_watts == pytest.approx(20.0)
    assert "idle baseline" in r.note


def test_baseline_never_makes_energy_negative(powercap: Path) -> None:
    t = FakeTime()
    meter = RaplReader(powercap, clock=t.clock, sleep=t.sleep)
    meter.baseline_watts_ = 50.0
    meter.start()
    t.now += 1
    assert meter.stop().joules == 0.0


def test_no_powercap_means_no_rapl(tmp_path: Path) -> None:
    ok, why = RaplReader(tmp_path / "missing").available()
    assert not ok and "no RAPL" in why
    ok, why = RaplReader(tmp_path).available()
    assert not ok and "no RAPL package/dram zone" in why


def test_unreadable_counters_make_rapl_unavailable(powercap: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    meter = RaplReader(powercap)

    def refuse() -> dict:
        raise PermissionError("Permission denied")

    monkeypatch.setattr(meter, "read", refuse)
    ok, why = meter.available()
    assert not ok and "root only" in why


def test_open_meter_prefers_rapl_and_falls_back_to_the_estimate(powercap: Path, tmp_path: Path) -> None:
    meter, why = open_meter(powercap)
    assert isinstance(meter, RaplReader) and meter.kind == "measured" and why.startswith("measured")
    meter, why = open_meter(tmp_path / "none")
    assert isinstance(meter, CpuEnergyEstimate) and meter.kind == "estimated"
    assert why.startswith("estimated from CPU time: no ")


@pytest.mark.parametrize(("active", "cpu_s", "ratio", "expected"), [
    (2, 3.0, 1.0, 2 * 2 * 10 + 8 * 3.0),            # idle 2 W × 2 cores × 10 s + 8 W × 3 CPU-s
    (1, 3.0, 1.0, 2 * 1 * 10 + 8 * 3.0),            # fewer cores: less static power
    (2, 3.0, 0.5, 2 * 2 * 10 + 8 * 3.0 * 0.125),    # half the clock: an eighth of the dynamic power (k = 3)
    (2, 0.0, None, 2 * 2 * 10),                     # idle; no cpufreq → f = f_max
])
def test_estimate_follows_the_power_model(active: int, cpu_s: float, ratio: float | None, expected: float) -> None:
    clock = iter([0.0, 10.0])
    tau = iter([5.0, 5.0 + cpu_s])
    est = CpuEnergyEstimate(clock=lambda: next(clock), cpu_time=lambda: next(tau),
                            active_cores=lambda: active, freq_ratio=lambda: ratio)
    assert est.idle_baseline(3.0) == 0.0
    est.start()
    r = est.stop()
    assert r.kind == "estimated" and r.seconds == 10
    assert r.joules == pytest.approx(expected) and r.gross_joules == r.joules
    assert r.parts["static"] == pytest.approx(2 * active * 10)
    assert ("f = f_max assumed" in r.note) == (ratio is None)


def test_estimate_charges_each_interval_at_the_cores_then_in_force() -> None:
    ticks = itertools.count(0.0, 10.0)
    tau = itertools.count(0.0, 1.0)
    cores = iter([4, 1, 1])
    est = CpuEnergyEstimate(PowerModel(p_idle_per_core=1.0, p_dyn_per_core=10.0, k=2.0),
                            clock=lambda: next(ticks), cpu_time=lambda: next(tau),
                            active_cores=lambda: next(cores), freq_ratio=lambda: 1.0)
    est.start()       # 4 cores
    est.sample()      # 10 s on 4 cores, 1 CPU-s; now 1 core
    r = est.stop()    # 10 s on 1 core, 1 CPU-s
    assert r.parts["static"] == pytest.approx(1.0 * 4 * 10 + 1.0 * 1 * 10)
    assert r.parts["dynamic"] == pytest.approx(10.0 * 2)


def test_power_model_steady_state() -> None:
    m = PowerModel()
    assert m.watts(active_cores=2, busy_cores=1, freq_ratio=1.0) == pytest.approx(2 * 2 + 8)
    assert m.joules(10, 5, 2, 0.5) == pytest.approx((40.0, 8 * 5 * 0.125))


def test_process_cpu_time_grows_with_work() -> None:
    before = process_cpu_time()
    sum(i * i for i in range(300_000))
    assert process_cpu_time() >= before
