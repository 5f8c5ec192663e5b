"""Kernel knobs on fake sysfs/proc trees: cpu_num by affinity, cpu_freq by cpufreq, never pretending."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from dtune.energy import CpuKnobs, KnobResult, apply_cpu_freq, apply_cpu_num


class Affinity:
    """Stand-ins for sched_getaffinity / sched_setaffinity that record the calls."""

    def __init__(self, cpus: set[int], refuse: bool = False) -> None:
        self.cpus = set(cpus)
        self.calls: list[tuple[int, list[int]]] = []
        self.refuse = refuse

    def get(self, pid: int) -> set[int]:
        return set(self.cpus)

    def set(self, pid: int, cpus) -> None:
        if self.refuse:
            raise PermissionError(1, "Operation not permitted")
        self.calls.append((pid, list(cpus)))


def policy(root: Path, n: int, *, governor: str = "schedutil", lo: int = 800_000, hi: int = 2_400_000,
           cur: int = 2_000_000, setspeed: bool = False) -> Path:
    d = root / "cpufreq" / f"policy{n}"
    d.mkdir(parents=True)
    for name, value in (("cpuinfo_min_freq", lo), ("cpuinfo_max_freq", hi), ("scaling_max_freq", hi),
                        ("scaling_min_freq", lo), ("scaling_cur_freq", cur), ("scaling_governor", governor)):
        (d / name).write_text(f"{value}\n")
    if setspeed:
        (d / "scaling_setspeed").write_text("<unsupported>\n" if governor != "userspace" else f"{cur}\n")
    return d


def proc(tmp_path: Path, tids: list[int]) -> Path:
    root = tmp_path / "proc"
    for tid in tids:
        (root / "self" / "task" / str(tid)).mkdir(parents=True)
    return root


def knobs(tmp_path: Path, aff: Affinity, tids: list[int] = ()) -> CpuKnobs:
    return CpuKnobs(sysfs_root=tmp_path / "cpu", proc_root=proc(tmp_path, list(tids)),
                    getaffinity=aff.get, setaffinity=aff.set)


def test_cpu_num_pins_every_thread_to_the_first_allowed_cpus(tmp_path: Path) -> None:
    aff = Affinity({3, 1, 5, 7})
    r = knobs(tmp_path, aff, tids=[100, 101]).apply_cpu_num(2)
    assert r == KnobResult("cpu_num", True, 2, 2, "affinity CPUs 1,3 on 2 threads")
    assert aff.calls == [(0, [1, 3]), (100, [1, 3]), (101, [1, 3])]


def test_cpu_num_can_grow_back_to_what_was_allowed(tmp_path: Path) -> None:
    aff = Affinity({0, 1, 2, 3})
    k = knobs(tmp_path, aff)
    k.apply_cpu_num(1)
    aff.cpus = {0}                          # the kernel now reports the narrowed set
    r = k.apply_cpu_num(3)
    assert r.applied and r.value == 3 and aff.calls[-1] == (0, [0, 1, 2])
    assert k.restore()[0].value == 4


@pytest.mark.parametrize(("n", "applied", "value", "why"), [
    (8, True, 2, "only 2 CPUs are allowed"),
    (0, False, None, "must be an integer >= 1"),
])
def test_cpu_num_out_of_range(tmp_path: Path, n: int, applied: bool, value: int | None, why: str) -> None:
    r = knobs(tmp_path, Affinity({0, 1})).apply_cpu_num(n)
    assert (r.applied, r.value) == (applied, value) and why in r.reason


def test_cpu_num_refused_by_the_kernel_is_reported(tmp_path: Path) -> None:
    r = knobs(tmp_path, Affinity({0, 1}, refuse=True)).apply_cpu_num(1)
    assert not r.applied and "sched_setaffinity refused" in r.reason


def test_no_cpufreq_is_said_plainly(tmp_path: Path) -> None:
    (tmp_path / "cpu" / "cpu0").mkdir(parents=True)      # like these VMs: cpu dirs, no cpufreq
    k = knobs(tmp_path, Affinity({0}))
    r = k.apply_cpu_freq(1_200_000)
    assert not r.applied and r.value is None and "no cpufreq" in r.reason
    assert k.freq_ratio() is None


def test_cpu_freq_caps_scaling_max_freq_on_every_policy(tmp_path: Path) -> None:
    root = tmp_path / "cpu"
    p0, p1 = policy(root, 0), policy(root, 2)
    k = knobs(tmp_path, Affinity({0}))
    r = k.apply_cpu_freq(1_200_000)
    assert r.applied and r.value == 1_200_000 and "2 of 2 policies (scaling_max_freq)" in r.reason
    assert (p0 / "scaling_max_freq").read_text() == "1200000\n" == (p1 / "scaling_max_freq").read_text()
    restored = k.restore()
    assert all(x.applied for x in restored if x.knob == "cpu_freq")
    assert (p0 / "scaling_max_freq").read_text() == "2400000\n"


def test_cpu_freq_is_clamped_to_the_cpus_range(tmp_path: Path) -> None:
    p0 = policy(tmp_path / "cpu", 0)
    r = knobs(tmp_path, Affinity({0})).apply_cpu_freq(5_000_000)
    assert r.applied and r.value == 2_400_000 and "outside the CPU's range" in r.reason
    assert (p0 / "scaling_max_freq").read_text() == "2400000\n"


def test_userspace_governor_gets_scaling_setspeed(tmp_path: Path) -> None:
    p0 = policy(tmp_path / "cpu", 0, governor="userspace", setspeed=True)
    r = knobs(tmp_path, Affinity({0})).apply_cpu_freq(1_600_000)
    assert r.applied and "scaling_setspeed" in r.reason
    assert (p0 / "scaling_setspeed").read_text() == "1600000\n"
    assert (p0 / "scaling_max_freq").read_text() == "2400000\n"


def test_per_cpu_cpufreq_dirs_work_without_policy_dirs(tmp_path: Path) -> None:
    d = tmp_path / "cpu" / "cpu0" / "cpufreq"
    d.mkdir(parents=True)
    (d / "scaling_max_freq").write_text("3000000\n")
    r = knobs(tmp_path, Affinity({0})).apply_cpu_freq(2_000_000)
    assert r.applied and (d / "scaling_max_freq").read_text() == "2000000\n"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes read-only files anyway")
def test_unwritable_cpufreq_is_not_applied(tmp_path: Path) -> None:
    p0 = policy(tmp_path / "cpu", 0)
    (p0 / "scaling_max_freq").chmod(0o444)
    r = knobs(tmp_path, Affinity({0})).apply_cpu_freq(1_200_000)
    assert not r.applied and "not writable" in r.reason


def test_read_only_sysfs_is_not_applied_even_as_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    policy(tmp_path / "cpu", 0)

    def read_only(self: Path, text: str) -> int:     # sysfs mounted read-only, as in many containers
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(Path, "write_text", read_only)
    r = knobs(tmp_path, Affinity({0})).apply_cpu_freq(1_200_000)
    assert not r.applied and r.value is None and "not writable: Read-only file system" in r.reason


def test_missing_cpufreq_file_is_not_applied(tmp_path: Path) -> None:
    p0 = policy(tmp_path / "cpu", 0)
    (p0 / "scaling_max_freq").unlink()
    r = knobs(tmp_path, Affinity({0})).apply_cpu_freq(1_200_000)
    assert not r.applied and "scaling_max_freq missing or unreadable" in r.reason


def test_freq_ratio_reads_current_over_maximum(tmp_path: Path) -> None:
    policy(tmp_path / "cpu", 0, cur=1_200_000)
    policy(tmp_path / "cpu", 1, cur=2_400_000)
    assert knobs(tmp_path, Affinity({0})).freq_ratio() == pytest.approx(0.75)


def test_module_functions_take_the_knobs_to_use(tmp_path: Path) -> None:
    aff = Affinity({0, 1})
    k = knobs(tmp_path, aff)
    assert apply_cpu_num(1, knobs=k).applied and aff.calls[0] == (0, [0])
    assert not apply_cpu_freq(1_000_000, knobs=k).applied
    assert str(apply_cpu_freq(1_000_000, knobs=k)).startswith("cpu_freq=1000000: not applied (no cpufreq")
