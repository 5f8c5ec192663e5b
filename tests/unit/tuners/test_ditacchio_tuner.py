"""The Di Tacchio tuners on plain snapshots: plan, slow start, the channel states, cores, fixed values."""

from __future__ import annotations

import pytest

from dtune.accounting import PartitionView, Snapshot
from dtune.netfacts import NetworkFacts
from dtune.tuners import make_tuner
from dtune.tuners.ditacchio import DiTacchioConstants, DiTacchioTuner

MB = 1_000_000
FACTS = NetworkFacts(rtt=0.040, bandwidth=125e6, tcp_buffer=512 * 1024, how={"rtt": "given"})


class Clock:
    """CPU seconds the tuner reads, advanced by hand."""

    def __init__(self) -> None:
        self.cpu = 0.0

    def __call__(self) -> float:
        return self.cpu


def snap(t: float, nbytes: int, total: int, parts: dict[str, tuple[int, int, int, int]],
         joules: float | None = None) -> Snapshot:
    """parts: name → (bytes, bytes_total, files_done, files_total)."""
    views = {n: PartitionView(bytes=b, bytes_resumed=0, bytes_total=bt, rate=0.0, eta=None, files_total=ft,
                              files_done=fd, lanes=0, params={}) for n, (b, bt, fd, ft) in parts.items()}
    return Snapshot(elapsed=t, bytes=nbytes, bytes_resumed=0, bytes_total=total, rate=0.0, rate_inst=0.0,
                    eta=None, files_total=0, files_done=0, files_skipped=0, files_failed=0, retries=0,
                    connections=0, rtt=0.040, partitions=views,
                    energy=None if joules is None else {"joules": joules, "watts": 0.0, "kind": "estimated"})


def one_group(t: float, nbytes: int, total: int = 1000 * MB, joules: float | None = None) -> Snapshot:
    return snap(t, nbytes, total, {"small": (nbytes, total, 0, 10_000)}, joules)


def make(sla: str = "max-throughput", cores: int = 2, **kw) -> tuple[DiTacchioTuner, Clock]:
    clock = Clock()
    return DiTacchioTuner(sla, cpu_time=clock, cores=lambda: cores, **kw), clock


def test_plan_takes_groups_and_pp_from_the_initial_rule_with_p_1():
    tuner, _ = make()
    plan = tuner.plan([100_000] * 1000, FACTS)
    # one window-limited stream: 512 KiB / 40 ms = 13.1 MB/s → ceil(125 / 13.1) = 10 groups
    assert plan.params == {"small": plan.params["small"]}
    assert (plan.params["small"].cc, plan.params["small"].p, plan.params["small"].pp) == (10, 1, 32)
    assert plan.params["small"].cpu_num == 2
    assert "reference 30 s" in plan.notes[0]


def test_groups_are_split_over_size_partitions_by_bytes():
    tuner, _ = make()
    sizes = [100_000] * 500 + [100 * MB] * 4      # 50 MB of small files, 400 MB of large ones
    plan = tuner.plan(sizes, FACTS)
    assert set(plan.params) == {"small", "large"}
    assert plan.params["small"].cc + plan.params["large"].cc == 10
    assert plan.params["large"].cc > plan.params["small"].cc
    assert plan.params["large"].pp >= 2               # split files keep two ranges in flight


def test_slow_start_once_then_increase_warning_recovery():
    k = DiTacchioConstants(interval=5.0)
    tuner, _ = make(constants=k)
    tuner.plan([100_000] * 10_000, FACTS)
    assert tuner.update(0.0, one_group(0, 0)) is None             # marks only
    assert tuner.update(1.0, one_group(1, 10 * MB)) is None       # between intervals nothing moves
    d = tuner.update(5.0, one_group(5, 50 * MB))                  # 10 MB/s on a 125 MB/s link
    assert d is not None and "slow start" in d.reason
    assert d.params["small"].cc == 32                             # min(10·125/10, 32)
    assert tuner.update(10.0, one_group(10, 150 * MB)) is None    # first reading sets the reference
    d = tuner.update(15.0, one_group(15, 350 * MB))               # 40 MB/s ≫ 20 MB/s: INCREASE (capped)
    assert tuner.machine_.state_ == "INCREASE"
    assert d is None or d.params["small"].cc == 32
    tuner.update(20.0, one_group(20, 400 * MB))                   # 10 MB/s: WARNING
    assert tuner.machine_.state_ == "WARNING"
    d = tuner.update(25.0, one_group(25, 450 * MB))               # still low: RECOVERY, step back by 6
    assert tuner.machine_.state_ == "RECOVERY"
    assert d is not None and d.params["small"].cc == 26 and "RECOVERY" in d.reason


