"""Credentials and user headers for requests: the ``HeaderSource``s of ``http.access``.

Each source is scoped to where its credential belongs, and is consulted in
this order (a header an earlier source set is not overridden by a later one):

1. ``UserHeaders``  ``--header 'Name: value'``: to the origins the user named;
2. ``OriginBasic``  ``http://user:password@host/`` in a source or mirror: basic
   auth to exactly that origin (scheme, host, port);
3. ``BearerToken``  ``--token-env VAR`` / ``--token-file PATH``: ``Authorization:
   Bearer`` to the origins the user named;
4. ``NetrcAuth``    ``~/.netrc`` (``$NETRC``, ``--netrc-file``): basic auth to any
   request whose host has an entry, whatever the port (as curl does);
5. ``CookieJar``    ``http.cookies``: the transfer's one jar, ``--cookies FILE``
   (Netscape format) and every ``Set-Cookie`` a server sends: each cookie to the
   hosts and paths it is for (https only when it is secure). ``Access`` holds it.

"The origins the user named" are the sources, the mirrors and the URLs of a
URL list or Metalink the user gave (``Access.trusted``); an origin reached
only through a redirect or a remote listing is not one of them. Every source
works out its answer once per origin (cookies: once per origin, then by
path), so a range request costs a dictionary lookup per source.

Nothing here prints a credential: errors name the option, the variable, the
file and the line, never what they hold.
"""

from __future__ import annotations

import base64
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from dtune.errors import UsageError
from dtune.http.access import HeaderSource
from dtune.http.cookies import Cookie, CookieJar, parse_cookie_file
from dtune.http.message import Origin

# Headers dtune writes itself because framing, ranges and the checks on them depend on them.
RESERVED_HEADERS = frozenset({"host", "range", "if-range", "content-length", "transfer-encoding",
                              "connection", "accept-encoding", "te", "upgrade", "expect", "keep-alive"})
# (character sets, not regular expressions: compiling those costs `dtune get` start-up)
_TCHARS = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _is_token(text: str) -> bool:
    """An RFC 9110 token (a header name)."""
    return bool(text) and all(c in _TCHARS for c in text)


# -- --header ----------------------------------------------------------------------------------


def parse_header(text: str) -> tuple[str, str]:
    """``"Name: value"`` → (name, value); a UsageError names what is wrong (never the value)."""
    if any(c in text for c in "\r\n\x00"):
        raise UsageError("--header: line break or NUL in a header")
    name, sep, value = text.partition(":")
    name = name.strip()
    if not sep:
        raise UsageError(f"--header {name[:40]!r}: no ':' (give 'Name: value')")
    if not _is_token(name):
        raise UsageError(f"--header {name[:40]!r}: not a valid header name")
    if name.lower() in RESERVED_HEADERS:
        raise UsageError(f"--header {name}: dtune sets this header itself")
    value = value.strip(" \t")
    if name.lower() == "user-agent":
        name = "User-Agent"  # the spelling build_request looks for to leave its own out
    try:
        value.encode("latin-1")
    except UnicodeEncodeError:
        raise UsageError(f"--header {name}: the value has characters HTTP headers cannot carry") from None
    return name, value


def parse_headers(items: list[str]) -> dict[str, str]:
    """Every ``--header``; one name twice is refused (which one is meant?)."""
    out: dict[str, str] = {}
    seen: set[str] = set()
    for text in items:
        name, value = parse_header(text)
        if name.lower() in seen:
            raise UsageError(f"--header {name}: given twice")
        seen.add(name.lower())
        out[name] = value
    return out


class UserHeaders:
    """The user's ``--header``s, to the origins the user named only."""

    def __init__(self, headers: Mapping[str, str]) -> None:
        self._headers = dict(headers)

    def headers(self, method: str, origin: Origin, target: str, trusted: bool) -> dict[str, str] | None:
        return self._headers if trusted else None


# -- basic auth: URL userinfo and .netrc -------------------------------------------------------


