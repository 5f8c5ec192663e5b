"""Schema versions and migrations: the plan on plain data, and real SQLite files an older dtune wrote.

An "old" history here is made by hand: a CREATE TABLE with a subset of
today's columns and no ``dtune_schema``, with rows. Both writers open it —
``lite.record`` (what ``dtune get`` uses) and ``open_store`` (every read and
every other URL) — and the rows must survive with the new columns NULL.
"""

from __future__ import annotations

import csv
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from support.harness import child_env
from support.history import make_record

from dtune.errors import DtuneError
from dtune.history import lite, migrate, open_store
from dtune.history.migrate import SCHEMA_VERSION, SchemaRefused, plan
from dtune.history.row import COLUMNS

SHIPPED_CSV = Path(__file__).resolve().parents[3] / "src" / "dtune" / "data" / "sweep-history.csv"
ALL = {t: set(cols) for t, cols in migrate.TABLE_COLUMNS.items()}
# the columns an "old" dtune wrote: the key attributes, θ and throughput, no JSON, no energy, no origin
OLD_COLUMNS = ("started_at", "source", "avg_file_size", "file_count", "rtt_ms", "tcp_buffer", "bandwidth_mbps",
               "cc", "p", "pp", "throughput_mbps", "duration_s", "bytes")
OLD_DDL = ("CREATE TABLE transfers (id INTEGER NOT NULL PRIMARY KEY, started_at VARCHAR(40), source TEXT, "
           "avg_file_size FLOAT, file_count INTEGER, rtt_ms FLOAT, tcp_buffer BIGINT, bandwidth_mbps FLOAT, "
           "cc INTEGER, p INTEGER, pp INTEGER, throughput_mbps FLOAT, duration_s FLOAT, bytes BIGINT)",
           "CREATE TABLE samples (id INTEGER NOT NULL PRIMARY KEY, transfer_id INTEGER NOT NULL "
           "REFERENCES transfers (id) ON DELETE CASCADE, t FLOAT NOT NULL, bytes BIGINT NOT NULL)")


@pytest.fixture(autouse=True)
def _no_home(tmp_path, monkeypatch):
    monkeypatch.delenv("DTUNE_HISTORY", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))


# -- the plan, on plain data -------------------------------------------------------------------------

def test_an_empty_database_gets_every_table_and_the_version():
    steps = plan(None, {})
    assert (steps.create, steps.add, steps.write_version) == (["transfers", "samples"], [], True)


def test_a_current_database_needs_nothing():
    assert not plan(SCHEMA_VERSION, ALL).changes


def test_an_unversioned_database_gets_its_missing_columns_and_the_version():
    steps = plan(None, {"transfers": {"id", "cc", "p"}, "samples": {"id", "transfer_id", "t", "bytes"}})
    assert steps.create == [] and steps.write_version
    assert steps.add == [("transfers", c) for c in COLUMNS if c not in ("id", "cc", "p")] + \
        [("samples", "rate_mbps"), ("samples", "params_json")]


def test_a_missing_samples_table_is_created_next_to_an_old_transfers_table():
    steps = plan(0, {"transfers": ALL["transfers"]})
    assert steps.create == ["samples"] and steps.add == [] and steps.write_version


def test_a_newer_database_with_every_column_is_used_as_it_is():
    steps = plan(SCHEMA_VERSION + 5, {t: cols | {"gpu_count"} for t, cols in ALL.items()})
    assert not steps.changes          # the version is never lowered


def test_a_newer_database_that_lacks_a_column_is_refused_naming_it_and_both_versions():
    have = {**ALL, "transfers": ALL["transfers"] - {"tuner", "energy_j"}}
    with pytest.raises(SchemaRefused) as info:
        plan(SCHEMA_VERSION + 1, have)
    text = str(info.value)
    assert f"schema version {SCHEMA_VERSION + 1}; this dtune knows {SCHEMA_VERSION}" in text
    assert "transfers.tuner" in text and "transfers.energy_j" in text


