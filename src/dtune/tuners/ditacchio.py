"""Baselines after Di Tacchio et al. (CLOUD 2019), as ALGORITHMS.md §2.6 describes them.

Pure state machines: fed one throughput (or predicted energy) per interval,
they answer the next channel count; ``cores_step`` answers the next core
count from the CPU load. Nothing here reads a clock or the system.

Reading of the text where it is silent (documented, configurable):
- ``ref`` is the value at the last change of the channel count; a reading
  above ``(1+β)·ref`` (below ``(1−β)·ref`` for energy, where lower is better)
  is an improvement: take another step and make it the new ``ref``;
- a reading below ``(1−α)·ref`` (above ``(1+α)·ref`` for energy) puts the
  machine in WARNING; a second one in a row steps back by ``Δcc``
  (RECOVERY) and makes that reading the new ``ref``;
- in between the machine holds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

INCREASE, WARNING, RECOVERY = "INCREASE", "WARNING", "RECOVERY"


@dataclass(frozen=True, slots=True)
class DiTacchioConstants:
    alpha: float = 0.05
    beta: float = 0.05
    step_cc: int = 6
    max_pp: int = 32
    max_channels: int = 32
    interval: float = 5.0        # reference 30 s; shortened for minute-long testbed transfers
    ewma_new: float = 0.8        # weight of the newest interval in the throughput EWMA
    load_add: float = 0.8        # CPU load above this adds a core
    load_remove_tput: float = 0.35
    load_remove_energy: float = 0.30
    min_cores: int = 2           # cores are removed only while more than this remain


DEFAULT = DiTacchioConstants()


def initial_parameters(bandwidth: float, rtt: float, buf: int, avg_file: float,
                       k: DiTacchioConstants = DEFAULT) -> tuple[int, int]:
    """(channels, pp): ``numCh = min(ceil(BW / (buf·8/RTT)), maxCh)``, ``pp = min(maxPP, ceil(BDP/avg))``.

    ``bandwidth`` in bytes/s, ``rtt`` in seconds, ``buf`` in bytes.
    """
    per_stream = buf / max(rtt, 1e-6)                  # bytes/s one window allows
    channels = min(math.ceil(bandwidth / per_stream), k.max_channels)
    pp = min(k.max_pp, math.ceil(bandwidth * rtt / max(avg_file, 1.0)))
    return max(1, channels), max(1, pp)


def split_channels(channels: int, group_bytes: dict[str, int]) -> dict[str, int]:
    """Channels over file groups by their share of bytes (at least one each, largest remainders)."""
    total = sum(group_bytes.values()) or 1
    names = list(group_bytes)
    if channels <= len(names):
        ranked = sorted(names, key=lambda n: -group_bytes[n])
        return {n: (1 if n in ranked[:channels] else 0) for n in names}
    exact = {n: channels * group_bytes[n] / total for n in names}
    alloc = {n: max(1, math.floor(exact[n])) for n in names}
    while sum(alloc.values()) > channels:
        n = max((x for x in names if alloc[x] > 1), key=lambda x: alloc[x] - exact[x])
        alloc[n] -= 1
    while sum(alloc.values()) < channels:
        n = max(names, key=lambda x: exact[x] - alloc[x])
        alloc[n] += 1
    return alloc


class ChannelMachine:
    """INCREASE / WARNING / RECOVERY over the channel count.

    ``higher_is_better`` is True for throughput, False for predicted energy.
    """

    def __init__(self, channels: int, *, higher_is_better: bool = True,
                 k: DiTacchioConstants = DEFAULT) -> None:
        self.k = k
        self.higher = higher_is_better
        self.channels_ = channels
        self.state_ = INCREASE
        self.ref_: float | None = None
        self.smoothed_: float | None = None

    def slow_start(self, bandwidth: float, throughput: float) -> int:
        """After the first interval: ``numCh = min(numCh·BW/lastThroughput, maxCh)``."""
        if throughput > 0:
            self.channels_ = max(1, min(self.k.max_channels,
                                        math.ceil(self.channels_ * bandwidth / throughput)))
        return self.channels_

    def step(self, value: float) -> tuple[int, str]:
        """One interval's reading → (channels, reason)."""
        k = self.k
        if self.smoothed_ is None or not self.higher:
            smoothed = value  # energy predictions are already averages
        else:
            smoothed = k.ewma_new * value + (1 - k.ewma_new) * self.smoothed_
        self.smoothed_ = smoothed
        if self.ref_ is None:
            self.ref_ = smoothed
            return self.channels_, f"{self.state_}: first reading {smoothed:.4g}"
        better = smoothed > (1 + k.beta) * self.ref_ if self.higher else smoothed < (1 - k.beta) * self.ref_
        worse = smoothed < (1 - k.alpha) * self.ref_ if self.higher else smoothed > (1 + k.alpha) * self.ref_
        if better:
            reason = f"INCREASE: {smoothed:.4g} beats {self.ref_:.4g} by > β"
            self.state_ = INCREASE
            self.ref_ = smoothed
            self.channels_ = min(k.max_channels, self.channels_ + k.step_cc)
            return self.channels_, reason
        if worse:
            if self.state_ == WARNING:
                self.state_ = RECOVERY
                self.ref_ = smoothed
                self.channels_ = max(1, self.channels_ - k.step_cc)
                return self.channels_, f"RECOVERY: {smoothed:.4g} still worse than ref by > α"
            self.state_ = WARNING
            return self.channels_, f"WARNING: {smoothed:.4g} worse than ref {self.ref_:.4g} by > α"
        return self.channels_, f"{self.state_}: hold at {smoothed:.4g}"


def predicted_energy(avg_power: float, remaining_bytes: int, avg_throughput: float) -> float:
    """Joules still to spend: ``average power × remaining bytes / average throughput``."""
    if avg_throughput <= 0:
        return math.inf
    return avg_power * remaining_bytes / avg_throughput


def cores_step(cores: int, load: float, available: int, *, energy: bool,
               k: DiTacchioConstants = DEFAULT) -> int:
    """Checked every second: load > 0.8 adds a core; a low load removes one while > 2 remain."""
    low = k.load_remove_energy if energy else k.load_remove_tput
    if load > k.load_add and cores < available:
        return cores + 1
    if load < low and cores > k.min_cores:
        return cores - 1
    return cores
