"""URL-list files: the subset of aria2's ``--input-file`` format dtune reads.

    # comment
    https://a.example/data/x.nc<TAB>https://b.example/mirror/x.nc
      out=run1/x.nc
      checksum=sha-256=<64 hex digits>
    https://a.example/data/y.nc

A line that starts without whitespace is one file: one or more URIs separated
by TAB, the first preferred, the others mirrors of the same bytes. The
indented lines after it are its options: ``out=`` (the output relpath —
untrusted like any listing name) and ``checksum=TYPE=HEX`` with any type
aria2 names (``sha-1``, ``sha-224``, ``sha-256``, ``sha-384``, ``sha-512``,
``md5``, ``adler32``) and ``crc32c``; given several, the strongest is
verified. Other options aria2 knows (``dir=``, ``header=``, ...) are reported
as warnings and ignored; checksums of unknown types are ignored with a warning. Blank lines and
lines whose first non-blank character is '#' are skipped. Without ``out=`` the
name is the first URI's last path segment, percent-decoded.

Refused (``DiscoveryError`` naming the file and line): bytes that are not
UTF-8, a URI that is not http(s), an option before any URI, an option without
'=', a checksum of a known type whose digest is not hex of the right length.
"""

from __future__ import annotations

from dtune import checksums
from dtune.discovery.entries import Entry, Listing
from dtune.discovery.urls import last_segment, requote_url
from dtune.errors import DiscoveryError


def parse_url_list(body: bytes, source: str) -> Listing:
    """Entries of a URL-list file (names untrusted, ``urls`` request-ready)."""
    try:
        text = body.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DiscoveryError(f"{source}: URL list is not UTF-8 (byte {exc.start})") from None

    listing = Listing()
    current: dict | None = None  # the file being read: urls, out, checksum

    def finish() -> None:
        if current is not None:
            name = current["out"] if current["out"] is not None else last_segment(current["urls"][0])
            listing.entries.append(Entry(name=name, checksum=current["checksum"], urls=tuple(current["urls"])))

    for lineno, raw in enumerate(text.split("\n"), start=1):
        line = raw.removesuffix("\r")
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        where = f"{source}: line {lineno}"
        if not line[0].isspace():
            finish()
            urls = []
            for uri in line.split("\t"):
                if not uri.strip():
                    continue
                try:
                    urls.append(requote_url(uri))
                except ValueError as exc:
                    raise DiscoveryError(f"{where}: {exc}") from None
            current = {"urls": list(dict.fromkeys(urls)), "out": None, "checksum": None}
            continue
        if current is None:
            raise DiscoveryError(f"{where}: option {stripped!r} before any URI")
        key, sep, value = stripped.partition("=")
        key = key.strip()
        if not sep:
            raise DiscoveryError(f"{where}: option {stripped!r} has no '='")
        if key == "out":
            current["out"] = value.strip()
        elif key == "checksum":
            kind, _, digest = value.partition("=")
            kind = kind.strip()
            algo = checksums.canonical(kind)
            if algo is None:
                listing.warnings.append(f"{where}: ignoring checksum of unknown type {kind!r} "
                                        f"(dtune checks {', '.join(checksums.ALGORITHMS)})")
                continue
            checksum = checksums.make(algo, digest, "url list")
            if checksum is None:
                raise DiscoveryError(f"{where}: {kind} checksum is not {checksums.hex_length(algo)} hex digits")
            current["checksum"] = checksums.strongest(current["checksum"], checksum)
        else:
            listing.warnings.append(f"{where}: ignoring unsupported option {key!r}")
    finish()
    return listing
