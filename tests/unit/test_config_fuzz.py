"""Property tests of the config file (``config.toml``): any bytes, and any TOML whose keys are
dtune's options with values of any type, give option values or a ``UsageError`` naming the file
(and the key), never another exception."""

from __future__ import annotations

import datetime
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.fuzz import FUZZ

from dtune.config import resolve
from dtune.errors import UsageError
from dtune.options import OPTIONS

pytestmark = pytest.mark.fuzz
KEYS = sorted(opt.key for opt in OPTIONS)


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return {"nan": "nan", "inf": "inf", "-inf": "-inf"}.get(str(value), repr(value))
    if isinstance(value, str):
        return '"' + "".join(c if c.isalnum() or c in " ./:-_" else f"\\u{ord(c):04x}" for c in value) + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + "}"
    return str(value)  # int, date, datetime


scalars = st.one_of(st.booleans(), st.integers(-2**63, 2**63 - 1), st.floats(), st.text(max_size=20),
                    st.sampled_from(["", "0", "-1", "1K", "4G", "1e400", "auto", "off", "none", "http://h/",
                                     "nan", "99999999999999999999", "1:2", "*"]),
                    st.dates(), st.datetimes(timezones=st.just(datetime.UTC)))
values = st.one_of(scalars, st.lists(scalars, max_size=3), st.dictionaries(st.sampled_from(["a", "b"]), scalars,
                                                                           max_size=2))
tables = st.dictionaries(st.sampled_from(KEYS) | st.text("abc-", min_size=1, max_size=4), values, max_size=4)


def resolve_file(text: bytes) -> None:
    box = Path(tempfile.mkdtemp(prefix="dtune-fuzz-config-"))
    path = box / "config.toml"
    path.write_bytes(text)
    try:
        values = resolve(OPTIONS, environ={}, config=path)
    except UsageError as exc:
        assert str(exc).startswith(f"config file {path}: "), exc
        return
    finally:
        shutil.rmtree(box, ignore_errors=True)
    assert set(values) == {opt.name for opt in OPTIONS}


@FUZZ
@given(table=tables, section=st.sampled_from(["", "[get]\n", "[serve]\n"]))
def test_any_typed_option_value_gives_a_value_or_a_usage_error(table: dict, section: str) -> None:
    text = section + "".join(f'"{k}" = {_toml_value(v)}\n' for k, v in table.items())
    resolve_file(text.encode())


@FUZZ
@given(text=st.one_of(st.binary(max_size=300), st.text(max_size=300).map(lambda t: t.encode("utf-8", "surrogatepass"))))
def test_random_bytes_give_values_or_a_usage_error(text: bytes) -> None:
    resolve_file(text)
