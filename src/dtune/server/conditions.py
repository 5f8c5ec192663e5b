"""What a file request gets: 200, 206, 304 or 416 — decided without I/O.

Theory of operation
-------------------
The connection hands ``plan_file_response`` the request's method and its
``Range`` / ``If-Range`` / ``If-None-Match`` / ``If-Modified-Since`` values,
plus the file's size and validators (ETag and mtime) from one ``fstat``.
It returns a ``Plan``: the status, and which bytes of the file form the body.
Nothing here reads a clock or a socket, so every rule is a table row in
``tests/unit/server/test_server_conditions.py``.

Rules (RFC 9110 §13 and §14):

* ``If-None-Match`` (weak comparison) or, when absent, ``If-Modified-Since``
  → 304 Not Modified for GET and HEAD.
* ``Range`` is only honoured on GET. One ``bytes=`` range → 206; a range
  starting past the end, ``-0``, or any range of an empty file → 416.
  A syntactically invalid header, another unit, or several ranges → the
  whole file with 200 (a server MAY ignore ``Range``; dtune never sends
  ``multipart/byteranges``).
* ``If-Range`` with a strong ETag equal to ours, or an HTTP-date equal to
  our Last-Modified second, lets the range through; anything else (weak
  tag, other tag, other date, garbage) → 200 with the whole file.
"""

from __future__ import annotations

import datetime
import email.utils
from dataclasses import dataclass
from functools import lru_cache

# Sentinel returned by ``parse_range`` when the range cannot be satisfied (416).
UNSATISFIABLE = "unsatisfiable"


@dataclass(frozen=True, slots=True)
class Plan:
    """The decision for one file request: ``status`` and the body's bytes ``[start, start+length)``."""

    status: int
    start: int = 0
    length: int = 0


def etag_for(size: int, mtime_ns: int) -> str:
    """A strong entity tag from size and mtime (what nginx does with mtime-size, in nanoseconds)."""
    return f'"{size:x}-{mtime_ns:x}"'


@lru_cache(maxsize=4096)
def http_date(seconds: int) -> str:
    """IMF-fixdate for a whole number of seconds since the epoch (``Last-Modified``, ``Date``)."""
    return email.utils.formatdate(seconds, usegmt=True)


def parse_http_date(value: str) -> int | None:
    """Seconds since the epoch for any of the three HTTP date formats, or None."""
    try:
        parsed = email.utils.parsedate_to_datetime(value.strip())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if parsed is None:
        return None
    if parsed.tzinfo is None:  # HTTP dates are always GMT
        return int(parsed.replace(tzinfo=datetime.UTC).timestamp())
    return int(parsed.timestamp())


def accepts_gzip(value: str) -> bool:
    """Whether an ``Accept-Encoding`` value takes a gzip'd body (RFC 9110 §12.5.3): ``gzip``
    (or ``x-gzip``) with a q-value above zero, or else ``*`` with one. Listings and manifests
    only: file bodies always go as they are, so that ranges mean bytes of the file."""
    named: float | None = None
    star: float | None = None
    for item in value.split(","):
        name, _, params = item.partition(";")
        name = name.strip().lower()
        q = 1.0
        for param in params.split(";"):
            key, _, text = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(text.strip())
                except ValueError:
                    q = 0.0
        if not 0.0 <= q <= 1.0:  # (nan, inf, negative: not a q-value)
            q = 0.0
        if name in ("gzip", "x-gzip"):
            named = q if named is None else max(named, q)
        elif name == "*":
            star = q
    if named is not None:
        return named > 0
    return star is not None and star > 0


def _digits(text: str) -> int | None:
    text = text.strip(" \t")
    if not text or not text.isascii() or not text.isdigit() or len(text) > 20:
        return None
    return int(text)


def parse_range(value: str | None, size: int) -> tuple[int, int] | str | None:
    """Parse a ``Range`` header against a file of ``size`` bytes.

    Returns ``(start, end)`` with ``end`` inclusive for one satisfiable range,
    ``UNSATISFIABLE`` for a range that asks for nothing inside the file, and
    ``None`` when the header is absent, invalid, not in bytes, or names more
    than one range (all of which mean: send the whole file with 200).
    """
    if value is None:
        return None
    unit, eq, specs = value.partition("=")
    if not eq or unit.strip(" \t").lower() != "bytes":
        return None
    parts = [p for p in specs.split(",") if p.strip(" \t")]
    if len(parts) != 1:
        return None  # empty or several ranges: the whole file
    first_text, dash, last_text = parts[0].partition("-")
    if not dash:
        return None
    if not first_text.strip(" \t"):  # suffix range: the last N bytes
        suffix = _digits(last_text)
        if suffix is None:
            return None
        if suffix == 0 or size == 0:
            return UNSATISFIABLE
        return (max(0, size - suffix), size - 1)
    first = _digits(first_text)
    if first is None:
        return None
    if last_text.strip(" \t"):
        last = _digits(last_text)
        if last is None or last < first:
            return None
    else:
        last = None
    if first >= size:
        return UNSATISFIABLE
    if last is None or last >= size:
        last = size - 1
    return (first, last)


def if_range_allows(value: str, etag: str, mtime: int) -> bool:
    """True when an ``If-Range`` value still describes this file, so the range may be sent."""
    value = value.strip(" \t")
    if value.startswith('"'):
        return value == etag  # strong comparison only
    if value.startswith("W/"):
        return False  # weak tags never match If-Range
    when = parse_http_date(value)
    return when is not None and when == mtime


def _none_match(value: str, etag: str) -> bool:
    """True when ``If-None-Match`` names our entity (weak comparison) or is ``*``."""
    if value.strip(" \t") == "*":
        return True
    ours = etag.removeprefix("W/")
    for tag in value.split(","):
        if tag.strip(" \t").removeprefix("W/") == ours:
            return True
    return False


def plan_file_response(
    *,
    is_get: bool,
    size: int,
    mtime: int,
    etag: str,
    range_value: str | None = None,
    if_range: str | None = None,
    if_none_match: str | None = None,
    if_modified_since: str | None = None,
) -> Plan:
    """Decide the status and body bytes for a GET (``is_get``) or HEAD of a regular file.

    ``mtime`` is the whole-second Last-Modified time, ``etag`` from ``etag_for``.
    """
    if if_none_match is not None:
        if _none_match(if_none_match, etag):
            return Plan(304)
    elif if_modified_since is not None:
        since = parse_http_date(if_modified_since)
        if since is not None and mtime <= since:
            return Plan(304)
    if not is_get or range_value is None:
        return Plan(200, 0, size)
    if if_range is not None and not if_range_allows(if_range, etag, mtime):
        return Plan(200, 0, size)
    parsed = parse_range(range_value, size)
    if parsed is None:
        return Plan(200, 0, size)
    if parsed == UNSATISFIABLE:
        return Plan(416)
    start, end = parsed  # type: ignore[misc]
    return Plan(206, start, end - start + 1)
