"""S3 buckets as sources: ``s3://BUCKET/PREFIX/`` (every object under it) and ``s3://BUCKET/KEY``.

A prefix is listed with ListObjectsV2 (``GET /BUCKET?list-type=2&prefix=...``,
then ``continuation-token`` until the answer is not truncated), one page of
``MAX_KEYS`` at a time, keys URL-encoded by the server (``encoding-type=url``)
so that any key survives XML. One object is asked for its first byte
(``Range: bytes=0-0``: size, ETag and date, where moto refuses an anonymous HEAD). Each object
becomes an ``Entry`` whose name is its key below the prefix (``discover``
makes it safe) and whose URL is the object on the endpoint, which the engine
then fetches with ranged GETs like any URL.

Addressing is path-style everywhere (``ENDPOINT/BUCKET/KEY``): S3-compatible
servers (MinIO, Ceph, moto) expect it for a custom endpoint, AWS still serves
it, and every bucket then shares one origin (its connections and its signer).
Keys are percent-encoded with AWS's unreserved set (``A-Z a-z 0-9 - _ . ~``,
``/`` kept), which is also what SigV4 signs, so the URL is signed as sent.

The listing is untrusted XML: the same DTD/entity refusal as Metalinks runs
before ElementTree, on a body bounded by ``MAX_PAGE_BYTES``. An ETag of 32 hex
digits (a single-part upload) is published as the object's MD5; a multipart
ETag (``HEX-N``) is not a digest of the bytes and is ignored.
"""

from __future__ import annotations

import email.utils
import os
import re
import xml.etree.ElementTree as ET
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import quote, unquote_plus, urlsplit

from dtune import checksums
from dtune.checksums import Checksum
from dtune.discovery.entries import Entry
from dtune.discovery.xmlsafe import parse_untrusted
from dtune.errors import DiscoveryError, ProtocolError, UsageError
from dtune.http import awsconfig
from dtune.http.client import FetchResult
from dtune.http.message import parse_content_range, parse_unsatisfied_range, split_url
from dtune.http.sigv4 import Credentials, SigV4Signer

SCHEME = "s3://"
MAX_KEYS = 1000                 # objects per ListObjectsV2 page (S3's own maximum)
MAX_PAGE_BYTES = 16 << 20       # 1000 keys of up to 1 KiB, URL-encoded, and their XML: far below
_ETAG_MD5 = re.compile(r'^"?([0-9a-fA-F]{32})"?$')
_BUCKET = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$")  # S3's rules, loosened for S3-compatible servers

# await get(url, method) -> FetchResult; raises DiscoveryError (retried by the caller when retryable)
Get = Callable[[str, str], Awaitable[FetchResult]]


@dataclass(frozen=True, slots=True)
class S3Settings:
    """Where the buckets of a transfer are served (no credentials: those are in ``Access``).

    endpoint  ``scheme://host[:port][/path]`` without a trailing '/'
    region    signed into every request (SigV4's scope)
    signed    requests are signed (credentials were found); else they go anonymous
    """

    endpoint: str = "https://s3.us-east-1.amazonaws.com"
    region: str = "us-east-1"
    signed: bool = False

    def __post_init__(self) -> None:
        parts = urlsplit(self.endpoint)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UsageError(f"--endpoint-url {self.endpoint!r}: not an http(s) URL")
        if "@" in parts.netloc or parts.query or parts.fragment:
            raise UsageError(f"--endpoint-url {self.endpoint!r}: must be scheme://host[:port][/path], "
                             "without user, query or fragment")
        if self.endpoint.endswith("/"):
            object.__setattr__(self, "endpoint", self.endpoint.rstrip("/"))
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", self.region):
            raise UsageError(f"--s3-region {self.region!r}: not a region name (like eu-west-1)")

    def bucket_url(self, bucket: str) -> str:
        return f"{self.endpoint}/{bucket}"

    def object_url(self, bucket: str, key: str) -> str:
        """The object's URL, its key encoded as SigV4 signs it."""
        return f"{self.endpoint}/{bucket}/{quote(key, safe='/')}"

    def list_url(self, bucket: str, prefix: str, token: str | None = None, max_keys: int = MAX_KEYS) -> str:
        query = f"list-type=2&encoding-type=url&max-keys={max_keys}&prefix={quote(prefix, safe='')}"
        if token is not None:
            query += f"&continuation-token={quote(token, safe='')}"
        return f"{self.bucket_url(bucket)}?{query}"


