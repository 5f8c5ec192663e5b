"""What the engine does with a request's report: finish, retry, restart, fail or commit a file.

``FileReports`` is the engine's collaborator (``core.py`` makes one per run)
that acts on what a request reports. ``report`` is the one entry: each report
(``outcomes``: Finished, Failed, NotModified, SizeLearned, RangeHonoured,
RangeIgnored, FileChanged, Redirected, WrongReplica) goes to its handler,
which asks the pure outcome rules (``after_failure``, ``after_change``,
``after_not_modified``) what it means and performs that: the range goes back
to its file or is kept, the file is retried after a delay, started over,
skipped, failed with a reason that names it, or queued for commit
(verification, fsync and rename in ``commit.py``, whose ``Committer`` it
holds). Every file ends exactly once, in ``_file_finished``, whichever way it
ends, and the engine hears it (``on_file_ended``). Of the engine's lanes it
asks only what ``LaneControl`` names.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Protocol

from dtune.accounting import Accounting
from dtune.engine.commit import Committer
from dtune.engine.files import FileState
from dtune.engine.options import EngineOptions
from dtune.engine.origins import OutageProbe
from dtune.engine.outcomes import (
    DropReplica,
    Failed,
    FailFile,
    Failure,
    FileChanged,
    Finished,
    NotModified,
    RangeHonoured,
    RangeIgnored,
    Redirected,
    Renew,
    ReplicaHealth,
    Report,
    Requeue,
    RestartFile,
    Retry,
    Settle,
    SizeLearned,
    SkipFile,
    WrongReplica,
    after_change,
    after_failure,
    after_not_modified,
    repeats,
)
from dtune.engine.politeness import Politeness, is_limit
from dtune.engine.request import RangeJob
from dtune.engine.scheduler import Scheduler, give_back
from dtune.errors import DiskError
from dtune.http.redact import redact_url


class LaneControl(Protocol):
    """What the reports ask of the engine's lanes and queues (``Engine`` is one)."""

    def release(self, job: RangeJob, wake: bool = True) -> None:
        """The job no longer counts against its lane (woken unless ``wake`` is False)."""

    def adopt(self, f: FileState) -> None:
        """A file with bytes to fetch again and no working group goes back to its queue."""

    def wake_partition(self, f: FileState) -> None:
        """Wake the idle lanes of the file's partition."""

    def wake_idle(self) -> None:
        """Wake every idle lane."""

    def staffed(self) -> set[int]:
        """The replicas the parameters give lanes to (a file dropped by one moves to these)."""


def verified_by(f: FileState) -> dict:
    """What a ``file_done`` event says verified the file: ``"checksum": "sha256 (SHA256SUMS)"`` (None:
    its size alone), and ``sha256_verified``, the key older readers of the events know. A file
    kept in place unread (``kept_by``) is not verified: ``kept``, and what matched."""
    if f.kept_by is not None:
        return {"verified": False, "kept": True, "kept_by": f.kept_by, "checksum": None,
                "sha256_verified": False}
    c = f.checksum
    return {"verified": True, "checksum": c.label() if c is not None else None,
            "sha256_verified": c is not None and c.algo == "sha256"}



def fault_at(job: RangeJob, exc: Exception) -> tuple[int | None, bool]:
    """Where a failed request's try of its file ended, and whether its body broke off there.

    None: it never reached the server (no connection was had for it); the start of what it asked
    for: the server answered no body of it; the byte its body reached: the body broke off there
    (a reset, a cut, a stall, a floor window), the place ``outcomes.repeats`` compares later tries
    with. A disk error is no fault of the server's."""
    if not job.t_sent or isinstance(exc, DiskError):
        return None, False
    if job.status in (200, 206) and not job.discard:
        return job.pos, True
    return job.first, False


