"""One row of the history's ``transfers`` table, without SQLAlchemy: the record and its column kinds.

``TransferRecord`` is what ``record_from_result`` builds and the stores
write; the column kinds (integer, float, JSON) serve the CSV reader and the
standard-library SQLite writer (``history/lite.py``), so that recording a
transfer into the default SQLite history imports no SQLAlchemy. Units as
in ``schema.py``; a test keeps these kinds equal to the SQLAlchemy table's.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields

ORIGINS = ("dtune", "import", "sweep")     # who produced the measurement
ENERGY_KINDS = ("measured", "estimated")   # NULL: no energy figure, or provenance unknown
HOWS = ("measured", "given", "assumed")    # how a network fact was obtained (NetworkFacts.how)
DIRECTIONS = ("get", "put")                # which way the bytes went: fetched, or uploaded (dtune put)

@dataclass(slots=True, kw_only=True)
class TransferRecord:
    """One row of ``transfers``; ``id`` is set by the store. Units as in the table."""

    id: int | None = None
    started_at: str | None = None
    source: str | None = None
    dataset_id: str | None = None
    avg_file_size: float | None = None
    file_count: int | None = None
    total_bytes: int | None = None
    rtt_ms: float | None = None
    rtt_how: str | None = None
    tcp_buffer: int | None = None
    tcp_buffer_how: str | None = None
    bandwidth_mbps: float | None = None
    bandwidth_how: str | None = None
    cc: int | None = None
    p: int | None = None
    pp: int | None = None
    cpu_num: int | None = None
    cpu_freq: int | None = None
    params_json: dict | None = None
    tuner: str | None = None
    tuner_settings: dict | None = None
    throughput_mbps: float | None = None
    duration_s: float | None = None
    bytes: int | None = None
    energy_j: float | None = None
    energy_kind: str | None = None
    files_ok: int | None = None
    files_failed: int | None = None
    retries: int | None = None
    exit_status: int | None = None
    origin: str = "dtune"
    direction: str = "get"

    def check(self) -> None:
        """Raise ValueError if a vocabulary column holds a word outside its vocabulary."""
        if self.origin not in ORIGINS:
            raise ValueError(f"origin must be one of {', '.join(ORIGINS)}, got {self.origin!r}")
        if self.direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {', '.join(DIRECTIONS)}, got {self.direction!r}")
        if self.energy_kind is not None and self.energy_kind not in ENERGY_KINDS:
            raise ValueError(f"energy_kind must be measured, estimated or empty, got {self.energy_kind!r}")
        for name in ("rtt_how", "tcp_buffer_how", "bandwidth_how"):
            value = getattr(self, name)
            if value is not None and value not in HOWS:
                raise ValueError(f"{name} must be one of {', '.join(HOWS)} or empty, got {value!r}")

        for name in NUMBER_COLUMNS:
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must not be negative, got {value!r}")

    def as_dict(self) -> dict:
        return {name: getattr(self, name) for name in COLUMNS}

    @classmethod
    def from_dict(cls, row: dict) -> TransferRecord:
        return cls(**{name: row[name] for name in COLUMNS if name in row})


COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(TransferRecord))
JSON_COLUMNS = ("params_json", "tuner_settings")

# JSON has no inf, -inf or nan (PostgreSQL refuses Python's ``Infinity``): in the history's JSON they
# are these strings, read back as the floats they were (SQLite, PostgreSQL and CSV alike)
NON_FINITE = {"Infinity": math.inf, "-Infinity": -math.inf, "NaN": math.nan}


def _portable(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: _portable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_portable(v) for v in value]
    return value


def _restored(value: object) -> object:
    if isinstance(value, str):
        return NON_FINITE.get(value, value)
    if isinstance(value, dict):
        return {k: _restored(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_restored(v) for v in value]
    return value


def json_text(value: object, **kwargs: object) -> str:
    """``value`` as strict JSON, its non-finite floats as the strings of ``NON_FINITE``."""
    return json.dumps(_portable(value), allow_nan=False, **kwargs)  # type: ignore[arg-type]


def json_value(text: str | bytes) -> object:
    """The value ``json_text`` wrote (the strings of ``NON_FINITE`` as floats again); a bare
    ``Infinity`` or ``NaN`` written before is read too."""
    return _restored(json.loads(text))
INT_COLUMNS = ("id", "file_count", "total_bytes", "tcp_buffer", "cc", "p", "pp", "cpu_num", "cpu_freq",
               "bytes", "files_ok", "files_failed", "retries", "exit_status")
FLOAT_COLUMNS = ("avg_file_size", "rtt_ms", "bandwidth_mbps", "throughput_mbps", "duration_s", "energy_j")
NUMBER_COLUMNS = tuple(n for n in INT_COLUMNS + FLOAT_COLUMNS if n != "id")
