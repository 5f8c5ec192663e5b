"""The XML documents of S3's multipart upload: the one dtune sends, and the answers it reads (pure).

Every answer is UNTRUSTED: parsed through ``discovery.xmlsafe`` (no DOCTYPE, no
entities), with its numbers checked; a document that is not what was asked
for raises the ``bad`` exception the caller gives, naming what is wrong.
A ``CompleteMultipartUpload`` may answer ``200 OK`` with an ``<Error>``
document (S3 sends the status before it knows): ``parse_complete`` says so.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from xml.sax.saxutils import escape

from dtune.discovery.xmlsafe import parse_untrusted
from dtune.upload.parts import S3_MAX_PARTS, clean_etag

Bad = Callable[[str], Exception]
MAX_SIZE = (1 << 63) - 1


def _local(tag: str) -> str:
    return tag.rpartition("}")[2] if isinstance(tag, str) else ""


def _child(element: ET.Element, name: str) -> str | None:
    for child in element:
        if _local(child.tag) == name:
            return child.text or ""
    return None


def _root(body: bytes, bad: Bad, want: str, also: str = "") -> ET.Element:
    root = parse_untrusted(body, bad)
    name = _local(root.tag)
    if name == "Error":
        code = (_child(root, "Code") or "").strip()[:64]
        message = " ".join((_child(root, "Message") or "").split())[:200]
        raise bad(f"S3 error {code}" + (f": {message}" if message else ""))
    if name != want and name != also:
        raise bad(f"not a {want} document (root {name[:60]!r})")
    return root


def parse_initiate(body: bytes, bad: Bad) -> str:
    """``InitiateMultipartUploadResult`` → its UploadId."""
    return parse_initiated(body, bad)[0]


def parse_initiated(body: bytes, bad: Bad) -> tuple[str, str | None]:
    """``InitiateMultipartUploadResult`` → (its UploadId, the ``ChecksumAlgorithm`` it names, upper
    case, or None)."""
    root = _root(body, bad, "InitiateMultipartUploadResult")
    upload = (_child(root, "UploadId") or "").strip()
    if not upload or len(upload) > 1024 or any(ord(c) < 0x21 or ord(c) > 0x7E for c in upload):
        raise bad("no usable UploadId")
    algo = (_child(root, "ChecksumAlgorithm") or "").strip().upper()
    return upload, (algo if algo.isalnum() and len(algo) <= 16 else None)


@dataclass(frozen=True, slots=True)
class Upload:
    """One incomplete multipart upload a bucket holds."""

    key: str          # UNTRUSTED: compared with the key asked for, never used as a path
    upload_id: str
    initiated: str    # ISO 8601 as S3 gives it (sorts as time)
    checksum: str = ""   # its ChecksumAlgorithm (upper case), "" when none


def parse_uploads(body: bytes, bad: Bad) -> tuple[list[Upload], str | None, str | None]:
    """``ListMultipartUploadsResult`` → (uploads, next key marker, next upload-id marker) — the
    markers only when the answer is truncated."""
    root = _root(body, bad, "ListMultipartUploadsResult")
    found = []
    for item in root:
        if _local(item.tag) != "Upload":
            continue
        key, upload = _child(item, "Key"), (_child(item, "UploadId") or "").strip()
        if key is None or not upload:
            continue
        algo = (_child(item, "ChecksumAlgorithm") or "").strip().upper()
        found.append(Upload(key, upload, (_child(item, "Initiated") or "").strip(),
                            algo if algo.isalnum() and len(algo) <= 16 else ""))
    if (_child(root, "IsTruncated") or "").strip().lower() == "true":
        key_marker, id_marker = _child(root, "NextKeyMarker"), _child(root, "NextUploadIdMarker")
        if not key_marker and not id_marker:
            raise bad("truncated without NextKeyMarker")
        return found, key_marker, id_marker
    return found, None, None


@dataclass(frozen=True, slots=True)
class ListedPart:
    number: int
    etag: str | None   # hex (an MD5) when S3 computed it from the bytes
    size: int


def parse_parts(body: bytes, bad: Bad) -> tuple[list[ListedPart], int | None]:
    """``ListPartsResult`` → (parts, next part-number marker when truncated)."""
    root = _root(body, bad, "ListPartsResult", "ListPartsResponse")   # (moto: …Response)
    parts = []
    for item in root:
        if _local(item.tag) != "Part":
            continue
        number, size = (_child(item, "PartNumber") or "").strip(), (_child(item, "Size") or "").strip()
        if not number.isdigit() or not size.isdigit() or len(number) > 6 or len(size) > 19:
            raise bad("a Part without a PartNumber and Size in digits")
        n, s = int(number), int(size)
        if not 1 <= n <= S3_MAX_PARTS or s > MAX_SIZE:
            raise bad(f"part number {n} or size {s} out of range")
        parts.append(ListedPart(n, clean_etag(_child(item, "ETag")), s))
    if (_child(root, "IsTruncated") or "").strip().lower() == "true":
        marker = (_child(root, "NextPartNumberMarker") or "").strip()
        if not marker.isdigit() or len(marker) > 6:
            raise bad("truncated without a NextPartNumberMarker")
        return parts, int(marker)
    return parts, None


def parse_complete(body: bytes, bad: Bad) -> str | None:
    """``CompleteMultipartUploadResult`` (moto: ``…Response``) → the object's ETag (None when it is
    not a digest)."""
    return clean_etag(_child(_root(body, bad, "CompleteMultipartUploadResult",
                                        "CompleteMultipartUploadResponse"), "ETag"))


def complete_body(etags: list[tuple[int, str]], crc32s: list[str] | None = None) -> bytes:
    """The ``CompleteMultipartUpload`` request: each part's number and ETag, in order (and its
    ``ChecksumCRC32``, base64, given in the same order, for an upload with flexible checksums)."""
    crcs = [f"<ChecksumCRC32>{escape(c)}</ChecksumCRC32>" for c in crc32s] if crc32s else [""] * len(etags)
    items = "".join(f"<Part><PartNumber>{n}</PartNumber><ETag>&quot;{escape(e)}&quot;</ETag>{c}</Part>"
                    for (n, e), c in sorted(zip(etags, crcs, strict=True)))
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<CompleteMultipartUpload '
            f'xmlns="http://s3.amazonaws.com/doc/2006-03-01/">{items}</CompleteMultipartUpload>').encode()
