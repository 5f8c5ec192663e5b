"""What a request's answer means for its file, as a table: this module decides, the engine acts.

A request (``request.RangeJob``) reports what happened — the facts a
response reveals as they arrive, and how the request ended:

    report               action
    -------------------  ---------------------------------------------------------------
    SizeLearned(n)       the file is n bytes: plan its ranges
    RangeIgnored         single stream: the server ignores Range, whole-file GETs only; its
                         origin is learnt, so that its other split files start as one stream
    RangeHonoured        the first 206 of a file: its origin honours Range, so split files
                         on it may have several ranges in flight before their first answer
    FileChanged(why)     RestartFile (every byte forgotten), or FailFile after max_restarts
    Redirected(url)      the replica's URL moves there (its original is kept: an expired link is
                         renewed from it), or FailFile after max_redirects hops of one chain
    WrongReplica(why)    a mirror serves another size: never used for this file again, its
                         request goes back without penalty (warning)
    Finished             done: journal, commit when every byte is on disk
    NotModified          a 304 to the If-Modified-Since of a file in place (``after_not_modified``):
        an answer for a file no longer fetched, or restarted ... nothing
        another answer already brings a new version of it .... Requeue (its range is asked
                                                                again, without condition)
        otherwise ............................................ SkipFile: the copy on disk is
                                                                the server's
    Failed(error)        ``after_failure``, first match wins:
        the file no longer wants these bytes .................. Settle
        the file is no longer active .......................... nothing
        every byte is on disk anyway .......................... Settle
        a replica refuses the file (``refusal``):
          the replica's link was renewed since this was sent ... Requeue, no penalty
          a link a redirect led to refused (400/401/403/410:
            it expired) fewer than max_renewals times in a row  Renew: the original URL is
                                                                asked again, its fresh redirect
                                                                followed (validators checked)
          (401/403/404/410, or renewals exhausted) another
            replica still serves the file ..................... DropReplica for this file only
                                                                (no pause: its other files use it)
          otherwise ........................................... FailFile
        disk error, or an HTTP error retrying cannot mend ..... FailFile
        the server asked to wait longer than retry_after_max
          (--max-retry-after), or its origin was given up ..... FailFile, naming the wait
        innocent (a redirect; or the connection died because
          of another request before this one was answered) .... Requeue, no penalty
        several replicas, another one in service .............. Requeue (the replica's
          failure is counted; N in a row pause it, doubling) .. + its pause
        a request limit (429, 503 with Retry-After) from an
          origin whose pace (``politeness``) now waits ........ Retry when it lets a request
                                                                go, not counted
        the file already waits out a backoff .................. Retry when it ends, not
                                                                counted again
        a network failure from an origin silent on every
          connection for outage_grace < s < outage_timeout .... Retry every few seconds,
                                                                not counted (an outage)
        otherwise ............................................. Retry after a backoff
                                                                (Retry-After honoured),
                                                                FailFile after ``retries``

A failure counts against ``retries`` unless its try brought new bytes *and*
got past every byte where an earlier try of the file broke off inside its
span (``repeats``). A fault that repeats at the same offset (a reset at byte
X on every try, a body always cut at X by a server that sends from 0) is
therefore counted even though each try brings bytes before X, and it is
never taken for an outage: the server answered. So such a file fails after
``retries`` + 1 tries, spaced by the backoff (0.5, 1, 2, 4, 8 s with the
defaults, counted from each try's start: a try that lasted longer than its
backoff is followed at once).

``status_error`` is the table of HTTP statuses that are not data: 408, 429
and 5xx are worth retrying (after Retry-After when given), anything else
fails the file at once, unless another replica serves it or the refusal came
from a link that can be renewed (``refusal``).

Expiring links: an archive or CDN that redirects each file to a presigned
URL (S3, CloudFront, Azure SAS, GCS) gives a link valid for seconds to
minutes. When it expires mid-file, the target answers 403 (S3, CloudFront,
Azure), 400 (GCS) or 401/410: the file's original URL is asked again and its
fresh redirect followed, and the ranges still missing go there. A replica
that refuses a file (403, 404, 410; 401) is dropped for that file only while
another replica still serves it; the file fails only when none is left.

Everything here is pure: the clock and the random jitter are passed in.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from dtune.engine.options import EngineOptions
from dtune.errors import DiskError, HTTPError

RETRYABLE = frozenset({408, 429})  # … and every 5xx
# what an expired link answers: S3, CloudFront and Azure SAS 403, GCS 400 (ExpiredToken), some
# token schemes 401, nginx secure_link as configured (410 in its documentation)
EXPIRED = frozenset({400, 401, 403, 410})
# a replica that says it does not have the file, or will not give it: another replica may
DROPPABLE = frozenset({401, 403, 404, 410})


# ---- reports: what a request says --------------------------------------------------------------
@dataclass(slots=True)
class SizeLearned:
    size: int


@dataclass(slots=True)
class RangeIgnored:
    """200 to a Range request. ``partial``: the range asked for was less than the whole file, so the
    server really ignores Range (a 200 to a range covering all of a file, or of an empty one, may
    be its right answer)."""

    partial: bool = True
    # the range carried If-Range: the whole file is the server's answer to a validator it judged
    # changed or weak (Apache deems a Last-Modified within the last second weak), not proof that
    # it ignores Range: the file streams whole, its origin's other files are still split
    validator: bool = False


@dataclass(slots=True)
class RangeHonoured:
    """The first 206 of a file: its origin honours Range (sent once per file)."""


@dataclass(slots=True)
class FileChanged:
    reason: str


@dataclass(slots=True)
class Redirected:
    location: str


@dataclass(slots=True)
class WrongReplica:
    """A mirror answers with another size than the file's: it serves something else."""
    reason: str


