"""``dtune serve --writable``: where upload bodies go, how they are checked and how they land.

Theory of operation
-------------------
Nothing user-visible is written until an upload is complete and checked.
Bodies go to part files in ``DIR/.dtune/uploads/`` (created 0700 at start;
``.dtune`` is refused for reads and writes, and hidden from listings):

* a whole-file ``PUT`` (no ``Content-Range``) writes ``w-RANDOM.part``,
  hashing as the bytes arrive; at the end of the body the digests sent are
  compared, the part is ``fsync``'d and renamed into place (atomic: a
  reader sees the old file or the new one, never a mix). A body cut short,
  or refused, removes its part. Parts of this kind left by a crash are
  removed at start.
* a piece (``Content-Range: bytes A-B/TOTAL``) belongs to the upload of
  its path, ``KEY.part`` with a journal ``KEY.json`` beside it (``KEY``: a
  hash of the path). Pieces are written with ``pwrite`` at their offset,
  from any number of connections, in any order. When a piece's body is
  complete the part is ``fdatasync``'d, and only then is the range added
  to the journal (written to a temporary name and renamed): a range in the
  journal is on disk, so a restarted server (``kill -9`` included) knows
  what it has and ``HEAD`` tells the client. A piece cut short is not
  recorded. When the ranges cover ``0..TOTAL-1`` the part is read once to
  compute its digests, compared with a ``Repr-Digest`` sent with any
  piece, and renamed into place; a mismatch discards the whole upload.

The path is confined twice. ``split_target`` (``paths.py``) refuses ``..``,
backslashes and NUL in any spelling; then every parent directory is opened
one at a time from the served directory's descriptor, and the real path of
each opened directory (``/proc/self/fd``) must lie inside the served
directory and outside ``.dtune``: a symlink anywhere on the path that leads
out is refused (403) even if it was swapped in after the check, because the
rename goes into the directory descriptor that was checked. Missing parents
are created only when the upload is complete. A symlink at the final name
itself is replaced (``rename`` does not follow it).

Quota: ``--upload-quota`` bounds the body bytes accepted since the server
started (one token, so one quota); each request reserves its
``Content-Length`` at its head and is charged what it wrote. The free space
of the file system is checked at the head too. Both answer 507.

Everything here runs on the server's event loop except ``fsync``, hashing a
complete pieced upload and renaming, which run in worker threads; a
finishing step runs as its own task, so a client that goes away does not
cut it in half.
"""

from __future__ import annotations

import asyncio
import base64
import errno
import hashlib
import json
import os
import secrets

from dtune.errors import DtuneError
from dtune.server.confine import FULL_DISK, Answer, Refusal, is_internal, place, status_of, walk
from dtune.server.paths import Root, Target
from dtune.server.uploadhead import (
    DIGEST_SIZES,
    Ranges,
    add_range,
    covers,
    format_digest,
    format_ranges,
    valid_ranges,
)

# Disjoint received ranges one upload may hold: Dtune-Received then stays below ~10 KB, within
# every client's header limits (Python's http.client takes 64 KiB lines).
MAX_RANGES = 256
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_NEW_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
_READ_PIECE = 1 << 20


def _key(relbytes: bytes) -> str:
    return hashlib.sha256(b"dtune-upload\0" + relbytes).hexdigest()[:40]


class Hashes:
    """Running digests of a body (always SHA-256, plus what the client asked to be checked)."""

    def __init__(self, names: set[str]) -> None:
        self.h = {name: hashlib.new(name.replace("-", "")) for name in names}

    def update(self, data: bytes) -> None:
        for h in self.h.values():
            h.update(data)

    def mismatch(self, expected: dict[str, bytes], md5: bytes | None) -> str:
        """"" when every expected digest matches, else which one did not."""
        for name, want in expected.items():
            if self.h[name].digest() != want:
                return f"Repr-Digest {name} does not match the bytes received"
        if md5 is not None and self.h["md5"].digest() != md5:
            return "Content-MD5 does not match the bytes received"
        return ""

    def repr_digest(self) -> str:
        return format_digest("sha-256", self.h["sha-256"].digest())


class Upload:
    """The pieced upload of one path: its part, journal and received ranges."""

    def __init__(self, relbytes: bytes, total: int, digests: dict[str, bytes], ranges: Ranges) -> None:
        self.relbytes = relbytes
        self.key = _key(relbytes)
        self.total = total
        self.digests = digests
        self.ranges = ranges
        self.fd = -1  # open while pieces are written
        self.active = 0  # request bodies writing now
        self.finishing = False
        self.aborted = False
        self.task: asyncio.Task[Answer] | None = None

    def __repr__(self) -> str:
        return f"<Upload {self.relbytes!r} {format_ranges(self.ranges) or '-'}/{self.total}>"

    @property
    def part(self) -> str:
        return self.key + ".part"

    def fields(self) -> str:
        return f"Dtune-Received: {format_ranges(self.ranges)}\r\nDtune-Upload-Length: {self.total}\r\n"