def test_a_table_without_the_required_columns_is_not_a_dtune_history():
    with pytest.raises(SchemaRefused, match="table samples has no column transfer_id: not a dtune history"):
        plan(None, {"transfers": {"id"}, "samples": {"id", "t", "bytes"}})


def test_the_shared_column_lists_are_the_tables_of_schema_py():
    from dtune.history.schema import metadata
    for table, columns in migrate.TABLE_COLUMNS.items():
        assert columns == tuple(c.name for c in metadata.tables[table].columns)
        required = {c.name for c in metadata.tables[table].columns
                    if c.primary_key or (not c.nullable and c.server_default is None)}
        assert set(migrate.REQUIRED[table]) == required


def test_both_writers_add_the_same_column_definitions():
    """lite.py's ALTER TABLE text for each column is what SQLAlchemy's CreateColumn compiles for SQLite."""
    from sqlalchemy.dialects import sqlite
    from sqlalchemy.schema import CreateColumn

    from dtune.history.schema import metadata
    definitions = lite.column_definitions()
    for table in migrate.TABLE_COLUMNS:
        for column in metadata.tables[table].columns:
            if column.name in migrate.REQUIRED[table]:
                continue
            compiled = str(CreateColumn(column).compile(dialect=sqlite.dialect()))
            assert definitions[table][column.name] == compiled


# -- real SQLite files -------------------------------------------------------------------------------

def _old_history(path: Path, rows: list[tuple]) -> None:
    con = sqlite3.connect(path)
    for ddl in OLD_DDL:
        con.execute(ddl)
    con.executemany(f"INSERT INTO transfers ({', '.join(OLD_COLUMNS)}) VALUES ({', '.join('?' * len(OLD_COLUMNS))})",
                    rows)
    con.execute("INSERT INTO samples (transfer_id, t, bytes) VALUES (1, 1.0, 100)")
    con.commit()
    con.close()


OLD_ROWS = [("2024-05-01T10:00:00.000+00:00", "http://old/a/", 1e6, 10, 20.0, 4194304, 1000.0, 4, 1, 2, 350.5,
             0.3, 10_000_000),
            ("2024-05-02T10:00:00.000+00:00", "http://old/b/", 2e6, 5, 30.0, 4194304, 1000.0, 8, 2, 4, 500.0,
             0.2, 10_000_000)]


def _columns(path: Path, table: str) -> list[str]:
    con = sqlite3.connect(path)
    try:
        return [r[1] for r in con.execute(f"PRAGMA table_info({table})")]
    finally:
        con.close()


def _version(path: Path) -> list[tuple]:
    con = sqlite3.connect(path)
    try:
        return con.execute("SELECT version FROM dtune_schema").fetchall()
    finally:
        con.close()


def _assert_old_rows_survived(path: Path) -> None:
    with open_store(str(path)) as store:
        first = store.get(1)
        assert (first.source, first.cc, first.p, first.pp, first.throughput_mbps) == ("http://old/a/", 4, 1, 2, 350.5)
        assert (first.tuner, first.params_json, first.energy_j, first.exit_status) == (None,) * 4
        assert first.origin == "dtune"                # the one added column with a default
        assert store.get(2).source == "http://old/b/"
        assert store.samples(1) == [{"t": 1.0, "bytes": 100, "rate_mbps": None, "params": None}]
    assert set(_columns(path, "transfers")) == set(COLUMNS)
    assert _columns(path, "samples")[-2:] == ["rate_mbps", "params_json"]
    assert _version(path) == [(SCHEMA_VERSION,)]


