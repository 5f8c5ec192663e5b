"""Where the history lives: any SQLAlchemy database, a SQLite file by default.

The store is opened by URL. Which URL, first match wins:

1. the ``url`` argument (``--history URL`` on the command line);
2. the environment variable ``DTUNE_HISTORY``;
3. ``sqlite:///$XDG_DATA_HOME/dtune/history.db``, with ``XDG_DATA_HOME``
   defaulting to ``~/.local/share`` (the XDG base-directory rule).

A plain path (no ``://``) means a SQLite file at that path. ``~`` is
expanded in SQLite paths and the parent directory is created.
``postgresql://`` and ``postgres://`` URLs use psycopg 3 when it is
installed (``pip install 'psycopg[binary]'``; SQLAlchemy alone would pick
psycopg2).

Opening creates the tables on first use and upgrades those of an older
dtune (``migrate.py``), under a lock so that processes opening one database
at once do not all do it: ``BEGIN IMMEDIATE`` on SQLite (through
``lite.migrate_sqlite``, the code ``dtune get`` uses), a transaction-level
advisory lock on PostgreSQL. Other databases are prepared in one
transaction without a lock.

Every SQLAlchemy or driver error becomes one ``DtuneError`` line that
names the database (password hidden) and the operation.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO

import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine

from dtune.config import hide_url_password
from dtune.errors import DtuneError
from dtune.history import migrate
from dtune.history.csvio import read_csv, write_csv
from dtune.history.lite import ENV_VAR, SQLITE_BUSY_TIMEOUT, default_path, migrate_sqlite
from dtune.history.row import json_text, json_value
from dtune.history.schema import COLUMNS, TransferRecord, metadata, schema_version, transfers
from dtune.history.schema import samples as samples_table

ROWS_BATCH = 2000            # rows() fetches this many at a time (~20k rows: ten round trips)
PG_CONNECT_TIMEOUT = 10      # seconds: an unreachable PostgreSQL fails `dtune get`'s recording, not hangs it
PG_DRIVER_HINT = "pip install 'psycopg[binary]'"


def default_url() -> str:
    """``sqlite:///<data home>/dtune/history.db`` following the XDG base-directory rule."""
    return f"sqlite:///{default_path()}"


def resolve_url(url: str | None = None) -> URL:
    """The URL to open (argument, then ``DTUNE_HISTORY``, then the default), ``~`` expanded.

    ``postgresql://`` and ``postgres://`` get the psycopg 3 driver when it can be imported.
    """
    text = url or os.environ.get(ENV_VAR) or default_url()
    if "://" not in text:
        text = f"sqlite:///{text}"
    try:
        parsed = sa.make_url(text)
    except (sa.exc.ArgumentError, ValueError) as exc:
        shown = hide_url_password(text)
        reason = str(exc).replace(text, shown)
        raise DtuneError(f"history: {shown!r} is not a database URL ({reason})") from None
    if parsed.get_backend_name() == "sqlite" and parsed.database and parsed.database != ":memory:" \
            and not parsed.database.startswith("file:"):
        parsed = parsed.set(database=os.path.expanduser(parsed.database))
    backend, _, driver = parsed.drivername.partition("+")
    if backend in ("postgresql", "postgres"):
        if not driver and _has_psycopg():
            driver = "psycopg"
        parsed = parsed.set(drivername="postgresql" + (f"+{driver}" if driver else ""))
    return parsed


def _has_psycopg() -> bool:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return False
    return True


def describe(url: URL) -> str:
    return url.render_as_string(hide_password=True)