def basic_auth(user: str, password: str) -> str:
    """The ``Authorization`` value of HTTP basic auth (RFC 7617, UTF-8)."""
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")


def strip_userinfo(url: str) -> tuple[str, tuple[str, str] | None]:
    """``url`` without ``user:password@``, and the credentials it carried (percent-decoded).

    The stripped URL is what the rest of dtune sees, prints and records. A
    URL of another scheme with userinfo is refused (its credentials would
    otherwise end up in the history); the message shows ``***`` for them.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url, None
    end = len(rest)
    for ch in "/?#":
        at = rest.find(ch)
        if at != -1:
            end = min(end, at)
    authority = rest[:end]
    if "@" not in authority:
        return url, None
    info, _, hostport = authority.rpartition("@")  # an unencoded '@' in the password: the last one ends it
    shown = f"{scheme}://***@{hostport}{rest[end:]}"
    if scheme.lower() not in ("http", "https"):
        raise UsageError(f"{shown}: user:password@ is read only from http:// and https:// URLs")
    if not hostport:
        raise UsageError(f"{shown}: no host after user:password@")
    user, _, password = info.partition(":")
    return f"{scheme}://{hostport}{rest[end:]}", (unquote(user), unquote(password))


class OriginBasic:
    """Basic auth from URL userinfo, to exactly the origin it was given for."""

    def __init__(self, userinfo: Mapping[Origin, tuple[str, str]]) -> None:
        self._by_origin = {origin: {"Authorization": basic_auth(*cred)} for origin, cred in userinfo.items()}

    def headers(self, method: str, origin: Origin, target: str, trusted: bool) -> dict[str, str] | None:
        return self._by_origin.get(origin)


@dataclass(frozen=True, slots=True)
class NetrcEntry:
    """One ``machine`` (``host`` None: the ``default`` entry)."""

    host: str | None
    login: str | None = None
    password: str | None = field(default=None, repr=False)


class NetrcError(Exception):
    """A .netrc that cannot be read as one: ``line`` and a reason that quotes nothing of the file."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"line {line}: {reason}")
        self.line = line


class _NetrcWords:
    """The words of a .netrc, with the line each starts on; quoted words may hold spaces."""

    _ESCAPES = {"n": "\n", "r": "\r", "t": "\t"}

    def __init__(self, text: str) -> None:
        self.text, self.i, self.line = text, 0, 1

    def next(self) -> tuple[str, int, bool] | None:
        """(word, line, quoted), or None at the end."""
        text, n = self.text, len(self.text)
        while self.i < n and text[self.i].isspace():
            if text[self.i] == "\n":
                self.line += 1
            self.i += 1
        if self.i >= n:
            return None
        start = self.line
        if text[self.i] != '"':
            j = self.i
            while j < n and not text[j].isspace():
                j += 1
            word, self.i = text[self.i:j], j
            return word, start, False
        self.i += 1
        out: list[str] = []
        while True:
            if self.i >= n:
                raise NetrcError(start, "a quoted word is not closed")
            c = text[self.i]
            if c == '"':
                self.i += 1
                return "".join(out), start, True
            if c == "\\" and self.i + 1 < n:
                c = self._ESCAPES.get(text[self.i + 1], text[self.i + 1])
                self.i += 1
            if text[self.i] == "\n":
                self.line += 1
            out.append(c)
            self.i += 1

    def skip_line(self) -> None:
        """A comment: up to the end of the line."""
        end = self.text.find("\n", self.i)
        self.i = len(self.text) if end == -1 else end

    def skip_macro(self) -> None:
        """A ``macdef`` body: up to the first empty line."""
        end = self.text.find("\n", self.i)
        while end != -1:
            self.line += 1
            nxt = self.text.find("\n", end + 1)
            if not self.text[end + 1:len(self.text) if nxt == -1 else nxt].strip():
                self.i = end + 1
                return
            end = nxt
        self.i = len(self.text)


