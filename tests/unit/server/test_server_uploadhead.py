"""The upload protocol's header fields and received-range sets (``dtune.server.uploadhead``): rules and fuzz."""

from __future__ import annotations

import base64
import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.fuzz import FUZZ

from dtune.server.uploadhead import (
    HeadError,
    add_range,
    covers,
    format_ranges,
    parse_content_md5,
    parse_content_range,
    parse_length,
    parse_repr_digest,
    received_bytes,
    valid_ranges,
)

SHA = hashlib.sha256(b"x").digest()
SHA_B64 = base64.b64encode(SHA).decode()


@pytest.mark.parametrize(("value", "expected"), [
    ("bytes 0-9/10", (0, 10, 10)),
    ("bytes 5-5/6", (5, 6, 6)),
    ("  bytes 100-199/1000 ", (100, 200, 1000)),
    ("bytes  0-0/1", (0, 1, 1)),
])
def test_content_range_gives_a_half_open_range_and_the_total(value: str, expected: tuple[int, int, int]) -> None:
    assert parse_content_range(value) == expected


@pytest.mark.parametrize("value", [
    "bytes 9-0/10", "bytes 0-10/10", "bytes */10", "bytes 0-9/*", "bytes -1-9/10", "bytes 0--9/10",
    "bits 0-9/10", "bytes 0-9", "bytes=0-9/10", "bytes 0x1-9/10", "bytes 0-9/10, bytes 10-19/20",
    "bytes +0-9/10", "bytes 0-9/99999999999999999999", "", "bytes 0-9 /10", "bytes ٠-٩/١٠",
])
def test_garbage_negative_or_reversed_content_ranges_are_refused_with_400(value: str) -> None:
    with pytest.raises(HeadError) as err:
        parse_content_range(value)
    assert err.value.status == 400 and "Content-Range" in err.value.reason


@pytest.mark.parametrize(("value", "n"), [("0", 0), ("12", 12), (" 7 ", 7), ("9" * 19, int("9" * 19))])
def test_content_length(value: str, n: int) -> None:
    assert parse_length(value) == n


@pytest.mark.parametrize("value", ["-1", "+1", "1e3", "", "1 2", "0x10", "9" * 20, "12, 12", "١"])
def test_bad_content_length_is_refused(value: str) -> None:
    with pytest.raises(HeadError):
        parse_length(value)


def test_repr_digest_takes_sha256_and_sha512_and_ignores_other_algorithms_and_parameters() -> None:
    sha512 = hashlib.sha512(b"x").digest()
    value = f"md5=:{base64.b64encode(b'0' * 16).decode()}:, sha-256=:{SHA_B64}:;p=1, " \
            f"sha-512=:{base64.b64encode(sha512).decode()}:"
    assert parse_repr_digest(value) == {"sha-256": SHA, "sha-512": sha512}


@pytest.mark.parametrize("value", [
    f"sha-256={SHA_B64}",  # not a byte sequence
    f"sha-256=:{SHA_B64}",
    f"sha-256=:{SHA_B64[:-4]}:",  # 30 bytes
    "sha-256=:!!!!:",
    f"SHA-256=:{SHA_B64}:",  # keys are lower case in structured fields
    "md5=:AAAAAAAAAAAAAAAAAAAAAA==:",  # only algorithms the server cannot check
    f"sha-256=:{SHA_B64}:,",
    "",
    "=:AA==:",
])
def test_bad_repr_digest_is_refused(value: str) -> None:
    with pytest.raises(HeadError) as err:
        parse_repr_digest(value)
    assert "Repr-Digest" in err.value.reason


def test_content_md5_is_16_bytes_of_base64() -> None:
    md5 = hashlib.md5(b"x").digest()
    assert parse_content_md5(base64.b64encode(md5).decode()) == md5
    for bad in ("", "AAAA", base64.b64encode(b"1" * 17).decode(), "not base64!"):
        with pytest.raises(HeadError):
            parse_content_md5(bad)


def test_ranges_merge_overlapping_and_touching_pieces_in_any_order() -> None:
    ranges: list[tuple[int, int]] = []
    ranges = add_range(ranges, 20, 30)
    ranges = add_range(ranges, 0, 10)
    assert ranges == [(0, 10), (20, 30)] and format_ranges(ranges) == "0-9,20-29"
    assert not covers(ranges, 30)
    ranges = add_range(ranges, 5, 21)  # overlaps both
    assert ranges == [(0, 30)] and covers(ranges, 30) and not covers(ranges, 31)
    assert add_range([(0, 10)], 10, 12) == [(0, 12)]  # touching
    assert add_range([(0, 10)], 3, 3) == [(0, 10)]  # empty
    assert covers([], 0) and format_ranges([]) == ""


def test_journal_ranges_read_back_are_checked_again() -> None:
    assert valid_ranges([[0, 10], [20, 30]], 30) == [(0, 10), (20, 30)]
    for bad in ([[0, 10], [10, 20]], [[5, 3]], [[0, 40]], [[20, 30], [0, 10]], [[-1, 3]], [[0, 1.5]],
                [[True, 3]], "0-9", [[0]], None):
        assert valid_ranges(bad, 30) is None, bad


pieces = st.lists(st.tuples(st.integers(0, 300), st.integers(1, 60)), max_size=30)


@pytest.mark.fuzz
@FUZZ
@given(pieces=pieces)
def test_merged_ranges_hold_exactly_the_bytes_of_the_pieces(pieces: list[tuple[int, int]]) -> None:
    ranges: list[tuple[int, int]] = []
    have: set[int] = set()
    for start, n in pieces:
        ranges = add_range(ranges, start, start + n)
        have.update(range(start, start + n))
    assert received_bytes(ranges) == len(have)
    assert all(a < b for a, b in ranges) and all(b < c for (_, b), (c, _) in zip(ranges, ranges[1:], strict=False))
    assert set().union(*(range(a, b) for a, b in ranges)) == have
    assert valid_ranges([list(r) for r in ranges], 400) == ranges
    assert covers(ranges, 100) == set(range(100)).issubset(have)


@pytest.mark.fuzz
@FUZZ
@given(value=st.one_of(st.text(max_size=80), st.from_regex(r"bytes [0-9 -]{0,12}/[0-9*]{0,6}", fullmatch=True)))
def test_any_content_range_text_parses_to_a_valid_range_or_is_a_400(value: str) -> None:
    try:
        start, end, total = parse_content_range(value)
    except HeadError as exc:
        assert exc.status == 400
    else:
        assert 0 <= start < end <= total


@pytest.mark.fuzz
@FUZZ
@given(value=st.one_of(st.text(max_size=120),
                       st.lists(st.tuples(st.sampled_from(["sha-256", "sha-512", "md5", "x", "A", ""]),
                                          st.binary(max_size=70).map(lambda b: base64.b64encode(b).decode()),
                                          st.sampled_from([":", "", ";q=1:"])),
                                max_size=3).map(lambda ms: ", ".join(f"{k}=:{v}{e}" for k, v, e in ms))))
def test_any_repr_digest_text_parses_to_checked_digests_or_is_a_400(value: str) -> None:
    try:
        found = parse_repr_digest(value)
    except HeadError as exc:
        assert exc.status == 400
    else:
        assert set(found) <= {"sha-256", "sha-512"}
        assert all(len(v) == {"sha-256": 32, "sha-512": 64}[k] for k, v in found.items())
