"""Per-file state and the disk side of a transfer: part file, journal, commit.

Life of a file (``FileState.status``)::

    queued ──▶ active ──▶ verifying ──▶ done
       ▲          │            │
       └─ backoff ┘            └──▶ failed (size / checksum mismatch)
    (a complete final file found at start: skipped)
    (a final file in place whose conditional GET is answered 304: skipped)

A final file already in place is judged by ``on_disk`` (sync): skipped when
it is the server's (size; with ``update`` also the mtime; with ``verify``,
--verify-existing, its published checksum), fetched again when it is not, or
asked about with a conditional GET when the listing cannot tell. A file
skipped without its content read is *kept* (``kept_by``), not verified.

Disk operations here are plain blocking calls; the engine runs the slow ones
(fsync, hashing, rename) in a worker thread.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from dtune import checksums
from dtune.dataset import FileSpec
from dtune.engine.hashahead import HashAhead
from dtune.engine.journal import Journal, judge_header, load_journal, source_header
from dtune.engine.ranges import RangeSet
from dtune.engine.replica import Replica
from dtune.errors import DiskError, DtuneError, HTTPError
from dtune.fileio import digest_fd, digest_file, disk_error, open_nofollow, start_writeback, syncfs
from dtune.http.message import resolve_location
from dtune.http.redact import redact_url
from dtune.http.validators import Validators, http_time
from dtune.statedir import Place, ensure, set_aside

MAX_BREAKS = 16   # places a file's tries broke off that are remembered: more are different faults
_NONE: frozenset[int] = frozenset()  # the shared empty ``refused`` (a file's own set at its first drop)
_NO_LANES: dict[int, int] = {}       # the shared empty ``lanes``: never written (``scheduler.assign``)


def on_disk(local_size: int, local_mtime: float, *, size: int | None, mtime: float | None,
            checksum_known: bool, update: bool, verify: bool = False) -> str:
    """What to do with a final file already in place (no journal next to it).

    "fetch"  it differs from the server's: fetch it again (its size differs, or under
             ``update`` its mtime, to the second)
    "hash"   a checksum is published and either ``verify`` (--verify-existing) asks for it or
             the listing gives no size: keep it if its digest matches (verified), else fetch
    "skip"   keep it without reading it (kept, not verified): without ``update`` a file of
             the right size; under ``update`` its mtime is the server's too
    "ask"    the listing cannot tell (no size; under ``update`` no mtime): a conditional GET
             (If-Modified-Since its mtime) decides; a 304 keeps it, anything else fetches it
    Pure: plain numbers in, a word out.
    """
    if size is not None and local_size != size:
        return "fetch"
    if checksum_known and (verify or size is None):
        return "hash"
    if not update:
        return "skip" if size is not None else "ask"
    if mtime is not None:
        if int(local_mtime // 1) != int(mtime // 1):
            return "fetch"
        if size is not None:
            return "skip"
    return "ask"


class FileState:
    """Everything the engine knows about one file while it moves.

    A transfer holds one per file, a million for a million-file tree: the record has
    ``__slots__``, its rarely used containers (``refused``, ``dropped``, ``notes``, ``breaks``,
    ``lanes``) start as shared empty ones replaced at the first write, and its working paths
    (``place``, ``part_path``, ``journal_path``) and ``replicas`` are made when first asked.
    """

    __slots__ = ("index", "spec", "relpath", "url", "_replicas", "refused", "dropped", "size", "checksum",
                 "final_path", "piece", "notes", "legacy_note", "partition", "status", "error", "done",
                 "ahead", "unassigned", "in_flight", "lanes", "group", "failures", "breaks", "not_before",
                 "single_stream", "ranges_seen", "full_job", "probing", "validators", "journal_validators",
                 "fd", "journal", "resumed", "done_zero", "gen", "restarts", "journaled",
                 "if_modified_since", "local_size", "kept_by", "__dict__")

    def __init__(self, index: int, spec: FileSpec, final_path: Path | str, partition: str) -> None:
        self.index = index
        self.spec = spec
        self.relpath = spec.relpath
        self.url = spec.url                 # the primary URL (recorded in the journal)
        self._replicas: list[Replica] | None = None  # ``replicas``, made when first asked
        self.refused: frozenset[int] | set[int] = _NONE  # replicas this file no longer uses (a 404, ...)
        self.dropped: tuple | list[dict] = ()  # why: {replica, url (redacted), status, reason}, in order
        self.size = spec.size
        self.checksum = spec.checksum       # what verifies the bytes beyond their size (None: size only)
        self.final_path = str(final_path)
        self.piece = spec.piece             # a cluster shard's share of the file (``dataset.Piece``)
        self.notes: tuple | list[str] = ()  # what resume_state has to say (a journal set aside)
        self.legacy_note: str | None = None  # an older dtune's partial not resumed: why (``adopt_legacy``)
        self.partition = partition
        self.status = "queued"
        self.error: str | None = None
        self.done = RangeSet()              # bytes on disk (journalled)
        self.ahead: HashAhead | None = None  # the checksum's digest of the settled prefix (hashahead)
        self.unassigned: RangeSet | None = None  # bytes nobody is fetching; None = size unknown
        self.in_flight = 0                  # requests out for this file
        self.lanes: dict[int, int] = _NO_LANES  # lane id → requests of this file on it (p counts lanes)
        self.group = None                   # the group working on it, if any
        self.failures = 0                   # consecutive failures without new bytes
        self.breaks: tuple | list[int] = ()  # bytes where a try's body broke off (``outcomes.repeats``)
        self.not_before = 0.0               # backoff: no request before this engine time
        self.single_stream = False          # server ignores Range: whole-file GETs only
        self.ranges_seen = False            # a 206 for this file has arrived
        self.full_job = None                # the whole-file response currently streaming
        self.probing = False                # a first request is learning the size
        self.validators: Validators | None = None          # the primary's: recorded in the journal
        self.journal_validators: Validators | None = None  # a resumed file's, from its journal
        self.fd = -1
        self.journal: Journal | None = None
        self.resumed = 0
        self.done_zero = False              # a zero-length file's response has completed
        self.gen = 0                        # bumped when the file restarts or fails
        self.restarts = 0                   # times the source changed under us
        # a file fetched in one request has no journal (and no preallocation): if the
        # transfer dies, all of it was in flight anyway; the engine sets this per size
        self.journaled = True
        # a final file in place the listing cannot judge (``on_disk`` "ask"): the first requests ask
        # If-Modified-Since its mtime (the HTTP date); a 304 skips the file. Cleared by the first 200/206
        self.if_modified_since: str | None = None
        self.local_size: int | None = None  # that file's size (a skipped file's, when the listing has none)
        # a final file in place kept without its content checked: what matched ("size", "size and
        # mtime", "not modified": a 304); None for a file fetched, or hashed against its checksum
        self.kept_by: str | None = None

    @property
    def replicas(self) -> list[Replica]:
        """The file's URLs, index = replica number: the primary, then its mirrors."""
        if self._replicas is None:
            self._replicas = [Replica(u) for u in (self.spec.url, *self.spec.mirrors)]
        return self._replicas

    def renewals(self) -> int:
        """Expired links renewed for this file (``Replica.renewed``, summed over its replicas)."""
        return 0 if self._replicas is None else sum(r.renewed for r in self._replicas)

    def shed(self) -> None:
        """The file has ended (done, failed, skipped): its replicas go unless a link was renewed
        (what the result counts); a late answer for it finds them made again from the listing."""
        if not self.renewals():
            self._replicas = None

    @property
    def place(self) -> Place:
        """Its working files, in DIR/.dtune (``statedir``)."""
        return Place.of(self.final_path, self.relpath)

    @property
    def part_path(self) -> str:
        return self.place.part

    @property
    def journal_path(self) -> str:
        place = self.place
        return place.piece_journal(self.piece.tag) if self.piece else place.journal

    def serves(self, replica: int) -> bool:
        """May a lane of ``replica`` fetch this file (it has that URL, and it was not dropped)?"""
        return replica < len(self.replicas) and replica not in self.refused

    def drop(self, replica: int, status: int | None, reason: str) -> dict:
        """This file no longer uses ``replica`` (its other files still do); returns what was recorded."""
        self.refused = {*self.refused, replica}
        entry = {"replica": replica, "url": redact_url(self.replicas[replica].original), "status": status,
                 "reason": reason}
        self.dropped = [*self.dropped, entry]
        return entry

    # ---- planning ----------------------------------------------------------
    def plan(self) -> None:
        """Set ``unassigned`` once the size is known."""
        if self.size is not None:
            self.unassigned = self.todo()

    def todo(self) -> RangeSet:
        """The bytes this engine still fetches: those of the file, or of its piece, not on disk."""
        gaps = self.done.complement(self.size or 0)
        if self.piece is not None:
            gaps.remove(0, self.piece.start)
            gaps.remove(self.piece.end, max(self.size or 0, self.piece.end))
        return gaps

    @property
    def wanted(self) -> int | None:
        """Bytes this engine moves for the file: its size, or its piece's."""
        return self.piece.size if self.piece is not None else self.size

    def learn_size(self, size: int, start: int, end: int | None, split_threshold: int) -> None:
        """A response said the size; the request [start, end) that said it is being fetched."""
        self.size = size
        if not self.done:
            self.journaled = size > split_threshold
        self.unassigned = self.todo()
        if end is not None:
            self.unassigned.remove(start, end)
        else:
            self.unassigned.remove(0, size)
        self.probing = False

    def stream_whole(self, job: object) -> bool:
        """The server ignores Range: ``job`` streams the whole file. True the first time."""
        first = not self.single_stream
        self.single_stream, self.ahead = True, None  # (a retry writes from byte 0 again: not hashed ahead)
        self.full_job = job
        if self.unassigned is not None:
            self.unassigned = RangeSet()
        return first

    def follow_redirect(self, replica: int, asked: str, location: str, max_redirects: int) -> None:
        """Move replica ``replica`` to the redirect target (once per hop, not per request).

        ``asked`` is the URL the redirected request went to; raises HTTPError
        (not retryable) after ``max_redirects`` hops or for a bad target.
        """
        rep = self.replicas[replica]
        if rep.url != asked:
            return  # an earlier answer already moved this replica; the request simply goes again
        rep.hops += 1   # (counted per replica since its last resolution: a renewal starts afresh)
        if rep.hops > max_redirects:
            raise HTTPError(f"{self.relpath}: more than {max_redirects} redirects (a loop; through a login, "
                            f"its session cookie was not kept or not accepted)", retryable=False)
        try:
            rep.move(resolve_location(asked, location))
        except DtuneError as exc:
            raise HTTPError(f"{self.relpath}: bad redirect: {exc}", retryable=False) from None

    def broke_at(self, pos: int) -> None:
        """A try's body broke off at byte ``pos`` (the latest ``MAX_BREAKS`` are kept)."""
        if pos not in self.breaks:
            self.breaks = [*self.breaks[-(MAX_BREAKS - 1):], pos]

    def forget(self) -> None:
        """The file changed on the server: forget every byte and validator, start over."""
        self.journal_validators = None
        self.validators = None
        for rep in self.replicas:
            rep.validators = None
        self.gen += 1
        self.close_files()
        self.done, self.ahead = RangeSet(), None
        self.breaks = ()
        self.resumed = 0
        self.single_stream = False
        self.full_job = None
        self.plan()

    @property
    def complete(self) -> bool:
        if self.size is None:
            return False
        if self.piece is not None:
            return self.done.covers(self.piece.start, self.piece.end)
        if self.size == 0:
            return self.done_zero
        return self.done.covers(0, self.size)

    def has_work(self) -> bool:
        if self.status != "active" and self.status != "queued":
            return False
        if self.size is None:
            return not self.probing
        if self.size == 0:
            return not self.done_zero and self.in_flight == 0
        if self.single_stream:
            return self.full_job is None and bool(self.unassigned)
        return bool(self.unassigned)

    # ---- disk ----------------------------------------------------------------
    def resume_state(self, update: bool = False, verify: bool = False, *, move: bool = True,
                     listed: frozenset[str] | set[str] = frozenset()) -> str:
        """Look at the disk before transferring: 'skip', 'resume' or 'fresh' (a fresh file may
        carry ``if_modified_since``). ``update``: --update, ``verify``: --verify-existing (see
        ``on_disk``); a file skipped unread says why in ``kept_by``. A piece is never skipped
        here: its parent decided to fetch the file. A journal that does not describe this
        file is set aside (``statedir.set_aside``, a line in ``notes``); an older dtune's part file
        is adopted (``adopt_legacy``; ``listed``: the transfer's relative paths). ``move`` False (a
        dry run): nothing is moved. Blocking."""
        self.kept_by = None
        if self.piece is None and os.path.isfile(self.final_path) and not os.path.exists(self.journal_path):
            try:
                st = os.stat(self.final_path)
                decision = on_disk(st.st_size, st.st_mtime, size=self.size, mtime=self.spec.mtime,
                                   checksum_known=self.checksum is not None, update=update, verify=verify)
                if decision == "skip" or (decision == "hash" and self.checksum is not None and
                                          digest_file(self.final_path, self.checksum.algo) == self.checksum.hex):
                    if self.size is None:
                        self.size = st.st_size
                    if decision == "skip":
                        self.kept_by = "size and mtime" if update else "size"
                    return "skip"
                if decision == "ask":
                    from email.utils import formatdate  # (only then: its import is start-up time)

                    self.if_modified_since = formatdate(st.st_mtime, usegmt=True)
                    self.local_size = st.st_size
            except (OSError, ImportError):  # (ImportError: crc32c missing; verify says so after the fetch)
                pass
        if self.piece is None and move and not os.path.lexists(self.journal_path) \
                and not os.path.lexists(self.final_path):
            self.adopt_legacy(listed)
        state, why = load_journal(self.journal_path)
        if state is not None:
            why = judge_header(state.header, urls=[r.original for r in self.replicas], size=self.size,
                               checksum=self.checksum, piece=self._piece_header())
        if why is not None:
            if move:  # (a dry run only says what would happen)
                aside = set_aside(self.place, self.journal_path, part=self.piece is None)
                where = f"kept as {aside}" if aside else "left in place"
                self.notes = [*self.notes, f"{self.relpath}: its journal was set aside ({why}; {where}): "
                                           f"the file starts over"]
            return "fresh"
        if state is not None:
            try:
                st = os.lstat(self.part_path)
                part_size = st.st_size if stat.S_ISREG(st.st_mode) else -1
            except OSError:
                part_size = -1
            if part_size >= 0:
                if self.size is None:
                    self.size = state.header["size"]
                done = RangeSet()
                for s, e in state.done:
                    if s < part_size:
                        done.add(s, min(e, part_size, self.size))
                self.done = done
                self.resumed = done.total()
                self.journal_validators = Validators.from_header(state.header)
                return "resume"
        return "fresh"

    def adopt_legacy(self, listed: frozenset[str] | set[str]) -> None:
        """Move an older dtune's ``NAME.dtune-part`` + ``NAME.dtune-journal`` into ``.dtune/`` when the
        journal says it is dtune's, for this source; neither may be a name of this transfer's listing.
        Otherwise they stay where they are (a note says the file restarts). Blocking."""
        place = self.place
        if self.relpath + ".dtune-part" in listed or self.relpath + ".dtune-journal" in listed:
            return
        try:
            if not all(stat.S_ISREG(os.lstat(p).st_mode) for p in (place.legacy_journal, place.legacy_part)):
                return
        except OSError:
            return
        state, _ = load_journal(place.legacy_journal)
        if state is None:
            return  # not a journal: not dtune's file
        why = judge_header(state.header, urls=[r.original for r in self.replicas], size=self.size,
                           checksum=self.checksum)
        if why is None:
            try:
                ensure(place.root)
                os.rename(place.legacy_part, self.part_path)
                os.rename(place.legacy_journal, self.journal_path)
                return
            except (OSError, DtuneError) as exc:
                why = str(exc)
        self.legacy_note = f"{self.relpath}: {os.path.basename(place.legacy_part)} ({why})"

    def journal_kept(self, reason: str) -> bool:
        """Does a failure for ``reason`` leave a part file a rerun resumes (a full disk or quota)?"""
        return (("no space left on device" in reason or "disk quota exceeded" in reason)
                and os.path.exists(self.journal_path))

    def open_for_write(self) -> None:
        """Open (or create) the part file and the journal. Blocking; raises DiskError."""
        if self.fd >= 0:
            return
        try:
            fresh = not self.done
            # a piece shares its part file with the file's other pieces: never truncated here
            flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | (os.O_TRUNC if fresh and self.piece is None else 0)
            ensure(self.place.root)  # (checked once per run: no symlink at .dtune redirects the part)
            try:
                self.fd = open_nofollow(self.part_path, flags)
            except FileNotFoundError:  # removed since it was checked (another process's run ended)
                ensure(self.place.root, again=True)
                self.fd = open_nofollow(self.part_path, flags)
            if fresh and self.size and self.journaled:
                start, length = (self.piece.start, self.piece.size) if self.piece else (0, self.size)
                try:
                    os.posix_fallocate(self.fd, start, length)
                except OverflowError:  # (beyond what an offset of this platform can name)
                    raise OSError(errno.EFBIG, f"{length} bytes is beyond what this platform can hold") from None
                except OSError as exc:
                    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
                        raise
                    # file systems without fallocate (e.g. some FUSE): grow as we write
            if self.size is not None and self.size > 0 and self.journaled:
                header = {**source_header([r.original for r in self.replicas]), "size": self.size,
                          "checksum": checksums.text(self.checksum) if self.checksum else None,
                          **(self.validators or Validators()).to_header()}
                if self.piece is not None:
                    header["piece"] = self._piece_header()
                self.journal = Journal(self.journal_path, header, fresh=fresh)
                if self.checksum and self.piece is None and not self.single_stream and checksums.available(self.checksum.algo):
                    self.ahead = HashAhead(self.checksum.algo)
        except OSError as exc:
            self.close_files()
            raise disk_error(self.part_path, exc) from None
        except DiskError:
            self.close_files()
            raise

    def _piece_header(self) -> list[int] | None:  # (a piece's journal header; None for a whole file's)
        return None if self.piece is None else [self.piece.start, self.piece.end]

    def record(self, start: int, end: int) -> None:
        if end > start:
            self.done.add(start, end)
            if self.ahead is not None:
                self.ahead.poke(self.fd, self.done)
            if self.journal is not None:
                try:
                    self.journal.record(start, end)
                except OSError as exc:
                    raise disk_error(self.journal_path, exc) from None

    def sync(self) -> None:
        """Make the journal durable no later than the bytes it names. Blocking."""
        fd, journal = self.fd, self.journal
        try:
            if fd >= 0:
                os.fdatasync(fd)
            if journal is not None:
                journal.sync()
        except OSError:
            pass  # the descriptor was closed meanwhile; the final commit syncs again

    def write_back(self) -> None:
        """Start writing this part file's dirty pages to disk, without waiting. Blocking (briefly)."""
        fd = self.fd
        if fd >= 0 and self.journaled:
            try:
                start_writeback(fd)
            except OSError:
                pass  # the descriptor was closed meanwhile

    def close_files(self) -> None:
        if self.journal is not None:
            self.journal.close()
            self.journal = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def verify(self) -> str | None:
        """Check the part file's size, and its checksum when one was published. Blocking.

        Returns None when the bytes are right, else the reason (the part file and journal are then
        removed; not when the checksum could not be computed here, which says nothing of the bytes).
        A piece is not verified here: its bytes are part of a file another process verifies.
        """
        try:
            if self.fd < 0:
                try:  # (without O_CREAT: a create locks the directory against the loop's creates)
                    self.fd = open_nofollow(self.part_path, os.O_RDWR)
                except FileNotFoundError:  # a zero-length file: no response opened one
                    self.open_for_write()
            if self.piece is not None:
                return None
            actual = os.fstat(self.fd).st_size
            if self.size is not None and actual > self.size:
                os.ftruncate(self.fd, self.size)
                actual = self.size
            if self.size is not None and actual != self.size:
                return self._reject(f"size mismatch: expected {self.size} bytes, have {actual}")
            if self.checksum is not None:
                return self._check_digest(self.checksum)
            return None
        except OSError as exc:
            self.close_files()
            return str(disk_error(self.part_path, exc))

    def _check_digest(self, want: checksums.Checksum) -> str | None:
        name = checksums.spelled(want.algo)
        try:
            ahead, self.ahead = self.ahead, None
            got = ahead.digest(self.fd) if ahead is not None and ahead.algo == want.algo else digest_fd(self.fd, want.algo)
        except ImportError:
            self.close_files()
            return (f"{name} checksum from {want.source} cannot be checked: {checksums.MISSING_CRC32C}; "
                    f"the bytes stay in {self.part_path}")
        if got != want.hex:
            hint = ("; an S3 ETag is the MD5 of the bytes only for a single-part object stored without "
                    "SSE-KMS or SSE-C, which a listing does not say") if want.source == "S3 ETag" else ""
            return self._reject(f"{name} mismatch: expected {want.hex} (from {want.source}), got {got}{hint}")
        return None

    def finish(self) -> str | None:
        """Atomically rename the verified, durable part file into place. Blocking.

        A piece is only made durable, its journal with it: the part file stays for its other
        pieces, and whoever holds them all renames it (``dtune.cluster.pieces``)."""
        if self.piece is not None:
            try:
                self.close_files()
                fd = os.open(self.journal_path, os.O_RDONLY | os.O_NOFOLLOW)
                try:  # (its descriptor was closed when the piece was queued for this commit)
                    os.fsync(fd)
                finally:
                    os.close(fd)
                return None
            except OSError as exc:
                self.close_files()
                return str(disk_error(self.journal_path, exc))
        try:
            self.close_files()
            try:
                os.replace(self.part_path, self.final_path)
            except FileNotFoundError:
                # its directory is made only when missing: a makedirs per file costs a stat per level
                os.makedirs(os.path.dirname(self.final_path), exist_ok=True)
                os.replace(self.part_path, self.final_path)
            mtime = self.server_mtime()
            if mtime is not None:
                os.utime(self.final_path, (mtime, mtime))
            try:
                os.unlink(self.journal_path)
            except FileNotFoundError:
                pass
            return None
        except OSError as exc:
            self.close_files()
            return str(disk_error(self.final_path, exc))

    def server_mtime(self) -> float | None:
        """The mtime a committed file gets: the listing's (what the next listing is compared with,
        under --update), else the Last-Modified of the answers (as wget -N and rclone do)."""
        if self.spec.mtime:
            return self.spec.mtime
        seen = self.validators or self.journal_validators
        return http_time(seen.last_modified) if seen is not None else None

    def _reject(self, reason: str) -> str:
        self.remove_working_files()
        return reason

    def remove_working_files(self) -> None:
        """Close the part file and remove it and its journal (what is missing is no matter)."""
        self.close_files()
        for path in (self.part_path, self.journal_path):
            try:
                os.unlink(path)
            except OSError:
                pass


def commit_batch(files: list[FileState]) -> list[str | None]:
    """Verify, make durable, then rename each file into place. Blocking.

    One file: ``fsync``. Several: one ``syncfs`` for the whole batch (one
    journal commit instead of one per file — what makes many small files
    cheap), falling back to ``fsync`` each where syncfs is missing or fails.
    Data is durable before any rename, so a crash never leaves a final
    name on missing bytes. Returns per file None (done) or the reason it failed.
    """
    errors = [f.verify() for f in files]
    good = [f for f, e in zip(files, errors, strict=True) if e is None]
    synced = False
    if len(good) > 1:
        synced = syncfs(good[0].fd)
    for i, f in enumerate(files):
        if errors[i] is not None:
            continue
        if not synced:
            try:
                os.fsync(f.fd)
            except OSError as exc:
                f.close_files()
                errors[i] = str(disk_error(f.part_path, exc))
                continue
        errors[i] = f.finish()
    return errors
