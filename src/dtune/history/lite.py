"""The default history, a SQLite file, written with the standard library alone.

``dtune get`` records every transfer. Importing SQLAlchemy to append one row
costs about a tenth of a second, as much as the rest of a small get, so a
SQLite history (the default, a plain path or ``sqlite:///PATH``) is written
here with ``sqlite3``: the same tables (``SQLITE_DDL`` is what SQLAlchemy
creates for ``schema.py``; a test keeps the two equal), the same JSON text
in the JSON columns, created on first use and upgraded when an older dtune
wrote them (``prepare``: the schema version and the columns to add come from
``migrate.py``, as for ``store.py``). Every other URL, and every read, goes
through ``store.py``, which upgrades a SQLite file with ``migrate_sqlite``
here, so that one piece of code alters SQLite tables.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from dtune.errors import DtuneError
from dtune.history import migrate
from dtune.history.row import COLUMNS, JSON_COLUMNS, TransferRecord, json_text

SQLITE_BUSY_TIMEOUT = 30.0   # seconds: several `dtune get` may finish at once and all append

SQLITE_DDL = (
    """CREATE TABLE dtune_schema (
    version INTEGER NOT NULL
)""",
    """CREATE TABLE transfers (
    id INTEGER NOT NULL,
    started_at VARCHAR(40),
    source TEXT,
    dataset_id TEXT,
    avg_file_size FLOAT,
    file_count INTEGER,
    total_bytes BIGINT,
    rtt_ms FLOAT,
    rtt_how VARCHAR(16),
    tcp_buffer BIGINT,
    tcp_buffer_how VARCHAR(16),
    bandwidth_mbps FLOAT,
    bandwidth_how VARCHAR(16),
    cc INTEGER,
    p INTEGER,
    pp INTEGER,
    cpu_num INTEGER,
    cpu_freq INTEGER,
    params_json JSON,
    tuner VARCHAR(64),
    tuner_settings JSON,
    throughput_mbps FLOAT,
    duration_s FLOAT,
    bytes BIGINT,
    energy_j FLOAT,
    energy_kind VARCHAR(16),
    files_ok INTEGER,
    files_failed INTEGER,
    retries INTEGER,
    exit_status INTEGER,
    origin VARCHAR(16) DEFAULT 'dtune' NOT NULL,
    direction VARCHAR(8) DEFAULT 'get' NOT NULL,
    PRIMARY KEY (id)
)""",
    "CREATE INDEX ix_transfers_started_at ON transfers (started_at)",
    """CREATE TABLE samples (
    id INTEGER NOT NULL,
    transfer_id INTEGER NOT NULL,
    t FLOAT NOT NULL,
    bytes BIGINT NOT NULL,
    rate_mbps FLOAT,
    params_json JSON,
    PRIMARY KEY (id),
    FOREIGN KEY(transfer_id) REFERENCES transfers (id) ON DELETE CASCADE
)""",
    "CREATE INDEX ix_samples_transfer_id ON samples (transfer_id)",
)

ENV_VAR = "DTUNE_HISTORY"


def default_path() -> Path:
    """``<data home>/dtune/history.db`` following the XDG base-directory rule."""
    base = os.environ.get("XDG_DATA_HOME", "")
    if not os.path.isabs(base):          # the XDG spec says to ignore relative values
        base = os.path.expanduser("~/.local/share")
    return Path(base) / "dtune" / "history.db"


def sqlite_path(url: str | None = None) -> Path | None:
    """The SQLite file a history URL names (argument, ``DTUNE_HISTORY``, default), ``~`` expanded.

    None when the URL is anything this module does not write: another
    database, an in-memory or ``file:`` URI, a URL with query options or
    percent escapes (SQLAlchemy handles those).
    """
    text = url or os.environ.get(ENV_VAR)
    if not text:
        return default_path()
    if "://" not in text:
        return Path(os.path.expanduser(text))
    if not text.startswith("sqlite:///"):
        return None
    db = text[len("sqlite:///"):]
    if not db or db == ":memory:" or db.startswith("file:") or "?" in db or "%" in db:
        return None
    return Path(os.path.expanduser(db))


def record(path: Path, row: TransferRecord, samples: Iterable[dict] = ()) -> int:
    """Append one transfer and its samples to the SQLite history at ``path``; return its id.

    Raises ``DtuneError`` (one line naming the file) when it cannot be written.
    """
    import sqlite3  # here, not at import: `dtune get` asks sqlite_path() before it moves a byte

    row.check()
    name = f"sqlite:///{path}"
    values = row.as_dict()
    values.pop("id")
    for col in JSON_COLUMNS:
        if values[col] is not None:
            values[col] = json_text(values[col])
    cols = [c for c in COLUMNS if c != "id"]
    batch = [(float(s["t"]), int(s["bytes"]), s.get("rate_mbps"), _json(s.get("params", s.get("params_json"))))
             for s in samples]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DtuneError(f"history {name}: cannot create {path.parent}: {exc.strerror or exc}") from None
    try:
        con = sqlite3.connect(path, timeout=SQLITE_BUSY_TIMEOUT, isolation_level=None)
    except sqlite3.Error as exc:
        raise DtuneError(f"history {name}: cannot open: {exc}") from None
    try:
        con.execute("PRAGMA foreign_keys=ON")     # so deleting a transfer deletes its samples
        con.execute("BEGIN IMMEDIATE")            # one writer at a time; others wait up to the timeout
        prepare(con, name)
        cur = con.execute(f"INSERT INTO transfers ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                          [values[c] for c in cols])
        new_id = int(cur.lastrowid)
        if batch:
            con.executemany("INSERT INTO samples (transfer_id, t, bytes, rate_mbps, params_json) "
                            "VALUES (?, ?, ?, ?, ?)", [(new_id, *b) for b in batch])
        con.execute("COMMIT")
    except sqlite3.Error as exc:
        raise DtuneError(f"history {name}: record a transfer: {' '.join(str(exc).split())}") from None
    finally:
        con.close()
    return new_id


def prepare(con, name: str) -> None:
    """Create the tables, or upgrade an older dtune's, inside the caller's ``BEGIN IMMEDIATE``.

    The write lock that transaction holds is what keeps two processes from
    both upgrading one file. Once the tables are at ``SCHEMA_VERSION`` this
    costs one query. Raises ``DtuneError`` for a database this dtune must not
    write (``migrate.plan``), ``sqlite3.Error`` for the caller to word.
    """
    import sqlite3  # (sqlite3: not before the first byte)
    try:
        found = con.execute(f"SELECT max(version) FROM {migrate.VERSION_TABLE}").fetchone()[0]
    except sqlite3.OperationalError:          # no version table: new, or from before versions
        found = None
    if found == migrate.SCHEMA_VERSION:
        return
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    have = {t: {r[1] for r in con.execute(f"PRAGMA table_info({t})")} for t in migrate.TABLE_COLUMNS if t in tables}
    try:
        steps = migrate.plan(found, have)
    except migrate.SchemaRefused as exc:
        raise DtuneError(f"history {name}: {exc}") from None
    definitions = column_definitions()
    for ddl in SQLITE_DDL:                    # missing tables, then every missing index
        words = ddl.split()
        if words[1] == "TABLE" and words[2] not in tables:
            con.execute(ddl)
    for table, column in steps.add:
        con.execute(f"ALTER TABLE {table} ADD COLUMN {definitions[table][column]}")
    for ddl in SQLITE_DDL:
        if ddl.split()[1] == "INDEX":
            con.execute(ddl.replace("CREATE INDEX", "CREATE INDEX IF NOT EXISTS", 1))
    if steps.write_version:
        con.execute(f"DELETE FROM {migrate.VERSION_TABLE}")
        con.execute(f"INSERT INTO {migrate.VERSION_TABLE} (version) VALUES (?)", (migrate.SCHEMA_VERSION,))


def migrate_sqlite(con, name: str) -> None:
    """Create or upgrade the tables on an open ``sqlite3`` connection, in a transaction of its own.

    ``store.py`` hands its SQLAlchemy engine's connection here, so a SQLite
    file is upgraded by the same code whichever writer opens it first.
    """
    import sqlite3  # (sqlite3: not before the first byte)
    saved = con.isolation_level
    con.isolation_level = None                # explicit BEGIN/COMMIT, none of sqlite3's own
    try:
        con.execute("BEGIN IMMEDIATE")
        try:
            prepare(con, name)
        except BaseException:
            con.execute("ROLLBACK")
            raise
        con.execute("COMMIT")
    except sqlite3.Error as exc:
        raise DtuneError(f"history {name}: prepare the tables: {' '.join(str(exc).split())}") from None
    finally:
        con.isolation_level = saved


def column_definitions() -> dict[str, dict[str, str]]:
    """Each table's columns as ``ALTER TABLE ... ADD COLUMN`` takes them, from ``SQLITE_DDL``.

    NOT NULL is kept only with a DEFAULT (old rows get the default); a NOT
    NULL column without one is a required column (``migrate.REQUIRED``),
    never added.
    """
    out: dict[str, dict[str, str]] = {}
    for ddl in SQLITE_DDL:
        head, _, body = ddl.partition("(\n")
        words = head.split()
        if words[1] != "TABLE":
            continue
        columns = {}
        for line in body.rsplit("\n)", 1)[0].split(",\n"):
            line = line.strip()
            if line.startswith(("PRIMARY KEY", "FOREIGN KEY")):
                continue
            if " DEFAULT " not in line:
                line = line.replace(" NOT NULL", "")
            columns[line.split()[0]] = line
        out[words[2]] = columns
    return out


def _json(value: object) -> str | None:
    return None if value is None else json_text(value)
