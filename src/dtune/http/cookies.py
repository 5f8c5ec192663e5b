"""Cookies: one jar per transfer, filled by every response's ``Set-Cookie`` (RFC 6265).

Theory of operation
-------------------
Archives with logins (NASA Earthdata Login, "URS") send a data request
without a session to an auth host, which sends it back with a code; the
data host answers that with ``Set-Cookie`` and a redirect to the file. A
client that keeps no cookie goes round that loop for ever. So every
response of a transfer — discovery's and the engine's, redirects included —
hands its ``Set-Cookie`` values to the transfer's one ``CookieJar``
(``Access.received``), and every request takes its ``Cookie`` header from it.

The rules are RFC 6265's (section 5.2 parses, 5.3 stores, 5.4 sends):

- ``Domain`` (a leading dot ignored) must domain-match the request host, and
  may not be a public suffix (a single label such as ``com`` or
  ``localhost``, or one of the few multi-label ones in ``PUBLIC_SUFFIXES``)
  unless it is the host itself; without it the cookie is host-only. An IP
  address matches only itself, never as a suffix.
- ``Path``: the default path is the request path up to its last '/'.
- ``Secure`` cookies are sent over https only, and an http answer cannot set
  one (RFC 6265bis, as curl and browsers do). ``HttpOnly`` is kept (it is
  saved as ``#HttpOnly_``) and means nothing to a client without scripts.
- ``Max-Age`` wins over ``Expires`` (an HTTP date, parsed as 5.1.1 says); a
  cookie set with an expiry in the past deletes the one it names.

``--cookies FILE`` loads a Netscape cookie file (curl -c, wget
--save-cookies) into the jar, and the jar is written back there at the end
of the transfer (``CookieJar.save``: atomically, mode 0600; session cookies
with expiry 0, as curl writes them). Nothing here prints a cookie's value.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from dtune.http.message import Origin

# (character sets, not regular expressions: compiling those costs `dtune get` start-up)
_CONTROLS = frozenset(map(chr, [*range(0x20), 0x7F]))
_COOKIE_NAME_BAD = _CONTROLS | frozenset(" =;,\t")   # RFC 6265's token, as browsers read it
_COOKIE_VALUE_BAD = _CONTROLS | frozenset(";")
# the multi-label public suffixes refused as a Domain besides every single label (not the whole
# Public Suffix List: a jar that serves one transfer only needs to refuse the obvious ones)
PUBLIC_SUFFIXES = frozenset({"co.uk", "ac.uk", "gov.uk", "org.uk", "com.au", "edu.au", "gov.au",
                             "co.jp", "ac.jp", "com.br", "com.cn", "co.nz", "co.in", "co.za"})
MAX_COOKIE_BYTES = 4096   # name + value; RFC 6265 6.1 asks a client to keep at least 4096
MAX_COOKIES = 3000        # RFC 6265 6.1 asks for 3000 in all; more from one transfer is an attack
SESSION = 0               # the expiry of a session cookie (curl's and wget's files say 0)


@dataclass(frozen=True, slots=True)
class Cookie:
    """One cookie: a line of a Netscape cookie file, or what a ``Set-Cookie`` stored."""

    domain: str           # lower case, without a leading dot
    subdomains: bool      # also for hosts under ``domain`` (a Domain attribute; TRUE in a file)
    path: str
    secure: bool          # https only
    expires: int          # epoch seconds; 0: a session cookie
    name: str
    value: str = field(repr=False)
    http_only: bool = False

    def matches(self, scheme: str, host: str) -> bool:
        """For this scheme and host (the path is matched per request: ``path_matches``). An IP
        address is matched exactly: ``.0.0.1`` is no domain of 127.0.0.1."""
        if self.secure and scheme != "https":
            return False
        if host == self.domain:
            return True
        return self.subdomains and host.endswith("." + self.domain) and not is_ip(host)

    def path_matches(self, path: str) -> bool:
        """RFC 6265 5.1.4: the cookie's path is the request path or a '/'-bounded prefix of it."""
        p = self.path
        return path == p or (path.startswith(p) and (p.endswith("/") or path[len(p)] == "/"))

    def netscape(self) -> str:
        """This cookie as a line of a Netscape cookie file (curl's spelling)."""
        domain = ("." + self.domain) if self.subdomains else self.domain
        if self.http_only:
            domain = "#HttpOnly_" + domain
        flag = "TRUE" if self.subdomains else "FALSE"
        secure = "TRUE" if self.secure else "FALSE"
        return f"{domain}\t{flag}\t{self.path}\t{secure}\t{self.expires}\t{self.name}\t{self.value}"