@dataclass(slots=True)
class Finished:
    pass


@dataclass(slots=True)
class Failed:
    error: Exception


@dataclass(slots=True)
class NotModified:
    """304 to a request that carried If-Modified-Since (``files.on_disk``): the file on disk is current."""


Report = (SizeLearned | RangeIgnored | RangeHonoured | FileChanged | Redirected | WrongReplica | Finished
          | Failed | NotModified)


# ---- actions: what the engine does -------------------------------------------------------------
@dataclass(slots=True)
class Settle:
    """Commit the file if every byte is on disk, else let its lanes carry on."""


@dataclass(slots=True)
class FailFile:
    reason: str
    penalised: bool = False   # the lane's last answer time moves on (it waited for this failure)
    pause: float | None = None  # seconds the request's replica now rests (several replicas)


@dataclass(slots=True)
class Requeue:
    """Ask again at once, no penalty for the file; ``pause``: seconds the replica now rests."""

    pause: float | None = None
    penalised: bool = False


@dataclass(slots=True)
class Retry:
    delay: float
    failures: int             # consecutive failures of the file, this one included
    pause: float | None = None  # seconds the request's replica now rests (several replicas)


@dataclass(slots=True)
class RestartFile:
    reason: str


@dataclass(slots=True)
class Renew:
    """Ask the replica's original URL again: the link a redirect led to was refused (expired)."""

    status: int


@dataclass(slots=True)
class DropReplica:
    """This file no longer uses the request's replica (its other files still do); its bytes go to
    the replicas left."""

    status: int
    reason: str


@dataclass(slots=True)
class SkipFile:
    """The file on disk is the server's version: nothing to fetch (counted as skipped)."""


Action = Settle | FailFile | Requeue | Retry | RestartFile | SkipFile | Renew | DropReplica


def after_not_modified(*, current: bool, new_version: bool) -> SkipFile | Requeue | None:
    """The action for a 304 (see the table in the module docstring).

    current      the answer is for the file as it is now fetched (same generation, still queued
                 or active)
    new_version  another request of the file already had a 200/206: bytes of a newer version
    """
    if not current:
        return None
    if new_version:
        return Requeue()
    return SkipFile()


# ---- the failure table --------------------------------------------------------------------------
@dataclass(slots=True)
class Failure:
    """The facts ``after_failure`` decides on (the engine gathers them from the request and file)."""

    error: Exception
    superseded: bool = False  # the file no longer needs these bytes
    active: bool = True       # the file is still being fetched
    complete: bool = False    # every byte of the file is on disk
    innocent: bool = False
    gained: bool = False      # the request wrote bytes before it failed
    failures: int = 0         # the file's consecutive failures before this one
    replica: int | None = None  # the request's replica, when the file has several
    quiet: float | None = None  # a network failure (no connection, a stall, a lost connection) from
                                # an origin that served bytes earlier: seconds it has sent nothing
    waiting: float = 0.0      # seconds left of a backoff the file is already in (another of its
                              # requests failed just before: six connections stalled at once)
    via_redirect: bool = False  # the request went where a redirect of its replica led
    renewed: bool = False     # … and that replica's link has been renewed since it was sent
    renewals: int = 0         # renewals of the replica's link in a row that brought no byte
    others: int = 0           # other replicas that still serve the file
    dropped: bool = False     # the request's replica no longer serves the file
    paced: float | None = None  # a request limit (429, 503 with Retry-After): seconds before the
                                # origin's pace (``politeness``) lets a request go. Not the file's
                                # fault: not counted (the controller gives the origin up instead)
    refused: str | None = None  # the origin was given up (``Politeness.refusal``): why
    at: int | None = None     # the byte of the file where the try ended (None: it never reached the
                              # server: no connection)
    repeated: int | None = None  # a byte where an earlier try's body broke off, inside this try's
                              # span, that this one did not get past (``repeats``): the same fault
    took: float = 0.0         # seconds since the try was sent: part of the backoff already waited


