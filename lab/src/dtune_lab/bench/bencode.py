"""Bencoding (BitTorrent's data format, BEP 3) for the bench's tracker and torrent files (pure).

::

    bencode({"interval": 30, "peers": b"..."})   # b'd8:intervali30e5:peers...e'
    bdecode(b"li1e3:abce")                        # [1, b'abc']
    info_hash(torrent_bytes)                      # SHA-1 of the info dictionary as written

Integers are ``i<n>e``, byte strings ``<len>:<bytes>``, lists ``l...e``,
dictionaries ``d...e`` with byte-string keys in sorted order. ``bencode``
accepts ``str`` (as UTF-8) wherever bytes may go and writes dictionary keys
sorted, as the format requires. ``bdecode`` takes untrusted bytes: anything
malformed -- truncated, leading zeros, ``-0``, non-string keys, nesting
deeper than ``MAX_DEPTH``, trailing bytes -- is a ``BencodeError`` (a
ValueError), never another exception. It does not insist on sorted keys
(some torrent writers get that wrong) but refuses a repeated key.
"""

from __future__ import annotations

import hashlib
from typing import Any

MAX_DEPTH = 64
# A longer integer is no length, count or port anyone sends; refusing it spares
# the int() of a megabyte of digits.
MAX_INT_DIGITS = 32


class BencodeError(ValueError):
    """Bytes that are not one well-formed bencoded value."""


def bencode(value: Any) -> bytes:
    """The bencoding of ``value``: int, bytes/str, list/tuple, dict with bytes/str keys."""
    out: list[bytes] = []
    _encode(value, out)
    return b"".join(out)


def _encode(value: Any, out: list[bytes]) -> None:
    if isinstance(value, bool):
        raise TypeError("bencode: a bool is no integer here; give 0 or 1")
    if isinstance(value, int):
        out.append(b"i%de" % value)
    elif isinstance(value, bytes | bytearray | memoryview):
        data = bytes(value)
        out.append(b"%d:" % len(data))
        out.append(data)
    elif isinstance(value, str):
        _encode(value.encode(), out)
    elif isinstance(value, list | tuple):
        out.append(b"l")
        for item in value:
            _encode(item, out)
        out.append(b"e")
    elif isinstance(value, dict):
        keys = {(k.encode() if isinstance(k, str) else k): v for k, v in value.items()}
        if not all(isinstance(k, bytes) for k in keys):
            raise TypeError("bencode: dictionary keys must be bytes or str")
        if len(keys) != len(value):
            raise TypeError("bencode: two keys are the same bytes")
        out.append(b"d")
        for key in sorted(keys):
            _encode(key, out)
            _encode(keys[key], out)
        out.append(b"e")
    else:
        raise TypeError(f"bencode: cannot encode {type(value).__name__}")


def bdecode(data: bytes) -> Any:
    """The one value ``data`` holds (ints, bytes, lists, dicts with bytes keys)."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise BencodeError("bdecode: needs bytes")
    data = bytes(data)
    value, end = _decode(data, 0, 0)
    if end != len(data):
        raise BencodeError(f"bdecode: {len(data) - end} bytes after the value")
    return value


def _decode(data: bytes, pos: int, depth: int) -> tuple[Any, int]:
    """The value starting at ``pos`` and the offset just after it."""
    if pos >= len(data):
        raise BencodeError("bdecode: truncated")
    lead = data[pos:pos + 1]
    if lead == b"i":
        end = data.find(b"e", pos + 1, pos + 2 + MAX_INT_DIGITS)
        if end < 0:
            raise BencodeError(f"bdecode: integer at {pos} has no end")
        return _integer(data[pos + 1:end], pos), end + 1
    if lead.isdigit():
        return _string(data, pos)
    if depth >= MAX_DEPTH:
        raise BencodeError(f"bdecode: nested deeper than {MAX_DEPTH}")
    if lead == b"l":
        items = []
        pos += 1
        while data[pos:pos + 1] != b"e":
            item, pos = _decode(data, pos, depth + 1)
            items.append(item)
        return items, pos + 1
    if lead == b"d":
        out: dict[bytes, Any] = {}
        pos += 1
        while data[pos:pos + 1] != b"e":
            if not data[pos:pos + 1].isdigit():
                raise BencodeError(f"bdecode: dictionary key at {pos} is not a string")
            key, pos = _string(data, pos)
            if key in out:
                raise BencodeError(f"bdecode: key {key!r} twice")
            out[key], pos = _decode(data, pos, depth + 1)
        return out, pos + 1
    raise BencodeError(f"bdecode: unexpected {lead!r} at {pos}")


def _integer(digits: bytes, pos: int) -> int:
    body = digits[1:] if digits.startswith(b"-") else digits
    if not body.isdigit() or (body.startswith(b"0") and len(body) > 1) or digits == b"-0":
        raise BencodeError(f"bdecode: bad integer {digits[:40]!r} at {pos}")
    return int(digits)


def _string(data: bytes, pos: int) -> tuple[bytes, int]:
    colon = data.find(b":", pos, pos + MAX_INT_DIGITS + 1)
    if colon < 0:
        raise BencodeError(f"bdecode: string length at {pos} has no colon")
    digits = data[pos:colon]
    if not digits.isdigit() or (digits.startswith(b"0") and len(digits) > 1):
        raise BencodeError(f"bdecode: bad string length {digits!r} at {pos}")
    start = colon + 1
    end = start + int(digits)
    if end > len(data):
        raise BencodeError(f"bdecode: string at {pos} runs past the end")
    return data[start:end], end


def info_hash(torrent: bytes) -> bytes:
    """The torrent's identity: SHA-1 of its ``info`` dictionary exactly as the file spells it.

    Raises BencodeError unless ``torrent`` is a bencoded dictionary with an ``info`` dictionary.
    """
    meta = bdecode(torrent)  # the whole file must be well-formed, not just the part hashed
    if not isinstance(meta, dict) or not isinstance(meta.get(b"info"), dict):
        raise BencodeError("torrent: no info dictionary")
    pos = 1
    while torrent[pos:pos + 1] != b"e":
        key, pos = _string(torrent, pos)
        _, end = _decode(torrent, pos, 1)
        if key == b"info":
            return hashlib.sha1(torrent[pos:end]).digest()
        pos = end
    raise BencodeError("torrent: no info dictionary")  # unreachable: bdecode found one