def open_store(url: str | None = None) -> HistoryStore:
    """Open the history database, creating or upgrading its tables. See the module doc for ``url``."""
    resolved = resolve_url(url)
    name = describe(resolved)
    kwargs: dict = {}
    backend = resolved.get_backend_name()
    if backend == "sqlite":
        db = resolved.database
        if db and db != ":memory:" and not db.startswith("file:"):
            try:
                Path(db).parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise DtuneError(f"history {name}: cannot create {Path(db).parent}: "
                                 f"{exc.strerror or exc}") from None
        kwargs["connect_args"] = {"timeout": SQLITE_BUSY_TIMEOUT}
    elif backend == "postgresql" and "connect_timeout" not in resolved.query:
        kwargs["connect_args"] = {"connect_timeout": PG_CONNECT_TIMEOUT}
    try:
        engine = sa.create_engine(resolved, json_serializer=json_text, json_deserializer=json_value, **kwargs)
    except ImportError as exc:
        hint = f": {PG_DRIVER_HINT}" if backend == "postgresql" else ""
        raise DtuneError(f"history {name}: cannot open: {_reason(exc, resolved.password)} "
                         f"(the driver for this database is not installed{hint})") from None
    except sa.exc.SQLAlchemyError as exc:
        raise DtuneError(f"history {name}: cannot open: {_reason(exc, resolved.password)}") from None
    if backend == "sqlite":
        sa.event.listen(engine, "connect", _sqlite_foreign_keys)
    store = HistoryStore(engine, name)
    try:
        with store._errors("prepare the tables"):
            if backend == "sqlite":
                _prepare_sqlite(engine, name)
            else:
                _prepare(engine, name)
    except BaseException:
        engine.dispose()
        raise
    return store


def _prepare_sqlite(engine: Engine, name: str) -> None:
    """Create or upgrade a SQLite history with ``lite.py``'s code, on this engine's connection."""
    raw = engine.raw_connection()
    try:
        migrate_sqlite(raw.driver_connection, name)
    finally:
        raw.close()


def _prepare(engine: Engine, name: str) -> None:
    """Create or upgrade the tables of a non-SQLite history in one transaction (PostgreSQL: locked).

    The advisory lock makes processes that open one database at once take
    turns: the first creates or alters the tables, the others then find
    them at ``SCHEMA_VERSION`` (PostgreSQL's DDL is transactional).
    """
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": migrate.PG_LOCK_KEY})
        inspector = sa.inspect(conn)
        tables = set(inspector.get_table_names())
        found = None
        if migrate.VERSION_TABLE in tables:
            found = conn.execute(sa.select(sa.func.max(schema_version.c.version))).scalar()
            if found == migrate.SCHEMA_VERSION:
                return
        have = {t: {c["name"] for c in inspector.get_columns(t)} for t in migrate.TABLE_COLUMNS if t in tables}
        try:
            steps = migrate.plan(found, have)
        except migrate.SchemaRefused as exc:
            raise DtuneError(f"history {name}: {exc}") from None
        metadata.create_all(conn, tables=[schema_version] + [metadata.tables[t] for t in steps.create])
        preparer = conn.dialect.identifier_preparer
        for table, column in steps.add:
            definition = sa.schema.CreateColumn(metadata.tables[table].c[column]).compile(dialect=conn.dialect)
            conn.execute(sa.text(f"ALTER TABLE {preparer.quote(table)} ADD COLUMN {definition}"))
        for table in migrate.TABLE_COLUMNS:
            indexes = {ix["name"] for ix in sa.inspect(conn).get_indexes(table)}
            for index in metadata.tables[table].indexes:
                if index.name not in indexes:
                    index.create(conn)
        if steps.write_version:
            conn.execute(schema_version.delete())
            conn.execute(schema_version.insert().values(version=migrate.SCHEMA_VERSION))


