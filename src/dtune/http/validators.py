"""A representation's validators (RFC 9110 §8.8): what tells two versions of a file apart.

A file fetched in several ranges is only whole if every range came from the
same version. Each answer's ``ETag`` and ``Last-Modified`` are compared with
the first answer's (``Validators.change``), and every range request after
the first answer carries ``If-Range`` with the strongest validator known
(``Validators.if_range``), so that a server whose file changed answers with
the whole new version instead of a range of it.

Rules, from RFC 9110:

* ETags are compared weakly for detecting a change (``W/"x"`` and ``"x"`` are
  the same version): a change of either kind is a new version, and a server
  that adds ``W/`` to some answers only (a compressing proxy) is not one.
* ``If-Range`` takes only a strong ETag (§13.1.5). Without one it takes
  ``Last-Modified``, but only when that date is strong: at least one second
  before the ``Date`` of the answer that gave it (§8.8.2.2), which in whole
  seconds takes two (a date one second on may be 1 ms after it). A weak date
  would make a careful server answer every range with the whole file.
* When both answers have an ETag, the ETag decides; otherwise Last-Modified,
  when both have one; otherwise nothing can be told.

Pure: headers in (lower-case names), decisions out.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_VALIDATOR = 256   # longer header values are not kept (a validator is a few dozen bytes)


@dataclass(frozen=True, slots=True)
class Validators:
    """What a response says about the version of a file (ETag, Last-Modified)."""
    etag: str | None = None
    last_modified: str | None = None
    strong_date: bool = False   # last_modified may go in If-Range

    @classmethod
    def of(cls, headers: dict[str, str]) -> Validators | None:
        """The validators of an answer; None when it has neither."""
        etag = _clean(headers.get("etag"))
        modified = _clean(headers.get("last-modified"))
        if etag is None and modified is None:
            return None
        # (the date matters only without a strong ETag: parsing it is skipped otherwise)
        strong = (modified is not None and (etag is None or etag.startswith("W/"))
                  and _strong_date(modified, headers.get("date")))
        return cls(etag, modified, strong)

    def change(self, seen: Validators, *, strict: bool = False) -> str | None:
        """How ``seen`` shows another version than ``self`` ("ETag a → b"), or None.

        ``strict``: every validator both have must agree, the ETag and Last-Modified alike (an answer
        from a renewed link, which may be another host: the same object shows the same of both).
        """
        if self.etag is not None and seen.etag is not None:
            if _opaque(self.etag) != _opaque(seen.etag):
                return f"ETag {self.etag} → {seen.etag}"
            if not strict:
                return None
        if self.last_modified is not None and seen.last_modified is not None:
            if self.last_modified != seen.last_modified:
                return f"Last-Modified {self.last_modified} → {seen.last_modified}"
        return None

    def if_range(self) -> str | None:
        """The value of ``If-Range`` for a range of this version, or None when none is safe."""
        if self.etag is not None and not self.etag.startswith("W/"):
            return self.etag
        if self.last_modified is not None and self.strong_date:
            return self.last_modified
        return None

    # ---- the journal header ----------------------------------------------------------------
    def to_header(self) -> dict[str, object]:
        return {"etag": self.etag, "last_modified": self.last_modified, "strong_date": self.strong_date}

    @classmethod
    def from_header(cls, header: dict) -> Validators | None:
        """Back from a journal header (a file on disk: anything may be in it)."""
        etag = _clean(header.get("etag"))
        modified = _clean(header.get("last_modified"))
        if etag is None and modified is None:
            return None
        return cls(etag, modified, header.get("strong_date") is True and modified is not None)


def http_time(value: object) -> float | None:
    """Seconds since the epoch of an HTTP date (``Last-Modified``), or None when it is not one."""
    if not isinstance(value, str):
        return None
    return _epoch(value.strip())


def utc_seconds(year: int, month: int, day: int, hour: int, minute: int, second: int) -> float:
    """Seconds since the epoch of a UTC time, with ``datetime``'s ranges (ValueError outside
    them), counted on the proleptic Gregorian calendar (days from 1970-01-01 by 400-year eras)."""
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    if not (1 <= year <= 9999 and 1 <= month <= 12
            and 1 <= day <= (29 if leap and month == 2 else _DAYS_IN[month])
            and 0 <= hour < 24 and 0 <= minute < 60 and 0 <= second < 60):
        raise ValueError("date out of range")
    y = year - (month <= 2)
    era, year_of_era = divmod(y, 400)
    day_of_year = (153 * (month - 3 if month > 2 else month + 9) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    days = era * 146097 + day_of_era - 719468
    return float(days * 86400 + hour * 3600 + minute * 60 + second)


_DAYS_IN = (0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_MONTHS = {m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct",
                                       "Nov", "Dec"), 1)}


def _epoch(value: str) -> float | None:
    """An HTTP date in seconds since the epoch: the IMF-fixdate every current server sends
    (``Sun, 06 Nov 1994 08:49:37 GMT``) read here, the obsolete forms by ``email.utils``
    (imported only then, like ``datetime``: their imports are start-up time). A date without a
    zone is UTC."""
    parts = value.split()
    try:
        if len(parts) == 6 and parts[5] == "GMT" and parts[2] in _MONTHS and parts[4].count(":") == 2:
            hour, minute, second = (int(x) for x in parts[4].split(":"))
            return utc_seconds(int(parts[3]), _MONTHS[parts[2]], int(parts[1]), hour, minute, second)
        from datetime import UTC  # (only for a date not in IMF form: its import is start-up time)
        from email.utils import parsedate_to_datetime  # (only then, as datetime: start-up time)

        when = parsedate_to_datetime(value)
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return when.timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def _clean(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    value = value.strip()
    if not value or len(value) > MAX_VALIDATOR or any(c in value for c in "\r\n\x00"):
        return None
    return value


def _opaque(etag: str) -> str:
    return etag[2:] if etag.startswith("W/") else etag


def _strong_date(modified: str, date: str | None) -> bool:
    if date is None:
        return False
    sent, changed = _epoch(date), _epoch(modified)
    # two whole seconds: a Date one second on may be a millisecond after the change, and a server
    # that keeps sub-second times (Apache) then deems the date weak and answers every range whole
    return sent is not None and changed is not None and sent - changed >= 2
