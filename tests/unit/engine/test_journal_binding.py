"""``dtune.engine.journal``: what binds a journal to its source (``judge_header``, ``binding_url``),
on plain data, and property tests of the journal parser and the header check on arbitrary input."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.fuzz import FUZZ

from dtune.checksums import Checksum
from dtune.engine.journal import MAGIC, JournalState, binding_url, judge_header, parse_journal, source_header

URL = "https://data.example.org/a/f.nc"
SIGNED = "https://bucket.s3.amazonaws.com/f.nc?X-Amz-Algorithm=AWS4&X-Amz-Date=20260101T000000Z" \
         "&X-Amz-Expires=3600&X-Amz-Signature={sig}&X-Amz-Credential=AK%2F1"


def ok(header: dict, urls: list[str], size: int | None = 100, checksum: Checksum | None = None,
       piece: list[int] | None = None) -> bool:
    return judge_header(header, urls=urls, size=size, checksum=checksum, piece=piece) is None


# -- the source ---------------------------------------------------------------------------------------

def test_a_journal_of_another_url_describes_something_else() -> None:
    why = judge_header({"url": "https://data.example.org/b/f.nc", "size": 100}, urls=[URL], size=100,
                       checksum=None)
    assert why is not None and "another source" in why


def test_a_renewed_link_with_only_a_new_signature_still_resumes() -> None:
    header = {**source_header([SIGNED.format(sig="aaaa")]), "size": 100}
    assert "aaaa" not in json.dumps(header) and "Credential" not in json.dumps(header)  # no credential stored
    assert ok(header, [SIGNED.format(sig="bbbb")])
    assert not ok(header, [SIGNED.format(sig="bbbb").replace("/f.nc", "/g.nc")])   # another object


@pytest.mark.parametrize(("url", "bound"), [
    ("https://user:pw@H.example/x?a=1&sig=S#frag", "https://h.example/x?a=1"),
    ("https://h/x?b=2&a=1", "https://h/x?b=2&a=1"),            # the naming query stays, in order
    ("https://h/x?Expires=1&Key-Pair-Id=K&Signature=S&Policy=P", "https://h/x"),  # CloudFront
    ("https://h/x?sv=1&se=2&sp=r&sig=S&st=3&sr=b", "https://h/x"),                 # Azure SAS
])
def test_binding_url_drops_credentials_and_signatures_only(url: str, bound: str) -> None:
    assert binding_url(url) == bound


@pytest.mark.parametrize(("recorded", "now", "trusted"), [
    (["http://m1/f", "http://m2/f"], ["http://m2/f", "http://m3/f"], True),   # a mirror changed: one shared
    (["http://m1/f", "http://m2/f"], ["http://m3/f", "http://m4/f"], False),  # disjoint: another source
    (["http://m1/f", "http://m2/f"], ["http://m1/f"], True),                  # mirrors dropped
])
def test_a_replica_set_binds_while_it_shares_a_url_with_the_recorded_one(recorded, now, trusted) -> None:
    assert ok({**source_header(recorded), "size": 100}, now) is trusted


# -- size, checksum, piece, validators -----------------------------------------------------------------

@pytest.mark.parametrize(("change", "words"), [
    ({"size": 99}, "99 bytes"),
    ({"checksum": "sha256:" + "cd" * 32}, "other content"),
    ({"piece": [0, 50]}, "another piece"),
])
def test_each_bound_field_that_differs_sets_the_journal_aside(change: dict, words: str) -> None:
    header = {"url": URL, "size": 100, "checksum": "sha256:" + "ab" * 32, **change}
    why = judge_header(header, urls=[URL], size=100, checksum=Checksum("sha256", "ab" * 32, "t"))
    assert why is not None and words in why


@pytest.mark.parametrize("header", [
    {"url": URL, "size": "100"}, {"url": URL, "size": True}, {"url": URL, "size": -1}, {"url": URL},
    {"url": 5, "size": 100}, {"size": 100}, {"url": URL, "size": 100, "replicas": URL},
    {"url": URL, "size": 100, "replicas": [1]}, {"url": URL, "size": 100, "etag": []},
    {"url": URL, "size": 100, "last_modified": 3}, {"url": URL, "size": 100, "checksum": {"a": 1}},
    {"url": URL, "size": 100, "piece": "0-5"}, [URL], "x", None,
])
def test_a_header_with_wrong_typed_fields_is_a_reason_not_an_exception(header: object) -> None:
    why = judge_header(header, urls=[URL], size=100, checksum=None)
    assert isinstance(why, str) and why


def test_this_dtunes_header_and_an_older_ones_both_bind() -> None:
    assert ok({**source_header([URL]), "size": 100, "checksum": None, "etag": '"e"', "last_modified": None}, [URL])
    assert ok({"url": URL, "size": 100, "sha256": None, "etag": None}, [URL])   # no "v": an older dtune's


# -- property tests -------------------------------------------------------------------------------------
pytestmark = pytest.mark.fuzz

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=6),
                    max_leaves=20)
FIELDS = st.fixed_dictionaries({}, optional={k: JSON for k in ("v", "url", "replicas", "size", "checksum", "sha256",
                                                               "etag", "last_modified", "piece", "strong_date")})


@FUZZ
@given(header=JSON | FIELDS, size=st.none() | st.integers(0, 10**12),
       urls=st.lists(st.text(max_size=30) | st.just(URL), min_size=1, max_size=3))
def test_judge_header_of_any_json_is_none_or_a_reason(header, size, urls) -> None:
    why = judge_header(header, urls=urls, size=size, checksum=Checksum("sha256", "ab" * 32, "t"), piece=None)
    assert why is None or (isinstance(why, str) and why)
    if why is None:  # what resumes has a usable size
        assert isinstance(header, dict) and isinstance(header["size"], int) and header["size"] >= 0


@FUZZ
@given(data=st.binary(max_size=400) | st.builds(lambda h, rest: (MAGIC + json.dumps(h)).encode() + rest,
                                                JSON | FIELDS, st.binary(max_size=200)))
def test_parse_journal_of_any_bytes_is_a_state_or_none(data: bytes) -> None:
    state = parse_journal(data)
    assert state is None or isinstance(state, JournalState)
    if state is not None:
        judge_header(state.header, urls=[URL], size=None, checksum=None)  # never raises
        assert all(0 <= s < e for s, e in state.done)
