"""AWS Signature Version 4 for S3 requests, and the ``HeaderSource`` that adds it.

``sign`` is pure: method, host, request-target, credentials, region and the
time in, the headers to send out (``x-amz-date``, ``x-amz-content-sha256``,
``x-amz-security-token`` for session credentials, ``Authorization``). It
follows the S3 flavour of SigV4: the path is used as sent (S3 does not
normalise or double-encode it), each query parameter is decoded and encoded
again with AWS's unreserved set and sorted, and the payload is
``UNSIGNED-PAYLOAD`` (dtune only sends GET and HEAD, which have none).

Only ``host``, ``x-amz-content-sha256``, ``x-amz-date`` (and the session
token) are signed, never ``Range``: so one signature serves every range of a
file, and ``SigV4Signer`` keeps it for ``CACHE_SECONDS`` per (method, origin,
target) instead of computing two SHA-256s and an HMAC per range request.
S3 accepts a signature for 15 minutes after its ``x-amz-date``.

``SigV4Signer`` is scoped: it signs requests to the S3 endpoint's origins
and returns nothing for any other origin (a redirect elsewhere, a mirror), so
the credentials are never seen there. A request that carries its own query
signature (a presigned URL) is left alone: S3 refuses two signatures.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from urllib.parse import quote, unquote

from dtune.http.message import Origin

ALGORITHM = "AWS4-HMAC-SHA256"
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
# How long one request's signature is reused: well inside the 15 minutes S3 allows, and short
# enough that a clock step on this machine is soon corrected.
CACHE_SECONDS = 60.0
_CACHE_MAX = 4096  # signatures kept at most (per file and method, so a transfer's files fit)
_UNRESERVED = "-_.~"  # with ASCII letters and digits, what AWS leaves unencoded


@dataclass(frozen=True, slots=True)
class Credentials:
    """An AWS access key; the secret and the session token never appear in a repr."""

    access_key: str
    secret_key: str = field(repr=False)
    token: str | None = field(default=None, repr=False)
    source: str = ""  # where it was found ("environment", "~/.aws/credentials [default]"): for messages


def amz_date(epoch: float) -> str:
    """``YYYYMMDDTHHMMSSZ`` (UTC), SigV4's timestamp."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(epoch))


def _aws_quote(text: str) -> str:
    return quote(text, safe=_UNRESERVED)


def canonical_query(query: str) -> str:
    """The query string as SigV4 signs it: each name and value decoded, encoded with AWS's
    unreserved set (so ``%2f`` and ``/`` agree), sorted by name then value."""
    if not query:
        return ""
    pairs = []
    for item in query.split("&"):
        if not item:
            continue
        name, _, value = item.partition("=")
        pairs.append((_aws_quote(unquote(name)), _aws_quote(unquote(value))))
    pairs.sort()
    return "&".join(f"{name}={value}" for name, value in pairs)


def signing_key(secret_key: str, day: str, region: str, service: str = "s3") -> bytes:
    """The key derived from the secret for one day, region and service (SigV4 step 3)."""
    key = hmac.new(("AWS4" + secret_key).encode("utf-8"), day.encode("ascii"), hashlib.sha256).digest()
    for part in (region, service, "aws4_request"):
        key = hmac.new(key, part.encode("utf-8"), hashlib.sha256).digest()
    return key


def sign(method: str, host: str, target: str, credentials: Credentials, region: str, when: str, *,
         service: str = "s3", payload_hash: str = UNSIGNED_PAYLOAD,
         extra_signed: Mapping[str, str] | None = None, key: bytes | None = None) -> dict[str, str]:
    """Headers that sign ``method target`` to ``host`` at ``when`` (an ``amz_date``).

    host          the Host header as sent (``name`` or ``name:port``)
    target        the request-target as sent: percent-encoded path, then ``?query``
    extra_signed  more headers to sign and send (AWS's examples sign ``range``)
    key           ``signing_key(...)`` for ``when``'s day, when the caller keeps it
    """
    path, _, query = target.partition("?")
    signed = {"host": host.strip(), "x-amz-content-sha256": payload_hash, "x-amz-date": when}
    if credentials.token:
        signed["x-amz-security-token"] = credentials.token
    for name, value in (extra_signed or {}).items():
        signed[name.lower()] = " ".join(value.split())
    names = sorted(signed)
    canonical = "\n".join([method.upper(), path or "/", canonical_query(query),
                           "".join(f"{name}:{signed[name]}\n" for name in names),
                           ";".join(names), payload_hash])
    day = when[:8]
    scope = f"{day}/{region}/{service}/aws4_request"
    to_sign = "\n".join([ALGORITHM, when, scope, hashlib.sha256(canonical.encode("utf-8")).hexdigest()])
    if key is None:
        key = signing_key(credentials.secret_key, day, region, service)
    signature = hmac.new(key, to_sign.encode("utf-8"), hashlib.sha256).hexdigest()
    headers = {name: value for name, value in signed.items() if name != "host"}
    headers["authorization"] = (f"{ALGORITHM} Credential={credentials.access_key}/{scope}, "
                                f"SignedHeaders={';'.join(names)}, Signature={signature}")
    return headers


def has_query_signature(target: str) -> bool:
    """A presigned URL (SigV4 ``X-Amz-Signature``, SigV2 ``Signature``) already carries its auth."""
    _, sep, query = target.partition("?")
    return bool(sep) and ("Signature=" in query or "signature=" in query)


class SigV4Signer:
    """``HeaderSource`` that signs every request to ``origins`` (the S3 endpoint) with SigV4."""

    def __init__(self, credentials: Credentials, region: str, origins: Iterable[Origin], *,
                 service: str = "s3", clock: Callable[[], float] = time.time) -> None:
        self._credentials = credentials
        self.region = region
        self.service = service
        self.origins = frozenset(origins)
        self._clock = clock
        self._cache: dict[tuple[str, Origin, str], tuple[float, dict[str, str]]] = {}
        self._keys: dict[str, bytes] = {}  # day -> signing key

    def __repr__(self) -> str:  # never the secret
        return f"SigV4Signer(region={self.region!r}, origins={sorted(map(str, self.origins))})"

    def headers(self, method: str, origin: Origin, target: str, trusted: bool) -> dict[str, str] | None:
        if origin not in self.origins or has_query_signature(target):
            return None
        now = self._clock()
        cached = self._cache.get((method, origin, target))
        if cached is not None and 0 <= now - cached[0] < CACHE_SECONDS:
            return cached[1]
        when = amz_date(now)
        day = when[:8]
        key = self._keys.get(day)
        if key is None:
            self._keys = {day: signing_key(self._credentials.secret_key, day, self.region, self.service)}
            key = self._keys[day]
        headers = sign(method, origin.host_header, target, self._credentials, self.region, when,
                       service=self.service, key=key)
        if len(self._cache) >= _CACHE_MAX:
            self._cache.clear()
        self._cache[(method, origin, target)] = (now, headers)
        return headers
