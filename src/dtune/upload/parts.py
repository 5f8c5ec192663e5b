"""How a file is cut into the parts of an upload, and the digests S3 answers for them (pure).

Part size (``part_size``): S3 takes 1 to 10,000 parts of 5 MiB to 5 GiB each
(the last may be smaller). dtune aims for at least ``PARTS_PER_LANE`` parts per
part in flight (p), so that the p connections of a file all stay busy until its
end, within ``[MIN_PART, MAX_TUNED_PART]``: 8 MiB is the AWS CLI's and
rclone's default chunk (below it a part's request costs more than its bytes on
a long path), 64 MiB bounds the memory a part holds (every part in flight is
read into memory once, hashed for ``Content-MD5``, then sent). A file larger
than 10,000 × 64 MiB gets larger parts, so that it still fits in 10,000.

ETags (``multipart_etag``): S3's ETag of an object made by a multipart upload
is the MD5 of the concatenated binary MD5s of its parts, in hex, then ``-N``
(N parts); a one-request upload's ETag is the MD5 of its bytes. Both hold
for objects without SSE-KMS / SSE-C encryption (whose ETags are not digests:
``etag_is_digest`` says when one can be compared).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

MIB = 1 << 20
S3_MIN_PART = 5 * MIB          # S3's smallest part (but the last)
S3_MAX_PART = 5 * 1024 * MIB   # S3's largest part
S3_MAX_PARTS = 10_000
MIN_PART = 8 * MIB             # the AWS CLI's and rclone's default chunk
MAX_TUNED_PART = 64 * MIB      # a tuned part holds at most this much memory while in flight
PARTS_PER_LANE = 2             # parts of a file per part in flight, at least (see the module doc)
MULTIPART_THRESHOLD = 16 * MIB  # files up to this size go in one PUT (one request, its MD5 checked)


@dataclass(frozen=True, slots=True)
class Part:
    """Part ``number`` (from 1) of a file: bytes ``[start, end)``."""

    number: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def _round_up(n: int, unit: int) -> int:
    return -(-n // unit) * unit


def part_size(size: int, p: int, fixed: int | None = None) -> int:
    """The part size for a file of ``size`` bytes sent with ``p`` parts in flight (module doc).

    ``fixed`` (``--part-size``) is kept, but raised to what 10,000 parts need."""
    least = _round_up(-(-size // S3_MAX_PARTS), MIB) if size > 0 else MIB
    if fixed is not None:
        return min(S3_MAX_PART, max(fixed, least, S3_MIN_PART))
    aim = _round_up(-(-size // (PARTS_PER_LANE * max(1, p))), MIB) if size > 0 else MIN_PART
    return min(S3_MAX_PART, max(least, MIN_PART, min(aim, MAX_TUNED_PART)))


def cut(size: int, part: int) -> list[Part]:
    """The parts of a ``size``-byte file cut every ``part`` bytes (one empty part for an empty file)."""
    if part <= 0:
        raise ValueError(f"part size must be positive, got {part}")
    if size <= 0:
        return [Part(1, 0, 0)]
    return [Part(i + 1, start, min(start + part, size)) for i, start in enumerate(range(0, size, part))]


def multipart_etag(md5s: list[bytes]) -> str:
    """S3's ETag (without quotes) of an object completed from parts with these binary MD5s."""
    return f"{hashlib.md5(b''.join(md5s)).hexdigest()}-{len(md5s)}"


_ETAG = re.compile(r'^(?:W/)?"?([0-9a-fA-F]{32}(?:-[0-9]{1,5})?)"?$')


def clean_etag(value: str | None) -> str | None:
    """An ETag header or XML element as ``hex`` or ``hex-N`` (lower case), or None when it is
    not one S3 computes from the bytes (an encrypted object's, or a server's of its own making)."""
    if not value:
        return None
    m = _ETAG.match(value.strip())
    return m.group(1).lower() if m else None


def etag_is_digest(headers: dict[str, str]) -> bool:
    """Whether an object's ETag can be compared with the bytes' MD5: not under SSE-KMS or SSE-C."""
    sse = headers.get("x-amz-server-side-encryption", "").strip().lower()
    return sse in ("", "aes256") and "x-amz-server-side-encryption-customer-algorithm" not in headers