def is_ip(host: str) -> bool:
    """An IP address as a URL's host spells it (brackets gone): IPv6, or a name whose last label is
    a number (no top-level domain is: URL parsers read such a host as IPv4, WHATWG URL 3.5)."""
    last = host.rsplit(".", 1)[-1]
    return ":" in host or (last.isdigit() and last.isascii())


def _valid(name: str, value: str) -> bool:
    if not name or not _COOKIE_NAME_BAD.isdisjoint(name) or not _COOKIE_VALUE_BAD.isdisjoint(value):
        return False
    if len(name) + len(value) > MAX_COOKIE_BYTES:
        return False
    try:
        (name + value).encode("latin-1")
    except UnicodeEncodeError:
        return False
    return True


# -- Netscape cookie files -------------------------------------------------------------------


def parse_cookie_line(line: str, now: float) -> Cookie | None:
    """One cookie line → Cookie; None for an expired one; raises ValueError if malformed."""
    http_only = line.startswith("#HttpOnly_")
    if http_only:
        line = line[len("#HttpOnly_"):]
    fields = line.split("\t")
    if len(fields) == 6:
        fields.append("")  # curl writes a cookie without a value so
    if len(fields) != 7:
        raise ValueError("not 7 tab-separated fields")
    domain, flag, path, secure, expires, name, value = fields
    if flag.upper() not in ("TRUE", "FALSE") or secure.upper() not in ("TRUE", "FALSE"):
        raise ValueError("a flag is not TRUE or FALSE")
    domain = domain.strip().lower()
    subdomains = flag.upper() == "TRUE" or domain.startswith(".")
    domain = domain.lstrip(".")
    if not domain or any(c.isspace() or c in "/;" for c in domain):
        raise ValueError("bad domain")
    if not path.startswith("/"):
        raise ValueError("the path does not start with '/'")
    when_text = expires.strip()
    if not when_text.lstrip("-").isdigit() or not when_text.isascii() or len(when_text) > 20:
        raise ValueError("the expiry is not a number")
    if not _valid(name, value):
        raise ValueError("bad name or value")
    when = int(when_text)
    if when != 0 and when <= now:
        return None
    # (a file's TRUE for an IP address or a public suffix would send the cookie to every host under it)
    subdomains = subdomains and not is_ip(domain) and not is_public_suffix(domain)
    return Cookie(domain, subdomains, path, secure.upper() == "TRUE", max(when, 0),
                  name, value, http_only)


@dataclass
class CookieFile:
    cookies: list[Cookie]
    malformed: int = 0
    first_bad: int | None = None   # the line number of the first malformed line
    expired: int = 0


def parse_cookie_file(text: str, now: float) -> CookieFile:
    """Every cookie of a Netscape cookie file (curl -c, wget --save-cookies, browsers' exports);
    comment and blank lines skipped, expired cookies left out, malformed lines counted."""
    out = CookieFile([])
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip("\r\n")
        if not line.strip() or (line.startswith("#") and not line.startswith("#HttpOnly_")):
            continue
        try:
            cookie = parse_cookie_line(line, now)
        except ValueError:
            out.malformed += 1
            out.first_bad = out.first_bad or lineno
            continue
        if cookie is None:
            out.expired += 1
        else:
            out.cookies.append(cookie)
    return out


# -- Set-Cookie (RFC 6265 5.2) ---------------------------------------------------------------

_MONTHS = {m: i for i, m in enumerate(("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep",
                                       "oct", "nov", "dec"), start=1)}
_DELIMITERS = frozenset("\t !\"#$%&'()*+,-./;<=>?@[\\]^_`{|}~")


