"""dtune's own working files: the ``.dtune/`` state directory in the output root.

A transfer's part files, journals and cluster marker live where no name from a
listing, a Metalink, a URL or a Content-Disposition can reach them::

    DIR/.dtune/parts/<key>.part          the bytes of a file being fetched (renamed into place at the end)
    DIR/.dtune/parts/<key>.journal       its resume journal (``engine.journal``)
    DIR/.dtune/parts/<key>.journal.TAG   a cluster piece's journal (``TAG`` = ``START-END``)
    DIR/.dtune/aside/<key>.<time>.journal  a journal that described something else (and its .part):
                                         set aside, never deleted by dtune
    DIR/.dtune/cluster-marker            the cluster's shared-file-system token (``cluster.marker``)

``<key>`` is the SHA-256 (first 32 hex digits) of the file's relative path, so
a name of any length or spelling maps to one short, fixed name. A listed name
whose first component is ``.dtune`` is refused (``discovery.paths``). A
symlink planted at ``.dtune`` or at one of its directories is refused
(DiskError), never followed; a planted symlink at a file inside is replaced
(``fileio.open_nofollow``). The directory is removed at the end of a run when
nothing is left in it (``remove_if_empty``).

Earlier dtune versions kept ``NAME.dtune-part`` and ``NAME.dtune-journal``
next to the file (``legacy_part``, ``legacy_journal``); ``engine.files``
adopts such a pair when its journal matches the file's source.
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
from dataclasses import dataclass

from dtune.errors import DiskError
from dtune.fileio import disk_error

STATE_DIR = ".dtune"
PARTS, ASIDE = "parts", "aside"
MARKER = "cluster-marker"
LEGACY_PART, LEGACY_JOURNAL = ".dtune-part", ".dtune-journal"  # an older dtune's names, next to the file

_ready: set[str] = set()   # state directories checked in this process since their run began


def key(relpath: str) -> str:
    """The fixed-length name of ``relpath``'s working files."""
    return hashlib.sha256(relpath.encode("utf-8", "surrogatepass")).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class Place:
    """Where one file of a transfer goes (``final``) and where its working files live."""

    root: str      # the output root: the directory the relative path is under
    relpath: str
    final: str

    @classmethod
    def of(cls, final_path: str, relpath: str) -> Place:
        """``final_path`` is ``root/relpath`` (``discovery.paths.resolve_inside``); where it is not
        (a caller's own path), the file's own directory is its root."""
        tail = "/" + relpath
        root = final_path[:-len(tail)] if final_path.endswith(tail) else os.path.dirname(final_path)
        return cls(root or "/", relpath, final_path)

    @property
    def parts_dir(self) -> str:
        return os.path.join(self.root, STATE_DIR, PARTS)

    @property
    def part(self) -> str:
        return os.path.join(self.parts_dir, key(self.relpath) + ".part")

    @property
    def journal(self) -> str:
        return os.path.join(self.parts_dir, key(self.relpath) + ".journal")

    def piece_journal(self, tag: str) -> str:
        return f"{self.journal}.{tag}"

    @property
    def legacy_part(self) -> str:
        return self.final + LEGACY_PART

    @property
    def legacy_journal(self) -> str:
        return self.final + LEGACY_JOURNAL


def _directory(path: str) -> None:
    """Make ``path`` a directory of dtune's own: created when missing, refused when it is a symlink
    or not a directory. Raises DiskError."""
    try:
        os.mkdir(path, 0o755)
        return
    except FileExistsError:
        pass
    except OSError as exc:
        raise disk_error(path, exc) from None
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise DiskError(f"{path}: is a symlink: dtune keeps its working files there and does not follow "
                        f"it (remove it)")
    if not stat.S_ISDIR(st.st_mode):
        raise DiskError(f"{path}: is not a directory: dtune keeps its working files there (remove it)")


def ensure(root: str, sub: str = PARTS, *, again: bool = False) -> str:
    """``root/.dtune/sub`` made and checked (no symlink on the way); its path. Checked once per run
    (``again``: once more, as when it went missing meanwhile). Raises DiskError."""
    top = os.path.join(root, STATE_DIR)
    path = os.path.join(top, sub) if sub else top
    if path in _ready and not again:
        return path
    if not os.path.isdir(root):
        try:
            os.makedirs(root, exist_ok=True)
        except OSError as exc:
            raise disk_error(root, exc) from None
    _directory(top)
    if sub:
        _directory(path)
    _ready.add(path)
    return path


def set_aside(place: Place, journal: str, *, part: bool) -> str | None:
    """Move ``journal`` (and, with ``part``, the file's part file) into ``.dtune/aside/``, named by the
    key and the time; the new journal path, None when nothing could be moved. Never deletes."""
    try:
        aside = ensure(place.root, ASIDE)
    except (DiskError, OSError):
        return None
    stem = os.path.join(aside, f"{key(place.relpath)}.{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}")
    suffix = os.path.basename(journal).partition(".")[2]   # "journal" or "journal.TAG"
    target = f"{stem}.{suffix}"
    try:
        os.rename(journal, target)
    except OSError:
        return None
    if part:
        try:
            os.rename(place.part, stem + ".part")
        except OSError:
            pass
    return target


def remove_if_empty(root: str) -> None:
    """Remove ``root/.dtune`` and its directories when nothing is left in them (the end of a run)."""
    top = os.path.join(root, STATE_DIR)
    for path in (os.path.join(top, PARTS), os.path.join(top, ASIDE), top):
        _ready.discard(path)
        try:
            os.rmdir(path)   # (not empty, missing, or a symlink: left as it is)
        except OSError:
            pass
