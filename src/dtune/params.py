"""Transfer parameters (cc, p, pp, …): the vocabulary tuners and the engine share.

**cc** is the number of groups of a partition (files worked on at once),
**p** the lanes (TCP connections) per group, **pp** the requests in flight
per lane (docs/architecture.md, "Words"). A tuner returns ``Params`` (one per
partition); the engine applies them while running. The engine's own
tunables are ``dtune.engine.options.EngineOptions``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

MIB = 1 << 20
DEFAULT_SPLIT_THRESHOLD = 2 * MIB


@dataclass(frozen=True, slots=True)
class Params:
    """One partition's parameters: cc, p, pp, the CPU knobs and the lanes per replica."""
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
