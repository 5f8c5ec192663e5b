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

Flexible checksums (``composite_crc32``): an upload in parts started with
``x-amz-checksum-algorithm: CRC32`` carries each part's CRC32 (4 bytes, big
endian, base64) in ``x-amz-checksum-crc32``; S3 checks it, and the object's
checksum is COMPOSITE: the CRC32 of the concatenated binary part CRC32s, in
base64, then ``-N``. CRC32 (zlib) costs a third of MD5 here, and is what
dtune hashes the parts with when the server takes it (``docs/put.md``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import zlib
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


def crc32_b64(crc: int) -> str:
    """A CRC32 as S3 writes it: its 4 bytes big endian, in base64."""
    return base64.b64encode((crc & 0xFFFFFFFF).to_bytes(4, "big")).decode("ascii")


def composite_crc32(crcs: list[int]) -> str:
    """S3's COMPOSITE CRC32 of an object completed from parts with these CRC32s: ``b64-N``."""
    joined = b"".join((c & 0xFFFFFFFF).to_bytes(4, "big") for c in crcs)
    return f"{crc32_b64(zlib.crc32(joined))}-{len(crcs)}"


_CHECKSUM = re.compile(r"^([A-Za-z0-9+/]{6}==)(-[0-9]{1,5})?$")


def clean_crc32(value: str | None) -> str | None:
    """An ``x-amz-checksum-crc32`` value (``b64`` or ``b64-N``, UNTRUSTED) as it must compare, or
    None when it is not one (not 4 bytes in base64, a part count out of S3's range)."""
    if not value:
        return None
    m = _CHECKSUM.match(value.strip())
    if not m:
        return None
    try:
        base64.b64decode(m.group(1), validate=True)
    except binascii.Error:
        return None
    if m.group(2) and not 1 <= int(m.group(2)[1:]) <= S3_MAX_PARTS:
        return None
    return m.group(0)