def parse_netrc(text: str) -> list[NetrcEntry]:
    """Entries of a .netrc: ``machine HOST login L password P``, ``default``, ``account``
    (ignored), ``macdef NAME`` (its body skipped up to an empty line), ``#`` comments where a
    keyword belongs, words across lines, ``"quoted words"`` with backslash escapes.
    Raises NetrcError naming the line; the message never quotes the file."""
    words = _NetrcWords(text)
    entries: list[NetrcEntry] = []
    current: dict[str, Any] | None = None

    def value(after: str, line: int) -> str:
        got = words.next()
        if got is None:
            raise NetrcError(line, f"{after!r} without a value at the end of the file")
        return got[0]

    def close() -> None:
        if current is not None:
            entries.append(NetrcEntry(current["host"], current.get("login"), current.get("password")))

    while (got := words.next()) is not None:
        word, line, quoted = got
        if not quoted and word.startswith("#"):
            words.skip_line()
        elif quoted:
            raise NetrcError(line, "a quoted word where machine, default, login, password, account "
                                   "or macdef belongs")
        elif word == "machine":
            close()
            current = {"host": value(word, line).lower()}
        elif word == "default":
            close()
            current = {"host": None}
        elif word in ("login", "password", "account"):
            if current is None:
                raise NetrcError(line, f"{word!r} before any machine or default")
            current[word] = value(word, line)
        elif word == "macdef":
            value(word, line)
            words.skip_macro()
        else:
            raise NetrcError(line, "a word where machine, default, login, password, account or macdef "
                                   "belongs")
    close()
    return entries


class NetrcAuth:
    """Basic auth from .netrc entries, to any request whose host has one (else ``default``),
    whether or not the origin is one the user named: a .netrc entry is per host by definition.
    An entry without both login and password sends nothing."""

    def __init__(self, entries: list[NetrcEntry]) -> None:
        self._entries = entries
        self._by_host: dict[str, dict[str, str] | None] = {}

    def headers(self, method: str, origin: Origin, target: str, trusted: bool) -> dict[str, str] | None:
        try:
            return self._by_host[origin.host]
        except KeyError:
            pass
        host = origin.host.lower()
        entry = next((e for e in self._entries if e.host == host), None)
        if entry is None:
            entry = next((e for e in self._entries if e.host is None), None)
        found = None
        if entry is not None and entry.login is not None and entry.password is not None:
            found = {"Authorization": basic_auth(entry.login, entry.password)}
        self._by_host[origin.host] = found
        return found


def netrc_path(values: Mapping[str, Any], environ: Mapping[str, str]) -> tuple[Path | None, bool]:
    """The .netrc to read and whether the user named it with ``--netrc-file`` (None: off)."""
    if not values.get("netrc", True):
        return None, False
    if values.get("netrc_file"):
        return Path(values["netrc_file"]).expanduser(), True
    if environ.get("NETRC"):
        return Path(environ["NETRC"]).expanduser(), False
    home = environ.get("HOME")
    return (Path(home) if home else Path.home()) / ".netrc", False


