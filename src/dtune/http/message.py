"""Sans-IO pieces of HTTP/1.1: origins, request bytes, header values.

Nothing here touches a socket or a clock; every function is fed plain data.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

from dtune.errors import ProtocolError, UsageError
from dtune.version import __version__

USER_AGENT = f"dtune/{__version__}"


@dataclass(frozen=True, slots=True)
class Origin:
    """scheme://host:port — what one connection (TCP) is bound to."""

    scheme: str
    host: str
    port: int

    @property
    def host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == default else f"{host}:{self.port}"

    def __str__(self) -> str:
        return f"{self.scheme}://{self.host_header}"


# "scheme://netloc" exactly as a URL spelt it → its Origin. A dataset's thousands of URLs share a
# few origins: a URL that starts with a known one (and then "/") is split without urlsplit
# (3.7 µs a URL instead of 14, timed by hand over 2000 URLs).
_ORIGINS: dict[str, Origin] = {}
_ORIGINS_MAX = 256


def split_url(url: str) -> tuple[Origin, str]:
    """Return (origin, request-target) for an absolute http(s) URL."""
    if any(c in url for c in "\t\r\n\x00"):  # urlsplit would silently drop them
        raise UsageError(f"bad URL {url!r}: tab, line break or NUL in the URL")
    mark = url.find("://")
    cut = url.find("/", mark + 3) if mark > 0 else -1
    origin = _ORIGINS.get(url[:cut]) if cut > 0 else None
    if origin is None:
        origin, target, spelt = _split(url)
        if cut > 0 and url[:cut] == spelt:  # (what urlsplit took for scheme://netloc, as written)
            if len(_ORIGINS) >= _ORIGINS_MAX:
                _ORIGINS.clear()
            _ORIGINS[spelt] = origin
        return origin, target
    # what urlsplit does to the rest: the fragment goes, an empty query goes with its "?"
    path, _, query = url[cut:].partition("#")[0].partition("?")
    return origin, _sendable(url, path + "?" + query if query else path)


def _sendable(url: str, target: str) -> str:
    if any(c in target for c in " \r\n\t\x00"):
        raise UsageError(f"bad URL {url!r}: unencoded whitespace or control character in the path")
    return target


def _split(url: str) -> tuple[Origin, str, str]:
    """``split_url`` by urlsplit; also "scheme://netloc" as urlsplit read them."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise UsageError(f"bad URL {url!r}: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise UsageError(f"bad URL {url!r}: only http:// and https:// are supported")
    if not parts.hostname:
        raise UsageError(f"bad URL {url!r}: no host")
    if port is None:
        port = 443 if scheme == "https" else 80
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    return Origin(scheme, parts.hostname, port), _sendable(url, target), f"{parts.scheme}://{parts.netloc}"


def resolve_location(base_url: str, location: str) -> str:
    """Absolute URL a redirect points to (relative Locations are allowed by RFC 9110)."""
    return urljoin(base_url, location.strip())


def build_request(method: str, origin: Origin, target: str,
                  range_: tuple[int, int] | None = None,
                  extra: dict[str, str] | None = None) -> bytes:
    """Request bytes. ``range_`` is [start, end) — sent as ``bytes=start-(end-1)``. A
    ``User-Agent`` in ``extra`` (spelt so: ``http.auth`` spells the user's so) replaces dtune's, and
    an ``Accept-Encoding`` there replaces ``identity``."""
    lines = [f"{method} {target} HTTP/1.1", f"Host: {origin.host_header}"]
    if not extra or "User-Agent" not in extra:
        lines.append(f"User-Agent: {USER_AGENT}")
    if not extra or "Accept-Encoding" not in extra:  # (a listing takes gzip: http.client decodes it)
        lines.append("Accept-Encoding: identity")
    if range_ is not None:
        lines.append(f"Range: bytes={range_[0]}-{range_[1] - 1}")
    if extra:
        for name, value in extra.items():
            if any(c in name + value for c in "\r\n\x00"):
                raise ValueError(f"header {name!r} has a line break")
            lines.append(f"{name}: {value}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


_CONTENT_RANGE = re.compile(r"^\s*bytes\s+(\d{1,19})-(\d{1,19})/(\d{1,19}|\*)\s*$", re.I)


def parse_content_range(value: str) -> tuple[int, int, int | None]:
    """``bytes a-b/total`` → (a, b+1, total); raises ProtocolError when malformed."""
    m = _CONTENT_RANGE.match(value)
    if not m:
        raise ProtocolError(f"malformed Content-Range {value[:80]!r}")
    start, last = int(m.group(1)), int(m.group(2))
    total = None if m.group(3) == "*" else int(m.group(3))
    if last < start or (total is not None and last >= total):
        raise ProtocolError(f"impossible Content-Range {value[:80]!r}")
    return start, last + 1, total


_UNSATISFIED = re.compile(r"^\s*bytes\s+\*/(\d{1,19})\s*$", re.I)


def parse_unsatisfied_range(value: str | None) -> int | None:
    """The total size from a 416's ``Content-Range: bytes */N``, or None."""
    m = _UNSATISFIED.match(value or "")
    return int(m.group(1)) if m else None


def parse_retry_after(value: str | None, now_epoch: float) -> float | None:
    """Seconds to wait from a Retry-After value (delta-seconds or HTTP-date)."""
    if not value:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():   # (str.isdigit alone takes "²" and other digits)
        return float(min(int(value[:12]), 24 * 3600))
    try:
        import email.utils  # (only for a Retry-After date: its import is start-up time)

        when = email.utils.parsedate_to_datetime(value)
        if when is None:
            return None
        return max(0.0, when.timestamp() - now_epoch)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
