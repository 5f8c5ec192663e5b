"""The history's two tables (SQLAlchemy); the record that fills one row of ``transfers`` is in ``row.py``.

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

``dtune_schema`` holds one row, the schema version (``migrate.py``): a
column added here needs ``SCHEMA_VERSION`` raised, the column nullable (or
with a server default), and the same column in ``lite.SQLITE_DDL``; opening
an older database then adds it.
"""

from __future__ import annotations

import sqlalchemy as sa

from dtune.history.migrate import VERSION_TABLE
from dtune.history.row import (  # noqa: F401  (re-exported: the record belongs with its table)
    COLUMNS,
    DIRECTIONS,
    ENERGY_KINDS,
    FLOAT_COLUMNS,
    HOWS,
    INT_COLUMNS,
    JSON_COLUMNS,
    NUMBER_COLUMNS,
    ORIGINS,
    TransferRecord,
)

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
    sa.Column("direction", sa.String(8), nullable=False, server_default="get"),   # get | put (dtune put)
)

schema_version = sa.Table(
    VERSION_TABLE, metadata,
    sa.Column("version", sa.Integer, nullable=False),     # migrate.SCHEMA_VERSION of the last writer
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

