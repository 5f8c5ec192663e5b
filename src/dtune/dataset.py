"""What to fetch: ``FileSpec`` (one file) and ``Dataset`` (many).

Discovery (``dtune.discovery``) turns a source — a file URL, a directory
listing, a URL list, a Metalink — into a ``Dataset``. The engine only reads
these objects; it never parses listings.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dtune.checksums import Checksum


@dataclass(frozen=True, slots=True)
class Piece:
    """Bytes [start, end) of one file, the share one shard of a cluster transfer fetches
    (``dtune.cluster``). Several pieces of a file write into the same part file with pwrite, each
    journals its own ranges in ``DIR/.dtune/parts/<key>.journal.TAG``, and the file is verified and renamed
    by whoever holds every piece (the cluster's parent), never by the engine that fetched one."""

    start: int
    end: int
    tag: str

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass(slots=True)
class FileSpec:
    """One file to fetch.

    url       absolute http(s) URL, already percent-encoded for the request line
    relpath   relative output path with '/' separators, already checked safe
              (see ``dtune.discovery.paths.safe_relpath``)
    size      bytes, when the source says so (None = learn it from the response)
    mirrors   other URLs serving the same bytes (MDTP uses them)
    mtime     seconds since the epoch, when known
    ranges    the source said its server honours Range (``Accept-Ranges: bytes`` on HEAD)
    checksum  the digest to verify the file with, when a source publishes one
              (``dtune.checksums.Checksum``: algorithm, hex, where it came from)
    piece     only these bytes of the file, for a cluster shard (``Piece``); None: all of it
    size_hint bytes a listing states only roughly (a THREDDS ``dataSize``): for planning when
              ``size`` is None, never verified against
    """

    url: str
    relpath: str
    size: int | None = None
    mirrors: list[str] = field(default_factory=list)
    mtime: float | None = None
    ranges: bool = False
    checksum: Checksum | None = None
    piece: Piece | None = None
    size_hint: int | None = None


@dataclass(slots=True)
class Dataset:
    """The files a listing found, and what it had to say about them."""
    files: list[FileSpec] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    unlisted: list[tuple[str, str]] = field(default_factory=list)  # (relpath/ of a directory that
                                                                   # could not be listed, why)
    collisions: list[tuple[str, str, str]] = field(default_factory=list)  # (relpath, the first URL, another
                                                                          # file's URL listed for the same path)

    @property
    def total_bytes(self) -> int | None:
        if any(f.size is None for f in self.files):
            return None
        return sum(f.size or 0 for f in self.files)

    def __len__(self) -> int:
        return len(self.files)
