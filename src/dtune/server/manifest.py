"""The dtune manifest: every file under a directory, with size, mtime and (optionally) SHA-256.

Shape (``dtune_manifest`` version 1)::

    {"dtune_manifest": 1,
     "base": "/data/",
     "files": [{"path": "sub/a.bin", "size": 123, "mtime": 1700000000.5,
                "sha256": "…64 hex…"}, …]}

``base`` is the percent-encoded URL path of the listed directory (always
ending in '/'); ``path`` is relative to it, '/'-separated and *not*
percent-encoded, so a client fetches ``base + quote(path)``. ``mtime`` is
seconds since the epoch (float). ``sha256`` is present only when the server
runs with ``--checksums``. Files are sorted by ``path``.

What the walk includes: regular files, and symlinks to regular files whose
target is inside the served directory. It does not descend into symlinked
directories (no loops, no duplicates), and it leaves out names that are not
valid UTF-8 (JSON cannot carry them) or contain a backslash (the server
refuses such paths).

Checksums are computed on the first manifest request that needs them, in a
worker thread, and cached in memory keyed by (path, size, mtime_ns); the
cache is also saved as JSON under ``$XDG_CACHE_HOME/dtune/checksums/``
(default ``~/.cache/dtune/checksums/``), one file per served directory named
by a hash of its absolute path. Nothing is ever written inside the served
directory: a cache directory that lies inside it is used in memory only.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from dtune.fileio import sha256_fd
from dtune.server.paths import Root

MANIFEST_VERSION = 1
_CACHE_FORMAT = 1


@dataclass(frozen=True, slots=True)
class FileEntry:
    """One file found by ``walk_tree``: ``path`` relative to the listed directory."""

    path: str
    size: int
    mtime_ns: int
    abspath: str


def _is_exportable(name: str) -> bool:
    if "\\" in name:
        return False
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # surrogate-escaped bytes: not valid UTF-8
        return False
    return True


def walk_tree(root: Root, directory: str) -> list[FileEntry]:
    """All files below ``directory`` (an absolute path inside ``root``), sorted by relative path."""
    found: list[FileEntry] = []
    stack: list[tuple[str, str]] = [(directory, "")]
    while stack:
        current, prefix = stack.pop()
        try:
            with os.scandir(current) as it:
                entries = list(it)
        except OSError:
            continue  # unreadable or vanished sub-directory: leave it out
        for entry in entries:
            name = entry.name
            if not _is_exportable(name) or (name == ".dtune" and current == root.real):
                continue  # (.dtune: the server's own, unfinished uploads)
            rel = prefix + name
            st = root.entry_stat(entry)
            if st is None:
                continue  # leads outside, or vanished while walking
            if stat.S_ISREG(st.st_mode):
                found.append(FileEntry(rel, st.st_size, st.st_mtime_ns, entry.path))
            elif stat.S_ISDIR(st.st_mode) and not entry.is_symlink():  # symlinked directories are not followed
                stack.append((entry.path, rel + "/"))
    found.sort(key=lambda e: e.path)
    return found


def manifest_bytes(base: str, entries: Iterable[FileEntry], digests: dict[str, str] | None = None) -> bytes:
    """The manifest JSON for ``entries``; ``digests`` maps ``abspath`` → SHA-256 hex (checksum mode)."""
    files = []
    for e in entries:
        item: dict[str, object] = {"path": e.path, "size": e.size, "mtime": e.mtime_ns / 1e9}
        if digests is not None:
            digest = digests.get(e.abspath)
            if digest is None:
                continue  # unreadable or changing while hashed: a client could not verify it
            item["sha256"] = digest
        files.append(item)
    doc = {"dtune_manifest": MANIFEST_VERSION, "base": base, "files": files}
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/dtune`` or ``~/.cache/dtune``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "dtune"


def sha256_file(path: str, stop: threading.Event | None = None) -> tuple[str, int, int] | None:
    """SHA-256 of a file plus the (size, mtime_ns) it had.

    None if the file cannot be read, changed while it was read, or ``stop`` was set.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        before = os.fstat(fd)
        digest = sha256_fd(fd, stop)
        after = os.fstat(fd)
    except OSError:
        return None
    finally:
        os.close(fd)
    if digest is None or (before.st_size, before.st_mtime_ns) != (after.st_size, after.st_mtime_ns):
        return None
    return digest, after.st_size, after.st_mtime_ns


class ChecksumCache:
    """SHA-256 digests keyed by (absolute path, size, mtime_ns), kept in memory and on disk.

    ``digests(entries)`` is blocking (it hashes missing files): call it in a
    worker thread. Concurrent callers share the work through a lock.
    """

    def __init__(self, root: Root, cache_dir: str | os.PathLike[str] | None = None) -> None:
        self._root_real = root.real
        directory = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        key = hashlib.sha256(root.real.encode("utf-8", "surrogateescape")).hexdigest()[:32]
        self.path: Path | None = directory / "checksums" / f"{key}.json"
        real_dir = os.path.realpath(directory)
        if root.contains(real_dir):
            self.path = None  # never write inside the served directory
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._table: dict[str, tuple[int, int, str]] | None = None

    def __repr__(self) -> str:
        known = 0 if self._table is None else len(self._table)
        return f"<ChecksumCache {self._root_real!r}: {known} digests, file={self.path}>"

    def _load(self) -> dict[str, tuple[int, int, str]]:
        table: dict[str, tuple[int, int, str]] = {}
        if self.path is None:
            return table
        try:
            doc = json.loads(self.path.read_text(encoding="utf-8"))
            if doc.get("format") == _CACHE_FORMAT and doc.get("root") == self._root_real:
                for path, (size, mtime_ns, digest) in doc["files"].items():
                    table[path] = (int(size), int(mtime_ns), str(digest))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pass  # missing or damaged cache: start empty
        return table

    def _save(self, table: dict[str, tuple[int, int, str]]) -> None:
        if self.path is None:
            return
        doc = {"format": _CACHE_FORMAT, "root": self._root_real,
               "files": {p: list(v) for p, v in sorted(table.items())}}
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(doc), encoding="utf-8")
            os.replace(tmp, self.path)
        except OSError:
            try:
                tmp.unlink()
            except OSError:
                pass

    def stop(self) -> None:
        """Abandon hashing in progress (server shutdown); later calls return what is cached."""
        self._stop.set()

    def digests(self, entries: Iterable[FileEntry]) -> dict[str, str]:
        """SHA-256 hex for every entry that can be read, hashing the ones not cached yet."""
        with self._lock:
            if self._table is None:
                self._table = self._load()
            table = self._table
            result: dict[str, str] = {}
            changed = False
            for e in entries:
                known = table.get(e.abspath)
                if known is not None and known[0] == e.size and known[1] == e.mtime_ns:
                    result[e.abspath] = known[2]
                    continue
                if self._stop.is_set():
                    continue
                hashed = sha256_file(e.abspath, self._stop)
                if hashed is None or hashed[1:] != (e.size, e.mtime_ns):
                    continue
                table[e.abspath] = (e.size, e.mtime_ns, hashed[0])
                result[e.abspath] = hashed[0]
                changed = True
            if changed:
                self._save(table)
            return result
