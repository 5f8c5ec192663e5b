"""The transfer history on a real PostgreSQL server (127.0.0.1, password auth, psycopg 3).

One server for the module (``postgres_server``), an empty database per
test. Concurrent writers are real processes: ``python -c`` scripts that use
the ``dtune.history`` API, and ``dtune get --history URL`` runs against
``dtune serve``; several of them create, upgrade and append to one
database at once.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from support.harness import FAST, child_env
from support.postgres import Postgres, postgres_server  # noqa: F401  (the session fixture)
from support.realservers import DtuneServe, Unavailable, public_dir

from dtune.history import open_store
from dtune.history.migrate import SCHEMA_VERSION

WRITERS = 4
RECORDS = 25
TESTS = Path(__file__).resolve().parents[1]          # for `support.history` in the writer processes
SHIPPED_CSV = TESTS.parent / "src" / "dtune" / "data" / "sweep-history.csv"

WRITER = textwrap.dedent("""
    import sys
    from support.history import make_record
    from dtune.history import open_store
    url, worker, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    for i in range(n):
        with open_store(url) as store:   # open each time: every open checks the tables at once with the others
            store.record(make_record(dataset_id=f"{worker}-{i}"),
                         [{"t": 1.0, "bytes": 10, "rate_mbps": 0.1, "params": None},
                          {"t": 2.0, "bytes": 20, "rate_mbps": 0.2, "params": {"all": {"cc": i}}}])
""")


@pytest.fixture
def pg(postgres_server: Postgres) -> str:  # noqa: F811
    """The URL of an empty database of this test's own, ``postgresql://dtune:PASSWORD@...``."""
    return postgres_server.new_database()


def _connect(url: str) -> psycopg.Connection:
    return psycopg.connect(url, autocommit=True)


def _dtune(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "dtune", *args], capture_output=True, text=True, env=env,
                          timeout=timeout, stdin=subprocess.DEVNULL)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def _writers(url: str, count: int, records: int, home: Path) -> list[subprocess.CompletedProcess]:
    """``count`` processes recording ``records`` transfers each into ``url``, all started before any is waited on."""
    env = child_env(home, PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, url, f"w{w}", str(records)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for w in range(count)]
    return _finish_all(procs, timeout=180)


def _finish_all(procs: list[subprocess.Popen], timeout: float) -> list[subprocess.CompletedProcess]:
    """Wait for every process; any still running when one times out is killed."""
    done = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=timeout)
            done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    return done


# -- the URL and the driver --------------------------------------------------------------------------

def test_a_bare_postgresql_url_opens_with_psycopg3_and_rows_read_back(pg: str, postgres_server: Postgres):  # noqa: F811
    from support.history import make_record
    samples = [{"t": 1.0, "bytes": 5, "rate_mbps": 0.04, "params": {"all": {"cc": 2, "p": 1, "pp": 4}}}]
    with open_store(pg) as store:
        assert store.engine.dialect.driver == "psycopg"
        assert store.name.startswith("postgresql+psycopg://dtune:***@127.0.0.1:")
        assert postgres_server.password not in store.name and postgres_server.password not in repr(store)
        rid = store.record(make_record(), samples)
        assert store.get(rid) == make_record(id=rid)       # JSON columns and floats come back equal
        assert store.samples(rid) == samples
    with open_store(pg.replace("postgresql://", "postgres://", 1)) as store:   # Heroku-style scheme
        assert store.engine.dialect.driver == "psycopg" and store.count() == 1
    with _connect(pg) as con:
        assert con.execute("SELECT version FROM dtune_schema").fetchall() == [(SCHEMA_VERSION,)]


def test_a_wrong_password_is_one_line_that_shows_neither_password(pg: str, postgres_server: Postgres,  # noqa: F811
                                                                   tmp_path: Path):
    wrong = "wrong-" + postgres_server.password[::-1]
    url = pg.replace(postgres_server.password, wrong)
    env = child_env(tmp_path)
    done = _dtune(env, "history", "list", "--history", url)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "password authentication failed" in lines[0], done.stderr
    assert "postgresql+psycopg://dtune:***@127.0.0.1" in lines[0]
    for secret in (wrong, postgres_server.password):
        assert secret not in done.stderr + done.stdout


