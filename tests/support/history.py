"""A complete history row for the history tests, and the rows a test run wrote."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from dtune.history.row import TransferRecord


def make_record(**changes) -> TransferRecord:
    values = dict(started_at="2025-03-01T10:00:00.000+00:00", source="http://h/data/", dataset_id="html",
                  avg_file_size=100_000.0, file_count=250, total_bytes=25_000_000, rtt_ms=10.0,
                  rtt_how="measured", tcp_buffer=6_291_456, tcp_buffer_how="measured",
                  bandwidth_mbps=1000.0, bandwidth_how="assumed", cc=8, p=1, pp=4,
                  params_json={"used": {"all": {"cc": 8, "p": 1, "pp": 4}}}, tuner="promc",
                  tuner_settings={"tuner": "promc", "max_cc": 16}, throughput_mbps=812.5, duration_s=0.246,
                  bytes=25_000_000, files_ok=250, files_failed=0, retries=0, exit_status=0)
    values.update(changes)
    return TransferRecord(**values)


def history_sources() -> list[str]:
    """The source of every row of the SQLite history ``DTUNE_HISTORY`` names, oldest first."""
    db = os.environ["DTUNE_HISTORY"].removeprefix("sqlite:///")
    if not Path(db).exists():
        return []
    with sqlite3.connect(db) as con:
        return [row[0] for row in con.execute("SELECT source FROM transfers ORDER BY id")]
