"""What every tuner is and returns: the contract between tuners and the engine.

A tuner is a pure decision object (it never touches a socket and imports
nothing that imports asyncio). ``plan(sizes, facts)`` gets the file sizes and
the network facts and returns a ``TunerPlan``: each file's partition, the
first ``Params`` per partition and, with replicas, a ``RangePolicy``.
``update(now, snapshot)`` — called once a tick, right after the engine's
accounting tick — reads the snapshot (its partitions carry the ``Params`` in
force) and returns a ``Decision`` (new ``Params`` per partition, with the
reason) or None; ``transfer()`` applies it.

Like scikit-learn estimators: ``__init__`` stores settings unchanged,
``get_params()`` returns every constructor argument and every constant
(recorded with every result, so that a result says what ran), learned state
ends in ``_``.

Values the user set (``Fixed``) are never changed by a tuner: ``apply_fixed``
puts them into every ``Params`` a tuner returns.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from dtune.accounting import Snapshot
from dtune.netfacts import NetworkFacts
from dtune.params import Params


class RangePolicy(Protocol):
    """Range sizes per replica (MDTP) and the facts the engine's endgame needs; fed every finished range."""

    def size(self, replica: int, unassigned: int, now: float) -> int | None:
        """Bytes for the next range of a lane on ``replica``; None: the engine's taper rule."""

    def observe(self, replica: int, lane: int, nbytes: int, seconds: float, now: float) -> None:
        """A range of ``nbytes`` on ``lane`` of ``replica`` took ``seconds``."""

    def forget(self, replica: int) -> None:
        """``replica`` was paused: measure it afresh when it comes back."""

    def share(self, replica: int) -> float:
        """Its per-connection speed relative to the fastest replica (1.0 = the fastest)."""

    def rate(self, replica: int) -> float | None:
        """Bytes/s of one connection to ``replica``; None: not adapting (no endgame cuts)."""

    def rtt_of(self, replica: int) -> float | None:
        """Seconds, when measured."""

    def admits(self, replica: int, nbytes: int, remaining: int | None, lanes: dict[int, int]) -> bool:
        """May a connection of ``replica`` start a piece of ``nbytes`` now? ``remaining`` is the
        transfer's bytes still to come, ``lanes`` the connections per replica."""


@dataclass(frozen=True, slots=True)
class Fixed:
    """The values the user set (``--cc``, ``-p``, ``--pp``); None: the tuner's to choose.

    ``cc`` is the number of groups (files in flight) over all partitions that
    run at once: a tuner with one partition gives it all, a tuner with
    several splits it between them. ``p`` is the lanes per group (spread
    over the replicas when there are several), ``pp`` the requests in flight
    per lane.
    """

    cc: int | None = None
    p: int | None = None
    pp: int | None = None

    @classmethod
    def of(cls, value: Fixed | Mapping[str, int] | None) -> Fixed:
        """A ``Fixed`` from itself, a ``{"cc": …, "p": …, "pp": …}`` mapping, or None."""
        if isinstance(value, Fixed):
            return value
        value = dict(value or {})
        unknown = set(value) - {"cc", "p", "pp"}
        if unknown:
            raise ValueError(f"only cc, p and pp can be fixed, not {sorted(unknown)}")
        return cls(**value)

    def as_dict(self) -> dict[str, int]:
        """The values that are set (what the history and the events record)."""
        return {k: v for k, v in (("cc", self.cc), ("p", self.p), ("pp", self.pp)) if v is not None}

    def __bool__(self) -> bool:
        return bool(self.as_dict())


def split_lanes(total: int, weights: Sequence[int]) -> tuple[int, ...]:
    """``total`` lanes over replicas in proportion to ``weights`` (largest remainder first)."""
    wsum = sum(weights)
    shares = [total * w / wsum for w in weights]
    lanes = [math.floor(s) for s in shares]
    order = sorted(range(len(weights)), key=lambda i: (lanes[i] - shares[i], i))
    for i in order[:total - sum(lanes)]:
        lanes[i] += 1
    return tuple(lanes)


