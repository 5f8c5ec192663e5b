"""Resume journal: an append-only record of the byte ranges already on disk.

Next to the part file ``.dtune/parts/<key>.part`` (the data, written with ``os.pwrite``;
``dtune.statedir``) lives ``.dtune/parts/<key>.journal``:

    dtune-journal 1 {"v": 2, "url": ..., "replicas": [...], "size": ..., "checksum": "ALGO:HEX",
                     "etag": ..., "last_modified": ...}\\n
    R <start> <end>\\n
    ...

A line is appended only after the bytes it names were written to the part
file, so after a crash (SIGKILL, exception) the journal never claims bytes
that are not there; at worst it lacks the last ones, which are fetched
again. A torn last line (no newline) is ignored.

What binds a journal to its file (``judge_header``): the source (the URL, or the
sorted replica set of a multi-source file, each as ``binding_url`` spells it:
no user-info, no signature parameters, so a renewed expiring link with a new
signature still resumes; a replica set resumes when it shares a URL with the
recorded one, so a Metalink whose mirror list changed keeps its bytes), the size,
the published checksum of the same algorithm, and a cluster piece's range. The
validators (ETag, Last-Modified) are recorded and must be well formed; the
first answer of the server is held to them (``engine.files``: a changed file
restarts). A journal that fails any of these, cannot be read, or has a field
of the wrong type is set aside by the caller and its file restarts. Journals
of older dtune versions (no ``"v"``, ``"sha256": HEX`` instead of
``checksum``) are judged the same way.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from dtune.checksums import Checksum
from dtune.engine.ranges import RangeSet
from dtune.fileio import open_nofollow

MAGIC = "dtune-journal 1 "
VERSION = 2   # the header's "v": 2 records the source as binding_url spells it, and "replicas"

# query parameters that sign or date a link, not name what it points to: a renewed presigned S3,
# Google, CloudFront or Azure SAS link differs from the old one only in these
SIGNATURE_PARAMS = frozenset({
    "x-amz-signature", "x-amz-credential", "x-amz-security-token", "x-amz-date", "x-amz-expires",
    "x-amz-algorithm", "x-amz-signedheaders", "x-goog-signature", "x-goog-credential", "x-goog-date",
    "x-goog-expires", "x-goog-algorithm", "x-goog-signedheaders", "signature", "awsaccesskeyid",
    "expires", "policy", "key-pair-id", "sig", "se", "st", "sp", "sv", "sr", "spr", "skoid", "sktid",
    "skt", "ske", "sks", "skv"})
_VALIDATOR_FIELDS = ("etag", "last_modified")


@dataclass(slots=True)
class JournalState:
    header: dict
    done: RangeSet


def parse_journal(data: bytes) -> JournalState | None:
    """Replay a journal's bytes; None when it is not a readable journal."""
    lines = data.split(b"\n")
    if len(lines) < 2:  # header without its newline: torn at creation
        return None
    try:
        head = lines[0].decode("utf-8")
        if not head.startswith(MAGIC):
            return None
        header = json.loads(head[len(MAGIC):])
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(header, dict):
        return None
    done = RangeSet()
    for line in lines[1:-1]:  # the piece after the last newline is torn or empty
        parts = line.split()
        if len(parts) != 3 or parts[0] != b"R":
            continue
        try:
            start, end = int(parts[1]), int(parts[2])
        except ValueError:
            continue
        if 0 <= start < end:
            done.add(start, end)
    return JournalState(header, done)


def recorded_checksum(header: dict) -> tuple[str, str] | None:
    """``(algo, hex)`` a journal header recorded: ``"checksum": "ALGO:HEX"``, or an older dtune's
    ``"sha256": HEX``; None when it recorded none (or something unreadable)."""
    text = header.get("checksum")
    if isinstance(text, str):
        algo, _, digest = text.partition(":")
        return algo, digest.lower()
    old = header.get("sha256")
    return ("sha256", old.lower()) if isinstance(old, str) else None


def binding_url(url: str) -> str:
    """``url`` as a journal records and compares it: without user-info, fragment and the query
    parameters that only sign or date a link (``SIGNATURE_PARAMS``); the rest kept in order."""
    try:
        parts = urlsplit(url)
        netloc = parts.netloc.rpartition("@")[2]
        query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)
                 if k.lower() not in SIGNATURE_PARAMS]
        return urlunsplit((parts.scheme.lower(), netloc.lower(), parts.path, urlencode(query), ""))
    except ValueError:
        return url.partition("#")[0]


