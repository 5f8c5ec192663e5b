"""Turning a request path into a file inside the served directory — and nothing outside it.

Theory of operation
-------------------
Two steps, so the part that decides is a pure function:

1. ``split_target(raw_path)`` percent-decodes the path of the request
   target exactly once and splits it into segments. ``.`` and empty
   segments vanish; a ``..`` segment, a backslash or a NUL byte (in any
   spelling: ``%2e%2e``, ``..%2f``, ``..%5c``, ``%00``) is refused here.
   Double encoding is harmless because decoding happens once: ``%252e%252e``
   is the literal name ``%2e%2e``.
2. ``Root.open(segments)`` opens the path relative to a descriptor of the
   served directory, ``fstat``s it, and asks the kernel where the opened
   file really lives (``/proc/self/fd/N``). A symlink that leads outside the
   directory is therefore caught on the very file that would be served —
   no check-then-open race, one extra syscall, and symlinks that stay
   inside the directory keep working. Without ``/proc`` it falls back to
   ``os.path.realpath``.

Names are kept as ``str`` decoded with the file-system encoding
(``surrogateescape``), so files whose names are not UTF-8 can still be
served; ``quote_segment`` turns such a name back into its exact bytes.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from urllib.parse import quote, unquote_to_bytes

_PROC_FD = "/proc/self/fd/"
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)


class PathRejected(Exception):
    """The request path cannot be served; ``status`` is the HTTP answer (400, 403 or 404)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


@dataclass(frozen=True, slots=True)
class Target:
    """A decoded request path: its ``segments`` and whether it ended with '/'."""

    segments: tuple[str, ...]
    trailing_slash: bool

    @property
    def relpath(self) -> str:
        """The path relative to the served directory, '/'-separated ('.' for the directory itself)."""
        return "/".join(self.segments) or "."

    def url_path(self, *, slash: bool | None = None) -> str:
        """The canonical percent-encoded URL path; ``slash`` forces a trailing '/' on or off."""
        path = "/" + "/".join(quote_segment(s) for s in self.segments)
        want_slash = self.trailing_slash if slash is None else slash
        if want_slash and not path.endswith("/"):
            path += "/"
        return path


def quote_segment(name: str) -> str:
    """Percent-encode one path segment (file name), exactly reversing ``split_target``."""
    return quote(os.fsencode(name), safe="")


def split_target(raw_path: bytes) -> Target:
    """Decode the path part of a request target (without query) into safe segments.

    Raises ``PathRejected``: 400 for a path that is not absolute or contains
    NUL, 403 for ``..`` segments and backslashes.
    """
    if not raw_path.startswith(b"/"):
        raise PathRejected(400, "request path must start with '/'")
    decoded = unquote_to_bytes(raw_path) if b"%" in raw_path else raw_path
    if b"\x00" in decoded:
        raise PathRejected(400, "NUL byte in path")
    if b"\\" in decoded:
        raise PathRejected(403, "backslash in path")
    segments = []
    for part in decoded.split(b"/"):
        if part == b"" or part == b".":
            continue
        if part == b"..":
            raise PathRejected(403, "'..' in path")
        segments.append(os.fsdecode(part))
    return Target(tuple(segments), decoded.endswith(b"/"))


class Root:
    """The served directory: opens request paths and guarantees they stay inside it."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.real = os.path.realpath(directory)
        self._prefix = self.real if self.real.endswith("/") else self.real + "/"
        self.fd = os.open(self.real, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
        self._use_proc = os.path.isdir(_PROC_FD)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def contains(self, real_path: str) -> bool:
        """True when an absolute, symlink-free path is the served directory or below it."""
        return real_path == self.real or real_path.startswith(self._prefix)

    def realpath_of(self, fd: int, relpath: str) -> str:
        """Where the file behind ``fd`` (opened as ``relpath``) really lives."""
        if self._use_proc:
            try:
                return os.readlink(f"{_PROC_FD}{fd}")
            except OSError:
                pass
        return os.path.realpath(os.path.join(self.real, relpath))

    def open(self, target: Target) -> tuple[int, os.stat_result, str]:
        """Open a decoded target; return its descriptor, ``fstat`` and real path.

        Only regular files and directories are returned.

        Raises ``PathRejected`` (404 missing, outside, or neither file nor
        directory; 403 permission denied). The caller closes the descriptor.
        """
        relpath = target.relpath
        try:
            fd = os.open(relpath, _OPEN_FLAGS, dir_fd=self.fd)
        except (FileNotFoundError, NotADirectoryError):
            raise PathRejected(404, "no such file") from None
        except PermissionError:
            raise PathRejected(403, "permission denied") from None
        except OSError as exc:  # ELOOP, ENAMETOOLONG, ENXIO (socket), ...
            raise PathRejected(404, exc.strerror or "cannot open") from None
        try:
            st = os.fstat(fd)
            if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
                raise PathRejected(404, "not a regular file or directory")
            real = self.realpath_of(fd, relpath)
            if not self.contains(real):
                raise PathRejected(404, "symlink leads outside the served directory")
        except BaseException:
            os.close(fd)
            raise
        return fd, st, real