def load_netrc(path: Path, explicit: bool, warn: Callable[[str], None]) -> list[NetrcEntry]:
    """Entries of ``path``. One the user named that cannot be read or parsed is a UsageError;
    the default one (or $NETRC's) is then a warning, and no entry is used. A file readable by
    others is read anyway, as curl and wget do."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        if explicit:
            raise UsageError(f"--netrc-file {path}: no such file") from None
        return []
    except OSError as exc:
        reason = f"{path}: cannot read: {exc.strerror or exc}"
        if explicit:
            raise UsageError(f"--netrc-file {reason}") from None
        warn(f"netrc file {reason}; not used")
        return []
    try:
        return parse_netrc(text)
    except NetrcError as exc:
        if explicit:
            raise UsageError(f"--netrc-file {path}: {exc}") from None
        warn(f"netrc file {path}: {exc}; not used")
        return []


# -- bearer tokens -----------------------------------------------------------------------------


class BearerToken:
    """``Authorization: Bearer TOKEN``, to the origins the user named only."""

    def __init__(self, token: str) -> None:
        self._headers = {"Authorization": f"Bearer {token}"}

    def __repr__(self) -> str:
        return "BearerToken(***)"

    def headers(self, method: str, origin: Origin, target: str, trusted: bool) -> dict[str, str] | None:
        return self._headers if trusted else None


def read_token(values: Mapping[str, Any], environ: Mapping[str, str]) -> str | None:
    """The token of ``--token-env`` or ``--token-file`` (the first line, stripped), or None."""
    var, path = values.get("token_env"), values.get("token_file")
    if var and path:
        raise UsageError("--token-env and --token-file: give one of them")
    if var:
        where = f"--token-env {var}"
        if var not in environ:
            raise UsageError(f"{where}: the variable is not set")
        token = environ[var].strip()
    elif path:
        where = f"--token-file {path}"
        try:
            with open(Path(path).expanduser(), encoding="utf-8", errors="replace") as f:
                token = f.readline().strip()
        except OSError as exc:
            raise UsageError(f"{where}: cannot read: {exc.strerror or exc}") from None
    else:
        return None
    if not token:
        raise UsageError(f"{where}: the token is empty")
    if not token.isascii() or not token.isprintable() or " " in token:
        raise UsageError(f"{where}: the token has spaces, control or non-ASCII characters")
    return token


# -- cookies ---------------------------------------------------------------------------------


def load_cookies(path: str, warn: Callable[[str], None]) -> list[Cookie]:
    """The cookies of ``--cookies FILE``; a file that cannot be read is a UsageError (one that
    does not exist yet is empty: the jar is saved there at the end), malformed lines are
    skipped with one warning that counts them."""
    where = f"--cookies {path}"
    try:
        text = Path(path).expanduser().read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        if not Path(path).expanduser().parent.is_dir():
            raise UsageError(f"{where}: no such directory to save the cookies in") from None
        return []
    except OSError as exc:
        raise UsageError(f"{where}: cannot read: {exc.strerror or exc}") from None
    jar = parse_cookie_file(text, time.time())
    if jar.malformed:
        warn(f"cookie file {path}: {jar.malformed} malformed line{'s' if jar.malformed > 1 else ''} "
             f"skipped (the first is line {jar.first_bad})")
    return jar.cookies


# -- all of them -------------------------------------------------------------------------------


def header_sources(values: Mapping[str, Any], userinfo: Mapping[Origin, tuple[str, str]], *,
                   environ: Mapping[str, str] | None = None,
                   warn: Callable[[str], None] | None = None) -> list[HeaderSource]:
    """The header sources the options ask for, in the order they are consulted (the module
    docstring). ``warn`` is told of what does not stop the transfer (a default .netrc that
    cannot be parsed, malformed cookie lines)."""
    env = os.environ if environ is None else environ
    say = warn or (lambda _message: None)
    sources: list[HeaderSource] = []
    headers = parse_headers(list(values.get("header") or []))
    if headers:
        sources.append(UserHeaders(headers))
    if userinfo:
        sources.append(OriginBasic(userinfo))
    token = read_token(values, env)
    if token is not None:
        sources.append(BearerToken(token))
    path, explicit = netrc_path(values, env)
    if path is not None:
        entries = load_netrc(path, explicit, say)
        if entries:
            sources.append(NetrcAuth(entries))
    return sources


def cookie_jar(values: Mapping[str, Any], warn: Callable[[str], None] | None = None) -> CookieJar:
    """The transfer's cookie jar: ``--cookies FILE``'s cookies, saved back there at the end; else
    an empty one (the cookies servers set, kept for this transfer only)."""
    path = values.get("cookies")
    if not path:
        return CookieJar()
    return CookieJar(load_cookies(path, warn or (lambda _message: None)), save_to=str(path))