def _sqlite_foreign_keys(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")   # so deleting a transfer deletes its samples
    cursor.close()


def _reason(exc: BaseException, password: str | None = None) -> str:
    """The error's text on one line, the password (should a driver repeat it) replaced by ***."""
    orig = getattr(exc, "orig", None)
    text = " ".join(str(orig if orig is not None else exc).split())
    if password:
        text = text.replace(password, "***")
    return text or type(exc).__name__


class HistoryStore:
    """The transfer history: ``record`` appends, the rest read.

    Not thread-safe to share across threads while a ``rows()`` iterator is
    open; open one store per thread instead (the engine pools connections).
    """

    def __init__(self, engine: Engine, name: str) -> None:
        self.engine = engine
        self.name = name

    def __repr__(self) -> str:
        return f"<HistoryStore {self.name}>"

    def __enter__(self) -> HistoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.engine.dispose()

    @contextlib.contextmanager
    def _errors(self, operation: str) -> Iterator[None]:
        try:
            yield
        except (sa.exc.SQLAlchemyError, ImportError) as exc:
            raise DtuneError(f"history {self.name}: {operation}: {_reason(exc, self.engine.url.password)}") from None

    # ---- writing ---------------------------------------------------------
    def record(self, row: TransferRecord, samples: Iterable[dict] = ()) -> int:
        """Append one transfer and its samples (``{"t","bytes","rate_mbps","params"}``); return its id."""
        row.check()
        values = row.as_dict()
        values.pop("id")
        with self._errors("record a transfer"), self.engine.begin() as conn:
            new_id = conn.execute(transfers.insert().values(**values)).inserted_primary_key[0]
            batch = [_sample_values(new_id, s) for s in samples]
            if batch:
                conn.execute(samples_table.insert(), batch)
        return int(new_id)

    def record_many(self, rows: Sequence[TransferRecord]) -> int:
        """Append many transfers (no samples) in one transaction; return how many."""
        for row in rows:
            row.check()
        batch = [{k: v for k, v in row.as_dict().items() if k != "id"} for row in rows]
        if batch:
            with self._errors("record transfers"), self.engine.begin() as conn:
                conn.execute(transfers.insert(), batch)
        return len(batch)

    # ---- reading ---------------------------------------------------------
    def count(self) -> int:
        with self._errors("count transfers"), self.engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(transfers)).scalar_one())

    def list(self, limit: int = 20, offset: int = 0) -> list[TransferRecord]:
        """The newest ``limit`` transfers after skipping ``offset``, newest first."""
        query = transfers.select().order_by(transfers.c.id.desc()).limit(limit).offset(offset)
        with self._errors("list transfers"), self.engine.connect() as conn:
            return [TransferRecord.from_dict(dict(m)) for m in conn.execute(query).mappings()]

    def get(self, transfer_id: int) -> TransferRecord | None:
        query = transfers.select().where(transfers.c.id == transfer_id)
        with self._errors(f"read transfer {transfer_id}"), self.engine.connect() as conn:
            row = conn.execute(query).mappings().first()
        return TransferRecord.from_dict(dict(row)) if row is not None else None

    def samples(self, transfer_id: int) -> list[dict]:
        """The samples of one transfer in time order, as ``{"t","bytes","rate_mbps","params"}``."""
        s = samples_table
        query = (sa.select(s.c.t, s.c.bytes, s.c.rate_mbps, s.c.params_json)
                 .where(s.c.transfer_id == transfer_id).order_by(s.c.t, s.c.id))
        with self._errors(f"read samples of transfer {transfer_id}"), self.engine.connect() as conn:
            return [{"t": t, "bytes": b, "rate_mbps": r, "params": pj} for t, b, r, pj in conn.execute(query)]

    def rows(self, columns: Sequence[str] | None = None, *, origin: str | None = None) -> Iterator[dict]:
        """Every transfer as a plain dict, oldest first, fetched in batches.

        ``columns`` picks the columns (default all; fewer is faster — the
        decision tree needs the key attributes, θ and the outcomes only);
        ``origin`` keeps one origin ('dtune', 'import', 'sweep').
        """
        names = list(columns or COLUMNS)
        unknown = [n for n in names if n not in COLUMNS]
        if unknown:
            raise ValueError(f"unknown history columns: {', '.join(unknown)}")
        query = sa.select(*(transfers.c[n] for n in names)).order_by(transfers.c.id)
        if origin is not None:
            query = query.where(transfers.c.origin == origin)
        with self._errors("read transfers"), self.engine.connect() as conn:
            result = conn.execution_options(yield_per=ROWS_BATCH).execute(query)
            for part in result.partitions():
                for values in part:
                    yield dict(zip(names, values, strict=True))

    # ---- CSV -------------------------------------------------------------
    def export_csv(self, fh: IO[str]) -> int:
        """Write every transfer as CSV (dtune's own format); return the row count."""
        return write_csv(fh, self.rows())

    def import_csv(self, fh: IO[str], name: str | None = None) -> int:
        """Append the rows of a CSV file (dtune's export or the seed's Table I columns).

        All or nothing: a bad line raises ``DtuneError`` naming ``name`` and the
        line, and nothing is stored. Returns the number of rows imported.
        """
        records = read_csv(fh, name or getattr(fh, "name", "<csv>"))
        return self.record_many(records)


def _sample_values(transfer_id: int, sample: dict) -> dict:
    return {"transfer_id": transfer_id, "t": float(sample["t"]), "bytes": int(sample["bytes"]),
            "rate_mbps": sample.get("rate_mbps"),
            "params_json": sample.get("params", sample.get("params_json"))}