def repeats(breaks: Iterable[int], first: int, end: int | None, at: int | None) -> int | None:
    """The byte where an earlier try of the file broke off that this try, which ran from ``first``
    towards ``end`` (None: the end of the file) and ended at ``at``, did not get past; None if it got
    past every such byte in its span (or never reached the server).

    A server that fails a file at the same place on every try — a reset at byte X, a body always cut
    at X by a server that ignores Range and sends from 0 each time — brings bytes before X, even
    new ones, but never passes X: that is no progress, and the failure counts against ``retries``.
    """
    if at is None:
        return None
    hit = [b for b in breaks if first <= b and (end is None or b <= end) and at <= b]
    return min(hit) if hit else None


def permanent(error: Exception) -> bool:
    """A disk error, or an HTTP error that trying again cannot mend (404, size changed, …)."""
    return isinstance(error, DiskError) or (isinstance(error, HTTPError) and not error.retryable)


def after_failure(fail: Failure, options: EngineOptions, *, health: ReplicaHealth | None = None,
                  now: float = 0.0, jitter: float = 1.0) -> Action | None:
    """The action for a failed request (see the table in the module docstring)."""
    if fail.superseded:
        return Settle()
    if not fail.active:
        return None
    if fail.complete:
        return Settle()  # this request's fate no longer matters
    refused = refusal(fail, options)
    if refused is not None:
        return refused
    if permanent(fail.error):
        return FailFile(str(fail.error))
    retry_after = getattr(fail.error, "retry_after", None)
    if fail.refused is not None:
        return FailFile(f"{fail.error}; {fail.refused}")
    if retry_after is not None and retry_after > options.retry_after_max:
        return FailFile(f"{fail.error}; the server asked to wait {retry_after:.0f} s (Retry-After): more "
                        f"than --max-retry-after {options.retry_after_max:g} s; try later or raise it")
    if fail.innocent:
        return Requeue()
    pause = None
    if fail.replica is not None and health is not None:
        pause = health.failed(fail.replica, now)
        if health.others_serving(fail.replica, now):
            return Requeue(pause, penalised=True)  # another replica can take these bytes now
    if fail.paced is not None:
        # the origin limits requests: its pace holds every request to it, this one's included;
        # and this request waits out its own answer's Retry-After whole, counted from now (the
        # pace counts it from the answer's head, a few milliseconds earlier)
        return Retry(max(fail.paced, fail.waiting, retry_after or 0.0), fail.failures, pause)
    if fail.waiting > 0:
        # the file already waits out a backoff for a failure of another of its requests: the same
        # failure (a stall drops every connection of the file in one tick), not one more
        return Retry(fail.waiting, fail.failures, pause)
    if (fail.quiet is not None and fail.repeated is None
            and options.outage_grace < fail.quiet < options.outage_timeout):
        # every connection of an origin that was serving went silent: an outage, not this file's
        # fault. Wait it out without counting, trying again every few seconds
        delay = min(options.outage_retry_max, backoff(fail.failures + 1, None, options, jitter))
        return Retry(delay, fail.failures, pause)
    # bytes are progress only when the try got past every place an earlier try broke off
    failures = (0 if fail.gained and fail.repeated is None else fail.failures) + 1
    if failures > options.retries:
        return FailFile(f"{fail.error} ({gave_up(failures, fail.at, fail.repeated)}gave up after "
                        f"{options.retries} retries)", penalised=True, pause=pause)
    delay = backoff(failures, retry_after, options, jitter)
    if retry_after is None:
        delay = max(0.0, delay - fail.took)  # tries are spaced by the backoff from one start to the next
    return Retry(delay, failures, pause)


