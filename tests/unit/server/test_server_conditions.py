"""Range / If-Range / conditional-GET decisions of ``dtune serve`` — pure tables, no sockets."""

from __future__ import annotations

import pytest

from dtune.server.conditions import (
    UNSATISFIABLE,
    Plan,
    accepts_gzip,
    etag_for,
    http_date,
    if_range_allows,
    parse_http_date,
    parse_range,
    plan_file_response,
)

SIZE = 1000

RANGE_TABLE = [
    # header, size, expected
    (None, SIZE, None),
    ("bytes=0-0", SIZE, (0, 0)),
    ("bytes=0-499", SIZE, (0, 499)),
    ("bytes=500-", SIZE, (500, 999)),
    ("bytes=-200", SIZE, (800, 999)),
    ("bytes=-5000", SIZE, (0, 999)),  # suffix longer than the file: all of it
    ("bytes=900-5000", SIZE, (900, 999)),  # last-pos clamped to the end
    ("bytes=999-999", SIZE, (999, 999)),
    ("BYTES = 10-20", SIZE, (10, 20)),  # unit is case-insensitive, OWS allowed
    ("bytes= 10 - 20 ", SIZE, (10, 20)),
    ("bytes=10-20,", SIZE, (10, 20)),  # empty list elements are ignored
    ("bytes=1000-", SIZE, UNSATISFIABLE),
    ("bytes=1000-2000", SIZE, UNSATISFIABLE),
    ("bytes=-0", SIZE, UNSATISFIABLE),
    ("bytes=0-", 0, UNSATISFIABLE),  # nothing to send from an empty file
    ("bytes=-1", 0, UNSATISFIABLE),
    ("bytes=0-1,5-6", SIZE, None),  # several ranges: whole file
    ("bytes=0-1, -1", SIZE, None),
    ("bytes=20-10", SIZE, None),  # invalid: ignored
    ("bytes=abc-", SIZE, None),
    ("bytes=-", SIZE, None),
    ("bytes=1-2-3", SIZE, None),
    ("bytes=+1-2", SIZE, None),
    ("bytes=\u0661-2", SIZE, None),  # non-ASCII digits are not digits here
    ("bytes=", SIZE, None),
    ("bytes", SIZE, None),
    ("items=0-1", SIZE, None),
    ("bytes=" + "9" * 30 + "-", SIZE, None),  # absurd numbers are invalid, not a crash
]


@pytest.mark.parametrize(("header", "size", "expected"), RANGE_TABLE)
def test_parse_range_table(header: str | None, size: int, expected: object) -> None:
    assert parse_range(header, size) == expected


ETAG = etag_for(SIZE, 1_700_000_000_123_456_789)
MTIME = 1_700_000_000
LASTMOD = http_date(MTIME)


def test_etag_changes_with_size_and_mtime() -> None:
    assert etag_for(1, 2) != etag_for(1, 3) != etag_for(2, 3)
    assert ETAG.startswith('"') and ETAG.endswith('"')


def test_http_date_round_trips() -> None:
    assert LASTMOD == "Tue, 14 Nov 2023 22:13:20 GMT"
    assert parse_http_date(LASTMOD) == MTIME
    assert parse_http_date("Tuesday, 14-Nov-23 22:13:20 GMT") == MTIME  # RFC 850
    assert parse_http_date("Tue Nov 14 22:13:20 2023") == MTIME  # asctime
    assert parse_http_date("yesterday") is None


@pytest.mark.parametrize(("value", "allowed"), [
    (ETAG, True),
    ('"other"', False),
    ("W/" + ETAG, False),  # weak tags never satisfy If-Range
    (LASTMOD, True),
    (http_date(MTIME + 1), False),
    ("garbage", False),
])
def test_if_range_table(value: str, allowed: bool) -> None:
    assert if_range_allows(value, ETAG, MTIME) is allowed


def plan(**kw: object) -> Plan:
    args: dict[str, object] = {"is_get": True, "size": SIZE, "mtime": MTIME, "etag": ETAG}
    args.update(kw)
    return plan_file_response(**args)  # type: ignore[arg-type]


@pytest.mark.parametrize(("kw", "expected"), [
    ({}, Plan(200, 0, SIZE)),
    ({"range_value": "bytes=10-19"}, Plan(206, 10, 10)),
    ({"range_value": "bytes=-10"}, Plan(206, 990, 10)),
    ({"range_value": "bytes=2000-"}, Plan(416)),
    ({"range_value": "bytes=0-1,3-4"}, Plan(200, 0, SIZE)),
    ({"range_value": "bytes=10-19", "is_get": False}, Plan(200, 0, SIZE)),  # HEAD ignores Range
    ({"range_value": "bytes=10-19", "if_range": ETAG}, Plan(206, 10, 10)),
    ({"range_value": "bytes=10-19", "if_range": '"stale"'}, Plan(200, 0, SIZE)),
    ({"range_value": "bytes=2000-", "if_range": '"stale"'}, Plan(200, 0, SIZE)),
    ({"range_value": "bytes=10-19", "if_range": LASTMOD}, Plan(206, 10, 10)),
    ({"if_none_match": ETAG}, Plan(304)),
    ({"if_none_match": 'W/' + ETAG}, Plan(304)),  # weak comparison for If-None-Match
    ({"if_none_match": '"a", ' + ETAG}, Plan(304)),
    ({"if_none_match": "*"}, Plan(304)),
    ({"if_none_match": '"other"'}, Plan(200, 0, SIZE)),
    ({"if_none_match": '"other"', "if_modified_since": LASTMOD}, Plan(200, 0, SIZE)),  # INM wins
    ({"if_modified_since": LASTMOD}, Plan(304)),
    ({"if_modified_since": http_date(MTIME - 1)}, Plan(200, 0, SIZE)),
    ({"if_modified_since": "garbage"}, Plan(200, 0, SIZE)),
    ({"if_none_match": ETAG, "is_get": False}, Plan(304)),
])
def test_plan_file_response_table(kw: dict[str, object], expected: Plan) -> None:
    assert plan(**kw) == expected


@pytest.mark.parametrize(("value", "takes"), [
    ("gzip", True), ("GZIP", True), ("x-gzip", True), ("gzip, deflate, br", True), ("br;q=1, gzip;q=0.1", True),
    ("*", True), ("*;q=0.5", True), ("identity, *;q=0.2", True),
    ("", False), ("identity", False), ("br", False), ("gzip;q=0", False), ("gzip; q=0.000", False),
    ("gzip;q=0, *", False),            # named gzip wins over *
    ("*;q=0", False), ("gzip;q=nan", False), ("gzip;q=inf", False), ("gzip;q=-1", False),
    ("gzip;q=abc", False), ("gzipx", False), (",,,;;;=", False),
])
def test_accepts_gzip_table(value: str, takes: bool) -> None:
    assert accepts_gzip(value) is takes
