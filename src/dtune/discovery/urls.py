"""URL helpers for discovery: quoting names, normalising URLs, digest headers.

Names in listings are decoded text; URLs dtune sends are percent-encoded.
The two meet here and nowhere else:

- ``quote_relpath`` encodes a decoded relative path for a request line: each
  segment is encoded whole (``#``, ``?``, ``%``, space, ``&``, non-ASCII) and
  the '/' between segments is kept, so every name round-trips.
- ``requote_url`` makes a URL someone typed or a server sent request-ready
  without changing what it means: valid ``%XX`` escapes stay, characters that
  may not appear raw (space, quotes, non-ASCII, a '%' that starts no escape)
  are encoded, the fragment is dropped and a unicode host becomes IDNA.
- ``relative_segments`` decides whether a URL lies under a directory URL,
  comparing decoded segments so ``%C3%BC`` and ``%c3%bc`` agree.
"""

from __future__ import annotations

import base64
import binascii
import re
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from dtune import checksums
from dtune.checksums import Checksum

_DEFAULT_PORTS = {"http": 80, "https": 443}
# Characters left as they are in a path or query: RFC 3986 reserved
# characters (they may carry meaning) plus '%' (existing escapes).
_KEEP = "!$&'()*+,/:;=@[]~%"
_LONE_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")


def _requote_part(text: str, extra_safe: str = "") -> str:
    return quote(_LONE_PERCENT.sub("%25", text), safe=_KEEP + extra_safe)


def requote_url(url: str) -> str:
    """``url`` made request-ready (see the module doc). Raises ``ValueError`` if it is not http(s)."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise ValueError(f"not an http(s) URL: {url!r}")
    host = parts.hostname
    if not host:
        raise ValueError(f"no host in URL: {url!r}")
    parts.port  # noqa: B018 -- raises ValueError for a port that is not a number in 0..65535
    netloc = parts.netloc
    if any(ch.isspace() or ord(ch) < 0x21 or ch in "<>\"{}|\\^`" for ch in netloc):
        raise ValueError(f"bad characters in host of URL: {url!r}")
    if not netloc.isascii():
        try:
            ascii_host = host.encode("idna").decode("ascii")
        except UnicodeError:
            raise ValueError(f"host is not a valid international domain name: {url!r}") from None
        userinfo, _, hostport = netloc.rpartition("@")
        port = hostport[len(host):] if hostport.lower().startswith(host) else ""
        netloc = (userinfo + "@" if userinfo else "") + ascii_host + port
    path = _requote_part(parts.path) or "/"
    query = _requote_part(parts.query, "?")
    return urlunsplit((scheme, netloc, path, query, ""))


# The checksums dtune verifies, as RFC 3230 names them, asked of a file's HEAD and of PROPFIND:
# dCache answers the first of these it holds for the file (adler32 is what WLCG sites keep).
WANT_DIGEST = "adler32, md5, sha-256"

# WebDAV sources as fsspec's webdav4 names them: listed with PROPFIND, fetched over http(s)
DAV_SCHEMES = {"dav": "http", "davs": "https"}


def from_dav(url: str) -> str | None:
    """``dav://H/P`` → ``http://H/P`` and ``davs://`` → ``https://``; None for any other URL."""
    scheme, sep, rest = url.strip().partition("://")
    if not sep or scheme.lower() not in DAV_SCHEMES:
        return None
    return f"{DAV_SCHEMES[scheme.lower()]}://{rest}"


def path_is_dir(url: str) -> bool:
    """A URL whose path ends in '/' names a directory (query and fragment aside)."""
    return urlsplit(url).path.endswith("/")


def quote_relpath(relpath: str) -> str:
    """Percent-encode a decoded '/'-separated relative path for a URL."""
    return quote(relpath, safe="/")


def join_url(dir_url: str, relpath: str) -> str:
    """``dir_url`` (a directory) + the quoted ``relpath``; the directory's query is not carried over."""
    parts = urlsplit(dir_url)
    path = parts.path if parts.path.endswith("/") else parts.path + "/"
    return urlunsplit((parts.scheme, parts.netloc, path + quote_relpath(relpath), "", ""))


