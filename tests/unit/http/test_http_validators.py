"""Validators: what tells two versions apart, and what may go in If-Range (RFC 9110 §8.8, §13.1.5)."""

from __future__ import annotations

import datetime
import email.utils
import random

import pytest

from dtune.http.validators import Validators, http_time, utc_seconds

OLD = "Tue, 01 Dec 2026 10:00:00 GMT"
NEW = "Tue, 01 Dec 2026 10:05:00 GMT"
LATER = "Tue, 01 Dec 2026 12:00:00 GMT"
ONE_ON = "Tue, 01 Dec 2026 10:00:01 GMT"
TWO_ON = "Tue, 01 Dec 2026 10:00:02 GMT"


def test_an_answer_without_etag_or_last_modified_has_no_validators() -> None:
    assert Validators.of({"content-length": "5"}) is None


@pytest.mark.parametrize("first, then, change", [
    ({"etag": '"a"'}, {"etag": '"b"'}, 'ETag "a" → "b"'),
    ({"etag": '"a"'}, {"etag": 'W/"a"'}, None),                          # weak comparison
    ({"etag": '"a"', "last-modified": OLD}, {"etag": '"a"', "last-modified": NEW}, None),  # ETag decides
    ({"last-modified": OLD}, {"last-modified": NEW}, f"Last-Modified {OLD} → {NEW}"),
    ({"etag": '"a"', "last-modified": OLD}, {"last-modified": NEW}, f"Last-Modified {OLD} → {NEW}"),
    ({"last-modified": OLD}, {"last-modified": OLD}, None),
    ({"etag": '"a"'}, {"last-modified": NEW}, None),                       # nothing to compare
])
def test_a_change_is_told_by_etag_else_last_modified(first: dict, then: dict, change: str | None) -> None:
    a, b = Validators.of(first), Validators.of(then)
    assert a is not None and b is not None
    assert a.change(b) == change


@pytest.mark.parametrize("headers, if_range", [
    ({"etag": '"a"', "last-modified": OLD, "date": LATER}, '"a"'),
    ({"etag": 'W/"a"', "last-modified": OLD, "date": LATER}, OLD),        # a weak ETag may not
    ({"etag": 'W/"a"'}, None),
    ({"last-modified": OLD, "date": LATER}, OLD),
    ({"last-modified": OLD, "date": OLD}, None),                          # modified within the second
    ({"last-modified": OLD, "date": ONE_ON}, None),                       # perhaps 1 ms later (Apache)
    ({"last-modified": OLD, "date": TWO_ON}, OLD),
    ({"last-modified": OLD}, None),                                       # no Date: cannot tell
    ({"last-modified": "yesterday", "date": LATER}, None),               # not a date
    ({"last-modified": OLD, "date": "Tue, 01 Dec 2026 12:00:00 +0100"}, OLD),
])
def test_if_range_takes_a_strong_etag_else_a_strong_date(headers: dict, if_range: str | None) -> None:
    v = Validators.of(headers)
    assert v is not None and v.if_range() == if_range


def test_validators_survive_the_journal_header_and_reject_junk() -> None:
    v = Validators.of({"last-modified": OLD, "date": LATER})
    assert v is not None
    assert Validators.from_header({"url": "x", **v.to_header()}) == v
    assert Validators.from_header({"etag": 5, "last_modified": ["x"]}) is None
    assert Validators.from_header({"etag": '"a"\r\nX: y'}) is None
    assert Validators.from_header({"etag": '"a"', "strong_date": True}) == Validators('"a"', None, False)


@pytest.mark.parametrize("value", [
    "Sun, 06 Nov 1994 08:49:37 GMT", "Thu, 01 Jan 1970 00:00:00 GMT", "Tue, 29 Feb 2028 23:59:59 GMT",
    "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994", "Sun, 06 Nov 1994 08:49:37 +0200",
    "Sun, 06 Nov 1994 08:49 GMT", "  Sun, 06 Nov 1994 08:49:37 GMT  ",
])
def test_an_http_date_is_read_as_email_utils_reads_it(value: str) -> None:
    assert http_time(value) == email.utils.parsedate_to_datetime(value.strip()).timestamp()


@pytest.mark.parametrize("value", ["", "garbage", "Sun, 31 Feb 1994 08:49:37 GMT", "Sun, 06 Nov 1994 25:49:37 GMT",
                                   "Sun, 06 Foo 1994 08:49:37 GMT", "Sun, 06 Nov 1994 08:x:37 GMT", None, 12])
def test_what_is_not_an_http_date_is_none(value: object) -> None:
    assert http_time(value) is None


def test_utc_seconds_is_datetimes_count_and_refuses_what_datetime_refuses() -> None:
    rng = random.Random(1994)
    cases = [(1970, 1, 1, 0, 0, 0), (1, 1, 1, 0, 0, 0), (9999, 12, 31, 23, 59, 59), (2000, 2, 29, 12, 0, 0),
             (1900, 2, 29, 0, 0, 0), (2100, 2, 29, 0, 0, 0), (2026, 4, 31, 0, 0, 0), (0, 1, 1, 0, 0, 0),
             (2026, 12, 1, 24, 0, 0), (2026, 12, 1, 0, 60, 0), (2026, 12, 1, 0, 0, 60)]
    cases += [(rng.randint(-5, 10005), rng.randint(0, 13), rng.randint(0, 32), rng.randint(-1, 24),
               rng.randint(-1, 60), rng.randint(-1, 60)) for _ in range(20000)]
    refused = 0
    for case in cases:
        try:
            want = datetime.datetime(*case, tzinfo=datetime.UTC).timestamp()
        except ValueError:
            refused += 1
            with pytest.raises(ValueError):
                utc_seconds(*case)
            continue
        assert utc_seconds(*case) == want, case
    assert 0 < refused < len(cases)
