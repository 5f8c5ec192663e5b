"""The standard-library SQLite writer: the same tables as SQLAlchemy's, rows readable by the store."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.history import make_record

from dtune.errors import DtuneError
from dtune.history import lite, open_store
from dtune.history.row import FLOAT_COLUMNS, INT_COLUMNS, JSON_COLUMNS


@pytest.fixture(autouse=True)
def _no_home(tmp_path, monkeypatch):
    monkeypatch.delenv("DTUNE_HISTORY", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))


def _norm(sql: str) -> str:
    return re.sub(r"\s+", " ", sql).replace("( ", "(").replace(" )", ")").strip()


def test_the_ddl_is_what_sqlalchemy_creates_for_the_schema():
    from sqlalchemy.dialects import sqlite
    from sqlalchemy.schema import CreateIndex, CreateTable

    from dtune.history.schema import metadata
    expected = []
    for table in metadata.sorted_tables:
        expected.append(str(CreateTable(table).compile(dialect=sqlite.dialect())))
        expected += [str(CreateIndex(ix).compile(dialect=sqlite.dialect())) for ix in table.indexes]
    assert [_norm(s) for s in lite.SQLITE_DDL] == [_norm(s) for s in expected]


def test_the_column_kinds_are_the_tables():
    import sqlalchemy as sa

    from dtune.history.schema import transfers
    assert set(INT_COLUMNS) == {c.name for c in transfers.columns if isinstance(c.type, sa.Integer)}
    assert set(FLOAT_COLUMNS) == {c.name for c in transfers.columns if isinstance(c.type, sa.Float)}
    assert set(JSON_COLUMNS) == {c.name for c in transfers.columns if isinstance(c.type, sa.JSON)}


def test_a_row_written_here_reads_back_through_the_store_with_its_samples(tmp_path):
    db = tmp_path / "deep" / "h.db"
    samples = [{"t": 1.0, "bytes": 10, "rate_mbps": 0.5, "params": {"all": {"cc": 2}}},
               {"t": 2.0, "bytes": 30, "rate_mbps": 0.7, "params": None}]
    first = lite.record(db, make_record(), samples)
    second = lite.record(db, make_record(cc=3, params_json=None), [])
    assert (first, second) == (1, 2)
    with open_store(str(db)) as store:
        assert store.get(first) == make_record(id=first)
        assert store.get(second) == make_record(id=second, cc=3, params_json=None)
        assert store.samples(first) == [{"t": 1.0, "bytes": 10, "rate_mbps": 0.5, "params": {"all": {"cc": 2}}},
                                        {"t": 2.0, "bytes": 30, "rate_mbps": 0.7, "params": None}]
        # and the store appends to a file this module created
        assert store.record(make_record(cc=4), []) == 3


def test_it_appends_to_a_history_sqlalchemy_created(tmp_path):
    db = tmp_path / "h.db"
    with open_store(str(db)) as store:
        store.record(make_record(), [])
    rid = lite.record(db, make_record(cc=9), [{"t": 0.5, "bytes": 1, "rate_mbps": None, "params": None}])
    with open_store(str(db)) as store:
        assert rid == 2 and store.get(rid).cc == 9 and store.count() == 2


def test_deleting_a_transfer_written_here_deletes_its_samples(tmp_path):
    import sqlite3
    db = tmp_path / "h.db"
    rid = lite.record(db, make_record(), [{"t": 1.0, "bytes": 1, "rate_mbps": 0.0, "params": None}])
    con = sqlite3.connect(db)
    con.execute("PRAGMA foreign_keys=ON")
    con.execute("DELETE FROM transfers WHERE id = ?", (rid,))
    con.commit()
    assert con.execute("SELECT count(*) FROM samples").fetchone()[0] == 0
    con.close()


@pytest.mark.parametrize(("url", "expected"), [
    ("h.db", "h.db"),
    ("~/x/h.db", os.path.expanduser("~/x/h.db")),
    ("sqlite:////abs/h.db", "/abs/h.db"),
    ("sqlite:///rel/h.db", "rel/h.db"),
    ("sqlite:///~/h.db", os.path.expanduser("~/h.db")),
    ("sqlite://", None),                      # in memory: SQLAlchemy's
    ("sqlite:///:memory:", None),
    ("sqlite:///file:h.db?mode=ro&uri=true", None),
    ("sqlite:///h%20b.db", None),
    ("postgresql+psycopg://u@h/db", None),
])
def test_which_urls_are_written_here(url, expected):
    got = lite.sqlite_path(url)
    assert (str(got) if got is not None else None) == expected


def test_the_default_and_the_environment_follow_the_stores_rule(tmp_path, monkeypatch):
    from dtune.history.store import default_url
    assert f"sqlite:///{lite.sqlite_path()}" == default_url()
    assert lite.sqlite_path() == tmp_path / "xdg" / "dtune" / "history.db"
    monkeypatch.setenv("DTUNE_HISTORY", str(tmp_path / "env.db"))
    assert lite.sqlite_path() == tmp_path / "env.db"
    monkeypatch.setenv("DTUNE_HISTORY", "postgresql://h/db")
    assert lite.sqlite_path() is None


def test_an_unwritable_history_is_one_line_naming_the_file(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(DtuneError, match=r"^history sqlite:///.*file/h\.db: cannot create .*file"):
        lite.record(blocker / "h.db", make_record())
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not a database" * 100)
    with pytest.raises(DtuneError, match=r"garbage\.db: record a transfer: file is not a database"):
        lite.record(garbage, make_record())


def test_a_bad_row_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(ValueError, match="origin"):
        lite.record(tmp_path / "h.db", make_record(origin="elsewhere"))
    assert not (tmp_path / "h.db").exists()


def test_recording_into_the_default_history_imports_no_sqlalchemy(tmp_path):
    code = ("import sys\n"
            "from dtune.engine.result import TransferResult\n"
            "from dtune.history import save_transfer\n"
            f"rid = save_transfer(TransferResult(), {{'sources': ['http://h/x']}}, {str(tmp_path / 'h.db')!r})\n"
            "print(rid, 'sqlalchemy' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[3] / "src")))
    assert out.stdout.split() == ["1", "False"]
