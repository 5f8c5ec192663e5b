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
2. ``Root.open(target)`` opens the path relative to a descriptor of the
   served directory and ``fstat``s it. Containment is checked by the kernel
   on the very file that is opened, so there is no check-then-open race:

   * fast path (Linux ≥ 5.6): ``openat2(..., RESOLVE_BENEATH)`` refuses any
     resolution that would leave the directory, in the same syscall;
   * otherwise, and whenever the fast path says ``EXDEV`` (an absolute
     symlink — which may still point inside — or one that escapes), a plain
     ``openat`` followed by ``readlink(/proc/self/fd/N)`` tells where the
     file really lives; without ``/proc``, ``os.path.realpath``.

   Symlinks that stay inside the directory therefore keep working, and
   those that lead out get 404.

Names are kept as ``str`` decoded with the file-system encoding
(``surrogateescape``), so files whose names are not UTF-8 can still be
served; ``quote_segment`` turns such a name back into its exact bytes.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import sys
from typing import NamedTuple
from urllib.parse import quote, unquote_to_bytes

_PROC_FD = "/proc/self/fd/"
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)


class PathRejected(Exception):
    """The request path cannot be served; ``status`` is the HTTP answer (400, 403 or 404)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


class Target(NamedTuple):
    """A decoded request path: relative to the served directory (``b"."`` for itself), and whether it ended with '/'."""

    relbytes: bytes
    trailing_slash: bool

    @property
    def segments(self) -> tuple[str, ...]:
        """The path's names, decoded with the file-system encoding."""
        return () if self.relbytes == b"." else tuple(os.fsdecode(self.relbytes).split("/"))

    @property
    def relpath(self) -> str:
        """The path relative to the served directory, '/'-separated ('.' for the directory itself)."""
        return os.fsdecode(self.relbytes)

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
    if raw_path[:1] != b"/":
        raise PathRejected(400, "request path must start with '/'")
    if (b"%" not in raw_path and b"/." not in raw_path and b"//" not in raw_path
            and b"\\" not in raw_path and b"\x00" not in raw_path):  # nothing to decode or clean
        if raw_path[-1:] == b"/":
            return Target(raw_path[1:-1] or b".", True)
        return Target(raw_path[1:], False)
    decoded = unquote_to_bytes(raw_path) if b"%" in raw_path else raw_path
    if b"\x00" in decoded:
        raise PathRejected(400, "NUL byte in path")
    if b"\\" in decoded:
        raise PathRejected(403, "backslash in path")
    parts = decoded.split(b"/")
    del parts[0]
    if b".." in parts:
        raise PathRejected(403, "'..' in path")
    if b"" in parts or b"." in parts:
        parts = [p for p in parts if p and p != b"."]
    if not parts:
        return Target(b".", True)
    return Target(b"/".join(parts), decoded[-1:] == b"/")


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_BENEATH = 0x08
_SYS_OPENAT2 = {"x86_64": 437, "aarch64": 437, "riscv64": 437, "ppc64le": 437, "s390x": 437}


def _openat2_function():  # type: ignore[no-untyped-def]
    """``openat2(dirfd, path, how) -> fd or -errno`` beneath ``dirfd``, or None where unavailable."""
    if not sys.platform.startswith("linux"):
        return None
    number = _SYS_OPENAT2.get(os.uname().machine)
    if number is None:
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        syscall = libc.syscall
    except (OSError, AttributeError):
        return None
    syscall.restype = ctypes.c_long
    # No argtypes (their conversion costs ~0.5 µs a call): every argument is passed as an
    # object of the right C type, or as int (dirfd) and bytes (path, char *).
    how = _OpenHow(_OPEN_FLAGS, 0, _RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS)
    return syscall, (ctypes.c_long(number), ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)), how)


_OPENAT2 = _openat2_function()


