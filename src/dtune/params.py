"""Transfer parameters (cc, p, pp, …) and engine options, each declared once.

Vocabulary (see ALGORITHMS.md): **cc** files in flight (channel groups),
**p** TCP streams (channels) per file, **pp** requests outstanding on one
channel. A tuner returns ``Params`` (or one per partition); the engine
applies them while running.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

MIB = 1 << 20
DEFAULT_SPLIT_THRESHOLD = 2 * MIB


@dataclass(frozen=True, slots=True)
class Params:
    cc: int = 8
    p: int = 1
    pp: int = 4
    cpu_num: int | None = None   # applied by the energy module; None = not applied
    cpu_freq: int | None = None  # kHz; None = not applied
    # lanes (connections) per replica in each group, for multi-source transfers;
    # None = all p lanes on the primary URL. When given, p == sum(lanes).
    lanes: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.lanes is not None:
            if any(n < 0 for n in self.lanes) or sum(self.lanes) < 1:
                raise ValueError(f"lanes must be >= 0 with at least one lane, got {self.lanes!r}")
            if sum(self.lanes) != self.p:
                raise ValueError(f"p ({self.p}) must equal the sum of lanes {self.lanes!r}")
        for name, least in (("cc", 0), ("p", 1), ("pp", 1)):  # cc=0 pauses a partition
            value = getattr(self, name)
            if not isinstance(value, int) or value < least:
                raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")

    def with_(self, **changes: object) -> Params:
        return replace(self, **changes)

    def spread(self, lanes: tuple[int, ...] | list[int]) -> Params:
        """The same parameters with ``lanes`` per replica (p becomes their sum)."""
        lanes = tuple(lanes)
        return replace(self, p=sum(lanes), lanes=lanes)

    def lanes_per_replica(self) -> tuple[int, ...]:
        return self.lanes if self.lanes is not None else (self.p,)

    def as_dict(self) -> dict[str, int | None]:
        return asdict(self)

    def __str__(self) -> str:
        lanes = "" if self.lanes is None else f" lanes={list(self.lanes)}"
        return f"cc={self.cc} p={self.p} pp={self.pp}{lanes}"


@dataclass(frozen=True, slots=True)
class EngineOptions:
    """Engine tunables with the reason for each default.

    Range sizing: a file larger than ``split_threshold`` is cut into ranges
    as channels ask for work. Each new range is
    ``clamp(unassigned / (2·p·pp), min_range, max_range)`` bytes of what is
    still unassigned, so ranges start large (few requests, long TCP
    bursts) and shrink towards the end of the file, letting all p streams
    finish together instead of waiting on one long tail range.
    """

    split_threshold: int = DEFAULT_SPLIT_THRESHOLD  # below this one request fetches the whole file
    min_range: int = 1 * MIB          # ≥ 1 MiB keeps per-request overhead < 1 % at 1 Gbit/s·40 ms
    max_range: int = 64 * MIB         # bounds what a stalled channel can hold up
    first_range: int = 1 * MIB        # first request for a file of unknown size
    connect_timeout: float = 15.0     # curl's default is 300 s, aria2c's 60 s: data transfers fail fast and retry
    stall_timeout: float = 30.0       # no byte for this long on a busy channel → drop it, re-queue its ranges
    retries: int = 5                  # consecutive failures of one file without progress before giving up
    backoff_base: float = 0.5         # seconds; doubles per failure, with jitter
    backoff_max: float = 30.0
    retry_after_max: float = 300.0    # longest Retry-After we honour
    max_redirects: int = 5
    max_restarts: int = 3             # the file changed on the server this often: give up on it
    journal_every: int = 1 * MIB      # journal progress inside a range at least this often (resume granularity)
    sync_interval: float = 5.0        # seconds between fdatasync of open part files and journals
    replica_failures: int = 3         # consecutive failures that bench a replica (multi-source)
    replica_bench: float = 5.0        # first bench, seconds; doubles each time, re-probed after
    replica_bench_max: float = 60.0


def default_params(file_count: int, avg_size: float | None, *, budget: int = 16) -> Params:
    """dtune's defaults before a tuner refines them.

    ``budget`` TCP connections in total: many small files get many channel
    groups with pipelining; few large files get the connections as
    parallel streams. (The heuristic tuner replaces this with Algorithm 1.)
    """
    files = max(1, file_count)
    cc = min(budget, files)
    large = avg_size is None or avg_size > 2 * DEFAULT_SPLIT_THRESHOLD
    p = max(1, budget // cc) if large else 1
    pp = 2 if large else 8
    return Params(cc=cc, p=min(p, budget), pp=pp)


def ceil_div(a: float, b: float) -> int:
    return int(math.ceil(a / b))