class Sink:
    """One request body on its way to a part file (``write`` is called by the request reader)."""

    def __init__(self, target: Target, fd: int, part: str, offset: int, length: int, hashes: Hashes,
                 digests: dict[str, bytes], md5: bytes | None, entry: Upload | None) -> None:
        self.target = target
        self.fd = fd
        self.part = part
        self.offset = offset
        self.length = length
        self.hashes = hashes
        self.digests = digests
        self.md5 = md5
        self.entry = entry
        self.received = 0
        self.error = 0  # errno of a failed write; ECANCELED: the upload was completed or aborted meanwhile
        self.released = False

    def write(self, data: bytes) -> None:
        n = len(data)
        if self.error:
            return
        entry = self.entry
        if entry is not None and (entry.finishing or entry.aborted):
            self.error = errno.ECANCELED
            return
        if self.received + n > self.length:
            self.error = errno.EFBIG
            return
        view = memoryview(data)
        at = self.offset + self.received
        try:
            while view:
                done = os.pwrite(self.fd, view, at)
                view = view[done:]
                at += done
        except OSError as exc:
            self.error = exc.errno or errno.EIO
            return
        self.hashes.update(data)
        self.received += n


class UploadStore:
    """The uploads of one server: the area under ``.dtune/uploads``, pieced uploads, the quota."""

    def __init__(self, root: Root, *, quota: int) -> None:
        self.root = root
        self.quota = quota
        self.used = 0
        self.reserved = 0
        self.entries: dict[bytes, Upload] = {}
        self._tasks: set[asyncio.Task[Answer]] = set()
        self.dir_fd = self._open_area()
        self._load()

    def __repr__(self) -> str:
        return f"<UploadStore {len(self.entries)} pieced, {self.used}+{self.reserved}/{self.quota} bytes>"

    def close(self) -> None:
        for entry in self.entries.values():
            if entry.fd >= 0:
                os.close(entry.fd)
                entry.fd = -1
        if self.dir_fd >= 0:
            os.close(self.dir_fd)
            self.dir_fd = -1

    def _open_area(self) -> int:
        where = os.path.join(self.root.real, ".dtune", "uploads")
        try:
            try:
                os.mkdir(".dtune", 0o700, dir_fd=self.root.fd)
            except FileExistsError:
                pass
            top = os.open(".dtune", _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=self.root.fd)
            try:
                try:
                    os.mkdir("uploads", 0o700, dir_fd=top)
                except FileExistsError:
                    pass
                return os.open("uploads", _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=top)
            finally:
                os.close(top)
        except OSError as exc:
            why = "a symlink or not a directory" if exc.errno in (errno.ELOOP, errno.ENOTDIR) else exc.strerror
            raise DtuneError(f"serve: --writable: cannot use {where} for unfinished uploads: {why}") from None

    # -- start: what a previous run left -------------------------------------------

    def _load(self) -> None:
        names = set(os.listdir(self.dir_fd))
        keep: set[str] = set()
        for name in sorted(names):
            if not name.endswith(".json"):
                continue
            entry = self._read_journal(name)
            if entry is not None and entry.part in names and entry.key + ".json" == name:
                self.entries[entry.relbytes] = entry
                keep.update((name, entry.part))
        for name in names - keep:  # whole-file parts of a crashed run, temporaries, orphans
            try:
                os.unlink(name, dir_fd=self.dir_fd)
            except OSError:
                pass

    def _read_journal(self, name: str) -> Upload | None:
        try:
            fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW, dir_fd=self.dir_fd)
            with os.fdopen(fd, "rb") as f:
                data = json.loads(f.read(1 << 20))
            relbytes = bytes.fromhex(data["path"])
            total = data["total"]
            digests = {k: base64.b64decode(v, validate=True) for k, v in data["digests"].items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None
        if type(total) is not int or total < 0 or not relbytes or relbytes.startswith(b"/"):
            return None
        if any(DIGEST_SIZES.get(k) != len(v) for k, v in digests.items()):
            return None
        ranges = valid_ranges(data.get("ranges"), total)
        if ranges is None:
            return None
        return Upload(relbytes, total, digests, ranges)

    def _write_journal(self, entry: Upload) -> None:
        data = json.dumps({
            "version": 1, "path": entry.relbytes.hex(), "total": entry.total,
            "digests": {k: base64.b64encode(v).decode() for k, v in entry.digests.items()},
            "ranges": [list(r) for r in entry.ranges],
        }).encode()
        tmp = entry.key + ".json.tmp"
        fd = os.open(tmp, _NEW_FLAGS | os.O_TRUNC, 0o600, dir_fd=self.dir_fd)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        os.rename(tmp, entry.key + ".json", src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)

    # -- heads ----------------------------------------------------------------------

    def admit(self, length: int) -> None:
        """Refuse (507) a body that the quota or the free disk space cannot take."""
        if length > self.quota - self.used - self.reserved:
            left = max(0, self.quota - self.used - self.reserved)
            raise Refusal(507, f"upload quota: {left} of --upload-quota {self.quota} bytes left", now=True)
        try:
            vfs = os.fstatvfs(self.dir_fd)
        except OSError:
            return
        if length > vfs.f_bavail * vfs.f_frsize:
            raise Refusal(507, "not enough free space on the file system of DIR", now=True)

    def open_whole(self, target: Target, length: int, digests: dict[str, bytes], md5: bytes | None) -> Sink:
        self._check_parents(target)
        self.admit(length)
        part = f"w-{secrets.token_hex(8)}.part"
        fd = self._create(part, truncate=False)
        names = {"sha-256", *digests}
        if md5 is not None:
            names.add("md5")
        self.reserved += length
        return Sink(target, fd, part, 0, length, Hashes(names), digests, md5, None)

    def open_piece(self, target: Target, start: int, end: int, total: int, digests: dict[str, bytes],
                   md5: bytes | None) -> Sink:
        self._check_parents(target)
        entry = self.entries.get(target.relbytes)
        if entry is not None:
            if entry.finishing:
                raise Refusal(409, "this upload is being completed", entry.fields())
            if entry.total != total:
                raise Refusal(409, f"TOTAL {total} differs from this upload's {entry.total} "
                                   "(DELETE ?upload to start over)", entry.fields())
            for name, value in digests.items():
                if entry.digests.get(name, value) != value:
                    raise Refusal(409, f"Repr-Digest {name} differs from the one sent with an earlier piece",
                                  entry.fields())
        if len(add_range(entry.ranges if entry else [], start, end)) > MAX_RANGES:
            raise Refusal(400, f"more than {MAX_RANGES} separate received ranges: send adjoining pieces")
        self.admit(end - start)
        if entry is None:
            entry = Upload(target.relbytes, total, dict(digests), [])
            os.close(self._create(entry.part, truncate=True))
            self._write_journal(entry)
            self.entries[target.relbytes] = entry
        elif digests and not digests.items() <= entry.digests.items():
            entry.digests.update(digests)
            self._write_journal(entry)
        if entry.fd < 0:
            entry.fd = os.open(entry.part, os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW, dir_fd=self.dir_fd)
        entry.active += 1
        self.reserved += end - start
        return Sink(target, entry.fd, entry.part, start, end - start, Hashes({"md5"} if md5 else set()),
                    {}, md5, entry)

    def _place(self, part: str, target: Target) -> int:
        return place(self.root, self.dir_fd, part, target)

    def _check_parents(self, target: Target) -> None:
        fd = walk(self.root, target, create=False)
        if fd >= 0:
            os.close(fd)

    def _create(self, part: str, *, truncate: bool) -> int:
        try:
            return os.open(part, _NEW_FLAGS | (os.O_TRUNC if truncate else os.O_EXCL), 0o644, dir_fd=self.dir_fd)
        except OSError as exc:
            raise Refusal(status_of(exc), f"cannot create the part file: {exc.strerror}") from None

    def fields_for(self, relbytes: bytes) -> str:
        entry = self.entries.get(relbytes)
        return "" if entry is None else entry.fields()

    def abort(self, relbytes: bytes) -> Answer:
        """``DELETE ?upload``: forget the pieced upload of a path and remove its part."""
        entry = self.entries.get(relbytes)
        if entry is None:
            return Answer(404, reason="no unfinished upload of this path")
        if entry.finishing:
            return Answer(409, reason="this upload is being completed")
        self._discard(entry)
        return Answer(204)

    def _discard(self, entry: Upload) -> None:
        entry.aborted = True
        if self.entries.get(entry.relbytes) is entry:
            del self.entries[entry.relbytes]
        for name in (entry.key + ".json", entry.part):
            try:
                os.unlink(name, dir_fd=self.dir_fd)
            except OSError:
                pass
        if entry.active == 0 and entry.fd >= 0:
            os.close(entry.fd)
            entry.fd = -1

    # -- bodies complete or cut -----------------------------------------------------------

    def _release(self, sink: Sink) -> None:
        if not sink.released:
            sink.released = True
            self.reserved -= sink.length
            self.used += sink.received

    def cut(self, sink: Sink) -> None:
        """A body that will never be complete (the client went away): nothing of it is kept."""
        self._release(sink)
        entry = sink.entry
        if entry is None:
            os.close(sink.fd)
            try:
                os.unlink(sink.part, dir_fd=self.dir_fd)
            except OSError:
                pass
            return
        self._piece_done(entry)

    def _piece_done(self, entry: Upload) -> None:
        entry.active -= 1
        if entry.active == 0 and entry.fd >= 0:
            os.close(entry.fd)
            entry.fd = -1

    def finish(self, sink: Sink) -> asyncio.Task[Answer]:
        """The body is complete: check, record, and maybe put the file in place (a task of its own)."""
        coro = self._finish_whole(sink) if sink.entry is None else self._finish_piece(sink, sink.entry)
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _finish_whole(self, sink: Sink) -> Answer:
        self._release(sink)
        loop = asyncio.get_running_loop()
        try:
            if sink.error:
                return _write_failed(sink.error)
            wrong = sink.hashes.mismatch(sink.digests, sink.md5)
            if wrong:
                return Answer(400, reason=wrong + "; nothing was stored")
            await loop.run_in_executor(None, os.fsync, sink.fd)
            status = await loop.run_in_executor(None, self._place, sink.part, sink.target)
            return Answer(status, f"Repr-Digest: {sink.hashes.repr_digest()}\r\n")
        except Refusal as exc:
            return Answer(exc.status, exc.fields, exc.reason)
        except OSError as exc:
            return _write_failed(exc.errno or errno.EIO)
        finally:
            os.close(sink.fd)
            try:
                os.unlink(sink.part, dir_fd=self.dir_fd)  # still there unless renamed into place
            except OSError:
                pass

    async def _finish_piece(self, sink: Sink, entry: Upload) -> Answer:
        self._release(sink)
        loop = asyncio.get_running_loop()
        try:
            if sink.error == errno.ECANCELED or entry.aborted:
                return Answer(409, reason="the upload was completed or aborted while this piece arrived")
            if sink.error:
                return _write_failed(sink.error)
            wrong = sink.hashes.mismatch({}, sink.md5)
            if wrong:
                return Answer(400, entry.fields(), "Content-MD5 of this piece does not match; it is not recorded")
            await loop.run_in_executor(None, os.fdatasync, entry.fd)
            if entry.aborted:
                return Answer(409, reason="the upload was aborted while this piece arrived")
            entry.ranges = add_range(entry.ranges, sink.offset, sink.offset + sink.length)
            if entry.task is None:
                if not covers(entry.ranges, entry.total):
                    self._write_journal(entry)
                    return Answer(202, entry.fields())
                entry.finishing = True
                self._write_journal(entry)
                entry.task = loop.create_task(self._complete(entry))
            return await asyncio.shield(entry.task)
        except OSError as exc:
            return _write_failed(exc.errno or errno.EIO)
        finally:
            self._piece_done(entry)

    async def _complete(self, entry: Upload) -> Answer:
        loop = asyncio.get_running_loop()
        target = Target(entry.relbytes, False)
        try:
            hashes = await loop.run_in_executor(None, self._hash_part, entry)
            wrong = hashes.mismatch(entry.digests, None)
            if wrong:
                self._discard(entry)
                return Answer(400, reason=wrong + "; the upload is discarded")
            status = await loop.run_in_executor(None, self._place, entry.part, target)
        except Refusal as exc:
            self._discard(entry)
            return Answer(exc.status, exc.fields, exc.reason + "; the upload is discarded")
        except OSError as exc:
            self._discard(entry)
            return _write_failed(exc.errno or errno.EIO)
        self._discard(entry)  # the part is in place now: only the journal goes
        return Answer(status, f"Repr-Digest: {hashes.repr_digest()}\r\n")

    def _hash_part(self, entry: Upload) -> Hashes:
        hashes = Hashes({"sha-256", *entry.digests})
        fd = os.open(entry.part, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW, dir_fd=self.dir_fd)
        try:
            left = entry.total
            at = 0
            while left > 0:
                data = os.pread(fd, min(_READ_PIECE, left), at)
                if not data:
                    raise OSError(errno.EIO, "the part file is shorter than the upload")
                hashes.update(data)
                at += len(data)
                left -= len(data)
            if os.fstat(fd).st_size != entry.total:
                raise OSError(errno.EIO, "the part file is longer than the upload")
        finally:
            os.close(fd)
        return hashes


def _write_failed(code: int) -> Answer:
    if code in FULL_DISK:
        return Answer(507, reason=f"the disk is full: {os.strerror(code)}; nothing was stored")
    return Answer(500, reason=f"writing the upload failed: {os.strerror(code)}")


__all__ = ["Answer", "Refusal", "Sink", "UploadStore", "is_internal"]