def gave_up(tries: int, at: int | None, repeated: int | None) -> str:
    """How a file that gives up failed: the tries in a row and where they ended ("" when its tries
    never reached the server)."""
    if repeated is not None:
        return f"failed {tries} times in a row at byte {repeated}: "
    if at is not None:
        return f"{tries} tries in a row without progress, the last ended at byte {at}: "
    return ""


def refusal(fail: Failure, options: EngineOptions) -> Requeue | Renew | DropReplica | FailFile | None:
    """A replica refused the file (see the table in the module docstring); None: not a refusal."""
    error = fail.error
    status = getattr(error, "status", None) if isinstance(error, HTTPError) else None
    if status is None or error.retryable or (status not in EXPIRED and status not in DROPPABLE):
        return None
    if fail.dropped:
        return Requeue()  # another answer of this replica dropped it for the file already
    if fail.via_redirect and fail.renewed:
        return Requeue()  # an older link's answer: the request goes again, to the fresh one
    droppable = status in DROPPABLE
    if fail.via_redirect and status in EXPIRED:
        if fail.renewals < options.max_renewals:
            return Renew(status)
        error = f"{error} (and {fail.renewals} fresh links in a row from the original URL)"
        droppable = True
    if droppable and fail.others > 0:
        return DropReplica(status, str(error))
    return FailFile(str(error))


def backoff(failures: int, retry_after: float | None, options: EngineOptions, jitter: float = 1.0) -> float:
    """Seconds before the next try: Retry-After (``after_failure`` fails a longer one than
    ``retry_after_max``), else exponential from ``backoff_base``.

    ``jitter`` is the random factor in [1 - backoff_jitter, 1 + backoff_jitter] the engine drew.
    """
    if retry_after is not None:
        return min(retry_after, options.retry_after_max)
    return min(options.backoff_max, options.backoff_base * 2 ** (failures - 1)) * jitter


def after_change(restarts: int, reason: str, options: EngineOptions) -> RestartFile | FailFile:
    """The file changed on the server for the ``restarts``-th time (this one included)."""
    if restarts > options.max_restarts:
        return FailFile(f"{reason}; it keeps changing ({restarts} versions seen)")
    return RestartFile(reason)


def status_error(status: int, *, what: str, relpath: str, size: int | None,
                 retry_after: float | None) -> HTTPError:
    """The error for a status that carries no data of the file (see the module docstring).

    ``what`` describes the request ("bytes 0-99 of a.bin"); ``retry_after``
    is the parsed Retry-After header, when there was one.
    """
    if status in RETRYABLE or status >= 500:
        return HTTPError(f"{what}: server answered {status}", status=status, retryable=True,
                         retry_after=retry_after)
    if status == 416:
        return HTTPError(f"{what}: server answered 416 (range not satisfiable; the file is shorter "
                         f"than {size} bytes?)", status=416, retryable=False)
    return HTTPError(f"{relpath}: server answered {status}", status=status, retryable=False)


class ReplicaHealth:
    """Consecutive failures per replica; ``replica_failures`` in a row pause the replica.

    The first pause lasts ``replica_pause`` seconds and each later one twice
    the one before, up to ``replica_pause_max``; the range policy forgets a
    paused replica's rate, so it is measured afresh when it comes back.
    ``paused_until`` (replica → engine time) is what the scheduler reads.
    """

    def __init__(self, replicas: int, options: EngineOptions) -> None:
        self.replicas = replicas
        self.options = options
        self.failures: dict[int, int] = {}
        self.pauses: dict[int, int] = {}
        self.paused_until: dict[int, float] = {}

    def ok(self, replica: int) -> None:
        self.failures[replica] = 0

    def failed(self, replica: int, now: float) -> float | None:
        """Count one failure; the pause in seconds if it starts now, else None."""
        opts = self.options
        count = self.failures.get(replica, 0) + 1
        self.failures[replica] = count
        if count < opts.replica_failures:
            return None
        done = self.pauses.get(replica, 0)
        pause = min(opts.replica_pause_max, opts.replica_pause * 2 ** done)
        self.pauses[replica] = done + 1
        self.paused_until[replica] = now + pause
        self.failures[replica] = 0
        return pause

    def others_serving(self, replica: int, now: float) -> bool:
        """Is some replica other than ``replica`` in service (not paused) at ``now``?"""
        return any(r != replica and self.paused_until.get(r, 0.0) <= now for r in range(self.replicas))

    def __repr__(self) -> str:
        return f"<ReplicaHealth failures={self.failures} paused_until={self.paused_until}>"
