"""Output paths from untrusted listings.

Every name dtune writes comes from a server or a file someone else wrote, so
it is checked twice:

1. ``safe_relpath(name)`` — pure string check, no file system. It turns a
   listing's name into a canonical relative path ('/'-separated, no empty or
   '.' components) or raises ``UnsafePathError``. It refuses anything that
   could mean "somewhere else" on any platform dtune might write to: absolute
   paths, drive letters, '..', backslashes (a separator on Windows), control
   characters (NUL truncates C strings; newlines forge log lines), lone
   surrogates (a name that was not valid UTF-8), components longer than
   common file systems accept (ext4, XFS, NTFS, APFS: 255 bytes), and a first
   component ``.dtune`` (in any case): dtune's own state directory (``dtune.statedir``). Spaces and
   any printable unicode are fine.
2. ``resolve_inside(outdir, relpath)`` — at write time, follows symlinks that
   already exist under ``outdir`` and refuses a path whose real location is
   not inside it (a listing cannot plant symlinks, but an earlier run or the
   user may have).
"""

from __future__ import annotations

import errno
import os
import re
import unicodedata
from pathlib import Path

from dtune.errors import UnsafePathError
from dtune.statedir import STATE_DIR

# Longest component most file systems accept (NAME_MAX on Linux), in bytes.
MAX_COMPONENT_BYTES = 255
# PATH_MAX on Linux; a longer relative path cannot be opened in one call.
MAX_PATH_BYTES = 4096

_DRIVE = re.compile(r"^[A-Za-z]:")
# Unicode categories refused anywhere in a name: control characters (Cc),
# lone surrogates (Cs: bytes that were not UTF-8) and the line/paragraph
# separators (Zl, Zp) that would split a one-line message.
_REFUSED_CATEGORIES = {"Cc": "control character", "Cs": "lone surrogate", "Zl": "line separator",
                       "Zp": "paragraph separator"}


def relpath_problem(name: object) -> tuple[str | None, str | None]:
    """``(relpath, None)`` when ``name`` is safe, else ``(None, reason)``. Never raises."""
    if not isinstance(name, str):
        return None, f"not a string ({type(name).__name__})"
    if name == "":
        return None, "empty name"
    for ch in () if name.isascii() and name.isprintable() else name:  # (printable ASCII: none refused)
        category = unicodedata.category(ch)
        if category == "Cs" and 0xDC80 <= ord(ch) <= 0xDCFF:  # a byte kept by errors="surrogateescape"
            return None, f"not valid UTF-8 (byte 0x{ord(ch) - 0xDC00:02X})"
        if category in _REFUSED_CATEGORIES:
            return None, f"{_REFUSED_CATEGORIES[category]} U+{ord(ch):04X}"
    if "\\" in name:
        return None, "backslash in name"
    if name.startswith("/"):
        return None, "absolute path"
    parts = []
    for part in name.split("/"):
        if part in ("", "."):
            continue  # 'a//b', './a', 'a/' are harmless spellings of 'a/b', 'a', 'a'
        if part == "..":
            return None, "'..' component"
        if _DRIVE.match(part):
            return None, "drive letter"
        if len(part.encode("utf-8")) > MAX_COMPONENT_BYTES:
            return None, f"component longer than {MAX_COMPONENT_BYTES} bytes"
        parts.append(part)
    if not parts:
        return None, "no name left after removing '.' components"
    if parts[0].casefold() == STATE_DIR:
        return None, f"'{STATE_DIR}' is dtune's own state directory (its part files and journals)"
    relpath = "/".join(parts)
    if len(relpath.encode("utf-8")) > MAX_PATH_BYTES:
        return None, f"path longer than {MAX_PATH_BYTES} bytes"
    return relpath, None


def safe_relpath(name: str) -> str:
    """Canonical '/'-separated relative path for an untrusted ``name``.

    Raises ``UnsafePathError("unsafe path NAME: REASON")`` for absolute paths,
    drive letters, '..' components, backslashes, control characters, empty
    names and names that are only '.'; ``a//b`` and ``./a`` become ``a/b``
    and ``a``.
    """
    relpath, reason = relpath_problem(name)
    if relpath is None:
        raise UnsafePathError(f"unsafe path {name!r}: {reason}")
    return relpath


def resolve_inside(outdir: str | os.PathLike[str], relpath: str) -> Path:
    """Where ``relpath`` goes under ``outdir``: ``realpath(outdir) / relpath``.

    Checks ``relpath`` with ``safe_relpath`` first, then resolves the result
    following any symlinks that exist now and raises ``UnsafePathError`` if
    the real location is not strictly inside ``outdir``. The returned path
    keeps ``relpath``'s own spelling under the resolved ``outdir`` (so a
    writer that renames onto it replaces a symlink rather than its target).
    """
    return Inside(outdir)(relpath)


class Inside:
    """``resolve_inside`` for the many names of one dataset under one ``outdir``.

    The output directory and each directory a name lies in are resolved once,
    and listed once (``os.scandir``: which of its names are symlinks); a name
    costs no system call then (more only where it is itself a symlink, or its
    directory could not be listed: one ``lstat``). Resolving every name from
    the root would cost an ``lstat`` per component.
    """

    def __init__(self, outdir: str | os.PathLike[str]) -> None:
        self.root = os.path.realpath(outdir)
        self._prefix = self.root.rstrip(os.sep) + os.sep   # what every real path inside starts with
        self._dirs: dict[str, str] = {"": self.root}  # directory under the root → its real path
        self._links: dict[str, frozenset[str] | None] = {}  # real directory → its symlinks' names

    def __call__(self, relpath: str) -> Path:
        return Path(self.text(relpath))

    def text(self, relpath: str) -> str:
        """``self(relpath)`` as a ``str``."""
        clean = safe_relpath(relpath)
        head, _, leaf = clean.rpartition("/")
        real_dir = self._dirs.get(head)
        if real_dir is None:
            real_dir = self._dirs[head] = self._real(os.path.join(self.root, head), relpath)
        real = os.path.join(real_dir, leaf)
        links = self._links[real_dir] if real_dir in self._links else self._list(real_dir)
        if leaf in links if links is not None else os.path.islink(real):
            real = self._real(real, relpath)
        if real == self.root or not real.startswith(self._prefix):  # (the root itself: for "/")
            raise UnsafePathError(f"unsafe path {relpath!r}: resolves to {real!r}, outside {self.root!r}")
        return os.path.join(self.root, clean)

    def _list(self, real_dir: str) -> frozenset[str] | None:
        """The names of the symlinks in ``real_dir`` (none when it is missing; None: not listed)."""
        try:
            with os.scandir(real_dir) as it:
                links = frozenset(e.name for e in it if e.is_symlink())
        except FileNotFoundError:
            links = frozenset()
        except OSError:
            links = None
        self._links[real_dir] = links
        return links

    def _real(self, path: str, relpath: str) -> str:
        """``realpath(path)``; a symlink loop (which realpath leaves unresolved) is refused."""
        real = os.path.realpath(path)
        try:
            os.stat(real)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise UnsafePathError(f"unsafe path {relpath!r}: cannot resolve under {self.root!r}: "
                                      f"symlink loop") from None
        return real