def parse_source(source: str) -> tuple[str, str]:
    """``s3://BUCKET/KEY`` → (bucket, key). The key is taken literally (as the AWS CLI does: no
    percent-decoding); '' or a key ending in '/' is a prefix."""
    rest = source[len(SCHEME):]
    bucket, _, key = rest.partition("/")
    if not _BUCKET.match(bucket):
        raise DiscoveryError(f"{source}: {bucket!r} is not a bucket name")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in key):
        raise DiscoveryError(f"{source}: control character in the key")
    return bucket, key


@dataclass(frozen=True, slots=True)
class S3Object:
    key: str                # decoded; UNTRUSTED
    size: int | None
    mtime: float | None
    etag: str | None


def _local(tag: str) -> str:
    """The element name without its namespace (AWS and MinIO use one, some servers none)."""
    return tag.rpartition("}")[2]


def _child_text(element: ET.Element, name: str) -> str | None:
    for child in element:
        if _local(child.tag) == name:
            return child.text or ""
    return None


def parse_iso_time(text: str | None) -> float | None:
    """``2026-12-01T20:35:29.000Z`` → epoch seconds; None when absent or malformed."""
    if not text:
        return None
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return when.timestamp() if when.tzinfo is not None else None


def parse_list_page(body: bytes, where: str, encoded: bool = True) -> tuple[list[S3Object], str | None]:
    """The objects of one ListObjectsV2 answer and the token of the next page (None: the last).

    ``encoded``: keys are URL-encoded (``encoding-type=url`` was asked and echoed)."""
    def bad(why: str) -> DiscoveryError:
        return DiscoveryError(f"{where}: S3 listing: {why}")

    root = parse_untrusted(body, bad)
    if _local(root.tag) != "ListBucketResult":
        raise bad(f"root element is {_local(root.tag)!r}, not ListBucketResult")
    encoded = encoded and (_child_text(root, "EncodingType") or "").strip().lower() == "url"
    objects = []
    for element in root:
        if _local(element.tag) != "Contents":
            continue
        key = _child_text(element, "Key")
        if key is None:
            raise bad("<Contents> without <Key>")
        if encoded:
            key = unquote_plus(key, errors="surrogateescape")
        size_text = (_child_text(element, "Size") or "").strip()
        # (19 digits at most: int() refuses 4,300 and more, and no object is 10**19 bytes)
        size = int(size_text) if size_text.isascii() and size_text.isdigit() and len(size_text) <= 19 else None
        etag = _child_text(element, "ETag")
        objects.append(S3Object(key, size, parse_iso_time(_child_text(element, "LastModified")),
                                etag.strip() if etag else None))
    truncated = (_child_text(root, "IsTruncated") or "").strip().lower() == "true"
    token = _child_text(root, "NextContinuationToken")
    if truncated and not token:
        raise bad("truncated, but no NextContinuationToken to ask for the rest")
    return objects, (token if truncated else None)


def etag_checksum(etag: str | None) -> Checksum | None:
    """The MD5 an ETag states for a single-part upload; None for a multipart one (``HEX-N``)."""
    match = _ETAG_MD5.match(etag.strip()) if etag else None
    return checksums.make("md5", match.group(1), "S3 ETag") if match else None


def error_reason(res: FetchResult) -> str:
    """One line for a refused S3 request: its status, S3's error code and message, and the
    bucket's region when S3 says the request went to the wrong one."""
    reason = f"HTTP {res.status}"
    body = res.body[:4096]
    if body.lstrip().startswith(b"<"):
        try:
            root: ET.Element | None = parse_untrusted(body, ValueError)
        except ValueError:  # not an S3 error document: the status says enough
            root = None
        if root is not None and _local(root.tag) == "Error":
            code = (_child_text(root, "Code") or "").strip()
            message = " ".join((_child_text(root, "Message") or "").split())
            reason += f" {code[:64]}" + (f": {message[:200]}" if message else "")
    region = res.headers.get("x-amz-bucket-region", "").strip()
    if region and re.fullmatch(r"[a-z0-9-]{1,64}", region):
        reason += f" (the bucket is in {region}: pass --s3-region {region})"
    return reason