def last_segment(url: str) -> str:
    """The decoded last path segment ('' for a path ending in '/').

    Bytes that are not UTF-8 decode to lone surrogates, which ``safe_relpath``
    then refuses with a clear reason instead of writing a mangled name.
    """
    return unquote(urlsplit(url).path.rpartition("/")[2], errors="surrogateescape")


def _origin(parts) -> tuple[str, str, int | None]:
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = -1
    return scheme, (parts.hostname or "").lower(), port or _DEFAULT_PORTS.get(scheme)


def relative_segments(url: str, dir_url: str) -> list[str] | None:
    """Decoded path segments of ``url`` below the directory of ``dir_url``, or None.

    None when ``url`` is on another origin, outside the directory, or the
    directory itself. A trailing '' segment means ``url`` is a sub-directory.
    The directory of ``dir_url`` is its path up to the last '/'.
    """
    u, d = urlsplit(url), urlsplit(dir_url)
    if _origin(u) != _origin(d):
        return None
    dir_segs = d.path.split("/")[:-1] or [""]
    url_segs = u.path.split("/")
    if len(url_segs) <= len(dir_segs):
        return None
    if [unquote(s) for s in url_segs[:len(dir_segs)]] != [unquote(s) for s in dir_segs]:
        return None
    rest = url_segs[len(dir_segs):]
    if rest == [""]:
        return None
    return [unquote(s, errors="surrogateescape") for s in rest]


def _digest_hex(value: str, algo: str, hex_allowed: bool) -> str | None:
    """The lowercase hex of a header's digest ``value`` (base64, or hex where ``hex_allowed``),
    or None when it is not a digest of ``algo``'s length."""
    value = value.strip()
    digits = checksums.hex_length(algo)
    if hex_allowed and len(value) == digits and all(c in "0123456789abcdefABCDEF" for c in value):
        return value.lower()  # some servers send hex where RFC 3230 says base64
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw.hex() if len(raw) * 2 == digits else None


def _members(value: str) -> list[tuple[str, str]]:
    """``a=1, b=2;p=x`` → ``[("a", "1"), ("b", "2")]`` (parameters dropped)."""
    out = []
    for member in value.split(","):
        key, sep, rest = member.partition("=")
        if sep:
            out.append((key.strip().lower(), rest.split(";")[0].strip()))
    return out


def checksum_from_headers(headers: dict[str, str]) -> Checksum | None:
    """The strongest digest of the whole file a response's headers publish, or None.

    ``headers`` has lower-case names, and must come from a HEAD or a 200 answer
    (a 206 carries the digest of its range, not of the file). Read:
    ``Repr-Digest: sha-256=:B64:`` (RFC 9530, byte sequences), ``Digest:
    SHA-256=B64`` (RFC 3230; hex accepted too), ``Content-MD5: B64`` and
    Google Cloud Storage's ``x-goog-hash: crc32c=B64, md5=B64``. Among equally
    strong digests the earlier header in that list wins; unknown algorithms
    and malformed values are ignored.
    """
    found: list[Checksum] = []

    def take(algo_name: str, value: str, source: str, hex_allowed: bool) -> None:
        algo = checksums.canonical(algo_name)
        if algo is not None:
            digest = _digest_hex(value, algo, hex_allowed)
            if digest is not None:
                found.append(Checksum(algo, digest, source))

    for key, value in _members(headers.get("repr-digest", "")):
        if len(value) >= 2 and value[0] == ":" == value[-1]:
            take(key, value[1:-1], "Repr-Digest header", False)
    for key, value in _members(headers.get("digest", "")):
        take(key, value, "Digest header", True)
    if "content-md5" in headers:
        take("md5", headers["content-md5"], "Content-MD5 header", False)
    for key, value in _members(headers.get("x-goog-hash", "")):
        take(key, value, "x-goog-hash header", False)
    return checksums.strongest(*found)