def parse_cookie_date(text: str) -> int | None:
    """RFC 6265 5.1.1: an ``Expires`` value → epoch seconds (UTC), or None when it is no date.
    Reads what servers really send (``Wed, 09 Jun 2021 10:18:14 GMT``, ``Wednesday, 09-Jun-21
    10:18:14 GMT``, asctime's order)."""
    tokens: list[str] = []
    word: list[str] = []
    for c in text[:200]:
        if c in _DELIMITERS:
            if word:
                tokens.append("".join(word))
                word = []
        else:
            word.append(c)
    if word:
        tokens.append("".join(word))
    time_: tuple[int, int, int] | None = None
    day = month = year = None
    for token in tokens:
        if time_ is None:
            time_ = _hms(token)
            if time_ is not None:
                continue
        if day is None and (n := _leading(token, 1, 2)) is not None:
            day = n
        elif month is None and token[:3].lower() in _MONTHS:
            month = _MONTHS[token[:3].lower()]
        elif year is None and (n := _leading(token, 2, 4)) is not None:
            year = n
    if time_ is None or day is None or month is None or year is None:
        return None
    if 70 <= year <= 99:
        year += 1900
    elif 0 <= year <= 69:
        year += 2000
    hour, minute, second = time_
    if not (1 <= day <= 31) or year < 1601 or hour > 23 or minute > 59 or second > 59:
        return None
    return _days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second


def _leading(token: str, lo: int, hi: int) -> int | None:
    """The number ``lo`` to ``hi`` ASCII digits start ``token`` with (then a non-digit or the end)."""
    n = 0
    while n < len(token) and n <= hi and "0" <= token[n] <= "9":
        n += 1
    return int(token[:n]) if lo <= n <= hi else None


def _hms(token: str) -> tuple[int, int, int] | None:
    """``hh:mm:ss`` (1 or 2 digits each, anything not a digit after the last)."""
    parts = token.split(":")
    if len(parts) != 3:
        return None
    numbers = []
    for i, part in enumerate(parts):
        n = 0
        while n < len(part) and n <= 2 and "0" <= part[n] <= "9":
            n += 1
        if not 1 <= n <= 2 or (i < 2 and n != len(part)):
            return None
        numbers.append(int(part[:n]))
    return numbers[0], numbers[1], numbers[2]


