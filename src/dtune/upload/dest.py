"""A destination of ``dtune put``: the small interface each kind of server implements.

``upload.run`` drives every destination the same way (S3: ``s3dest``, WebDAV:
``davdest``, ``dtune serve --writable``: ``servedest``); one more kind of server
is one more module with a class like these:

=================  =================================================================
``prepare``        check the destination answers; make what files need first (WebDAV
                   collections, MKCOL parents first). Warnings back.
``existing``       what the destination holds already under the names to put (size,
                   mtime, ETag/checksum): ``--sync`` compares with it
``put_whole``      one request carries the whole file; the server's answer back
``begin``          start the upload of a file in parts, or resume the one an earlier run
                   left (its parts whose MD5 matches the local bytes are kept)
``put_part``       one part; its ETag back (S3 has checked the part's Content-MD5, or
                   its CRC32 when ``begin`` set ``Begun.checksum``)
``complete``       make the object from its parts
``abort``          drop an upload in parts that failed (S3 keeps, and bills, the parts
                   of an upload never completed or aborted)
``verify``         read back what the destination says of the file (size, ETag, digest)
                   and compare it with the local bytes: ``IntegrityError`` when they differ
=================  =================================================================

``multipart`` says whether large files go in parts (S3, dtune serve) or whole (WebDAV).
Names are the safe relative paths of ``upload.local``; a destination builds
its key or URL as its prefix plus that path, nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from dtune.checksums import Checksum
from dtune.errors import DtuneError
from dtune.upload.local import LocalFile
from dtune.upload.parts import Part
from dtune.upload.wire import Body


class IntegrityError(DtuneError):
    """What the destination holds is not what was sent (size, ETag or digest differ)."""


@dataclass(frozen=True, slots=True)
class Remote:
    """What a destination says it holds for one name (None: not said)."""

    size: int | None = None
    mtime: float | None = None
    etag: str | None = None            # S3: hex (one PUT) or hex-N (parts), when a digest
    checksum: Checksum | None = None   # WebDAV: a digest it publishes (Digest header, properties)


@dataclass(frozen=True, slots=True)
class Sent:
    """What was sent of one file, to verify against: its size and the digests computed locally."""

    size: int
    md5: bytes | None = None                        # the whole file's, when read whole
    part_md5s: list[bytes] | None = None            # each part's, in order (an upload in parts)
    sha256: str | None = None                       # hex, when computed (WebDAV)
    part_crc32s: list[int] | None = None            # each part's CRC32 (S3 flexible checksums)
    part_etags: list[str] | None = None             # each part's ETag as answered (then needed to complete)


@dataclass
class Begun:
    """An upload in parts, started or resumed."""

    handle: str                                     # S3: the UploadId
    parts: list[Part]
    kept: dict[int, tuple[str, bytes]] = field(default_factory=dict)   # number → (ETag, MD5) resumed
    checksum: str | None = None     # "CRC32": the server takes flexible checksums (else Content-MD5)
    kept_crc32s: dict[int, int] = field(default_factory=dict)          # number → CRC32, resumed

    @property
    def kept_bytes(self) -> int:
        return sum(p.size for p in self.parts if p.number in self.kept)


class Destination(Protocol):
    label: str            # for messages: never a credential
    multipart: bool

    def url(self, relpath: str) -> str: ...
    async def prepare(self, files: list[LocalFile]) -> list[str]: ...
    async def existing(self, files: list[LocalFile]) -> dict[str, Remote]: ...
    async def put_whole(self, f: LocalFile, body: Body, sent: Sent) -> Remote: ...
    async def begin(self, f: LocalFile, part_size: int, resume: bool) -> Begun: ...
    async def put_part(self, f: LocalFile, begun: Begun, part: Part, data: bytes, md5: bytes | None,
                       crc32: int | None = None) -> str: ...
    async def complete(self, f: LocalFile, begun: Begun, sent: Sent) -> Remote: ...
    async def abort(self, f: LocalFile, begun: Begun) -> None: ...
    async def verify(self, f: LocalFile, sent: Sent, answered: Remote) -> str: ...
    def close(self) -> None: ...
