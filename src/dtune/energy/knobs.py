"""Kernel-layer knobs: cpu_num (CPU affinity) and cpu_freq (cpufreq limits) — docs/algorithms.md §2.5.

cpu_num  The transfer's threads are pinned to the first n CPUs the process
         was allowed when the knobs were created (``sched_setaffinity`` on
         every thread in ``/proc/self/task``; new threads inherit it). The
         other cores stay online — the paper's hot-plugging is not done —
         so this limits where dtune runs, not what the machine powers.
cpu_freq A frequency in kHz (the unit of cpufreq's files) is clamped to
         ``cpuinfo_min_freq..cpuinfo_max_freq`` and written to every cpufreq
         policy: to ``scaling_setspeed`` where the governor is ``userspace``,
         otherwise to ``scaling_max_freq`` (a ceiling the governor keeps
         under). This is machine-wide; ``restore()`` writes back what was there.

Where a knob cannot be turned — no cpufreq directory (virtual machines),
files not writable, no ``sched_setaffinity`` — the result says
``applied=False`` with the reason, and nothing pretends otherwise.
Both roots are parameters so that tests run on fake sysfs trees.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

SYSFS_CPU = "/sys/devices/system/cpu"
PROC = "/proc"


@dataclass(frozen=True, slots=True)
class KnobResult:
    """The outcome of one knob change: ``value`` is what is in force after it (cores, kHz)."""

    knob: str                 # "cpu_num" or "cpu_freq"
    applied: bool
    requested: int | None
    value: int | None
    reason: str

    def __str__(self) -> str:
        state = f"applied {self.value}" if self.applied else "not applied"
        return f"{self.knob}={self.requested}: {state} ({self.reason})"


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


class CpuKnobs:
    """cpu_num and cpu_freq for this process, with undo.

    sysfs_root   where cpufreq lives (``/sys/devices/system/cpu``)
    proc_root    where this process's threads are listed (``/proc``)
    getaffinity, setaffinity
                 ``os.sched_getaffinity`` / ``os.sched_setaffinity`` (or stand-ins)

    The CPUs allowed at construction are remembered, so cpu_num can grow
    back after it was lowered.
    """

    def __init__(self, *, sysfs_root: str | Path = SYSFS_CPU, proc_root: str | Path = PROC,
                 getaffinity: Callable[[int], Iterable[int]] | None = None,
                 setaffinity: Callable[[int, Iterable[int]], None] | None = None) -> None:
        self.sysfs_root = str(sysfs_root)
        self.proc_root = str(proc_root)
        self._get = getaffinity or getattr(os, "sched_getaffinity", None)
        self._set = setaffinity or getattr(os, "sched_setaffinity", None)
        self.allowed_: list[int] = sorted(self._get(0)) if self._get else []
        self._saved: dict[Path, str] = {}

    def get_params(self) -> dict:
        return {"sysfs_root": self.sysfs_root, "proc_root": self.proc_root}

    # -- cpu_num ----------------------------------------------------------------------

    def _threads(self) -> list[int]:
        try:
            return sorted(int(t) for t in os.listdir(Path(self.proc_root) / "self" / "task") if t.isdigit())
        except OSError:
            return []

    def apply_cpu_num(self, n: int) -> KnobResult:
        """Pin this process to the first ``n`` allowed CPUs."""
        if self._set is None or not self.allowed_:
            return KnobResult("cpu_num", False, n, None, "this platform has no sched_setaffinity")
        if not isinstance(n, int) or n < 1:
            return KnobResult("cpu_num", False, n, None, f"cpu_num must be an integer >= 1, got {n!r}")
        cpus = self.allowed_[:n]
        try:
            self._set(0, cpus)
        except OSError as exc:
            return KnobResult("cpu_num", False, n, None, f"sched_setaffinity refused: {exc}")
        others = 0
        for tid in self._threads():
            try:
                self._set(tid, cpus)
                others += 1
            except OSError:
                pass   # a thread that ended meanwhile
        why = f"affinity CPUs {','.join(map(str, cpus))}"
        if n > len(self.allowed_):
            why += f"; only {len(self.allowed_)} CPUs are allowed to this process"
        if others:
            why += f" on {others} thread{'' if others == 1 else 's'}"
        return KnobResult("cpu_num", True, n, len(cpus), why)

    # -- cpu_freq ---------------------------------------------------------------------

    def policies(self) -> list[Path]:
        """cpufreq policy directories (``cpufreq/policy*``, else ``cpu*/cpufreq``)."""
        root = Path(self.sysfs_root)
        found = sorted(p for p in (root / "cpufreq").glob("policy*") if p.is_dir())
        if not found:
            found = sorted(p for p in root.glob("cpu[0-9]*/cpufreq") if p.is_dir())
        return found

    def apply_cpu_freq(self, khz: int) -> KnobResult:
        """Limit (or, under the userspace governor, set) the CPU frequency to ``khz``."""
        if not isinstance(khz, int) or khz <= 0:
            return KnobResult("cpu_freq", False, khz, None, f"cpu_freq must be a positive integer kHz, got {khz!r}")
        policies = self.policies()
        if not policies:
            return KnobResult("cpu_freq", False, khz, None,
                              f"no cpufreq under {self.sysfs_root} (virtual machine, or no cpufreq driver)")
        written, failed, value = [], [], None
        for pol in policies:
            lo, hi = _read(pol / "cpuinfo_min_freq"), _read(pol / "cpuinfo_max_freq")
            target = khz
            if hi and hi.isdigit():
                target = min(target, int(hi))
            if lo and lo.isdigit():
                target = max(target, int(lo))
            userspace = _read(pol / "scaling_governor") == "userspace" and (pol / "scaling_setspeed").exists()
            path = pol / ("scaling_setspeed" if userspace else "scaling_max_freq")
            old = _read(path)
            if old is None:
                failed.append(f"{path.name} missing or unreadable in {pol}")
                continue
            try:
                path.write_text(f"{target}\n")
            except OSError as exc:
                failed.append(f"{path} not writable: {exc.strerror or exc}")
                continue
            self._saved.setdefault(path, old)
            written.append(path)
            value = target
        if not written:
            return KnobResult("cpu_freq", False, khz, None, "; ".join(failed))
        why = f"wrote {value} kHz to {len(written)} of {len(policies)} policies ({written[0].name})"
        if value != khz:
            why += f"; {khz} kHz is outside the CPU's range"
        if failed:
            why += "; " + "; ".join(failed)
        return KnobResult("cpu_freq", True, khz, value, why)

    def freq_ratio(self) -> float | None:
        """Mean ``scaling_cur_freq / cpuinfo_max_freq`` over the policies; None without cpufreq."""
        ratios = []
        for pol in self.policies():
            cur, top = _read(pol / "scaling_cur_freq"), _read(pol / "cpuinfo_max_freq")
            if cur and top and cur.isdigit() and top.isdigit() and int(top) > 0:
                ratios.append(int(cur) / int(top))
        return sum(ratios) / len(ratios) if ratios else None

    # -- undo -------------------------------------------------------------------------

    def restore(self) -> list[KnobResult]:
        """Put back the affinity and every cpufreq file this object changed."""
        out = []
        if self._set is not None and self.allowed_:
            out.append(self.apply_cpu_num(len(self.allowed_)))
        for path, old in list(self._saved.items()):
            try:
                path.write_text(f"{old}\n")
                out.append(KnobResult("cpu_freq", True, None, int(old) if old.isdigit() else None,
                                      f"restored {path}"))
                del self._saved[path]
            except OSError as exc:
                out.append(KnobResult("cpu_freq", False, None, None, f"could not restore {path}: {exc}"))
        return out

    def __repr__(self) -> str:
        return (f"<CpuKnobs: {len(self.allowed_)} CPUs allowed, {len(self.policies())} cpufreq policies, "
                f"{len(self._saved)} files changed>")


_default: CpuKnobs | None = None


def default_knobs() -> CpuKnobs:
    """The process-wide knobs on the real sysfs (created on first use)."""
    global _default
    if _default is None:
        _default = CpuKnobs()
    return _default


def apply_cpu_num(n: int, *, knobs: CpuKnobs | None = None) -> KnobResult:
    """Pin dtune to the first ``n`` CPUs it may use; see ``CpuKnobs.apply_cpu_num``."""
    return (knobs or default_knobs()).apply_cpu_num(n)


def apply_cpu_freq(khz: int, *, knobs: CpuKnobs | None = None) -> KnobResult:
    """Cap (or set) the CPU frequency in kHz; see ``CpuKnobs.apply_cpu_freq``."""
    return (knobs or default_knobs()).apply_cpu_freq(khz)