def source_header(urls: list[str]) -> dict:
    """What a journal records of its source: the primary URL and, for several, the sorted set."""
    out: dict = {"v": VERSION, "url": binding_url(urls[0])}
    if len(urls) > 1:
        out["replicas"] = sorted({binding_url(u) for u in urls})
    return out


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def judge_header(header: object, *, urls: list[str], size: int | None, checksum: Checksum | None,
                 piece: list[int] | None = None) -> str | None:
    """None when a journal written with ``header`` can be trusted for this file now, else why not
    (in words). ``urls``: the file's primary URL then its mirrors. Pure; any JSON value in.

    A checksum of the same algorithm with another digest means other content
    was announced; one of another algorithm cannot be compared (the final
    verification still checks the bytes).
    """
    if not isinstance(header, dict):
        return "its header is not an object"
    recorded_size = header.get("size")
    if not _is_int(recorded_size) or recorded_size < 0:
        return "it records no size" if recorded_size is None else "its size is not a number of bytes"
    if size is not None and recorded_size != size:
        return f"it describes {recorded_size} bytes, the file has {size}"
    url, replicas = header.get("url"), header.get("replicas")
    if not isinstance(url, str):
        return "it names no source URL"
    if replicas is not None and not (isinstance(replicas, list) and all(isinstance(r, str) for r in replicas)):
        return "its replica list is not a list of URLs"
    for name in ("checksum", "sha256", *_VALIDATOR_FIELDS):
        if header.get(name) is not None and not isinstance(header[name], str):
            return f"its {name} is not text"
    if "piece" in header and header["piece"] is not None and not (
            isinstance(header["piece"], list) and all(_is_int(x) for x in header["piece"])):
        return "its piece is not a byte range"
    was = {binding_url(u) for u in (replicas or [url])} | {binding_url(url)}
    now = {binding_url(u) for u in urls}
    if not was & now:
        return f"it was written for another source ({sorted(was)[0]})"
    recorded = recorded_checksum(header)
    if checksum is not None and recorded is not None and recorded[0] == checksum.algo \
            and recorded[1] != checksum.hex:
        return f"it was written for other content ({recorded[0]} {recorded[1]})"
    if header.get("piece") != piece:
        return "it describes another piece of the file"
    return None


def header_matches(header: object, *, url: str, size: int | None, checksum: Checksum | None) -> bool:
    """Can a journal written with ``header`` be trusted for the file at ``url`` now (``judge_header``)?"""
    return judge_header(header, urls=[url], size=size, checksum=checksum) is None


class Journal:
    """Appends finished ranges for one part file."""

    def __init__(self, path: str, header: dict, *, fresh: bool) -> None:
        self.path = path
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (os.O_TRUNC if fresh else 0)
        self._fd = open_nofollow(path, flags)
        if fresh:
            self.write_header(header)

    def write_header(self, header: dict) -> None:
        os.write(self._fd, (MAGIC + json.dumps(header, sort_keys=True) + "\n").encode())

    def record(self, start: int, end: int) -> None:
        os.write(self._fd, b"R %d %d\n" % (start, end))

    def sync(self) -> None:
        fd = self._fd  # (read once: another thread may close the journal meanwhile)
        if fd >= 0:
            os.fdatasync(fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def load_journal(path: str) -> tuple[JournalState | None, str | None]:
    """``(state, None)``; ``(None, None)`` when there is no journal; ``(None, why)`` when there is
    one that cannot be read (a symlink is not a journal of dtune's)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"it cannot be read ({exc.strerror or exc})"
    with os.fdopen(fd, "rb") as fh:
        try:
            data = fh.read(64 << 20)
        except OSError as exc:
            return None, f"it cannot be read ({exc.strerror or exc})"
    state = parse_journal(data)
    if state is None and b"\n" not in data and (data.startswith(MAGIC.encode()) or MAGIC.encode().startswith(data)):
        return None, None  # torn at creation (a crash, a full disk): it names no byte, as if there were none
    return (state, None) if state is not None else (None, "it is not a readable journal")


def read_journal(path: str) -> JournalState | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)  # a symlink is not our journal
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        try:
            return parse_journal(fh.read(64 << 20))
        except OSError:
            return None
