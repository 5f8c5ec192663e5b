"""Checksum files published next to data: ``SHA256SUMS``, ``MD5SUMS``, ``NAME.sha256`` sidecars.

Two kinds of file are recognised by name (``checksum_file_kind``):

- a SUMS file lists many files: ``SHA512SUMS``, ``SHA384SUMS``, ``SHA256SUMS``,
  ``SHA224SUMS``, ``SHA1SUMS``, ``MD5SUMS`` (any case, optionally ``.txt``),
  and ``NAME.sha256sum``, ``NAME.md5sum``, ... (what ``sha256sum * > NAME.sha256sum``
  writes);
- a sidecar publishes the digest of one file: ``NAME.sha512``, ``NAME.sha256``,
  ``NAME.sha1``, ``NAME.md5`` (and ``.sha384``, ``.sha224``) is the digest of
  ``NAME`` in the same directory.

Lines are read in the formats the coreutils tools write and ``-c`` reads:
GNU ``HEX  name`` (text mode), ``HEX *name`` (binary mode), ``\\HEX  na\\\\me``
(escaped name), and BSD / ``--tag`` ``SHA256 (name) = HEX``, whose own
algorithm name wins over the file's. A line of only ``HEX`` names the
sidecar's (or ``NAME.sha256sum``'s) ``NAME``. Blank lines and ``#``
comments are skipped; CRLF line ends are accepted; any other line is
malformed and counted (the caller warns once per file, never fails).

A file the user names (``--checksum-file``) may be called anything
(``checksums.txt``): the algorithm of its GNU lines is then told by the
digest's length (128 hex digits: sha512, 64: sha256, 40: sha1, 32: md5, ...).

Names are untrusted and relative to the checksum file's directory; ``attach``
runs each through ``paths.relpath_problem`` and gives a digest only to a file
that discovery already listed — a name of a file not in the dataset is
ignored, so a checksum file can never add a file or a path.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from dtune import checksums
from dtune.checksums import Checksum
from dtune.dataset import FileSpec
from dtune.discovery.paths import relpath_problem

MAX_BYTES = 16 << 20  # a checksum file larger than this is not a checksum file

_SUMS = re.compile(r"^(sha512|sha384|sha256|sha224|sha1|md5)sums(\.txt)?$", re.IGNORECASE)
_SUMS_SUFFIX = re.compile(r"^(.+)\.(sha512|sha384|sha256|sha224|sha1|md5)sum$", re.IGNORECASE)
_SIDECAR = re.compile(r"^(.+)\.(sha512|sha384|sha256|sha224|sha1|md5)$", re.IGNORECASE)
_BSD = re.compile(r"^([A-Za-z0-9-]+) ?\((.*)\) ?= ?([0-9A-Fa-f]+)$")
_HEX = re.compile(r"^[0-9A-Fa-f]+")


@dataclass(frozen=True, slots=True)
class Kind:
    """What a checksum file's name says: the algorithm of its GNU lines, the file a bare digest
    belongs to (``NAME`` of ``NAME.sha256``; None for ``SHA256SUMS``), and whether it is a sidecar
    (of ``target`` alone: worth fetching only when ``target`` is listed)."""

    algo: str | None         # None: told by each digest's length (a file whose name says nothing)
    target: str | None
    sidecar: bool = False


ANY = Kind(None, None)       # a checksum file the user names, whatever it is called
# digest length → algorithm, for lines of a file whose name does not say (8 digits is ambiguous)
_BY_LENGTH = {128: "sha512", 96: "sha384", 64: "sha256", 56: "sha224", 40: "sha1", 32: "md5"}


@dataclass(slots=True)
class SumsFile:
    """A parsed checksum file: ``(untrusted name, Checksum)`` pairs and how many lines were malformed."""

    entries: list[tuple[str, Checksum]] = field(default_factory=list)
    malformed: int = 0


def checksum_file_kind(basename: str) -> Kind | None:
    """The ``Kind`` of a file named ``basename``, or None when the name is not a checksum file's."""
    if m := _SUMS.match(basename):
        return Kind(m.group(1).lower(), None)
    if m := _SUMS_SUFFIX.match(basename):
        return Kind(m.group(2).lower(), m.group(1))
    if m := _SIDECAR.match(basename):
        return Kind(m.group(2).lower(), m.group(1), sidecar=True)
    return None