# -- concurrent writers ------------------------------------------------------------------------------

def test_four_processes_create_the_tables_and_append_25_transfers_each_at_once(pg: str, tmp_path: Path):
    done = _writers(pg, WRITERS, RECORDS, tmp_path)
    assert [d.returncode for d in done] == [0] * WRITERS, [d.stderr[-2000:] for d in done]
    with _connect(pg) as con:
        rows = con.execute("SELECT id, dataset_id FROM transfers").fetchall()
        assert len(rows) == WRITERS * RECORDS and len({r[0] for r in rows}) == WRITERS * RECORDS
        assert sorted(r[1] for r in rows) == sorted(f"w{w}-{i}" for w in range(WRITERS) for i in range(RECORDS))
        per_transfer = con.execute("SELECT transfer_id, count(*) FROM samples GROUP BY transfer_id").fetchall()
        assert sorted(per_transfer) == sorted((r[0], 2) for r in rows)
        assert con.execute("SELECT version FROM dtune_schema").fetchall() == [(SCHEMA_VERSION,)]


@pytest.fixture
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``dtune serve`` on a directory with one small file; the file's URL."""
    root = public_dir("dtune-test-pg-")
    (root / "tiny.bin").write_bytes(bytes(range(256)) * 16)
    try:
        server = DtuneServe(root, env=child_env(tmp_path_factory.mktemp("serve"))).start()
    except Unavailable as exc:
        shutil.rmtree(root, ignore_errors=True)
        pytest.skip(f"dtune serve not available: {exc}")
    try:
        yield f"{server.base}/tiny.bin"
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


def _get(url: str, out: Path, history: str, env: dict[str, str], *extra: str) -> subprocess.Popen:
    argv = [sys.executable, "-m", "dtune", "get", url, "-o", str(out), "--history", history, "--no-progress",
            *FAST, *extra]
    return subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_four_dtune_get_at_once_record_into_one_postgresql_history(pg: str, served: str, tmp_path: Path,
                                                                   postgres_server: Postgres):  # noqa: F811
    env = child_env(tmp_path / "home")
    procs = [_get(served, tmp_path / f"out{i}", pg, env, "--json") for i in range(WRITERS)]
    ids = []
    for done in _finish_all(procs, timeout=120):
        out, err = done.stdout, done.stderr
        assert done.returncode == 0, err
        assert postgres_server.password not in out + err
        events = [json.loads(line) for line in out.splitlines()]
        assert not [e for e in events if e["event"] == "warning"], events
        ids += [e["id"] for e in events if e["event"] == "history"]
    assert len(ids) == WRITERS and len(set(ids)) == WRITERS
    with _connect(pg) as con:
        rows = con.execute("SELECT id, source, bytes, exit_status, origin FROM transfers ORDER BY id").fetchall()
    assert sorted(r[0] for r in rows) == sorted(ids)
    assert {(r[1], r[2], r[3], r[4]) for r in rows} == {(served, 4096, 0, "dtune")}


def test_dtune_get_warns_without_the_password_when_the_history_refuses_it(pg: str, served: str, tmp_path: Path,
                                                                          postgres_server: Postgres):  # noqa: F811
    wrong = "nope-" + postgres_server.password[::-1]
    url = pg.replace(postgres_server.password, wrong)
    env = child_env(tmp_path / "home", DTUNE_HISTORY=url)       # the environment variable, this time
    for extra in ((), ("--json",)):
        [done] = _finish_all([_get(served, tmp_path / f"out{len(extra)}", url, env, *extra)], timeout=120)
        out, err = done.stdout, done.stderr
        assert done.returncode == 0, err                           # the transfer itself succeeded
        assert "transfer history not written" in out + err
        assert "dtune:***@127.0.0.1" in out + err
        for secret in (wrong, postgres_server.password):
            assert secret not in out + err


