"""``dtune.http.ratelimit`` and ``message.parse_retry_after``: what servers say of their request limits.

The cases follow the headers real hosts send: Zenodo and GitHub (X-RateLimit-*
with an epoch reset), the IETF draft's early separate fields and combined
``RateLimit: limit=…, remaining=…, reset=…``, and its later structured
``RateLimit``/``RateLimit-Policy``. Untrusted input never raises.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.fuzz import FUZZ

from dtune.http.message import parse_retry_after
from dtune.http.ratelimit import RateHint, hint, number, params

NOW = 1_700_000_000.0


@pytest.mark.parametrize(("headers", "want"), [
    ({}, None),
    ({"content-length": "5"}, None),
    # Zenodo / GitHub: quota, what is left, the reset in epoch seconds
    ({"x-ratelimit-limit": "133", "x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(NOW) + 42)},
     RateHint(limit=133, remaining=0, reset=42, source="X-RateLimit")),
    # a reset in delta-seconds (below 10⁹)
    ({"x-ratelimit-remaining": "5", "x-ratelimit-reset": "30"},
     RateHint(remaining=5, reset=30, source="X-RateLimit")),
    # the IETF draft, early: separate fields, reset in delta-seconds, policy with its window
    ({"ratelimit-limit": "100", "ratelimit-remaining": "7", "ratelimit-reset": "12",
      "ratelimit-policy": "100;w=60"},
     RateHint(limit=100, window=60, remaining=7, reset=12, source="RateLimit")),
    # … its combined form
    ({"ratelimit": "limit=10, remaining=3, reset=4"},
     RateHint(limit=10, remaining=3, reset=4, source="RateLimit")),
    # … and the later structured one
    ({"ratelimit": '"default";r=50;t=30', "ratelimit-policy": '"default";q=100;w=60'},
     RateHint(limit=100, window=60, remaining=50, reset=30, source="RateLimit")),
    # Retry-After alone, and with a quota
    ({"retry-after": "7"}, RateHint(retry_after=7.0, source="Retry-After")),
    ({"retry-after": "Tue, 14 Nov 2023 22:13:27 GMT"}, RateHint(retry_after=7.0, source="Retry-After")),
    ({"retry-after": "2", "x-ratelimit-remaining": "0", "x-ratelimit-reset": "9"},
     RateHint(remaining=0, reset=9, retry_after=2.0, source="Retry-After")),
    # values that do not parse are ignored
    ({"x-ratelimit-remaining": "-1", "x-ratelimit-reset": "soon"}, None),
    ({"retry-after": "²"}, None),
], ids=["none", "unrelated", "zenodo", "delta-reset", "ietf-early", "ietf-combined", "ietf-structured",
        "retry-after", "retry-after-date", "retry-after-and-quota", "garbage", "unicode-digit"])
def test_hint_reads_each_family_of_headers(headers: dict[str, str], want: RateHint | None) -> None:
    assert hint(headers, NOW) == want


def test_quota_rate_is_the_policy_quota_over_its_window() -> None:
    assert RateHint(limit=100, window=60).quota_rate == pytest.approx(100 / 60)
    assert RateHint(limit=100).quota_rate is None


@pytest.mark.parametrize(("text", "want"), [("12", 12.0), (" 1.5 ", 1.5), ("1e3", None), ("-3", None),
                                            ("inf", None), ("nan", None), ("٣", None), ("", None)])
def test_number_takes_plain_non_negative_decimals_only(text: str, want: float | None) -> None:
    assert number(text) == want


def test_params_read_the_first_item_of_a_structured_list() -> None:
    assert params('"a";r=1;t=2, "b";r=9;t=99') == {"r": 1.0, "t": 2.0}
    assert params("limit=10, remaining=3, reset=4") == {"limit": 10.0, "remaining": 3.0, "reset": 4.0}


HEADER_NAMES = st.sampled_from(["retry-after", "x-ratelimit-limit", "x-ratelimit-remaining",
                                "x-ratelimit-reset", "ratelimit", "ratelimit-limit", "ratelimit-remaining",
                                "ratelimit-reset", "ratelimit-policy", "other"])
LATIN1 = st.text(st.characters(min_codepoint=0, max_codepoint=255), max_size=60)
VALUES = st.one_of(LATIN1, st.integers(-10**20, 10**20).map(str),
                   st.floats(allow_nan=True, allow_infinity=True).map(str),
                   st.sampled_from(['"d";r=5;t=2', "limit=1, remaining=0, reset=1", "10;w=1",
                                    "Wed, 21 Oct 2015 07:28:00 GMT", "Fri, 31 Dec 9999 23:59:59 GMT",
                                    "Mon, 01 Jan 0001 00:00:00 GMT"]))


@pytest.mark.fuzz
@FUZZ
@given(st.dictionaries(HEADER_NAMES, VALUES, max_size=6), st.floats(0, 4e9))
def test_untrusted_headers_never_crash_and_give_sane_numbers(headers: dict[str, str], now: float) -> None:
    got = hint(headers, now)
    if got is None:
        return
    for value in (got.limit, got.window, got.remaining, got.reset, got.retry_after):
        assert value is None or (value >= 0 and value == value and value != float("inf"))


@pytest.mark.fuzz
@FUZZ
@given(LATIN1, st.floats(0, 4e9))
def test_retry_after_never_crashes_on_untrusted_text(value: str, now: float) -> None:
    got = parse_retry_after(value, now)
    assert got is None or got >= 0