class Root:
    """The served directory: opens request paths and guarantees they stay inside it."""

    def __init__(self, directory: str | os.PathLike[str], *, fast_open: bool = True) -> None:
        self.real = os.path.realpath(directory)
        self._prefix = self.real if self.real.endswith("/") else self.real + "/"
        self.fd = os.open(self.real, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
        self._use_proc = os.path.isdir(_PROC_FD)
        self._syscall = None
        if fast_open and _OPENAT2 is not None:
            syscall, (number, how_ref, how_size, self._how) = _OPENAT2
            self._syscall = syscall
            self._sysargs = (number, self.fd)
            self._how_args = (how_ref, how_size)
            probe = self._openat2(b".")
            if probe < 0:  # ENOSYS (old kernel), EPERM (seccomp): use the portable path
                self._syscall = None
            else:
                os.close(probe)

    def _openat2(self, path: bytes) -> int:
        """``openat2(root, path, RESOLVE_BENEATH)``: a descriptor, or ``-errno``."""
        fd = self._syscall(*self._sysargs, path, *self._how_args)  # type: ignore[misc]
        return fd if fd >= 0 else -ctypes.get_errno()

    def __repr__(self) -> str:
        return f"<Root {self.real!r} open={'openat2' if self._syscall else 'openat+readlink'}>"

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def contains(self, real_path: str) -> bool:
        """True when an absolute, symlink-free path is the served directory or below it."""
        return real_path == self.real or real_path.startswith(self._prefix)

    def entry_stat(self, entry: os.DirEntry[str]) -> os.stat_result | None:
        """An entry of a directory inside the root, as a request for it would find it.

        A symlink is followed only when its target lies inside the root;
        None for one that leads outside, or for an entry that vanished.
        """
        try:
            if entry.is_symlink():
                real = os.path.realpath(entry.path)
                if not self.contains(real):
                    return None
                return os.stat(real)
            return entry.stat(follow_symlinks=False)
        except OSError:
            return None

    def realpath_of(self, fd: int, relpath: str) -> str:
        """Where the file behind ``fd`` (opened as ``relpath``) really lives."""
        if self._use_proc:
            try:
                return os.readlink(f"{_PROC_FD}{fd}")
            except OSError:
                pass
        return os.path.realpath(os.path.join(self.real, relpath))

    def open(self, target: Target) -> tuple[int, os.stat_result, str | None]:
        """Open a decoded target; return its descriptor, ``fstat`` and real path (None if not looked up).

        Only regular files and directories are returned. Raises
        ``PathRejected`` (404 missing, outside, or neither file nor
        directory; 403 permission denied). The caller closes the descriptor.
        """
        real: str | None = None
        if self._syscall is not None:
            fd = self._syscall(*self._sysargs, target.relbytes, *self._how_args)
            if fd < 0:
                fd = -ctypes.get_errno()
        else:
            fd = -errno.EXDEV
        if fd == -errno.EXDEV:  # no fast path, or a symlink to judge: open, then ask where it landed
            try:
                fd = os.open(target.relbytes, _OPEN_FLAGS, dir_fd=self.fd)
            except OSError as exc:
                fd = -(exc.errno or errno.EIO)
            else:
                try:
                    real = self.realpath_of(fd, target.relpath)
                except BaseException:
                    os.close(fd)
                    raise
                if not self.contains(real):
                    os.close(fd)
                    raise PathRejected(404, "symlink leads outside the served directory")
        if fd < 0:
            code = -fd
            if code in (errno.EACCES, errno.EPERM):
                raise PathRejected(403, "permission denied")
            raise PathRejected(404, os.strerror(code))
        try:
            st = os.fstat(fd)
        except BaseException:
            os.close(fd)
            raise
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
            os.close(fd)
            raise PathRejected(404, "not a regular file or directory")
        return fd, st, real

    def real_of(self, fd: int, target: Target, known: str | None) -> str:
        """The real path of an opened target (for directories that will be walked)."""
        return known if known is not None else self.realpath_of(fd, target.relpath)