# -- migrations --------------------------------------------------------------------------------------

OLD_TRANSFERS = """CREATE TABLE transfers (id SERIAL PRIMARY KEY, started_at VARCHAR(40), source TEXT,
    avg_file_size FLOAT, file_count INTEGER, rtt_ms FLOAT, tcp_buffer BIGINT, bandwidth_mbps FLOAT,
    cc INTEGER, p INTEGER, pp INTEGER, throughput_mbps FLOAT, duration_s FLOAT)"""
OLD_SAMPLES = """CREATE TABLE samples (id SERIAL PRIMARY KEY,
    transfer_id INTEGER NOT NULL REFERENCES transfers (id) ON DELETE CASCADE, t FLOAT NOT NULL,
    bytes BIGINT NOT NULL)"""


def _old_database(url: str) -> None:
    """Tables as an older dtune wrote them (fewer columns, no dtune_schema), with two transfers."""
    with _connect(url) as con:
        con.execute(OLD_TRANSFERS)
        con.execute(OLD_SAMPLES)
        con.execute("INSERT INTO transfers (started_at, source, avg_file_size, file_count, rtt_ms, tcp_buffer, "
                    "bandwidth_mbps, cc, p, pp, throughput_mbps, duration_s) VALUES "
                    "('2024-05-01T10:00:00.000+00:00', 'http://old/a/', 1e6, 10, 20.0, 4194304, 1000, 4, 1, 2, "
                    "350.5, 0.3), ('2024-05-02T10:00:00.000+00:00', 'http://old/b/', 2e6, 5, 30.0, 4194304, "
                    "1000, 8, 2, 4, 500.0, 0.2)")
        con.execute("INSERT INTO samples (transfer_id, t, bytes) VALUES (1, 1.0, 100), (1, 2.0, 200)")


def test_four_processes_opening_an_old_database_at_once_upgrade_it_once_and_keep_its_rows(pg: str, tmp_path: Path):
    _old_database(pg)
    done = _writers(pg, WRITERS, 3, tmp_path)
    assert [d.returncode for d in done] == [0] * WRITERS, [d.stderr[-2000:] for d in done]
    with open_store(pg) as store:
        old = store.get(1)
        assert (old.source, old.cc, old.throughput_mbps, old.rtt_ms) == ("http://old/a/", 4, 350.5, 20.0)
        # the added columns: NULL, origin its default
        assert (old.tuner, old.energy_j, old.params_json, old.exit_status, old.origin) == (None,) * 4 + ("dtune",)
        assert store.samples(1) == [{"t": 1.0, "bytes": 100, "rate_mbps": None, "params": None},
                                    {"t": 2.0, "bytes": 200, "rate_mbps": None, "params": None}]
        assert store.count() == 2 + WRITERS * 3
        new = store.list(limit=1)[0]
        assert new.tuner == "promc" and new.params_json == {"used": {"all": {"cc": 8, "p": 1, "pp": 4}}}
    with _connect(pg) as con:
        assert con.execute("SELECT version FROM dtune_schema").fetchall() == [(SCHEMA_VERSION,)]
        index = con.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'transfers'").fetchall()
        assert ("ix_transfers_started_at",) in index


def test_a_newer_dtunes_database_is_used_when_it_has_every_column_and_refused_otherwise(pg: str, tmp_path: Path):
    from support.history import make_record
    with open_store(pg) as store:
        store.record(make_record())
    with _connect(pg) as con:
        con.execute("ALTER TABLE transfers ADD COLUMN gpu_count INTEGER")     # a newer dtune's column
        con.execute("UPDATE dtune_schema SET version = 99")
    with open_store(pg) as store:
        assert store.record(make_record(cc=3)) == 2 and store.get(1).cc == 8
    with _connect(pg) as con:
        assert con.execute("SELECT version FROM dtune_schema").fetchall() == [(99,)]   # never lowered
        con.execute("ALTER TABLE transfers DROP COLUMN tuner")
    done = _dtune(child_env(tmp_path), "history", "list", "--history", pg)
    assert done.returncode == 1
    assert f"written by a newer dtune (schema version 99; this dtune knows {SCHEMA_VERSION})" in done.stderr
    assert "transfers.tuner" in done.stderr and len(done.stderr.strip().splitlines()) == 1


