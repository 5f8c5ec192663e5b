"""One request for a byte range of a file, and what its response may do.

``RangeJob`` is the exchange a ``Connection`` reports to (see
``http.connection``): it checks the status and ``Content-Range`` against
what was asked before a single byte is written, writes the body with
``os.pwrite`` at the right offset and journals progress. It decides
nothing about the transfer: what it learns (the file's size, a server
that ignores Range, a changed file, a redirect) and how it ended
(``Finished`` or ``Failed``) go as reports (``engine.outcomes``) to the one
function it was given, ``report``; the engine acts on them. A response that
does not match the request is never written as data.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from dtune.engine.outcomes import (
    Failed,
    FileChanged,
    Finished,
    NotModified,
    RangeHonoured,
    RangeIgnored,
    Redirected,
    Report,
    SizeLearned,
    WrongReplica,
    status_error,
)
from dtune.errors import DtuneError, HTTPError, ProtocolError, RangeCut
from dtune.fileio import disk_error, write_all
from dtune.http.access import DIRECT, Access
from dtune.http.client import sign_in, unauthorized
from dtune.http.connection import ConnectionClosed
from dtune.http.message import (
    parse_content_range,
    parse_retry_after,
    parse_unsatisfied_range,
    split_url,
)
from dtune.http.redact import redact_url
from dtune.http.validators import Validators

if TYPE_CHECKING:
    import asyncio

    from dtune.accounting import Meter
    from dtune.engine.files import FileState
    from dtune.engine.limiter import RateLimiter
    from dtune.engine.state import Lane

REDIRECT_STATUSES = (301, 302, 303, 307, 308)

ReportSink = Callable[["RangeJob", Report], None]
PaceHook = Callable[["RangeJob", int, dict[str, str]], None]   # (job, status, headers)


NEVER = 1 << 62   # a byte position no file reaches


class RangeJob:
    """One request for bytes [start, end) of a file (or the whole file).

    ``pos`` is where the next body byte goes; bytes in [first, pos) are on
    disk. ``ranged`` says whether a Range header was sent. ``lane`` is the
    lane that sends it (the engine's bookkeeping; the job only reads its
    replica and meter).
    """

    __slots__ = ("report", "file", "lane", "meter", "start", "end", "pos", "first", "ranged",
                 "request", "discard", "error", "superseded", "redirected", "journaled", "status",
                 "fd", "gen", "replica", "origin", "t_sent", "url", "cut", "journal_every",
                 "small_body", "conditional", "limiter", "if_range", "lead_at", "leading", "access", "login",
                 "login_to", "pace")

    def __init__(self, file: FileState, lane: Lane, start: int, end: int | None, ranged: bool, *,
                 report: ReportSink, journal_every: int, small_body: int, access: Access = DIRECT,
                 limiter: RateLimiter | None = None, pace: PaceHook | None = None) -> None:
        self.report = report
        self.access = access      # its jar keeps every Set-Cookie; a login redirect waits (``login``)
        self.login: asyncio.Future[bool] | None = None
        self.login_to = ""        # the redirect's Location, followed if the login was none
        self.pace = pace          # every answer's status and headers, for the origin's request rate
        self.limiter = limiter    # --limit-rate: every body byte written takes a token
        self.file = file
        self.lane = lane
        self.meter: Meter = lane.meter
        self.start = start
        self.end = end          # None: until the server says (unknown size, whole-file GET)
        self.pos = start
        self.first = start
        self.ranged = ranged
        self.discard = False
        self.error: Exception | None = None
        self.superseded = False   # the file no longer needs these bytes (do not give them back)
        self.redirected = False   # give the bytes back, no penalty
        self.journaled = start
        self.journal_every = journal_every
        self.small_body = small_body
        self.status = 0
        self.fd = -1
        self.gen = file.gen       # a restarted or failed file bumps gen: stale responses are dropped
        self.replica = lane.replica
        rep = file.replicas[lane.replica]
        self.origin = rep.origin
        self.url = rep.url
        self.t_sent = 0.0
        self.cut = False          # end was moved earlier (the endgame): stop there, drop the connection
        self.lead_at = NEVER      # from this byte on, the lane may ask for its next range (Scheduler.lead)
        self.leading = False
        # a file in place the listing cannot judge (``files.on_disk``): the primary is asked whether
        # the copy on disk is current; a 304 skips the file
        self.conditional = file.if_modified_since is not None and lane.replica == 0
        extra = {"If-Modified-Since": file.if_modified_since} if self.conditional else None
        self.if_range = False
        if ranged and end is not None:
            # a range of the version seen so far, or the whole file if the server's has changed
            known = rep.validators if rep.validators is not None else (
                file.journal_validators if lane.replica == 0 else None)
            tag = known.if_range() if known is not None else None
            if tag is not None:
                extra = {**(extra or {}), "If-Range": tag}
                self.if_range = True
            self.request = access.request("GET", rep.origin, rep.target, (start, end), extra)
        else:
            self.request = access.request("GET", rep.origin, rep.target, None, extra)

    def describe(self) -> str:
        f = self.file
        if not self.ranged:
            return f.relpath
        return f"bytes {self.start}-{(self.end or 0) - 1} of {f.relpath}"

    def __repr__(self) -> str:
        return f"<RangeJob {self.describe()} pos={self.pos} status={self.status}{' cut' if self.cut else ''}>"

    # ---- Exchange protocol (called by Connection) ---------------------------
    def on_headers(self, status: int, headers: dict[str, str]) -> bool:
        self.status = status
        if "set-cookie" in headers:
            self.access.received(self.origin, split_url(self.url)[1], headers)
        if self.pace is not None:
            self.pace(self, status, headers)   # (engine.politeness: 429s, quota headers)
        try:
            return self._accept(status, headers)
        except DtuneError as exc:
            self.error = exc
            return self._discard_body(headers)

    def _discard_body(self, headers: dict[str, str]) -> bool:
        """Keep the connection if the unwanted body is small, else drop it."""
        length = headers.get("content-length", "")
        if length.isdigit() and int(length) <= self.small_body:
            self.discard = True
            return True
        self.report(self, Failed(self.error or ProtocolError("unwanted body")))
        return False

    def _accept(self, status: int, headers: dict[str, str]) -> bool:
        f = self.file
        if status == 304 and self.conditional:  # (a 304 has no body: on_complete reports it)
            self.discard = True
            return True
        if f.status not in ("active", "queued"):
            self.superseded = True
            raise ProtocolError(f"{f.relpath}: no longer wanted")
        if status == 200 or status == 206:
            f.if_modified_since = None  # a version to fetch: no more conditions
            seen = Validators.of(headers)
            if seen is not None:
                self._check_version(seen)
        if status == 206 or status == 200:
            self._check_codings(headers)
        if status == 206:
            return self._accept_partial(headers)
        if status == 200:
            return self._accept_full(headers)
        if status in REDIRECT_STATUSES and headers.get("location"):
            location = headers["location"]
            login = sign_in(self.access, self.url, location, b"\r\nCookie: " in self.request)  # (may refuse it)
            self.redirected = True  # (given back without penalty)
            if login is not None:
                # a login: this request waits for it (``on_complete``), then goes again or follows
                self.login, self.login_to = login, location
                length = headers.get("content-length", "")
                if length.isdigit() and int(length) <= self.small_body:
                    self.discard = True
                    return True
                login.add_done_callback(lambda done: self._signed_in(done, location))
                return False
            self.access.redirected(self.url, location)
            self.report(self, Redirected(location))
            raise ProtocolError("redirected")
        if status == 416 and f.size is None and self.ranged and self.start == 0:
            if parse_unsatisfied_range(headers.get("content-range")) == 0:
                # the size probe of an empty file: "bytes */0" is its whole answer
                self.report(self, SizeLearned(0))
                f.done_zero = True
                self.discard = True
                return True
        if status == 401:  # (who asked, and the ways to give credentials)
            sent = b"\r\nAuthorization: " in self.request
            raise HTTPError(f"{f.relpath}: {unauthorized(self.origin, headers, sent)}", status=401, retryable=False)
        raise status_error(status, what=self.describe(), relpath=f.relpath, size=f.size,
                           retry_after=parse_retry_after(headers.get("retry-after"), time.time()))

    def _check_codings(self, headers: dict[str, str]) -> None:
        """The body must be the file's bytes: a transfer coding other than chunked (httptools
        removes only that one), or a content coding dtune did not ask for, would be saved as the
        file. Neither goes away by asking again: the file fails."""
        f = self.file
        te = headers.get("transfer-encoding")
        if te is not None and [c.strip().lower() for c in te.split(",") if c.strip()] != ["chunked"]:
            raise HTTPError(f"{f.relpath}: the server sent Transfer-Encoding: {te[:80]}; dtune does not "
                            f"decode transfer codings other than chunked", retryable=False)
        ce = headers.get("content-encoding")
        if (ce is not None and ce.strip().lower() not in ("", "identity")
                and b"\r\nAccept-Encoding: identity\r\n" in self.request):
            raise HTTPError(f"{f.relpath}: the server sent Content-Encoding: {ce[:80]} though dtune asked "
                            f"for identity; dtune does not save encoded bytes as the file", retryable=False)

    def _check_version(self, seen: Validators) -> None:
        """Every answer's validators (ETag, else Last-Modified) must match the first ones seen from
        this replica (or the journal's, for a resumed file): two versions are never stitched."""
        f = self.file
        rep = f.replicas[self.replica]
        known = rep.validators if rep.validators is not None else (
            f.journal_validators if self.replica == 0 else None)
        if known is not None:
            # (after a renewed link every validator must agree: the fresh target may be another host)
            change = known.change(seen, strict=rep.renewed > 0)
            if change is not None:
                when = "during the transfer" if rep.validators is not None else "since the last run"
                if rep.renewed and rep.validators is not None:
                    when = "behind a renewed link"
                self.report(self, FileChanged(f"{f.relpath}: changed on the server {when} ({change})"))
                self.superseded = True
                raise ProtocolError(f"{f.relpath}: changed on the server")
        if rep.validators is None:
            rep.validators = seen
            if self.replica == 0 and f.validators is None:
                f.validators = seen  # recorded in the journal header

    def _accept_partial(self, headers: dict[str, str]) -> bool:
        f = self.file
        if not self.ranged:
            raise ProtocolError(f"{f.relpath}: server sent 206 to a request without Range")
        cr = headers.get("content-range")
        if cr is None:
            raise ProtocolError(f"{self.describe()}: 206 without Content-Range")
        start, end, total = parse_content_range(cr)
        if f.size is not None and total is not None and total != f.size:
            # (checked first: a shrunk file also answers a range across its new end short)
            self._wrong_size(total, f"{f.relpath}: size changed: expected {f.size} bytes, server says {total}")
        want_end = self.end if f.size is not None else min(self.end or 0, total or 0)
        if start != self.start or end != want_end or total is None:
            raise ProtocolError(f"{self.describe()}: server sent Content-Range {cr!r} "
                                f"for Range bytes={self.start}-{(self.end or 0) - 1}", retryable=True)
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) != end - start):
            raise ProtocolError(f"{self.describe()}: Content-Length {length} does not match "
                                f"Content-Range {cr!r}")
        if f.size is None:
            self.end = end
            self.report(self, SizeLearned(total))
        if not f.ranges_seen:
            f.ranges_seen = True
            self.report(self, RangeHonoured())
        self._open()
        return True

    def _accept_full(self, headers: dict[str, str]) -> bool:
        f = self.file
        length = headers.get("content-length")
        if length is not None and not length.isdigit():
            raise ProtocolError(f"{f.relpath}: bad Content-Length {length[:40]!r}")
        size = int(length) if length is not None else None
        if f.size is not None and size is not None and size != f.size:
            self._wrong_size(size, f"{f.relpath}: size mismatch: expected {f.size} bytes, server sends {size}")
        if self.ranged or f.single_stream:
            # The server ignored our Range header: this response carries the whole file.
            if f.full_job is not None and f.full_job is not self:
                self.superseded = True  # another response already streams the whole file
                raise ProtocolError(f"{f.relpath}: duplicate whole-file response")
            whole = size if size is not None else f.size
            self.report(self, RangeIgnored(partial=self.ranged and (
                self.start > 0 or (whole is not None and self.end is not None and self.end < whole)),
                validator=self.ranged and self.if_range))
        if f.size is None and size is not None:
            self.report(self, SizeLearned(size))
        self.start = self.first = self.pos = self.journaled = 0
        self.end = f.size
        self.ranged = False
        self._open()
        return True

    def _wrong_size(self, theirs: int, reason: str) -> None:
        """An answer says the file has another size. From a mirror: that mirror serves something
        else, and this file never uses it again (the request goes back, no penalty). From the
        primary, whose size the file has: the file changed, which fails it."""
        if self.replica != 0:
            self.report(self, WrongReplica(f"{self.file.relpath}: mirror {redact_url(self.url)} serves {theirs} "
                                           f"bytes, not {self.file.size}: not used for this file"))
            self.redirected = True  # (given back without penalty)
            raise ProtocolError(f"{self.file.relpath}: wrong size from mirror {self.url}")
        raise HTTPError(reason, retryable=False)

    def _open(self) -> None:
        f = self.file
        if f.fd < 0:
            f.open_for_write()
        self.fd = f.fd

    def on_body(self, data: bytes) -> None:
        if self.discard:
            return
        if self.gen != self.file.gen:
            raise ProtocolError(f"{self.file.relpath}: no longer wanted")
        n = len(data)
        pos = self.pos
        end = self.end
        if end is not None and pos + n > end:
            if not self.cut:
                raise ProtocolError(f"{self.describe()}: server sent more bytes than asked for")
            # the bytes past the cut belong to another request: keep ours, drop the connection
            self._write(data[:end - pos], pos)
            raise RangeCut(f"{self.describe()}: reached the cut at byte {end}", innocent=True)
        self._write(data, pos)
        if self.cut and self.pos == end:  # exactly at the cut: do not wait for bytes we would drop
            raise RangeCut(f"{self.describe()}: reached the cut at byte {end}", innocent=True)

    def _write(self, data: bytes, pos: int) -> None:
        n = len(data)
        if not n:
            return
        try:
            written = os.pwrite(self.fd, data, pos)
            if written < n:  # short (a disk filling up): the rest, or the error that stopped it
                write_all(self.fd, data[written:], pos + written)
        except OSError as exc:
            raise disk_error(self.file.part_path, exc) from None
        pos += n
        self.pos = pos
        self.meter.bytes += n
        if pos >= self.lead_at:  # a round trip's worth of bytes left: the next request goes out now
            self.lead_at = NEVER
            self.leading = True
            self.lane.wake.set()
        limiter = self.limiter
        if limiter is not None:
            limiter.tokens -= n
            if limiter.tokens <= 0:
                limiter.empty(self.lane.conn, n)
        if pos - self.journaled >= self.journal_every:
            self.file.record(self.journaled, pos)
            self.journaled = pos

    def _signed_in(self, login: asyncio.Future[bool], location: str) -> None:
        """The login this request waited for has ended: ask again (signed in), follow the
        redirect (no login after all), or fail the file with the login's error."""
        if login.cancelled():
            self.report(self, Failed(HTTPError(f"{self.describe()}: the login was cut short")))
        elif login.exception() is not None:
            self.redirected = False
            self.report(self, Failed(login.exception()))
        elif login.result():
            self.report(self, Failed(ProtocolError(f"{self.describe()}: signed in, asked again")))
        else:
            self.access.redirected(self.url, location)
            self.report(self, Redirected(location))
            self.report(self, Failed(ProtocolError("redirected")))

    def on_complete(self) -> None:
        if self.login is not None:
            self.login.add_done_callback(lambda done: self._signed_in(done, self.login_to))
            return
        if self.discard:
            # an answer with nothing to write (an empty file, a 304), or an unwanted small body
            if self.error is not None:
                self.report(self, Failed(self.error))
            else:
                self.report(self, NotModified() if self.status == 304 else Finished())
            return
        f = self.file
        if self.end is None:  # whole-file stream of unknown length ended
            self.end = self.pos
            if f.size is None:
                self.report(self, SizeLearned(self.pos))
        if self.pos != self.end:
            self.report(self, Failed(ProtocolError(
                f"{self.describe()}: response ended after {self.pos - self.first} of "
                f"{self.end - self.first} bytes")))
            return
        self.report(self, Finished())

    def on_error(self, exc: Exception) -> None:
        if isinstance(exc, RangeCut) and self.pos == self.end:
            self.report(self, Finished())
            return
        if (isinstance(exc, ConnectionClosed) and self.status in (200, 206) and not self.discard
                and self.fd >= 0):
            # the body ended before its framing said (a chunked body without its last chunk, or
            # fewer bytes than Content-Length): say where; retried as any lost connection
            of = f" of {self.end - self.first}" if self.end is not None else ""
            exc = ProtocolError(f"{self.describe()}: the body ended after {self.pos - self.first}{of} bytes, "
                                f"at byte {self.pos}, before its framing said ({exc})")
        self.report(self, Failed(exc))

    def save_progress(self) -> None:
        """Journal what this request wrote (called once it ends, either way)."""
        if (self.pos > self.journaled and self.status in (200, 206) and not self.discard
                and self.gen == self.file.gen):
            self.file.record(self.journaled, self.pos)
            self.journaled = self.pos