class FileReports:
    """Acts on what requests report (see the module docstring), for one engine run."""

    def __init__(self, options: EngineOptions, files: list[FileState], scheduler: Scheduler,
                 health: ReplicaHealth, outage: OutageProbe, acct: Accounting, lanes: LaneControl, *,
                 clock: Callable[[], float], loop: asyncio.AbstractEventLoop,
                 emit: Callable[..., None], on_file_ended: Callable[[], None],
                 pace: Politeness | None = None) -> None:
        self.options = options
        self.files = files
        self.scheduler = scheduler
        self.health = health
        self.outage = outage
        self.acct = acct
        self.lanes = lanes
        self.now = clock
        self._loop = loop
        self._emit = emit
        self._on_file_ended = on_file_ended
        self.pace = pace   # each origin's request rate (``politeness``): a limit answer is its to pace
        self.committer = Committer(options.commit_batch, self._committed)

    # ---- reports from requests --------------------------------------------------------
    def report(self, job: RangeJob, what: Report) -> None:
        """The one place that acts on what a request reports (``outcomes``)."""
        if isinstance(what, Finished):
            self._job_done(job)
        elif isinstance(what, Failed):
            self._job_failed(job, what.error)
        elif isinstance(what, NotModified):
            self._not_modified(job)
        elif isinstance(what, SizeLearned):
            self._learn_size(job.file, what.size, job)
        elif isinstance(what, RangeHonoured):
            if job.origin not in self.scheduler.ranges_ok:
                self.scheduler.ranges_ok.add(job.origin)
                self.lanes.wake_idle()  # lanes that waited for the first answer of a split file
        elif isinstance(what, RangeIgnored):
            self._to_single_stream(job.file, job, what.partial, what.validator)
        elif isinstance(what, FileChanged):
            self._restart_file(job.file, what.reason)
        elif isinstance(what, Redirected):
            self._redirect(job, what.location)
        elif isinstance(what, WrongReplica):
            self._emit("warning", file=job.file.relpath, replica=job.replica, reason=what.reason)
            self._drop_replica(job.file, job.replica, None, what.reason)

    def _job_done(self, job: RangeJob) -> None:
        f = job.file
        if job.gen != f.gen:
            self.lanes.release(job)
            return
        if job.ranged is False and f.size == 0:
            f.done_zero = True
        job.save_progress()
        f.failures = 0
        now = self.now()
        lane = job.lane
        if self.scheduler.policy is not None and job.pos > job.first:
            self.scheduler.policy.observe(job.replica, lane.id, job.pos - job.first,
                                      now - max(job.t_sent, lane.last_done), now)
        lane.last_done = now
        self._served(job)
        self.health.ok(job.replica)
        self.outage.alive[job.origin] = now
        conn = lane.conn
        if (conn is not None and conn.server_closes and conn.responses <= 1
                and conn.origin not in self.scheduler.no_pipeline):
            # a server that closes after its first answer (HTTP/1.0, Connection: close) loses what
            # is pipelined behind it, and a reset can take the unsent end of that answer with it:
            # one request at a time to it. (One that closes after many, as nginx does after its
            # keepalive_requests, is only ending a connection: not learnt)
            self.scheduler.no_pipeline.add(conn.origin)
            self._emit("warning", reason=f"{conn.origin} closes the connection after each answer: "
                                         f"one request at a time to it")
        if f.full_job is job:
            f.full_job = None
        self.lanes.release(job)
        if f.probing and f.size is not None:
            f.probing = False
        self._settle(f)

    def _not_modified(self, job: RangeJob) -> None:
        """A 304 to the If-Modified-Since of a file in place: the copy on disk is the server's."""
        f = job.file
        self.lanes.release(job)
        action = after_not_modified(current=job.gen == f.gen and f.status in ("queued", "active"),
                                    new_version=f.if_modified_since is None)
        if isinstance(action, SkipFile):
            self._skip_file(f)
        elif isinstance(action, Requeue):
            give_back(f, job, job.start)
            self.lanes.adopt(f)
            self.lanes.wake_partition(f)

    def in_place(self, f: FileState) -> None:
        """A complete file found in place at the start needs nothing fetched: counted as skipped,
        and reported verified (its checksum hashed) or kept (``kept_by``: its size, mtime)."""
        f.status = "skipped"
        self.acct.file_skipped(f.partition, f.size or 0)
        self._emit("file_done", file=f.relpath, size=f.size, skipped=True, **verified_by(f))
        f.shed()

    def _skip_file(self, f: FileState) -> None:
        """The file needs nothing fetched (a 304): kept, as a complete file found at start is."""
        f.status = "skipped"
        f.kept_by = "not modified"
        f.gen += 1  # the other answers to its conditional requests are dropped
        if f.size is None:
            f.size = f.local_size
        f.close_files()
        self.acct.file_skipped(f.partition, f.size or 0)
        self._detach(f)
        self._emit("file_done", file=f.relpath, size=f.size, skipped=True, not_modified=True, **verified_by(f))
        self._file_finished(f)

    def _settle(self, f: FileState) -> None:
        """Commit a file once all its bytes are on disk and no request for it is out."""
        if f.status == "active" and f.complete and f.in_flight == 0:
            self.commit(f)
        else:
            self.lanes.wake_partition(f)

    def _job_failed(self, job: RangeJob, exc: Exception) -> None:
        f = job.file
        if job.gen != f.gen:
            self.lanes.release(job)
            return
        before = f.done.total()
        try:
            job.save_progress()
        except DiskError as disk:
            exc = disk
        self.lanes.release(job)
        if job.superseded:
            if f.full_job is job:
                f.full_job = None
        else:
            give_back(f, job, job.pos if job.status in (200, 206) and not job.discard else job.start)
            self.lanes.adopt(f)
        if f.done.total() > before:
            self._served(job)
        now = self.now()
        rep = f.replicas[job.replica]
        paced = refused = None
        if self.pace is not None and is_limit(job.status, getattr(exc, "retry_after", None)):
            refused = self.pace.refusal(job.origin)
            paced = self.pace.wait(job.origin, now)
        fail = Failure(exc, superseded=job.superseded, active=f.status == "active", complete=f.complete,
                       innocent=job.redirected or (getattr(exc, "innocent", False) and job.status == 0),
                       gained=f.done.total() > before and getattr(exc, "progress", True),
                       failures=f.failures, quiet=self.outage.quiet(job.origin, now, exc),
                       waiting=max(0.0, f.not_before - now),
                       replica=job.replica if len(f.replicas) > 1 else None,
                       via_redirect=job.url != rep.original, renewed=job.url != rep.url,
                       renewals=rep.renewals, others=self._others(f, job.replica),
                       dropped=not f.serves(job.replica), paced=paced, refused=refused)
        fail.at, broke = fault_at(job, exc)
        fail.repeated = repeats(f.breaks, job.first, job.end, fail.at)
        fail.took = now - job.t_sent if job.t_sent else 0.0
        if broke and not fail.innocent and not job.superseded:
            f.broke_at(job.pos)
        jitter = random.uniform(1 - self.options.backoff_jitter, 1 + self.options.backoff_jitter)
        action = after_failure(fail, self.options, health=self.health, now=now, jitter=jitter)
        if action is None:
            return
        if isinstance(action, Settle):
            self._settle(f)
            return
        if isinstance(action, Retry) or getattr(action, "penalised", False):
            job.lane.last_done = now  # the lane waited for this failure: its next answer is timed from now
        pause = getattr(action, "pause", None)
        if pause is not None:
            if self.scheduler.policy is not None:
                self.scheduler.policy.forget(job.replica)  # re-probe it when it comes back
            self._emit("replica_paused", replica=job.replica, seconds=round(pause, 1), reason=str(exc))
        if isinstance(action, Requeue):
            self.lanes.wake_partition(f)
        elif isinstance(action, Renew):
            self._renew(f, job, action.status)
        elif isinstance(action, DropReplica):
            self._drop_replica(f, job.replica, action.status, action.reason)
        elif isinstance(action, FailFile):
            if action.penalised:  # the retry that was not granted still counts
                self.acct.retry()
            self._fail_file(f, action.reason)
        elif isinstance(action, Retry):
            self._retry(f, action, exc)

    def _others(self, f: FileState, replica: int) -> int:
        """Replicas other than ``replica`` that still serve ``f`` and have lanes to fetch it on."""
        staffed = self.lanes.staffed()
        return sum(1 for r in range(len(f.replicas)) if r != replica and f.serves(r) and r in staffed)

    def _served(self, job: RangeJob) -> None:
        """The request brought bytes: its replica's link works (its renewals in a row start afresh)."""
        rep = job.file.replicas[job.replica]
        if job.url == rep.url:
            rep.renewals = 0

    def _renew(self, f: FileState, job: RangeJob, status: int) -> None:
        """The link a redirect led to was refused: the replica's original URL is asked again (its
        redirect followed afresh) for the ranges still missing."""
        rep = f.replicas[job.replica]
        rep.renew()
        self._emit("link_renewed", file=f.relpath, replica=job.replica, url=redact_url(rep.original),
                   expired=redact_url(job.url), status=status, renewals=rep.renewals)
        self.lanes.wake_partition(f)

    def _drop_replica(self, f: FileState, replica: int, status: int | None, reason: str) -> None:
        """``f`` no longer uses ``replica`` (its other files still do); with none left it fails."""
        if not f.serves(replica):
            return
        entry = f.drop(replica, status, reason)
        self._emit("replica_dropped", file=f.relpath, **entry)
        if not any(f.serves(r) for r in self.lanes.staffed()):
            drops = "; ".join(f"{d['url']}: {d['reason']}" for d in f.dropped)
            self._fail_file(f, f"no replica serves it any more ({drops})")
        else:
            self.lanes.adopt(f)
            self.lanes.wake_partition(f)

    def _retry(self, f: FileState, retry: Retry, exc: Exception) -> None:
        f.failures = retry.failures
        self.acct.retry()
        delay = retry.delay
        f.not_before = self.now() + delay
        # wake the lanes when the backoff ends (not at the next tick); uvloop may fire a
        # timer up to a millisecond early, so aim a little late
        self._loop.call_later(delay + self.options.timer_slack, self.lanes.wake_partition, f)
        self._emit("retry", file=f.relpath, attempt=f.failures, delay=round(delay, 3), reason=str(exc))
        self.lanes.adopt(f)
        self.lanes.wake_partition(f)

    def _learn_size(self, f: FileState, size: int, job: RangeJob) -> None:
        f.learn_size(size, job.start, job.end, self.options.split_threshold)
        known = self.acct.bytes_total is not None or all(x.size is not None for x in self.files)
        self.acct.size_learned(f.partition, size, sum(x.size or 0 for x in self.files) if known else None)
        # a group that retired while the size was unknown had nothing of the file to hand back:
        # its rest goes back to the queue now, or no lane would ever ask for it
        self.lanes.adopt(f)
        self.lanes.wake_partition(f)

    def _to_single_stream(self, f: FileState, job: RangeJob, partial: bool, validator: bool = False) -> None:
        if f.stream_whole(job):
            why = ("server answered the whole file to If-Range (it judged the file's validator changed "
                   "or weak)" if validator else "server ignores Range requests")
            self._emit("retry", file=f.relpath, attempt=0, delay=0, reason=f"{f.relpath}: {why}; fetching it "
                                                                          f"as one stream")
        if partial and not validator and job.origin not in self.scheduler.no_ranges:
            # its other files are asked whole from the start: each range would bring the whole file
            self.scheduler.no_ranges.add(job.origin)
            self._emit("warning", reason=f"{job.origin} ignores Range requests: each of its files is "
                                         f"fetched as one stream")

    def _redirect(self, job: RangeJob, location: str) -> None:
        job.file.follow_redirect(job.replica, job.url, location, self.options.max_redirects)

    def _restart_file(self, f: FileState, reason: str) -> None:
        """The file changed on the server: forget every byte of it and start over."""
        f.restarts += 1
        action = after_change(f.restarts, reason, self.options)
        if isinstance(action, FailFile):
            self._fail_file(f, action.reason)
            return
        assert isinstance(action, RestartFile)
        f.forget()
        self.lanes.adopt(f)
        self._emit("retry", file=f.relpath, attempt=0, delay=0, reason=reason + "; starting it over")

    def _fail_file(self, f: FileState, reason: str) -> None:
        if f.status in ("done", "failed", "skipped"):
            return
        if not reason.startswith(f.relpath):
            reason = f"{f.relpath}: {reason}"  # every error names its file
        if f.dropped and "no replica serves it" not in reason:
            reason += "; replicas dropped before: " + "; ".join(f"{d['url']} ({d['reason']})" for d in f.dropped)
        f.status = "failed"
        f.gen += 1
        f.sync()
        f.close_files()
        kept = f.done.total()
        if not kept and f.piece is None:  # (nothing to resume: no empty part is left in DIR/.dtune)
            f.remove_working_files()
        elif f.journal_kept(reason):
            # (the part file and its journal stay: the rerun asks only for what is missing)
            reason += (f"; the {kept} bytes already written are kept in {f.part_path}: "
                       f"the same command resumes there once there is space")
        f.error = reason
        self.acct.file_failed()
        self._detach(f)
        self._emit("error", file=f.relpath, reason=reason)
        self._file_finished(f)

    def fail(self, f: FileState, reason: str) -> None:
        """Fail a file for a reason no request reported (a stream whose descriptor failed)."""
        self._fail_file(f, reason)

    # ---- commit ------------------------------------------------------------------------
    def commit(self, f: FileState) -> None:
        """Queue a complete file for verification, fsync and rename (in a worker thread)."""
        f.status = "verifying"
        self._detach(f)
        f.close_files()  # the queue can grow long: do not hold a descriptor per queued file
        self.committer.add(f)

    def _committed(self, f: FileState, error: str | None) -> None:
        if error is not None:
            f.status = "active"  # so that _fail_file records it
            self._fail_file(f, error)
            return
        f.status = "done"
        self.acct.file_done(f.partition)
        self._emit("file_done", file=f.relpath, size=f.size, **verified_by(f))
        self._file_finished(f)

    def _detach(self, f: FileState) -> None:
        group = f.group
        if group is not None and f in group.files:
            group.files.remove(f)
        f.group = None
        self.lanes.wake_partition(f)

    def _file_finished(self, f: FileState) -> None:
        f.shed()  # (an ended file keeps only what the result says of it)
        self._on_file_ended()