# -- reading: dtune history and dtune model ----------------------------------------------------------

def test_history_import_list_show_export_and_model_build_work_on_postgresql(pg: str, tmp_path: Path,
                                                                            postgres_server: Postgres):  # noqa: F811
    env = child_env(tmp_path / "home")
    with SHIPPED_CSV.open(newline="") as fh:
        shipped = list(csv.DictReader(fh))
    done = _dtune(env, "history", "import", "--csv", str(SHIPPED_CSV), "--history", pg)
    assert done.returncode == 0, done.stderr
    assert f"imported {len(shipped)} transfers" in done.stderr and "dtune:***@" in done.stderr

    done = _dtune(env, "history", "list", "--limit", "3", "--history", pg)
    assert done.returncode == 0, done.stderr
    assert "transfer history (postgresql+psycopg://dtune:***@127.0.0.1" in done.stdout
    assert f"3 of {len(shipped)} transfers" in done.stdout
    assert done.stdout.splitlines()[2].strip().startswith(f"{len(shipped)} ")   # the newest row first

    done = _dtune(env, "history", "show", "1", "--history", pg)
    assert done.returncode == 0, done.stderr
    shown = dict(map(str.strip, line.split(None, 1)) for line in done.stdout.splitlines() if len(line.split(None, 1)) == 2)
    assert shown["cc"] == shipped[0]["cc"] and shown["origin"] == shipped[0]["origin"]

    out = tmp_path / "export.csv"
    done = _dtune(env, "history", "export", "--csv", str(out), "--history", pg)
    assert done.returncode == 0, done.stderr
    with out.open(newline="") as fh:
        exported = list(csv.DictReader(fh))
    assert [(r["cc"], r["throughput_mbps"]) for r in exported] == [(r["cc"], r["throughput_mbps"]) for r in shipped]

    model = tmp_path / "model.json"
    done = _dtune(env, "model", "build", "--history", pg, "--out", str(model), timeout=300)
    assert done.returncode == 0, done.stderr
    assert model.is_file() and json.loads(model.read_text())
    for text in (done.stdout, done.stderr):
        assert postgres_server.password not in text


def test_non_finite_numbers_in_json_fields_round_trip_through_postgresql_and_its_csv(pg: str) -> None:
    """PostgreSQL's JSON refuses Python's bare ``Infinity``: the history writes the strings
    "Infinity", "-Infinity", "NaN" and reads them back as the floats (``history.row.json_text``)."""
    import io  # (this test only)
    import math  # (this test only)

    from support.history import make_record  # (this test only)

    params = {"thr": math.inf, "low": [-math.inf, math.nan], "name": "ok"}
    with open_store(pg) as store:
        row_id = store.record(make_record(params_json=params, tuner_settings={"eta": math.inf}),
                              [{"t": 1.0, "bytes": 1, "rate_mbps": 0.1, "params": {"r": -math.inf}}])
        row = store.get(row_id)
        assert row is not None
        assert row.params_json["thr"] == math.inf and row.params_json["low"][0] == -math.inf
        assert math.isnan(row.params_json["low"][1]) and row.params_json["name"] == "ok"
        assert row.tuner_settings == {"eta": math.inf}
        assert store.samples(row_id)[0]["params"] == {"r": -math.inf}
        fh = io.StringIO()
        store.export_csv(fh)
        assert store.import_csv(io.StringIO(fh.getvalue()), "back.csv") == 1
        again = store.list(limit=1)[0]
    assert again.id != row_id and again.params_json["thr"] == math.inf and again.tuner_settings == {"eta": math.inf}