def check_answer(res: FetchResult, what: str, settings: S3Settings, ok: tuple[int, ...] = (200,)) -> None:
    """Raise ``DiscoveryError`` for an answer not in ``ok`` (retryable for 408, 429, 5xx)."""
    if res.status in ok:
        return
    hint = ""
    if res.status == 403 and not settings.signed:
        hint = " (the request was unsigned: no AWS credentials were found)"
    raise DiscoveryError(f"{what}: {error_reason(res)}{hint}", retryable=res.status in (408, 429) or res.status >= 500)


async def list_objects(get: Get, settings: S3Settings, bucket: str, prefix: str,
                       max_keys: int = MAX_KEYS) -> AsyncIterator[S3Object]:
    """Every object under ``prefix``, page after page, in S3's (key) order."""
    token: str | None = None
    seen: set[str] = set()
    while True:
        url = settings.list_url(bucket, prefix, token, max_keys)
        res = await get(url, "GET")
        objects, token = parse_list_page(res.body, f"s3://{bucket}/{prefix}")
        for obj in objects:
            yield obj
        if token is None:
            return
        if token in seen:
            raise DiscoveryError(f"s3://{bucket}/{prefix}: S3 listing: continuation token repeats")
        seen.add(token)


def object_entry(obj: S3Object, settings: S3Settings, bucket: str, prefix: str) -> Entry | None:
    """The ``Entry`` of one listed object; None for a folder marker (a key ending in '/')."""
    if obj.key.endswith("/") or not obj.key.startswith(prefix) or obj.key == prefix:
        return None
    return Entry(name=obj.key[len(prefix):], size=obj.size, mtime=obj.mtime,
                 urls=(settings.object_url(bucket, obj.key),), checksum=etag_checksum(obj.etag))


FIRST_BYTE_OK = (200, 206, 416)  # 416: an empty object has no byte 0
FIRST_BYTE_MAX = 4096  # body read at most: one byte, or S3's short XML answer for an empty object


def _first_byte_size(res: FetchResult) -> int | None:
    """The object's size from the answer to ``Range: bytes=0-0``."""
    if res.status == 206:
        try:
            return parse_content_range(res.headers.get("content-range", ""))[2]
        except ProtocolError:
            return None
    if res.status == 416:
        total = parse_unsatisfied_range(res.headers.get("content-range"))
        if total is None and b"<ActualObjectSize>0</ActualObjectSize>" in res.body:
            total = 0
        return total
    length = res.headers.get("content-length", "").strip()
    return int(length) if length.isascii() and length.isdigit() else None


def object_entry_from_get(res: FetchResult, settings: S3Settings, bucket: str, key: str) -> Entry:
    """The ``Entry`` of one object from the answer to ``GET`` with ``Range: bytes=0-0`` (a HEAD
    needs the same permission, but some servers refuse it to anonymous requests); its name is
    the key's last segment."""
    size = _first_byte_size(res)
    mtime = None
    if res.headers.get("last-modified"):
        try:
            mtime = email.utils.parsedate_to_datetime(res.headers["last-modified"]).timestamp()
        except (TypeError, ValueError, IndexError):
            mtime = None
    # an SSE-KMS or SSE-C object's ETag is not its MD5, even for a single part
    encrypted = res.headers.get("x-amz-server-side-encryption", "").lower() == "aws:kms" or \
        "x-amz-server-side-encryption-customer-algorithm" in res.headers
    checksum = None if encrypted or res.status == 416 else etag_checksum(res.headers.get("etag"))
    return Entry(name=key.rpartition("/")[2], size=size, mtime=mtime,
                 urls=(settings.object_url(bucket, key),), checksum=checksum)


def s3_settings(values: Mapping[str, object],
                environ: Mapping[str, str] | None = None) -> tuple[S3Settings, Credentials | None]:
    """The endpoint and region of a transfer's buckets, and the credentials to sign with (None:
    unsigned)."""
    environ = os.environ if environ is None else environ
    found = awsconfig.credentials(values, environ)
    where = awsconfig.region(values, environ)
    return S3Settings(awsconfig.endpoint(values, environ, where), where, signed=found is not None), found


def s3_signer(settings: S3Settings, found: Credentials | None) -> SigV4Signer | None:
    """The ``SigV4Signer`` for the endpoint's origin, or None for unsigned requests."""
    if found is None:
        return None
    return SigV4Signer(found, settings.region, [split_url(settings.endpoint + "/")[0]])
