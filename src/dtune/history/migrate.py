"""The history's schema version, and what opening a database written by another dtune must change.

Both writers (``lite.py`` with ``sqlite3``, ``store.py`` with SQLAlchemy)
ask ``plan`` what to do with the tables they found, so they agree on every
database. The version lives in a one-row table, ``dtune_schema (version)``,
on every backend. A database without that table but with ``transfers`` was
written before versions existed (version 0).

The rule that keeps old and new dtune working on one database: a schema
change only *adds* columns, each nullable or with a default. So an older
database is upgraded by adding the columns it lacks (old rows read NULL, or
the default), and a database from a newer dtune (a higher version) is used
as it is when it holds every column this dtune writes; otherwise it is
refused. A change that is not an added column needs a step of its own here.

Only SQLAlchemy-free imports: ``dtune get`` reaches this through ``lite.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dtune.history.row import COLUMNS

SCHEMA_VERSION = 2            # 1: transfers and samples as in schema.py, the first versioned schema;
                              # 2: transfers.direction ('get' | 'put'), 'get' for the rows before it
VERSION_TABLE = "dtune_schema"
SAMPLE_COLUMNS = ("id", "transfer_id", "t", "bytes", "rate_mbps", "params_json")
TABLE_COLUMNS: dict[str, tuple[str, ...]] = {"transfers": COLUMNS, "samples": SAMPLE_COLUMNS}
# columns a dtune history has always had: without them a table is not a dtune history (they are
# the primary keys and the NOT NULL columns without a default, which ALTER TABLE could not add)
REQUIRED: dict[str, tuple[str, ...]] = {"transfers": ("id",), "samples": ("id", "transfer_id", "t", "bytes")}
# PostgreSQL: the key of the transaction-level advisory lock held while the tables are checked
# and upgraded, so that processes opening one database at once do not all create or alter them
PG_LOCK_KEY = 0x64_74_75_6E_65   # "dtune"


class SchemaRefused(Exception):
    """The database cannot be used by this dtune; the message says why (without the database name)."""


@dataclass
class Plan:
    """What opening a database changes, in this order, inside one locked transaction."""

    found: int | None                                   # the version found; None: no version table
    create: list[str] = field(default_factory=list)     # tables to create (with their indexes)
    add: list[tuple[str, str]] = field(default_factory=list)   # (table, column) to add
    write_version: bool = False                         # store SCHEMA_VERSION afterwards

    @property
    def changes(self) -> bool:
        return bool(self.create or self.add or self.write_version)


def plan(found: int | None, have: dict[str, set[str]]) -> Plan:
    """What to do with a database whose version is ``found`` and whose tables have these columns.

    ``have`` maps each of the history's tables that exists to its column
    names (a table that is missing is absent). Raises ``SchemaRefused`` for
    a table that is not a dtune history's and for a newer dtune's database
    that lacks a column this dtune writes.
    """
    result = Plan(found=found)
    missing: list[tuple[str, str]] = []
    for table, columns in TABLE_COLUMNS.items():
        if table not in have:
            result.create.append(table)
            continue
        absent = [c for c in REQUIRED[table] if c not in have[table]]
        if absent:
            raise SchemaRefused(f"table {table} has no column {', '.join(absent)}: not a dtune history")
        missing += [(table, c) for c in columns if c not in have[table]]
    if found is not None and found > SCHEMA_VERSION:
        if missing:
            cols = ", ".join(f"{t}.{c}" for t, c in missing)
            raise SchemaRefused(f"written by a newer dtune (schema version {found}; this dtune knows "
                                f"{SCHEMA_VERSION}) and lacks columns this dtune writes ({cols}); "
                                "use that dtune, or another --history")
        return result                       # (a table it lacks is still created)
    result.add = missing
    result.write_version = found != SCHEMA_VERSION
    return result
