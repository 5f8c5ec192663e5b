"""What a server says about its request limit, read from the headers of any answer (pure).

Three families are in use:

- ``Retry-After`` (RFC 9110 §10.2.3) on a 429 or 503: delta-seconds or an
  HTTP date (``message.parse_retry_after``).
- ``X-RateLimit-Limit`` / ``-Remaining`` / ``-Reset``, as GitHub and Zenodo
  send them on every answer: the quota of the window, what is left of it and
  when it comes back, in epoch seconds (a value below 10⁹ is taken as
  delta-seconds, as some servers send it).
- The IETF draft (draft-ietf-httpapi-ratelimit-headers): the separate
  ``RateLimit-Limit`` / ``-Remaining`` / ``-Reset`` (delta-seconds) of its
  early versions, their combined ``RateLimit: limit=100, remaining=50,
  reset=5``, and the later ``RateLimit: "default";r=50;t=30`` with
  ``RateLimit-Policy: "default";q=100;w=60`` (r remaining, t reset, q quota,
  w window), of which the first item is read.

Untrusted input: a value that does not parse is ignored, never raised on.
``hint`` returns None when an answer carries none of these headers, which is
what almost every answer of an unlimited server does, at the cost of a few
dictionary lookups.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from dtune.http.message import parse_retry_after

EPOCH_MIN = 1e9           # an X-RateLimit-Reset above this is an epoch time (2001 on), else seconds

_KEYS = ("retry-after", "x-ratelimit-remaining", "x-ratelimit-reset", "x-ratelimit-limit",
         "ratelimit", "ratelimit-remaining", "ratelimit-reset", "ratelimit-limit", "ratelimit-policy")
_NUMBER = re.compile(r"^\s*(\d{1,15}(?:\.\d{1,9})?)\s*$", re.ASCII)
_PARAM = re.compile(r"([A-Za-z][\w-]*)\s*=\s*\"?(\d{1,15}(?:\.\d{1,9})?)\"?", re.ASCII)


@dataclass(frozen=True, slots=True)
class RateHint:
    """What one answer says about the limit; None where it says nothing."""

    limit: float | None = None       # requests per window (the quota)
    window: float | None = None      # seconds of that window
    remaining: float | None = None   # requests left in the window now
    reset: float | None = None       # seconds until the quota is back
    retry_after: float | None = None  # seconds the server asked to wait (Retry-After)
    source: str = ""                 # the header family it came from, for messages

    @property
    def quota_rate(self) -> float | None:
        """Requests/s the policy allows on average (quota / window), when both are given."""
        if self.limit is None or not self.window:
            return None
        return self.limit / self.window


def number(value: str | None) -> float | None:
    """A non-negative decimal, or None (anything else: signs, exponents, words, non-ASCII digits)."""
    if value is None:
        return None
    m = _NUMBER.match(value)
    if m is None:
        return None
    n = float(m.group(1))
    return n if math.isfinite(n) else None


def _reset(value: str | None, now_epoch: float) -> float | None:
    n = number(value)
    if n is None:
        return None
    if n >= EPOCH_MIN:
        return max(0.0, n - now_epoch)
    return n


def params(value: str | None) -> dict[str, float]:
    """``name=number`` pairs of the first list item of a structured header (``r=5;t=30`` or
    ``limit=10, remaining=5, reset=3``: the old draft's pairs are all kept)."""
    if not value:
        return {}
    value = value[:1000]
    out: dict[str, float] = {}
    # the later draft lists one item per policy ("a";r=1;t=2, "b";r=…): only the first is read.
    # The old draft's form is one item of pairs separated by commas
    first = value if "limit=" in value or "remaining=" in value else value.split(",")[0]
    for name, raw in _PARAM.findall(first):
        n = number(raw)
        if n is not None:
            out.setdefault(name.lower(), n)
    return out


def hint(headers: Mapping[str, str], now_epoch: float) -> RateHint | None:
    """The limit the headers (lower-case names) describe, or None when they carry no such header."""
    if not any(key in headers for key in _KEYS):
        return None
    retry_after = None
    raw = headers.get("retry-after")
    if raw is not None:
        try:
            retry_after = parse_retry_after(raw[:200], now_epoch)
        except (ValueError, OverflowError):
            retry_after = None
    limit = remaining = reset = window = None
    source = "Retry-After" if retry_after is not None else ""
    if "x-ratelimit-remaining" in headers or "x-ratelimit-reset" in headers:
        limit = number(headers.get("x-ratelimit-limit"))
        remaining = number(headers.get("x-ratelimit-remaining"))
        reset = _reset(headers.get("x-ratelimit-reset"), now_epoch)
        source = source or "X-RateLimit"
    elif "ratelimit-remaining" in headers or "ratelimit-reset" in headers:
        limit = number((headers.get("ratelimit-limit") or "").split(",")[0])
        remaining = number(headers.get("ratelimit-remaining"))
        reset = number(headers.get("ratelimit-reset"))
        source = source or "RateLimit"
    elif "ratelimit" in headers:
        pairs = params(headers.get("ratelimit"))
        limit = pairs.get("limit")
        remaining = pairs.get("remaining", pairs.get("r"))
        reset = pairs.get("reset", pairs.get("t"))
        source = source or "RateLimit"
    policy = params(headers.get("ratelimit-policy"))
    if policy:
        limit = limit if limit is not None else policy.get("q")
        window = policy.get("w")
    elif "ratelimit-policy" in headers or "ratelimit-limit" in headers:
        # the early draft's policy: "100;w=60" or "10, 10;w=1, 1000;w=3600" (the limit first)
        text = headers.get("ratelimit-policy") or headers.get("ratelimit-limit") or ""
        m = re.search(r"(\d{1,15})\s*;\s*w\s*=\s*(\d{1,15})", text[:1000], re.ASCII)
        if m is not None:
            limit = limit if limit is not None else number(m.group(1))
            window = number(m.group(2))
    if all(v is None for v in (retry_after, limit, remaining, reset)):
        return None
    if window is not None and window <= 0:
        window = None
    return RateHint(limit=limit, window=window, remaining=remaining, reset=reset,
                    retry_after=retry_after, source=source)
