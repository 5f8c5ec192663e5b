"""The model's input: history rows as one numeric table.

A row is a dict (``dtune history`` rows work as they are) or a row of a
numpy array whose columns are ``COLUMNS`` in that order. Column names follow
docs/algorithms.md §2.1; the history's own names are accepted as aliases
(``rtt_ms`` for ``rtt``, ``tcp_buffer`` for ``buf``, ``bandwidth_mbps`` for
``bandwidth``, ``throughput_mbps`` for ``throughput``, ``energy_j`` for
``energy``).

Units are the history's: sizes and buffers in bytes, RTT in ms, bandwidth
and throughput in Mbit/s, energy in joules, CPU frequency in kHz. The trees
do not care about units (they normalise per node), but the RTT bins of the
lookup table are 10 *ms* and the automatic throughput bins assume Mbit/s.

Missing values (``None``, empty, NaN) become NaN. A row without all five key
attributes cannot be placed in a tree and is dropped (and counted); a
missing outcome only keeps the row out of that outcome's surface; a missing
``cpu_num``/``cpu_freq`` means "not applied" (the history's NULL).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

KEYS: tuple[str, ...] = ("avg_file_size", "file_count", "rtt", "buf", "bandwidth")
THETA: tuple[str, ...] = ("cc", "p", "pp", "cpu_num", "cpu_freq")
OUTCOMES: tuple[str, ...] = ("throughput", "energy")
COLUMNS: tuple[str, ...] = KEYS + THETA + OUTCOMES

ALIASES: dict[str, str] = {
    "rtt_ms": "rtt",
    "tcp_buffer": "buf",
    "bandwidth_mbps": "bandwidth",
    "throughput_mbps": "throughput",
    "energy_j": "energy",
}


def canonical(name: str) -> str:
    """The model's name for a column given by its own or the history's name."""
    return ALIASES.get(name, name)


def _number(value: object) -> float:
    if value is None or value == "":
        return math.nan
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        raise ValueError(f"history row: {value!r} is not a number") from exc


def key_vector(attrs: Mapping[str, object]) -> np.ndarray:
    """The five key attributes of a query as a float vector (NaN where not given)."""
    named = {canonical(k): v for k, v in attrs.items()}  # other fields are ignored
    return np.array([_number(named.get(k)) for k in KEYS], dtype=float)


@dataclass(slots=True)
class LogTable:
    """History rows as arrays: ``keys`` (n×5), ``theta`` (n×5), ``outcomes`` (n×2), NaN = missing.

    ``energy_kind`` keeps each row's "measured"/"estimated"/None mark, and
    ``dropped`` counts input rows left out for lack of a key attribute.
    """

    keys: np.ndarray
    theta: np.ndarray
    outcomes: np.ndarray
    energy_kind: list[str | None]
    dropped: int = 0

    def __len__(self) -> int:
        return int(self.keys.shape[0])

    @property
    def throughput(self) -> np.ndarray:
        return self.outcomes[:, 0]

    @property
    def energy(self) -> np.ndarray:
        return self.outcomes[:, 1]

    def energy_kinds(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for i, kind in enumerate(self.energy_kind):
            if not math.isnan(self.outcomes[i, 1]):
                name = kind or "unknown"
                counts[name] = counts.get(name, 0) + 1
        return counts

    def to_dict(self) -> dict:
        """Column lists (NaN → None) so that a model file carries its logs."""
        out: dict[str, list] = {}
        for j, name in enumerate(KEYS):
            out[name] = _plain(self.keys[:, j])
        for j, name in enumerate(THETA):
            out[name] = _plain(self.theta[:, j])
        for j, name in enumerate(OUTCOMES):
            out[name] = _plain(self.outcomes[:, j])
        out["energy_kind"] = list(self.energy_kind)
        return {"columns": out, "dropped": self.dropped}

    @classmethod
    def from_dict(cls, data: Mapping) -> LogTable:
        cols = data["columns"]

        def block(names: tuple[str, ...]) -> np.ndarray:
            n = len(cols[names[0]])
            arr = np.empty((n, len(names)), dtype=float)
            for j, name in enumerate(names):
                arr[:, j] = [math.nan if v is None else float(v) for v in cols[name]]
            return arr

        return cls(block(KEYS), block(THETA), block(OUTCOMES), list(cols["energy_kind"]),
                   int(data.get("dropped", 0)))


def _plain(column: np.ndarray) -> list[float | None]:
    return [None if math.isnan(v) else float(v) for v in column.tolist()]


def as_table(rows: Iterable[Mapping[str, object]] | np.ndarray) -> LogTable:
    """Build a ``LogTable`` from dict rows or an array with ``COLUMNS`` in order."""
    if isinstance(rows, np.ndarray):
        arr = np.asarray(rows, dtype=float)
        if arr.ndim != 2 or arr.shape[1] != len(COLUMNS):
            raise ValueError(f"history array must have {len(COLUMNS)} columns "
                             f"({', '.join(COLUMNS)}), got shape {arr.shape}")
        kinds: list[str | None] = [None] * arr.shape[0]
    else:
        records = []
        kinds = []
        for row in rows:
            named = {canonical(k): v for k, v in row.items()}
            records.append([_number(named.get(k)) for k in COLUMNS])
            kind = named.get("energy_kind")
            kinds.append(str(kind) if kind not in (None, "") else None)
        arr = np.array(records, dtype=float).reshape(len(records), len(COLUMNS))
    nk = len(KEYS)
    complete = ~np.isnan(arr[:, :nk]).any(axis=1)
    arr = arr[complete]
    kinds = [k for k, keep in zip(kinds, complete.tolist(), strict=True) if keep]
    nt = nk + len(THETA)
    return LogTable(arr[:, :nk].copy(), arr[:, nk:nt].copy(), arr[:, nt:].copy(), kinds,
                    int((~complete).sum()))