def _unescape(name: str) -> str | None:
    r"""GNU's escaped name (``\\`` → ``\``, ``\n`` → newline); None for another escape."""
    out, i = [], 0
    while i < len(name):
        ch = name[i]
        if ch == "\\":
            nxt = name[i + 1:i + 2]
            if nxt not in ("\\", "n", "r"):
                return None
            out.append({"\\": "\\", "n": "\n", "r": "\r"}[nxt])
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def parse_line(line: str, kind: Kind, source: str) -> tuple[str, Checksum] | None:
    """One non-blank, non-comment line as ``(name, Checksum)``; None when it is malformed."""
    bsd = _BSD.match(line)
    if bsd:
        checksum = checksums.make(bsd.group(1), bsd.group(3), source)
        return (bsd.group(2), checksum) if checksum is not None and bsd.group(2) else None
    escaped = line.startswith("\\")
    if escaped:
        line = line[1:]
    m = _HEX.match(line)
    if not m:
        return None
    digest, rest = m.group(0), line[m.end():]
    algo = kind.algo or _BY_LENGTH.get(len(digest))
    checksum = checksums.make(algo, digest, source) if algo is not None else None
    if checksum is None:
        return None
    if not rest.strip():
        return (kind.target, checksum) if kind.target is not None and not escaped else None
    if rest[:2] in ("  ", " *"):
        name = rest[2:]
    elif rest[:1] == " ":
        name = rest[1:]  # one space: not what the tools write, but what people type
    else:
        return None
    if escaped:
        unescaped = _unescape(name)
        if unescaped is None:
            return None
        name = unescaped
    return (name, checksum) if name else None


def parse_sums(body: bytes, kind: Kind, source: str) -> SumsFile:
    """Every digest of a checksum file's bytes (see the module doc); never raises.

    ``source`` is what ``Checksum.source`` says (the file's name, e.g. ``SHA256SUMS``).
    """
    text = body.decode("utf-8", errors="surrogateescape").removeprefix("\ufeff")
    parsed = SumsFile()
    for raw in text.split("\n"):
        line = raw.removesuffix("\r")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        entry = parse_line(line, kind, source)
        if entry is None:
            parsed.malformed += 1
        else:
            parsed.entries.append(entry)
    return parsed


def choose(current: Checksum | None, new: Checksum, warn: Callable[[str], None], relpath: str) -> Checksum:
    """The checksum a file keeps when ``new`` is published for it too: the stronger algorithm; of two
    digests of one algorithm the first (a different second one is reported, not used)."""
    if current is None:
        return new
    if current.algo == new.algo:
        if current.hex != new.hex:
            warn(f"{relpath}: {new.source} gives another {new.algo} than {current.source}; "
                 f"verifying the one from {current.source}")
        return current
    best = checksums.strongest(current, new)
    assert best is not None
    return best


def attach(parsed: SumsFile, directory: str, files: dict[str, FileSpec], where: str,
           warn: Callable[[str], None], *, suffix_match: bool = False) -> int:
    """Give each file of ``files`` (relpath → spec) named in ``parsed`` its digest; how many got one.

    Names are relative to ``directory`` (the checksum file's relpath directory,
    ``""`` or ``"sub/"``). With ``suffix_match`` (a checksum file the user named,
    which lives anywhere), a name that is no relpath is tried without its
    leading directories, so ``data/a.bin`` in a parent's SHA256SUMS finds
    ``a.bin``. Unsafe names and malformed lines cost one warning for the file.
    """
    unsafe = 0
    attached = 0
    for name, checksum in parsed.entries:
        relpath, _reason = relpath_problem(name)
        if relpath is None:
            unsafe += 1
            continue
        spec = _find(directory + relpath, files, suffix_match)
        if spec is None:
            continue  # a file not in the dataset: a checksum file never adds one
        spec.checksum = choose(spec.checksum, checksum, warn, spec.relpath)
        attached += 1
    problems = []
    if parsed.malformed:
        problems.append(f"{parsed.malformed} malformed line(s)")
    if unsafe:
        problems.append(f"{unsafe} unsafe name(s)")
    if problems:
        warn(f"{where}: skipped {' and '.join(problems)}")
    return attached


def _find(relpath: str, files: dict[str, FileSpec], suffix_match: bool) -> FileSpec | None:
    spec = files.get(relpath)
    while spec is None and suffix_match and "/" in relpath:
        relpath = relpath.split("/", 1)[1]
        spec = files.get(relpath)
    return spec


@dataclass(frozen=True, slots=True)
class Job:
    """One checksum file to read: a URL (or local path), what its name says, the relpath directory
    its names are relative to, and what ``Checksum.source`` calls it."""

    where: str
    kind: Kind
    directory: str
    label: str
    explicit: bool = False   # named by --checksum-file: a failure to read it is an error


def listed_jobs(listed: list[FileSpec], files: dict[str, FileSpec], warn: Callable[[str], None]) -> list[Job]:
    """Jobs for the checksum files a directory listing holds (``listed``): a sidecar only when its
    file is in the dataset, a file listed larger than ``MAX_BYTES`` not at all."""
    jobs = []
    for spec in listed:
        directory, _, base = spec.relpath.rpartition("/")
        directory = directory + "/" if directory else ""
        kind = checksum_file_kind(base)
        if kind is None or (kind.sidecar and directory + (kind.target or "") not in files):
            continue
        if spec.size is not None and spec.size > MAX_BYTES:
            warn(f"{spec.relpath}: not read as a checksum file: larger than {MAX_BYTES >> 20} MiB")
            continue
        jobs.append(Job(spec.url, kind, directory, spec.relpath))
    return jobs