def _days_from_civil(y: int, m: int, d: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm)."""
    y -= m <= 2
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def default_path(target: str) -> str:
    """RFC 6265 5.1.4: the request path up to (not including) its last '/', or '/'."""
    path = target.split("?", 1)[0]
    if not path.startswith("/") or path.count("/") == 1:
        return "/"
    return path[:path.rfind("/")]


def is_public_suffix(domain: str) -> bool:
    """A Domain no cookie may name unless it is the host itself: a single label, or a known
    multi-label public suffix."""
    return "." not in domain or domain in PUBLIC_SUFFIXES


def parse_set_cookie(value: str, origin: Origin, target: str, now: float) -> Cookie | None:
    """One ``Set-Cookie`` value, from a response to ``origin`` and ``target``, → the Cookie to
    store (its ``expires`` is in the past when it deletes one), or None when it must be ignored
    (malformed, a Domain the host may not set, Secure from http)."""
    pair, _, attributes = value.partition(";")
    name, eq, val = pair.partition("=")
    if not eq:
        return None
    name, val = name.strip(" \t"), val.strip(" \t")
    if not _valid(name, val):
        return None
    host = origin.host.lower()
    domain_attr: str | None = None
    path: str | None = None
    secure = http_only = False
    max_age: int | None = None
    expires: int | None = None
    for attribute in attributes.split(";")[:32]:
        key, _, arg = attribute.partition("=")
        key, arg = key.strip(" \t").lower(), arg.strip(" \t")
        if key == "domain":
            arg = arg.lstrip(".").lower()
            if arg:
                domain_attr = arg
        elif key == "path":
            path = arg if arg.startswith("/") else None
        elif key == "secure":
            secure = True
        elif key == "httponly":
            http_only = True
        elif key == "max-age":
            digits = arg[1:] if arg[:1] == "-" else arg
            if digits.isdigit() and digits.isascii() and len(digits) <= 15:
                max_age = int(arg)
        elif key == "expires":
            when = parse_cookie_date(arg)
            if when is not None:
                expires = when
    if secure and origin.scheme != "https":
        return None
    if domain_attr is not None and domain_attr != host:
        if is_ip(host) or is_public_suffix(domain_attr) or not host.endswith("." + domain_attr):
            return None
        subdomains, domain = True, domain_attr
    else:
        subdomains, domain = False, host
    if max_age is not None:
        when = int(now) + max_age if max_age > 0 else -1
    elif expires is not None:
        when = expires if expires > now else -1
    else:
        when = SESSION
    if path is None or any(c in path for c in "\t"):
        path = default_path(target)
    return Cookie(domain, subdomains, path, secure, when, name, val, http_only)


# -- the jar ---------------------------------------------------------------------------------


class CookieJar:
    """The transfer's cookies: a ``Cookie`` header for each request's scheme, host and path (the
    longer paths first, RFC 6265 5.4), and every ``Set-Cookie`` of every response stored.

    ``save_to``: the cookie file written back by ``save`` (``--cookies``). ``set`` counts the
    cookies stored, ``refused`` the ones ignored (the "login loop" message says so).
    """

    def __init__(self, cookies: list[Cookie] = (), *, save_to: str | None = None) -> None:
        self._cookies: dict[tuple[str, str, str], Cookie] = {}
        for cookie in cookies:
            self._cookies[(cookie.domain, cookie.path, cookie.name)] = cookie
        self._by_site: dict[tuple[str, str], list[Cookie]] = {}
        self._soonest = 0.0   # the earliest expiry of a cookie held (0: none expires)
        self._note_expiries()
        self.save_to = save_to
        self.set = 0
        self.refused = 0
        self.changed = False

    def __len__(self) -> int:
        return len(self._cookies)

    def __repr__(self) -> str:
        return f"<CookieJar {len(self._cookies)} cookies, {self.set} set, {self.refused} refused>"

    def cookies(self) -> list[Cookie]:
        return list(self._cookies.values())

    def headers(self, method: str, origin: Origin, target: str, trusted: bool) -> dict[str, str] | None:
        if not self._cookies:
            return None
        if self._soonest and time.time() >= self._soonest:
            self.expire(time.time())
        site = (origin.scheme, origin.host)
        mine = self._by_site.get(site)
        if mine is None:
            host = origin.host.lower()
            mine = [c for c in self._cookies.values() if c.matches(origin.scheme, host)]
            mine.sort(key=lambda c: -len(c.path))
            self._by_site[site] = mine
        if not mine:
            return None
        path = target.split("?", 1)[0]
        pairs = [f"{c.name}={c.value}" for c in mine if c.path_matches(path)]
        return {"Cookie": "; ".join(pairs)} if pairs else None

    def sends(self, origin: Origin, target: str) -> bool:
        """Whether a request to ``origin`` and ``target`` carries a cookie."""
        return self.headers("GET", origin, target, False) is not None

    def store(self, origin: Origin, target: str, values: list[str], now: float) -> None:
        """Every ``Set-Cookie`` value of one response to ``origin`` and ``target``."""
        for value in values:
            cookie = parse_set_cookie(value, origin, target, now)
            if cookie is None:
                self.refused += 1
                continue
            key = (cookie.domain, cookie.path, cookie.name)
            if cookie.expires < 0:
                if self._cookies.pop(key, None) is not None:
                    self._changed()
                continue
            old = self._cookies.get(key)
            if old == cookie:
                continue
            if old is None and len(self._cookies) >= MAX_COOKIES:
                self.refused += 1
                continue
            self._cookies[key] = cookie
            self.set += 1
            self._changed()

    def _changed(self) -> None:
        self._by_site.clear()
        self.changed = True
        self._note_expiries()

    def _note_expiries(self) -> None:
        self._soonest = min((c.expires for c in self._cookies.values() if c.expires != SESSION), default=0)

    def expire(self, now: float) -> None:
        """Forget the cookies whose time has come."""
        gone = [k for k, c in self._cookies.items() if c.expires != SESSION and c.expires <= now]
        for key in gone:
            del self._cookies[key]
        if gone:
            self._changed()

    def netscape(self, now: float) -> str:
        """The jar as a Netscape cookie file (what curl -c writes)."""
        lines = ["# Netscape HTTP Cookie File", "# https://curl.se/docs/http-cookies.html",
                 "# This file was written by dtune: edit at your own risk.", ""]
        for cookie in self._cookies.values():
            if cookie.expires == SESSION or cookie.expires > now:
                lines.append(cookie.netscape())
        return "\n".join(lines) + "\n"

    def save(self, now: float) -> None:
        """Write the jar to ``save_to`` atomically (a temporary file renamed over it), mode 0600.
        Raises OSError."""
        if self.save_to is None:
            return
        path = Path(self.save_to).expanduser()
        fd, tmp = tempfile.mkstemp(prefix=".dtune-cookies-", dir=path.parent or ".")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(self.netscape(now))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        self.changed = False

