"""Di Tacchio baselines (docs/algorithms.md §2.6): the pure machines on plain numbers."""

from __future__ import annotations

import math

from dtune.tuners.ditacchio import (
    INCREASE,
    RECOVERY,
    WARNING,
    GroupMachine,
    cores_step,
    initial_parameters,
    predicted_energy,
    split_groups,
)


def test_initial_groups_fill_the_link_with_window_limited_streams():
    # 1 Gbit/s, 40 ms, 512 KiB: one stream ≤ 512 KiB / 40 ms = 13.1 MB/s → ceil(125/13.1) = 10
    groups, pp = initial_parameters(125e6, 0.040, 512 * 1024, 100_000)
    assert groups == 10
    assert pp == 32  # ceil(5e6 / 1e5) = 50, capped by maxPP 32
    assert initial_parameters(125e6, 0.040, 512 * 1024, 200e6) == (10, 1)
    assert initial_parameters(1.25e9, 0.001, 64 * 1024, 1e6)[0] == 20
    assert initial_parameters(1e12, 0.5, 1024, 1e6)[0] == 32  # capped at max groups


def test_groups_split_by_bytes_with_at_least_one_each():
    assert split_groups(10, {"small": 100, "large": 900}) == {"small": 1, "large": 9}
    assert split_groups(10, {"a": 1, "b": 1}) == {"a": 5, "b": 5}
    assert split_groups(1, {"a": 1, "b": 9}) == {"a": 0, "b": 1}
    assert sum(split_groups(7, {"a": 3, "b": 3, "c": 3}).values()) == 7


def test_throughput_machine_increases_warns_then_recovers():
    m = GroupMachine(10)
    assert m.step(100.0)[0] == 10                      # first reading sets ref
    groups, why = m.step(200.0)                      # EWMA 0.8·200 + 0.2·100 = 180 > 1.05·100
    assert groups == 16 and m.state_ == INCREASE and "INCREASE" in why
    m.step(180.0)                                      # within the bands: hold
    assert m.groups_ == 16
    groups, _ = m.step(100.0)                        # 0.8·100 + 0.2·180 = 116 < 0.95·180
    assert groups == 16 and m.state_ == WARNING
    groups, _ = m.step(100.0)                        # still low → step back
    assert groups == 10 and m.state_ == RECOVERY


def test_energy_machine_treats_lower_as_better():
    m = GroupMachine(10, higher_is_better=False)
    m.step(1000.0)
    assert m.step(900.0)[0] == 16                      # 10 % less energy predicted: more of the same
    m.step(1000.0)                                     # > 1.05·900: warning
    assert m.state_ == WARNING
    assert m.step(1000.0)[0] == 10


def test_slow_start_scales_groups_by_the_unused_bandwidth():
    m = GroupMachine(4)
    assert m.slow_start(bandwidth=100.0, throughput=25.0) == 16
    assert GroupMachine(20).slow_start(100.0, 10.0) == 32  # capped


def test_predicted_energy():
    assert predicted_energy(50.0, 1000, 100.0) == 500.0
    assert math.isinf(predicted_energy(50.0, 1000, 0.0))


def test_cores_follow_the_load():
    assert cores_step(2, 0.9, 8, energy=False) == 3
    assert cores_step(8, 0.9, 8, energy=False) == 8      # none left to add
    assert cores_step(4, 0.32, 8, energy=False) == 3     # < 0.35 removes (max-throughput)
    assert cores_step(4, 0.32, 8, energy=True) == 4      # … but not under 0.30 (min-energy)
    assert cores_step(2, 0.1, 8, energy=True) == 2       # never below two
