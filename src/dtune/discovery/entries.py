"""What every listing parser returns: untrusted entries plus warnings.

Parsers only read bytes; they never decide whether a name is safe to write
(``discover`` runs every name through ``safe_relpath`` and turns refusals
into warnings) and never build ``FileSpec`` objects themselves.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dtune.checksums import Checksum


@dataclass(frozen=True, slots=True)
class Entry:
    """One row of a listing.

    name     decoded, '/'-separated, relative to the listed directory (or the
             output directory, for URL lists and Metalinks); UNTRUSTED
    is_dir   a sub-directory to list next (nginx JSON and HTML indexes only)
    size     exact bytes, when the listing states them exactly
    mtime    seconds since the epoch, when the listing states it
    checksum the digest the listing publishes (``dtune.checksums.Checksum``: sha-256, md5, ...)
    urls     request-ready absolute URLs the listing names for this entry, best
             first; empty when the URL is built from the directory URL + name
    """

    name: str
    is_dir: bool = False
    size: int | None = None
    mtime: float | None = None
    urls: tuple[str, ...] = ()
    checksum: Checksum | None = None


@dataclass(slots=True)
class Listing:
    """What one listing held: its entries and its warnings."""
    entries: list[Entry] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