def apply_fixed(params: Params, fixed: Fixed, *, cc: bool = True) -> Params:
    """``params`` with the user's values in force.

    ``pp`` and ``p`` replace the tuner's (with replicas, the user's ``p``
    lanes are spread over them in the tuner's proportions); ``cc`` too,
    unless ``cc=False``: a tuner with several partitions splits the user's
    ``cc`` between them itself (see ``Fixed``).
    """
    if fixed.pp is not None and params.pp != fixed.pp:
        params = params.with_(pp=fixed.pp)
    if fixed.p is not None and params.p != fixed.p:
        if params.lanes is None:
            params = params.with_(p=fixed.p)
        else:
            params = params.spread(split_lanes(fixed.p, params.lanes))
    if cc and fixed.cc is not None and params.cc != fixed.cc:
        params = params.with_(cc=fixed.cc)
    return params


@dataclass(slots=True)
class TunerPlan:
    """A tuner's first answer: partitions, their parameters and the range policy."""
    partition_of: list[str]                 # partition name of each file
    params: dict[str, Params]               # first parameters per partition
    notes: list[str] = field(default_factory=list)
    range_policy: RangePolicy | None = None  # range sizes per replica (None: the engine's taper)


@dataclass(slots=True)
class Decision:
    """A tuner's new parameters while the transfer runs, and why."""
    params: dict[str, Params]
    reason: str
    event: dict | None = None   # the measurement behind it, emitted as an NDJSON event when set
    drain: bool = False         # lanes it retires may finish a few MiB they hold (nothing is measured
                                # on them next; ``EngineOptions.retire_drain_max``) rather than give
                                # the unreceived rest back at once


class Tuner:
    """Base class: see the module docstring. Subclasses set ``name``, ``label`` and ``needs_facts``."""

    name = "tuner"
    label = "tuner"
    needs_facts = False  # whether plan() uses measured network facts
    sizes_connections = False  # True: the tuner itself sizes the connections per replica (MDTP's climber)

    def __init__(self, *, fixed: Fixed | Mapping[str, int] | None = None) -> None:
        self.fixed = Fixed.of(fixed)

    def get_params(self) -> dict:
        """Every constructor argument, and every field of its constants, JSON-ready.

        A constants dataclass (``HeuristicConstants``, ``MdtpConstants``, …) is
        flattened: its fields stand at the top level beside the arguments.
        """
        out: dict[str, Any] = {"tuner": self.name}
        for name in _init_params(type(self)):
            value = getattr(self, name)
            if dataclasses.is_dataclass(value) and not isinstance(value, Fixed | type):
                for f in dataclasses.fields(value):
                    if f.name in out:
                        raise TypeError(f"{type(self).__name__}: constant {f.name!r} shadows a parameter")
                    out[f.name] = plain(getattr(value, f.name))
            else:
                out[name] = plain(value)
        return out

    def plan(self, sizes: Sequence[int | None], facts: NetworkFacts) -> TunerPlan:
        raise NotImplementedError

    def update(self, now: float, snap: Snapshot) -> Decision | None:
        return None

    def limit(self, cap: int | None, why: str, fresh: bool = False) -> bool:
        """Hold at most ``cap`` connections from the next ``update`` on (a cluster's parent caps
        each node's, ``cluster.conduct``; ``fresh``: the node's conditions changed, search again);
        False when the tuner does not search their number."""
        return False


def _init_params(cls: type) -> list[str]:
    """The keyword arguments of ``cls.__init__`` and of every base class's, in order."""
    names: list[str] = []
    for klass in reversed(cls.__mro__):
        init = klass.__dict__.get("__init__")
        if init is None or klass is object:
            continue
        for p in inspect.signature(init).parameters.values():
            if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name not in names:
                names.append(p.name)
    return names


def plain(value: Any) -> Any:
    """``value`` as JSON-ready data: tuples become lists, callables and objects their name."""
    if isinstance(value, Fixed):
        return value.as_dict()
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    name = getattr(value, "__qualname__", None) or type(value).__name__
    return f"<{name}>"
