"""Several processes writing one SQLite history at once: every row lands, with distinct ids.

The writers are real processes started together: ``lite.record`` (what
``dtune get`` uses) and ``open_store().record`` (SQLAlchemy), on a new file
(all race to create the tables) and on an older dtune's file (all race to
upgrade it). SQLite's busy timeout makes them take turns.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.harness import child_env

from dtune.history import open_store
from dtune.history.migrate import SCHEMA_VERSION

TESTS = Path(__file__).resolve().parents[2]
WRITERS = 4
RECORDS = 25

WRITER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from support.history import make_record
    from dtune.history import lite, open_store
    db, how, worker, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    samples = [{"t": 1.0, "bytes": 10, "rate_mbps": 0.1, "params": None}]
    for i in range(n):
        row = make_record(dataset_id=f"{worker}-{i}")
        if how == "lite":
            lite.record(Path(db), row, samples)
        else:
            with open_store(db) as store:
                store.record(row, samples)
""")


@pytest.fixture(autouse=True)
def _no_home(tmp_path, monkeypatch):
    monkeypatch.delenv("DTUNE_HISTORY", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))


def _run_writers(db: Path, hows: list[str], records: int, home: Path) -> None:
    env = child_env(home, PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    env.pop("DTUNE_HISTORY", None)
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(db), how, f"w{w}", str(records)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for w, how in enumerate(hows)]
    errors = []
    try:
        for proc in procs:
            _, err = proc.communicate(timeout=240)
            if proc.returncode != 0:
                errors.append(err[-2000:])
    finally:
        for proc in procs:            # one timed out: stop the others too
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert not errors, errors


def _assert_all_rows(db: Path, workers: int, records: int, before: int = 0) -> None:
    con = sqlite3.connect(db)
    try:
        rows = con.execute("SELECT id, dataset_id FROM transfers").fetchall()
        samples = con.execute("SELECT transfer_id FROM samples").fetchall()
        version = con.execute("SELECT version FROM dtune_schema").fetchall()
    finally:
        con.close()
    assert len(rows) == before + workers * records and len({r[0] for r in rows}) == len(rows)
    expected = {f"w{w}-{i}" for w in range(workers) for i in range(records)}
    assert {r[1] for r in rows if r[1] and r[1].startswith("w")} == expected
    assert len(samples) >= workers * records
    assert version == [(SCHEMA_VERSION,)]


@pytest.mark.parametrize("hows", [["lite"] * WRITERS, ["lite", "store", "lite", "store"]],
                         ids=["dtune-get-writer", "both-writers"])
def test_four_processes_append_25_transfers_each_to_a_new_sqlite_history_at_once(tmp_path, hows):
    db = tmp_path / "h.db"
    _run_writers(db, hows, RECORDS, tmp_path / "home")
    _assert_all_rows(db, WRITERS, RECORDS)


def test_four_processes_upgrading_an_old_sqlite_history_at_once_all_succeed(tmp_path):
    db = tmp_path / "old.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE transfers (id INTEGER NOT NULL PRIMARY KEY, source TEXT, cc INTEGER)")
    con.execute("INSERT INTO transfers (source, cc) VALUES ('http://old/', 4)")
    con.commit()
    con.close()
    _run_writers(db, ["lite", "store", "lite", "store"], 3, tmp_path / "home")
    _assert_all_rows(db, WRITERS, 3, before=1)
    with open_store(str(db)) as store:
        old = store.get(1)
        assert (old.source, old.cc, old.tuner, old.origin) == ("http://old/", 4, None, "dtune")