@pytest.mark.parametrize("writer", ["lite.record", "open_store"])
def test_an_old_sqlite_history_is_upgraded_in_place_by_either_writer(tmp_path, writer):
    db = tmp_path / "old.db"
    _old_history(db, OLD_ROWS)
    if writer == "lite.record":
        rid = lite.record(db, make_record(), [{"t": 0.5, "bytes": 1, "rate_mbps": 0.1, "params": {"a": {"cc": 1}}}])
    else:
        with open_store(str(db)) as store:
            rid = store.record(make_record(), [{"t": 0.5, "bytes": 1, "rate_mbps": 0.1, "params": {"a": {"cc": 1}}}])
    assert rid == 3
    _assert_old_rows_survived(db)
    with open_store(str(db)) as store:
        assert store.get(3) == make_record(id=3)
        assert store.samples(3) == [{"t": 0.5, "bytes": 1, "rate_mbps": 0.1, "params": {"a": {"cc": 1}}}]
    con = sqlite3.connect(db)
    indexes = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    con.close()
    assert {"ix_transfers_started_at", "ix_samples_transfer_id"} <= indexes


def test_a_refused_newer_history_is_left_as_it_was(tmp_path):
    """Neither writer alters a newer dtune's file it cannot use, nor lowers its version."""
    db = tmp_path / "old.db"
    _old_history(db, OLD_ROWS)
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE dtune_schema (version INTEGER NOT NULL)")
    con.execute("INSERT INTO dtune_schema VALUES (7)")    # "newer", but lacks columns
    con.commit()
    con.close()
    before = _columns(db, "transfers")
    for write in (lambda: lite.record(db, make_record()), lambda: open_store(str(db))):
        with pytest.raises(DtuneError, match=f"history sqlite:///{db}: written by a newer dtune "
                                             f"\\(schema version 7; this dtune knows {SCHEMA_VERSION}\\)"):
            write()
    assert _columns(db, "transfers") == before and _version(db) == [(7,)]


def test_a_newer_sqlite_history_with_every_column_is_written_and_keeps_its_version(tmp_path):
    db = tmp_path / "new.db"
    lite.record(db, make_record())
    con = sqlite3.connect(db)
    con.execute("ALTER TABLE transfers ADD COLUMN gpu_count INTEGER")
    con.execute("UPDATE dtune_schema SET version = 42")
    con.commit()
    con.close()
    assert lite.record(db, make_record(cc=2)) == 2
    with open_store(str(db)) as store:
        assert store.record(make_record(cc=3)) == 3 and [r.cc for r in store.list()] == [3, 2, 8]
    assert _version(db) == [(42,)]


def test_a_sqlite_file_that_is_not_a_dtune_history_is_refused(tmp_path):
    db = tmp_path / "other.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE transfers (name TEXT)")
    con.commit()
    con.close()
    with pytest.raises(DtuneError, match="table transfers has no column id: not a dtune history"):
        lite.record(db, make_record())


def test_history_list_and_model_build_work_on_an_old_sqlite_history(tmp_path):
    """The shipped sweep log, as an older dtune's file with a subset of the columns, read by both commands."""
    with SHIPPED_CSV.open(newline="") as fh:
        shipped = list(csv.DictReader(fh))
    rows = [tuple(None if r[c] == "" else r[c] for c in OLD_COLUMNS) for r in shipped]
    db = tmp_path / "old.db"
    _old_history(db, rows)
    env = child_env(tmp_path / "home")
    listed = subprocess.run([sys.executable, "-m", "dtune", "history", "list", "--limit", "2", "--history", str(db)],
                            capture_output=True, text=True, env=env, timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert f"2 of {len(rows)} transfers" in listed.stdout and shipped[-1]["source"][:20] in listed.stdout
    model = tmp_path / "model.json"
    built = subprocess.run([sys.executable, "-m", "dtune", "model", "build", "--history", str(db), "--out", str(model)],
                           capture_output=True, text=True, env=env, timeout=300)
    assert built.returncode == 0, built.stderr
    assert model.is_file() and "Traceback" not in built.stderr
    with open_store(str(db)) as store:
        assert store.count() == len(rows) and store.get(1).energy_j is None
    assert _version(db) == [(SCHEMA_VERSION,)]
