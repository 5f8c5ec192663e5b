"""File-system primitives shared by every room: safe opens, disk errors, digests, descriptor limit.

Plain blocking calls; callers on an event loop run the slow ones (hashing)
in a worker thread.
"""

from __future__ import annotations

import errno
import fcntl
import os
import resource
import threading

from dtune.checksums import hasher
from dtune.errors import DiskError

HASH_BLOCK = 4 << 20        # bytes read per pread while hashing: few syscalls, bounded memory
MAX_OPEN_FILES = 1 << 20    # the most descriptors dtune asks for when the hard limit is unlimited


def disk_error(path: str, exc: OSError) -> DiskError:
    """A ``DiskError`` naming ``path`` and the reason in words (ENOSPC → "no space left on device")."""
    reason = {errno.ENOSPC: "no space left on device", errno.EROFS: "read-only file system",
              errno.EACCES: "permission denied", errno.EDQUOT: "disk quota exceeded",
              errno.EFBIG: "file too large for this file system"}.get(
                  exc.errno or 0, exc.strerror or str(exc))
    return DiskError(f"{path}: {reason}")


def open_nofollow(path: str, flags: int, mode: int = 0o644) -> int:
    """Open a file dtune owns in the output directory, never through a symlink.

    A symlink planted where a part file or journal goes (``.dtune/parts/KEY.part ->
    /elsewhere``) would make dtune write outside the output directory; it is
    removed and a plain file created in its place. (A symlink at ``.dtune`` or
    one of its directories is refused before: ``dtune.statedir.ensure``.)
    """
    try:
        return os.open(path, flags | os.O_NOFOLLOW, mode)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
    os.unlink(path)  # the symlink itself, not what it points to
    return os.open(path, flags | os.O_NOFOLLOW | os.O_CREAT, mode)


def write_all(fd: int, data: bytes, offset: int) -> None:
    """``pwrite`` all of ``data`` at ``offset`` (a write may be short: a signal, a full disk's last blocks)."""
    view = memoryview(data)
    done = 0
    while done < len(view):
        n = os.pwrite(fd, view[done:], offset + done)
        if n <= 0:  # nothing written and no error: the file system has no room left
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        done += n


def digest_fd(fd: int, algo: str, stop: threading.Event | None = None) -> str | None:
    """Hex digest (``algo``: one of ``dtune.checksums.ALGORITHMS``) of everything in ``fd``,
    read with pread from offset 0.

    None when ``stop`` was set before the end (a caller shutting down).
    Raises ImportError for crc32c when its optional package is missing.
    """
    h = hasher(algo)
    offset = 0
    while True:
        block = os.pread(fd, HASH_BLOCK, offset)
        if not block:
            return h.hexdigest()
        h.update(block)
        offset += len(block)
        if stop is not None and stop.is_set():
            return None


def digest_file(path: str | os.PathLike[str], algo: str) -> str:
    """Hex digest of the file at ``path``; raises OSError when it cannot be read."""
    fd = os.open(path, os.O_RDONLY)
    try:
        digest = digest_fd(fd, algo)
        assert digest is not None  # no stop event: always runs to the end
        return digest
    finally:
        os.close(fd)


def sha256_fd(fd: int, stop: threading.Event | None = None) -> str | None:
    """Hex SHA-256 of everything in ``fd`` (``digest_fd``); None when ``stop`` was set first."""
    return digest_fd(fd, "sha256", stop)


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex SHA-256 of the file at ``path``; raises OSError when it cannot be read."""
    return digest_file(path, "sha256")


_LIBC: object = None   # libc through ctypes, loaded on first use (None: not yet; False: not here)

SYNC_FILE_RANGE_WRITE = 2  # <linux/fs.h>: start writing dirty pages back, do not wait


def _libc():  # noqa: ANN202 (a ctypes.CDLL, or False)
    global _LIBC
    if _LIBC is None:
        try:
            import ctypes  # (ctypes: only for the calls libc alone has)
            _LIBC = ctypes.CDLL(None, use_errno=True)
        except OSError:
            _LIBC = False
    return _LIBC


def syncfs(fd: int) -> bool:
    """Make the whole file system of ``fd`` durable (Linux ``syncfs``); False where it is missing or fails."""
    call = getattr(_libc(), "syncfs", None)
    return call is not None and call(fd) == 0


def start_writeback(fd: int) -> bool:
    """Start writing ``fd``'s dirty pages to disk now, without waiting for them (Linux
    ``sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE)``); False where it is missing.

    The kernel otherwise holds written data in memory until a tenth of RAM is
    dirty: the ``fsync`` before a large file is renamed into place would then
    write all of it at the end of the transfer.
    """
    call = getattr(_libc(), "sync_file_range", None)
    if call is None or fd < 0:
        return False
    import ctypes  # (ctypes: only for the calls libc alone has)
    return call(fd, ctypes.c_longlong(0), ctypes.c_longlong(0), SYNC_FILE_RANGE_WRITE) == 0


FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE = 1, 2  # <linux/falloc.h>


def punch_hole(fd: int, offset: int, length: int) -> bool:
    """Free the disk blocks of ``[offset, offset + length)`` of ``fd`` (they read as zeros after), the
    file's size kept (Linux ``fallocate`` with ``FALLOC_FL_PUNCH_HOLE``); False where it cannot."""
    call = getattr(_libc(), "fallocate", None)
    if call is None or fd < 0 or length <= 0:
        return False
    import ctypes  # (ctypes: only for the calls libc alone has)
    return call(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, ctypes.c_longlong(offset),
                ctypes.c_longlong(length)) == 0


def lock_directory(path: str) -> int | None:
    """Hold an exclusive ``flock`` on the directory ``path`` (no file is created in it).

    Returns the descriptor that holds it (close it to let go), None where the
    file system cannot lock (some network file systems). Raises DiskError when
    another process holds it: another ``dtune get`` is writing there.
    """
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise DiskError(f"output directory {path} is in use by another dtune get: wait for it to "
                        f"finish, or give another -o") from None
    except OSError:  # ENOLCK, EOPNOTSUPP: no locks here
        os.close(fd)
        return None
    return fd


def raise_open_file_limit(want: int | None = None) -> None:
    """Lift the soft RLIMIT_NOFILE to ``want`` descriptors (default: the hard limit), never lower it.

    Many files and connections in flight each hold descriptors; where the
    limit cannot be raised, dtune keeps what it has and reports "too many
    open files" per file if it happens.
    """
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        ceiling = MAX_OPEN_FILES if hard == resource.RLIM_INFINITY else hard
        target = ceiling if want is None else min(want, ceiling)
        if soft != resource.RLIM_INFINITY and soft < target:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ImportError, ValueError, OSError):
        pass
