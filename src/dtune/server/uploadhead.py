"""The upload protocol's header fields and received-range sets, parsed and decided without I/O.

Every function here takes the raw text of one header field (as the client
sent it: untrusted) and returns a value or raises ``HeadError`` with the
status to answer (400) and a reason that names the field. Nothing here
opens a file or reads a clock; ``tests/unit/server/test_server_uploadhead.py``
holds the rules and a hypothesis property test feeds them garbage.

* ``Content-Length``: decimal digits only (no sign, no spaces inside), at
  most 19 digits.
* ``Content-Range``: ``bytes FIRST-LAST/TOTAL`` (RFC 9110 §14.4), all three
  numbers present, ``FIRST <= LAST < TOTAL``. ``bytes */TOTAL`` and ``*``
  as TOTAL say nothing an upload can use and are refused.
* ``Repr-Digest`` (RFC 9530): a structured-field dictionary such as
  ``sha-256=:BASE64:, sha-512=:BASE64:``; parameters are ignored.
  ``sha-256`` and ``sha-512`` are checked; other algorithms are ignored,
  but a field naming none of the two is refused (a digest the server
  cannot check would pass silently otherwise).
* ``Content-MD5`` (RFC 1864): the base64 of 16 bytes.

A set of received ranges is a sorted list of disjoint, non-adjacent
half-open ``(start, end)`` pairs; ``add_range`` merges a new one in.
``format_ranges`` writes it as ``Dtune-Received`` carries it:
``FIRST-LAST`` pairs (inclusive, as in ``Content-Range``) joined by ``,``.
"""

from __future__ import annotations

import base64
import binascii
import re

DIGEST_SIZES = {"sha-256": 32, "sha-512": 64}
MAX_DIGITS = 19  # 10**19 > 2**63: every length a file system can hold, and no more

_DIGITS = re.compile(r"[0-9]{1,19}")
_RANGE = re.compile(r"bytes[ ]+([0-9]{1,19})-([0-9]{1,19})/([0-9]{1,19})")
_KEY = re.compile(r"[a-z*][a-z0-9_\-.*]*")
_B64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")


class HeadError(ValueError):
    """A header field the upload cannot go on with; ``status`` is the answer (400)."""

    def __init__(self, reason: str, status: int = 400) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def parse_length(value: str) -> int:
    """``Content-Length``: a non-negative integer."""
    text = value.strip(" \t")
    if not _DIGITS.fullmatch(text):
        raise HeadError("Content-Length is not one decimal number")
    return int(text)


def parse_content_range(value: str) -> tuple[int, int, int]:
    """``Content-Range: bytes FIRST-LAST/TOTAL`` → ``(FIRST, LAST + 1, TOTAL)`` (a half-open range)."""
    match = _RANGE.fullmatch(value.strip(" \t"))
    if match is None:
        raise HeadError("Content-Range is not 'bytes FIRST-LAST/TOTAL'")
    first, last, total = (int(g) for g in match.groups())
    if first > last:
        raise HeadError("Content-Range: FIRST is after LAST")
    if last >= total:
        raise HeadError("Content-Range: LAST is not below TOTAL")
    return first, last + 1, total


def _base64(text: str, what: str) -> bytes:
    if not _B64.fullmatch(text) or len(text) % 4:
        raise HeadError(f"{what} is not base64")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise HeadError(f"{what} is not base64") from None


def parse_repr_digest(value: str) -> dict[str, bytes]:
    """``Repr-Digest`` → ``{"sha-256": digest, ...}`` holding the algorithms this server checks."""
    found: dict[str, bytes] = {}
    seen_any = False
    for member in value.split(","):
        member = member.strip(" \t")
        if not member:
            raise HeadError("Repr-Digest has an empty member")
        key, eq, rest = member.partition("=")
        if not eq or not _KEY.fullmatch(key):
            raise HeadError("Repr-Digest member is not 'algorithm=:base64:'")
        item = rest.split(";", 1)[0].strip(" \t")
        if len(item) < 2 or item[0] != ":" or item[-1] != ":":
            raise HeadError(f"Repr-Digest {key} is not a byte sequence (':base64:')")
        raw = _base64(item[1:-1], f"Repr-Digest {key}")
        seen_any = True
        size = DIGEST_SIZES.get(key)
        if size is None:
            continue
        if len(raw) != size:
            raise HeadError(f"Repr-Digest {key} has {len(raw)} bytes, not {size}")
        found[key] = raw
    if seen_any and not found:
        raise HeadError("Repr-Digest names no algorithm this server checks (sha-256, sha-512)")
    return found


def parse_content_md5(value: str) -> bytes:
    """``Content-MD5`` → the 16 bytes of the digest."""
    raw = _base64(value.strip(" \t"), "Content-MD5")
    if len(raw) != 16:
        raise HeadError(f"Content-MD5 has {len(raw)} bytes, not 16")
    return raw


def format_digest(name: str, raw: bytes) -> str:
    """One ``Repr-Digest`` member: ``sha-256=:BASE64:``."""
    return f"{name}=:{base64.b64encode(raw).decode('ascii')}:"


# -- received ranges ---------------------------------------------------------------

Ranges = list[tuple[int, int]]


def add_range(ranges: Ranges, start: int, end: int) -> Ranges:
    """``ranges`` with ``[start, end)`` merged in (overlapping and touching ranges join)."""
    if start >= end:
        return list(ranges)
    out: Ranges = []
    placed = False
    for a, b in ranges:
        if b < start:
            out.append((a, b))
        elif end < a:
            if not placed:
                out.append((start, end))
                placed = True
            out.append((a, b))
        else:
            start, end = min(a, start), max(b, end)
    if not placed:
        out.append((start, end))
    return out


def covers(ranges: Ranges, total: int) -> bool:
    """True when ``ranges`` hold every byte of ``[0, total)``."""
    if total == 0:
        return True
    return bool(ranges) and ranges[0][0] == 0 and ranges[0][1] >= total  # (sorted and merged)


def received_bytes(ranges: Ranges) -> int:
    return sum(b - a for a, b in ranges)


def format_ranges(ranges: Ranges) -> str:
    """``Dtune-Received``: ``0-1048575,2097152-3145727`` (inclusive ends); "" for none."""
    return ",".join(f"{a}-{b - 1}" for a, b in ranges)


def valid_ranges(value: object, total: int) -> Ranges | None:
    """A journal's range list checked again (it is read back from disk): sorted, disjoint, in ``[0, total)``."""
    if not isinstance(value, list):
        return None
    out: Ranges = []
    prev_end = -1
    for item in value:
        if not isinstance(item, list) or len(item) != 2 or not all(type(x) is int for x in item):
            return None
        a, b = item
        if not (prev_end < a < b <= total):
            return None
        out.append((a, b))
        prev_end = b
    return out