def test_energy_variant_steps_on_predicted_energy_from_the_meter():
    tuner, _ = make("min-energy")
    tuner.plan([100_000] * 10_000, FACTS)
    tuner.update(0.0, one_group(0, 0, joules=0.0))
    tuner.update(5.0, one_group(5, 100 * MB, joules=50.0))        # slow start
    tuner.update(10.0, one_group(10, 200 * MB, joules=100.0))     # reference: 10 W × 800 MB / 20 MB/s = 400 J
    ref = tuner.machine_.ref_
    assert ref == pytest.approx(10.0 * 800 * MB / (20 * MB))
    before = tuner.machine_.groups_
    d = tuner.update(15.0, one_group(15, 400 * MB, joules=150.0))  # 10 W × 600 MB / 40 MB/s = 150 J: better
    assert tuner.machine_.state_ == "INCREASE"
    assert d is None or "J predicted" in d.reason
    assert tuner.machine_.groups_ == min(32, before + 6)


def test_energy_variant_without_a_meter_reads_throughput_and_says_so():
    tuner, _ = make("min-energy")
    tuner.plan([100_000] * 10_000, FACTS)
    tuner.update(0.0, one_group(0, 0))
    tuner.update(5.0, one_group(5, 100 * MB))
    reasons = tuner._interval(10.0, one_group(10, 200 * MB))
    assert "no energy reading" in reasons[0]


def test_cores_follow_the_process_cpu_load_every_second():
    tuner, clock = make(cores=4)
    tuner.plan([100_000] * 10_000, FACTS)
    assert tuner.cores_ == 4
    tuner.update(0.0, one_group(0, 0))
    clock.cpu = 0.2                                               # 0.2 CPU-s over 1 s on 4 cores: load 0.05
    d = tuner.update(1.0, one_group(1, MB))
    assert d is not None and d.params["small"].cpu_num == 3 and "cores 4 → 3" in d.reason
    clock.cpu = 0.4
    d = tuner.update(2.0, one_group(2, 2 * MB))                   # 0.2/3 < 0.35, but only > 2 cores go
    assert d is not None and d.params["small"].cpu_num == 2
    clock.cpu = 0.6
    assert tuner.update(3.0, one_group(3, 3 * MB)) is None        # 2 cores: never fewer
    clock.cpu = 2.4                                               # 1.8 CPU-s on 2 cores: load 0.9
    d = tuner.update(4.0, one_group(4, 4 * MB))
    assert d is not None and d.params["small"].cpu_num == 3


def test_energy_variant_removes_cores_below_030_only():
    tput, c1 = make(cores=4)
    energy, c2 = make("min-energy", cores=4)
    for tuner, clock in ((tput, c1), (energy, c2)):
        tuner.plan([100_000] * 10_000, FACTS)
        tuner.update(0.0, one_group(0, 0, joules=0.0))
        clock.cpu = 1.3                                           # load 1.3 / 4 = 0.325
        tuner.update(1.0, one_group(1, MB, joules=1.0))
    assert tput.cores_ == 3 and energy.cores_ == 4


def test_explicit_cc_and_pp_are_never_changed():
    tuner, _ = make(fixed={"cc": 3, "pp": 2})
    plan = tuner.plan([100_000] * 10_000, FACTS)
    assert (plan.params["small"].cc, plan.params["small"].pp) == (3, 2)
    tuner.update(0.0, one_group(0, 0))
    for t, b in ((5, 10), (10, 100), (15, 400), (20, 410), (25, 420)):
        d = tuner.update(float(t), one_group(t, b * MB))
        assert d is None or (d.params["small"].cc, d.params["small"].pp) == (3, 2)


def test_a_finished_partition_hands_its_groups_to_the_others():
    tuner, _ = make()
    plan = tuner.plan([100_000] * 500 + [100 * MB] * 4, FACTS)
    small_total = sum([100_000] * 500)
    tuner.update(0.0, snap(0, 0, 0, {"small": (0, small_total, 0, 500), "large": (0, 400 * MB, 0, 4)}))
    d = tuner.update(1.0, snap(1, 0, 0, {"small": (small_total, small_total, 500, 500),
                                         "large": (10 * MB, 400 * MB, 0, 4)}))
    assert d is not None
    assert d.params["small"].cc == 0 and d.params["large"].cc == sum(p.cc for p in plan.params.values())


def test_make_tuner_builds_both_variants_with_their_names():
    assert make_tuner("ditacchio-max", fixed={}, max_cc=16, max_partitions=2).name == "ditacchio-max"
    t = make_tuner("ditacchio-energy", fixed={}, max_cc=16, max_partitions=2)
    assert t.name == "ditacchio-energy" and t.get_params()["sla"] == "min-energy"
    with pytest.raises(ValueError):
        DiTacchioTuner("fastest")
