"""Where an upload may land: the parent directories of its path, opened one at a time and checked.

``walk`` opens every parent directory of a decoded target (``paths.split_target``
has already refused ``..``, backslashes and NUL) starting from the served
directory's descriptor. After each ``openat`` the real path of the opened
directory (``/proc/self/fd``) must lie inside the served directory and
outside its ``.dtune``: a symlink anywhere on the path that leads out is
refused with 403. Because the final ``rename`` goes into the very directory
descriptor that was checked, a symlink swapped in after the check cannot
redirect it. A missing parent is created (0755 less the umask) only when
``create`` is set, i.e. when the upload is complete and checked; before,
``walk`` stops there and reports it. A symlink at the final name itself is
replaced by ``rename`` (which never follows it); a directory there is a
conflict (409).

``Refusal`` is how every upload step says no: the status, a reason for
the answer's body, extra header lines, and whether to answer before the
body (``now``).
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass

from dtune.server.paths import Root, Target

INTERNAL = b".dtune"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
FULL_DISK = (errno.ENOSPC, errno.EDQUOT)


class Refusal(Exception):
    """An upload request the server will not carry out: ``status``, ``reason`` and extra header lines."""

    def __init__(self, status: int, reason: str, fields: str = "", *, now: bool = False) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.fields = fields
        self.now = now  # answer before the body (the connection then closes)


@dataclass(frozen=True, slots=True)
class Answer:
    """The final answer to an upload request."""

    status: int
    fields: str = ""
    reason: str = ""


def is_internal(target: Target) -> bool:
    """True for ``/.dtune`` and everything below it: the server's own area."""
    rel = target.relbytes
    return rel == INTERNAL or rel.startswith(INTERNAL + b"/")


def status_of(exc: OSError) -> int:
    """The answer to a failed file-system call on an upload's path."""
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return 403
    if exc.errno in FULL_DISK:
        return 507
    return 409


def walk(root: Root, target: Target, create: bool) -> int:
    """The directory of ``target``'s last name, opened and checked (see the module docstring);
    -1 when a parent is missing and ``create`` is false. Raises ``Refusal``."""
    internal = os.path.join(root.real, ".dtune")
    parts = target.relbytes.split(b"/")
    cur = os.open(".", _DIR_FLAGS, dir_fd=root.fd)
    done: list[bytes] = []
    try:
        for seg in parts[:-1]:
            done.append(seg)
            nxt = _step(root, internal, cur, seg, b"/".join(done), create)
            os.close(cur)
            cur = nxt
            if cur < 0:
                return -1
        try:
            st = os.stat(parts[-1], dir_fd=cur, follow_symlinks=False)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise Refusal(status_of(exc), f"the target cannot be looked at: {exc.strerror}") from None
        else:
            if stat.S_ISDIR(st.st_mode):
                raise Refusal(409, "a directory has this name")
    except BaseException:
        if cur >= 0:
            os.close(cur)
        raise
    return cur


def _step(root: Root, internal: str, cur: int, seg: bytes, sofar: bytes, create: bool) -> int:
    for attempt in range(2):
        try:
            fd = os.open(seg, _DIR_FLAGS, dir_fd=cur)
        except FileNotFoundError:
            if not create:
                return -1
            if attempt:
                raise Refusal(409, "a parent directory cannot be created (a dangling symlink?)") from None
            try:
                os.mkdir(seg, 0o755, dir_fd=cur)
            except FileExistsError:
                pass
            except OSError as exc:
                raise Refusal(status_of(exc), f"cannot create a parent directory: {exc.strerror}") from None
            continue
        except NotADirectoryError:
            raise Refusal(409, "a file stands where the path needs a directory") from None
        except OSError as exc:
            raise Refusal(status_of(exc), f"cannot open a parent directory: {exc.strerror}") from None
        real = root.realpath_of(fd, os.fsdecode(sofar))
        if not root.contains(real) or real == internal or real.startswith(internal + "/"):
            os.close(fd)
            raise Refusal(403, "a symlink on the path leads outside the served directory")
        return fd
    raise AssertionError("unreachable")


def place(root: Root, area_fd: int, part: str, target: Target) -> int:
    """Rename the checked part ``part`` (in ``area_fd``) to ``target``, parents created and confined,
    and ``fsync`` the directory; 201 for a new file, 204 for one replaced. Raises ``Refusal``."""
    parent = walk(root, target, create=True)
    name = target.relbytes.split(b"/")[-1]
    try:
        try:
            os.stat(name, dir_fd=parent, follow_symlinks=False)
            existed = True
        except FileNotFoundError:
            existed = False
        try:
            os.rename(part, name, src_dir_fd=area_fd, dst_dir_fd=parent)
        except OSError as exc:
            if exc.errno == errno.EXDEV:
                raise Refusal(500, "the target lies on another file system than DIR/.dtune") from None
            raise Refusal(status_of(exc), f"cannot move the upload into place: {exc.strerror}") from None
        os.fsync(parent)
    finally:
        os.close(parent)
    return 204 if existed else 201
