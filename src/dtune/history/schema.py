"""The history's two tables and the record that fills one row of ``transfers``.

``transfers`` holds one row per transfer: the key attributes the decision
tree cuts on (docs/algorithms.md §2.1: avg file size, file count, RTT, TCP buffer,
bandwidth), the parameters θ = (cc, p, pp, cpu_num, cpu_freq) and the
outcomes (throughput, energy). ``samples`` holds the per-interval samples
of a transfer (one a second from ``dtune get``).

Units are fixed and part of each column's name where they are not bytes:
sizes and buffers in bytes, RTT in ms, rates in Mbit/s (10^6 bit/s), time in
seconds, energy in joules, CPU frequency in kHz (what cpufreq's sysfs files
and ``Params.cpu_freq`` use). A NULL means "not known" for attributes and
outcomes and "not applied" for cpu_num/cpu_freq.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import sqlalchemy as sa

ORIGINS = ("dtune", "import", "sweep")     # who produced the measurement
ENERGY_KINDS = ("measured", "estimated")   # NULL: no energy figure, or provenance unknown
HOWS = ("measured", "given", "assumed")    # how a network fact was obtained (NetworkFacts.how)

metadata = sa.MetaData()
JSON = sa.JSON(none_as_null=True)   # Python None is SQL NULL, not the JSON text 'null'

transfers = sa.Table(
    "transfers", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("started_at", sa.String(40), index=True),   # UTC, ISO 8601 with offset
    sa.Column("source", sa.Text),                         # first source URL
    sa.Column("dataset_id", sa.Text),                     # dataset id or label
    # key attributes
    sa.Column("avg_file_size", sa.Float),                 # bytes
    sa.Column("file_count", sa.Integer),
    sa.Column("total_bytes", sa.BigInteger),
    sa.Column("rtt_ms", sa.Float),
    sa.Column("rtt_how", sa.String(16)),
    sa.Column("tcp_buffer", sa.BigInteger),               # bytes
    sa.Column("tcp_buffer_how", sa.String(16)),
    sa.Column("bandwidth_mbps", sa.Float),
    sa.Column("bandwidth_how", sa.String(16)),
    # parameters θ
    sa.Column("cc", sa.Integer),                          # summed over partitions
    sa.Column("p", sa.Integer),
    sa.Column("pp", sa.Integer),
    sa.Column("cpu_num", sa.Integer),                     # NULL: not applied
    sa.Column("cpu_freq", sa.Integer),                    # kHz; NULL: not applied
    sa.Column("params_json", JSON),                       # per-partition parameters
    sa.Column("tuner", sa.String(64)),
    sa.Column("tuner_settings", JSON),                    # the tuner's get_params()
    # outcomes
    sa.Column("throughput_mbps", sa.Float),
    sa.Column("duration_s", sa.Float),
    sa.Column("bytes", sa.BigInteger),                    # received in this run
    sa.Column("energy_j", sa.Float),
    sa.Column("energy_kind", sa.String(16)),
    sa.Column("files_ok", sa.Integer),
    sa.Column("files_failed", sa.Integer),
    sa.Column("retries", sa.Integer),
    sa.Column("exit_status", sa.Integer),                 # dtune's exit code for the transfer
    sa.Column("origin", sa.String(16), nullable=False, server_default="dtune"),
)

samples = sa.Table(
    "samples", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("transfer_id", sa.Integer, sa.ForeignKey("transfers.id", ondelete="CASCADE"),
              nullable=False, index=True),
    sa.Column("t", sa.Float, nullable=False),             # seconds since the transfer started
    sa.Column("bytes", sa.BigInteger, nullable=False),    # received so far
    sa.Column("rate_mbps", sa.Float),                     # smoothed rate at t
    sa.Column("params_json", JSON),                       # per-partition parameters at t
)


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

    def check(self) -> None:
        """Raise ValueError if a vocabulary column holds a word outside its vocabulary."""
        if self.origin not in ORIGINS:
            raise ValueError(f"origin must be one of {', '.join(ORIGINS)}, got {self.origin!r}")
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
INT_COLUMNS = tuple(c.name for c in transfers.columns if isinstance(c.type, sa.Integer))
FLOAT_COLUMNS = tuple(c.name for c in transfers.columns if isinstance(c.type, sa.Float))
NUMBER_COLUMNS = tuple(n for n in INT_COLUMNS + FLOAT_COLUMNS if n != "id")

assert COLUMNS == tuple(c.name for c in transfers.columns), "TransferRecord and transfers disagree"
