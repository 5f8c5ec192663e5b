"""Bencoding: round trips, the format's exact spelling, and malformed input refused (pure)."""

from __future__ import annotations

import hashlib

import pytest
from dtune_lab.bench.bencode import MAX_DEPTH, BencodeError, bdecode, bencode, info_hash
from hypothesis import given, settings
from hypothesis import strategies as st


@pytest.mark.parametrize("value, text", [
    (0, b"i0e"), (-42, b"i-42e"), (2**70, b"i1180591620717411303424e"),
    (b"", b"0:"), (b"spam", b"4:spam"), ("né", b"3:n\xc3\xa9"),
    ([], b"le"), ([1, b"a", [2]], b"li1e1:ali2eee"),
    ({}, b"de"), ({"b": 1, "a": b"x"}, b"d1:a1:x1:bi1ee"),  # keys sorted, as the format requires
    ({b"\xff": 1, b"\x00": 2}, b"d1:\x00i2e1:\xffi1ee"),   # sorted as raw bytes
])
def test_encoding_is_the_formats_spelling(value: object, text: bytes) -> None:
    assert bencode(value) == text


def test_decode_inverts_encode_on_nested_data() -> None:
    value = {b"announce": b"http://t/announce", b"info": {b"files": [{b"length": 5, b"path": [b"a", b"b c"]}],
                                                           b"name": b"ds", b"piece length": 262144,
                                                           b"pieces": bytes(range(20))}}
    assert bdecode(bencode(value)) == value


@pytest.mark.parametrize("bad", [True, 1.5, None, {1: 2}, {"a": 1, b"a": 2}, object()])
def test_encode_refuses_what_bencoding_cannot_say(bad: object) -> None:
    with pytest.raises(TypeError):
        bencode(bad)


@pytest.mark.parametrize("data", [
    b"", b"i", b"i12", b"ie", b"i-e", b"i-0e", b"i03e", b"i1x2e", b"i" + b"9" * 40 + b"e",
    b"5:abc", b"-1:a", b"01:a", b"3abc", b"99999999999999999999999999999999999:",
    b"l", b"li1e", b"d", b"d1:a", b"di1ei2ee", b"d1:ai1e1:ai2ee",
    b"x", b"i1ei2e", b"4:spamX", b"l" * (MAX_DEPTH + 1) + b"e" * (MAX_DEPTH + 1),
])
def test_malformed_input_is_a_bencode_error_and_nothing_else(data: bytes) -> None:
    with pytest.raises(BencodeError):
        bdecode(data)


def test_unsorted_keys_are_accepted_but_a_str_input_is_not() -> None:
    assert bdecode(b"d1:bi1e1:ai2ee") == {b"b": 1, b"a": 2}
    with pytest.raises(BencodeError):
        bdecode("i1e")  # type: ignore[arg-type]


def test_info_hash_is_sha1_of_the_info_dict_as_written_even_when_unsorted() -> None:
    info = b"d4:name2:ds12:piece lengthi16384e1:zi0e1:ai1ee"  # keys not sorted: re-encoding would differ
    torrent = b"d8:announce3:url4:info" + info + b"7:comment1:xe"
    assert info_hash(torrent) == hashlib.sha1(info).digest()
    assert bencode(bdecode(info)) != info


@pytest.mark.parametrize("data", [b"le", b"d8:announce3:urle", b"d4:infoi1ee", b"d4:infodee4:junk", b"junk"])
def test_info_hash_refuses_what_is_no_torrent(data: bytes) -> None:
    with pytest.raises(BencodeError):
        info_hash(data)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_decode_or_raise_bencode_error(data: bytes) -> None:
    try:
        value = bdecode(data)
    except BencodeError:
        return
    assert bdecode(bencode(value)) == value  # what was read can be written back (keys then sorted)


_values = st.recursive(st.integers(-2**63, 2**64) | st.binary(max_size=20),
                       lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.binary(max_size=8), inner,
                                                                                   max_size=4),
                       max_leaves=20)


@settings(max_examples=200, deadline=None)
@given(_values)
def test_every_value_round_trips(value: object) -> None:
    assert bdecode(bencode(value)) == value
