"""What ``dtune put`` reads from ``dtune serve``'s answers (untrusted) and how it cuts what is left to send."""

from __future__ import annotations

import base64
import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.fuzz import FUZZ

from dtune.server.uploadhead import format_ranges
from dtune.upload.servedest import answered_sha256, missing, pieces, received_ranges, repr_digest


def test_received_ranges_are_read_sorted_and_merged():
    assert received_ranges("0-9,20-29", 100) == [(0, 10), (20, 30)]
    assert received_ranges(" 20-29 , 0-9,10-14", 100) == [(0, 15), (20, 30)]
    assert received_ranges("", 100) == []


@pytest.mark.parametrize("value", ["0-100", "5-4", "a-b", "-1-3", "0-9;", "0-9,,10-12", "1", "0 - 9",
                                   "0-99999999999999999999"])
def test_a_field_that_does_not_parse_or_leaves_the_file_is_not_resumed(value):
    assert received_ranges(value, 100) is None


def test_missing_is_what_the_ranges_leave():
    assert missing(100, [(0, 10), (20, 30)]) == [(10, 20), (30, 100)]
    assert missing(100, []) == [(0, 100)]
    assert missing(100, [(0, 100)]) == []


def test_pieces_keep_what_was_received_and_cut_the_rest():
    parts, kept = pieces(100, [(10, 40)], 25)
    assert [(p.number, p.start, p.end) for p in parts] == [(1, 0, 10), (2, 10, 40), (3, 40, 65), (4, 65, 90),
                                                            (5, 90, 100)]
    assert kept == {2}


@FUZZ
@given(st.lists(st.tuples(st.integers(0, 999), st.integers(1, 300)), max_size=30), st.integers(1, 400))
def test_pieces_cover_the_file_exactly_once_whatever_was_received(spans, size):
    total = 1000
    text = ",".join(f"{s}-{min(total, s + n) - 1}" for s, n in spans)
    have = received_ranges(text, total)
    assert have is not None
    assert format_ranges(have) == format_ranges(received_ranges(format_ranges(have), total))   # the server's form
    parts, kept = pieces(total, have, size)
    assert parts[0].start == 0 and parts[-1].end == total
    assert all(a.end == b.start for a, b in zip(parts, parts[1:], strict=False))
    assert [p.number for p in parts] == list(range(1, len(parts) + 1))
    assert sum(p.size for p in parts if p.number in kept) == sum(e - s for s, e in have)
    assert all(p.size <= size for p in parts if p.number not in kept)


@pytest.mark.fuzz
@FUZZ
@given(st.text(max_size=200), st.integers(0, 1 << 40))
def test_received_ranges_never_raises_and_stays_inside_the_file(value, total):
    got = received_ranges(value, total)
    if got is not None:
        assert all(0 <= s < e <= total for s, e in got)
        assert all(a[1] < b[0] for a, b in zip(got, got[1:], strict=False))


def test_the_answered_digest_is_read_from_repr_digest():
    sha = hashlib.sha256(b"x").hexdigest()
    assert answered_sha256(repr_digest(sha)) == sha
    other = "sha-512=:" + base64.b64encode(b"\0" * 64).decode() + ":"
    assert answered_sha256(f"{other}, {repr_digest(sha)}") == sha
    assert answered_sha256(other) is None
    assert answered_sha256(None) is None
    assert answered_sha256("sha-256=:short=:") is None


@pytest.mark.fuzz
@FUZZ
@given(st.text(max_size=300))
def test_answered_digest_never_raises(value):
    got = answered_sha256(value)
    assert got is None or len(got) == 64


def _dest_with(sha: str):
    from pathlib import Path

    from dtune.upload.local import LocalFile
    from dtune.upload.servedest import ServeDestination

    dest = ServeDestination("http://127.0.0.1:1/d/", sender=None)  # type: ignore[arg-type]  (verify sends nothing)
    f = LocalFile(path=Path("/nonexistent"), relpath="a b.bin", size=1, mtime=0.0)
    dest._sha[f.relpath] = sha
    return dest, f


def test_verify_fails_when_the_server_stored_other_bytes_or_says_nothing():
    import asyncio

    from dtune.checksums import Checksum
    from dtune.upload.dest import IntegrityError, Remote, Sent

    sha, other = hashlib.sha256(b"x").hexdigest(), hashlib.sha256(b"y").hexdigest()
    dest, f = _dest_with(sha)
    assert asyncio.run(dest.verify(f, Sent(1), Remote(size=1, checksum=Checksum("sha256", sha, "Repr-Digest")))) \
        == "sha256 (the server's Repr-Digest)"
    dest, f = _dest_with(sha)
    with pytest.raises(IntegrityError, match="a%20b.bin: the server's Repr-Digest sha-256 is " + other):
        asyncio.run(dest.verify(f, Sent(1), Remote(size=1, checksum=Checksum("sha256", other, "Repr-Digest"))))
    dest, f = _dest_with(sha)
    with pytest.raises(IntegrityError, match="answered no Repr-Digest"):
        asyncio.run(dest.verify(f, Sent(1), Remote(size=1)))
