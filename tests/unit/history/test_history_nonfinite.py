"""Non-finite numbers (inf, -inf, nan) in the history's JSON fields round-trip: written as strict
JSON (the strings "Infinity", "-Infinity", "NaN"), read back as the floats they were, in SQLite
(both writers) and CSV; PostgreSQL in tests/net/test_history_postgres.py."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

from support.history import make_record

from dtune.history import open_store
from dtune.history.csvio import read_csv, write_csv
from dtune.history.lite import record as lite_record
from dtune.history.row import json_text, json_value

PARAMS = {"used": {"all": {"cc": 8, "p": 1, "pp": 4}}, "thr": math.inf, "low": [-math.inf, math.nan, 1.5],
          "name": "ok"}
SETTINGS = {"eta": math.inf, "floor": -math.inf}


def same(a: object, b: object) -> bool:
    """Equal, with nan equal to nan."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def test_json_text_is_strict_json_and_reads_back() -> None:
    text = json_text(PARAMS)
    assert "Infinity" in text
    json.loads(text, parse_constant=lambda name: (_ for _ in ()).throw(ValueError(name)))  # no bare constants
    assert same(json_value(text), PARAMS)
    assert same(json_value('{"x": Infinity, "y": NaN}'), {"x": math.inf, "y": math.nan})  # older rows


def test_sqlite_rows_written_either_way_read_back_non_finite_values(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    first = lite_record(path, make_record(params_json=PARAMS, tuner_settings=SETTINGS),
                        [{"t": 1.0, "bytes": 1, "rate_mbps": 0.1, "params": {"r": math.inf}}])
    with open_store(f"sqlite:///{path}") as store:
        second = store.record(make_record(params_json=PARAMS, tuner_settings=SETTINGS))
        for row_id in (first, second):
            row = store.get(row_id)
            assert row is not None
            assert same(row.params_json, PARAMS) and same(row.tuner_settings, SETTINGS)
        assert store.samples(first)[0]["params"] == {"r": math.inf}


def test_csv_round_trips_non_finite_values_in_json_fields() -> None:
    fh = io.StringIO()
    write_csv(fh, [make_record(params_json=PARAMS, tuner_settings=SETTINGS).as_dict()])
    assert "Infinity" in fh.getvalue()
    (row,) = read_csv(io.StringIO(fh.getvalue()), "t.csv")
    assert same(row.params_json, PARAMS) and same(row.tuner_settings, SETTINGS)
