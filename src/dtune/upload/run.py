"""``dtune put``: local files → a destination, tuned, every file verified (see ``docs/put.md``).

Theory of operation
-------------------
The local files are collected (``upload.local``) and handed to the request's
tuner as a get's listing is: ``plan(sizes, facts)`` splits them into size
partitions with θ each. For an upload, a partition's **cc** is the number of
its files in flight at once and **p** the parts of one file in flight (each
on a connection of its own); pp is not used (a request with a body is not
pipelined). Then the online search a get runs re-tunes them while the put
runs (``upload.online``): every control tick it is fed the bytes acknowledged,
the requests in flight and the mean request time, and its steps change cc
(between files) and p (between parts) without cutting a request in flight.

Each file then goes through its destination (``upload.dest``): small files
and every file to WebDAV in one request, larger ones to S3 (or to dtune
serve, in ``Content-Range`` pieces) in parts of the tuned size
(``upload.parts``), at most ``BUFFER_BUDGET`` bytes of parts read into memory
at once. A request that fails retryably is sent again after a
backoff (0.5 s doubling, up to 8 s; ``--retries`` times per request); a
file whose verification fails, or whose request keeps failing, fails, and
its incomplete multipart upload is aborted. A run that is interrupted
(Ctrl-C, SIGTERM, kill) leaves its multipart uploads for the rerun, which
resumes them (``S3Destination.begin``, ``ServeDestination.begin``).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dtune.discovery.select import Selection
from dtune.errors import DtuneError, HTTPError, UsageError
from dtune.netfacts import ASSUMED_BUFFER, NetworkFacts, os_receive_buffer_max
from dtune.tuners import Fixed, make_tuner
from dtune.upload.dest import Begun, Destination, IntegrityError, Remote, Sent
from dtune.upload.local import LocalFile
from dtune.upload.online import PutOnline
from dtune.upload.parts import MULTIPART_THRESHOLD, part_size
from dtune.upload.wire import CHUNK, Body, Pacer, Sender

BUFFER_BUDGET = 512 << 20   # bytes of parts held in memory at once, over all files
ASSUMED_BANDWIDTH = 1e9 / 8  # bytes/s: 1 Gbit/s, as a get assumes without --bandwidth
ASSUMED_RTT = 0.01           # s, when it cannot be measured
# parts of one file in flight at least (without -p): what rclone (--s3-upload-concurrency) and the
# AWS CLI send at once. A get's tuners size p from the path's BDP, which is 1 on a LAN; an object
# store's rate per request is bounded by its own per-request work, which parts in flight hide.
MIN_PARTS_IN_FLIGHT = 4
# while the online search runs (and -p is not given), files are cut for this many times the plan's
# p in flight (parts of 8 MiB at least, ``upload.parts``): a file cut for p lanes has no parts for more
GROW_ROOM = 4
Emit = Callable[[dict], None]


@dataclass
class FileResult:
    relpath: str
    size: int
    status: str = "pending"          # done | skipped | failed | pending (interrupted)
    verified: str | None = None      # what was compared (size and ETag, size and sha256...)
    error: str | None = None
    resumed: int = 0                 # bytes of parts an earlier run had sent, kept


@dataclass
class PutResult:
    files: list[FileResult] = field(default_factory=list)
    sent: int = 0                    # body bytes written in this run (resends included)
    seconds: float = 0.0
    retries: int = 0
    tuning: dict = field(default_factory=dict)
    dry_run: bool = False

    @property
    def ok(self) -> bool:
        return self.dry_run or all(f.status in ("done", "skipped") for f in self.files)


class _Budget:
    """At most ``limit`` bytes held at once; a request larger than it waits for all of it."""

    def __init__(self, limit: int) -> None:
        self.limit, self.used = limit, 0
        self._cond = asyncio.Condition()

    async def take(self, n: int) -> None:
        async with self._cond:
            await self._cond.wait_for(lambda: self.used == 0 or self.used + n <= self.limit)
            self.used += n

    def try_take(self, n: int) -> bool:
        """Take ``n`` now if it fits without waiting (a read ahead: never waited for while holding)."""
        if self.used + n > self.limit and self.used:
            return False
        self.used += n
        return True

    async def give(self, n: int) -> None:
        async with self._cond:
            self.used -= n
            self._cond.notify_all()


def _read(path: os.PathLike[str], start: int, end: int, crc: bool = False) -> tuple[bytes, bytes | None, int | None]:
    """Bytes ``[start, end)`` of a file and their MD5, or their CRC32 instead with ``crc`` (a thread's work)."""
    with open(path, "rb") as fh:
        fh.seek(start)
        data = fh.read(end - start)
    if len(data) != end - start:
        raise DtuneError(f"{path}: shorter than when it was listed (did it change while being put?)")
    return (data, None, zlib.crc32(data)) if crc else (data, hashlib.md5(data).digest(), None)


def unchanged(f: LocalFile, remote: Remote | None, *, s3: bool) -> bool:
    """``--sync``: whether the destination already holds ``f`` (pure).

    Sizes must agree; then S3 compares the ``x-amz-meta-mtime`` dtune (and rclone) store, to the
    second, and WebDAV takes a copy modified at or after the local file's mtime as current."""
    if remote is None or remote.size != f.size:
        return False
    if remote.mtime is None:
        return False
    if s3:
        return int(remote.mtime) == int(f.mtime)
    return remote.mtime >= int(f.mtime)


class Put:
    """One put: its files, destination, plan and counters (``run`` drives it)."""

    def __init__(self, dest: Destination, sender: Sender, values: dict[str, Any], emit: Emit,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.dest, self.sender, self.v, self.emit, self.clock = dest, sender, values, emit, clock
        self.result = PutResult()
        self.budget = _Budget(BUFFER_BUDGET)
        self.retries = int(values.get("retries") or 0)
        self.is_s3 = dest.label.startswith("s3://")
        self.acked = 0                   # body bytes of requests the destination answered
        self.in_flight = 0               # requests with a body in flight (the lanes in use)
        self.req_seconds, self.req_bytes, self.req_count = 0.0, 0, 0   # since the last control tick
        self.live: dict[str, dict[str, int]] = {}   # cc and p in force per partition (the search's)
        self.p_of: dict[str, str] = {}   # relpath → partition
        self.headroom = 1                # parts sized for p × this in flight (room for the search's p)

    async def timed(self, nbytes: int, call: Callable[[], Any]) -> Any:
        """A request with a body, counted: in flight meanwhile, then its time and bytes acknowledged."""
        t0 = self.clock()
        self.in_flight += 1
        try:
            out = await call()
        finally:
            self.in_flight -= 1
        self.req_seconds += self.clock() - t0
        self.req_bytes += nbytes
        self.req_count += 1
        self.acked += nbytes
        return out

    def p_now(self, f: LocalFile, p: int) -> int:
        """Parts of ``f`` in flight now: the search's p for its partition, else the plan's."""
        live = self.live.get(self.p_of.get(f.relpath, ""))
        return int(live["p"]) if live else p

    # ---- retrying ---------------------------------------------------------------------------
    async def retried(self, what: str, call: Callable[[], Any]) -> Any:
        delay = 0.5
        for attempt in range(self.retries + 1):
            try:
                return await call()
            except IntegrityError:
                raise
            except HTTPError as exc:
                if not exc.retryable or attempt == self.retries:
                    raise
                self.result.retries += 1
                self.emit({"event": "retry", "path": what, "error": str(exc), "wait_s": delay})
                await asyncio.sleep(delay)
                delay = min(delay * 2, 8.0)
        raise AssertionError("unreachable")

    # ---- one file ---------------------------------------------------------------------------
    async def put_file(self, f: LocalFile, fr: FileResult, p: int) -> None:
        begun: Begun | None = None
        try:
            fixed_part = self.v.get("part_size")
            if not self.dest.multipart or f.size <= max(MULTIPART_THRESHOLD, fixed_part or 0):
                answered, sent = await self._whole(f)
            else:
                begun = await self.retried(f.relpath, lambda: self.dest.begin(
                    f, part_size(f.size, p * self.headroom, fixed_part), not self.v.get("no_resume")))
                answered, sent = await self._parts(f, begun, p)
            fr.verified = await self.retried(f.relpath, lambda: self.dest.verify(f, sent, answered))
            fr.status = "done"
            fr.resumed = begun.kept_bytes if begun is not None else 0
            self.emit({"event": "file_done", "path": f.relpath, "bytes": f.size, "verified": fr.verified,
                       "resumed_bytes": fr.resumed})
        except (DtuneError, OSError) as exc:
            fr.status, fr.error = "failed", str(exc) if isinstance(exc, DtuneError) else f"{f.path}: {exc}"
            self.emit({"event": "error", "path": f.relpath, "error": fr.error})
            if begun is not None:
                try:
                    # (retried as any request: a kept connection the server closed meanwhile fails it once)
                    await self.retried(f"{f.relpath} abort", lambda: self.dest.abort(f, begun))  # noqa: B023
                    self.emit({"event": "aborted", "path": f.relpath, "upload": "multipart upload aborted"})
                except (DtuneError, OSError) as again:
                    self.emit({"event": "warning", "message": f"{f.relpath}: the failed upload could not be "
                               f"aborted ({again}); its parts stay in the bucket until aborted"})

    async def _whole(self, f: LocalFile) -> tuple[Remote, Sent]:
        # in memory: small files, and every one-PUT file to S3 (its Content-MD5 comes before its bytes;
        # up to --part-size, within S3's 5 GiB for one PUT)
        if f.size <= MULTIPART_THRESHOLD or self.dest.multipart:
            await self.budget.take(f.size)
            try:
                data, md5, _ = await asyncio.to_thread(_read, f.path, 0, f.size)
                sha = hashlib.sha256(data).hexdigest() if not self.dest.multipart else None
                sent = Sent(f.size, md5=md5, sha256=sha)
                answered = await self.timed(f.size, lambda: self.retried(
                    f.relpath, lambda: self.dest.put_whole(f, Body(data=data), sent)))
            finally:
                await self.budget.give(f.size)
            return answered, sent
        # a large file sent whole (WebDAV) has no Content-MD5 (it would cost a pass over it before its
        # first byte). It is hashed (SHA-256) as it is read to be sent when the destination says it will
        # need that digest (``hash_in_flight``: WebDAV with --verify-read); else it goes unhashed, and a
        # digest the server publishes is compared with the file hashed then (``DavDestination.verify``)
        hashed: list = []
        in_flight = getattr(self.dest, "hash_in_flight", True)

        async def attempt() -> Remote:
            hashed[:] = [hashlib.sha256()] if in_flight else []
            return await self.dest.put_whole(f, Body(path=f.path, start=0, end=f.size, hashers=tuple(hashed)),
                                             Sent(f.size))

        answered = await self.timed(f.size, lambda: self.retried(f.relpath, attempt))
        sent = Sent(f.size, sha256=hashed[0].hexdigest() if hashed else None)
        st = os.stat(f.path)
        if st.st_size != f.size or st.st_mtime != f.mtime:
            raise DtuneError(f"{f.path}: changed while it was put")
        return answered, sent

    async def _parts(self, f: LocalFile, begun: Begun, p: int) -> tuple[Remote, Sent]:
        crc = begun.checksum == "CRC32"   # (the server takes CRC32 flexible checksums: no MD5 computed)
        md5s: dict[int, bytes] = {n: md5 for n, (_, md5) in begun.kept.items()}
        crcs: dict[int, int] = dict(begun.kept_crc32s)
        etags: dict[int, str] = {n: etag for n, (etag, _) in begun.kept.items()}
        todo = [part for part in begun.parts if part.number not in begun.kept]
        if begun.kept:
            self.emit({"event": "resumed", "path": f.relpath, "parts_kept": len(begun.kept),
                       "bytes_kept": begun.kept_bytes, "parts_left": len(todo)})
        queue = list(reversed(todo))

        def read(part):
            return part, asyncio.ensure_future(asyncio.to_thread(_read, f.path, part.start, part.end, crc))

        lanes = [0]

        def excess() -> bool:   # more lanes on this file than the search's p now: this one stops
            return lanes[0] > self.p_now(f, p)

        async def lane() -> None:
            # each lane reads (and hashes) its next part on a thread while it sends this one, when the
            # budget has room for it now (waiting for room while holding a part could wait for ever)
            ahead = None
            try:
                while queue or ahead is not None:
                    if ahead is None:
                        if excess():
                            break
                        part = queue.pop()
                        await self.budget.take(part.size)
                        ahead = read(part)
                    part, reading = ahead
                    ahead = None
                    try:
                        data, md5, sum32 = await reading
                        if queue and not excess() and self.budget.try_take(queue[-1].size):
                            ahead = read(queue.pop())
                        etag = await self.timed(part.size, lambda: self.retried(  # noqa: B023
                            f"{f.relpath} part {part.number}", lambda: (  # noqa: B023
                                self.dest.put_part(f, begun, part, data, md5) if md5 is not None  # noqa: B023
                                else self.dest.put_part(f, begun, part, data, None, crc32=sum32))))  # noqa: B023
                        etags[part.number] = etag
                        if md5 is not None:
                            md5s[part.number] = md5
                        if sum32 is not None:
                            crcs[part.number] = sum32
                    finally:
                        await self.budget.give(part.size)
            finally:
                lanes[0] -= 1
                if ahead is not None:
                    await asyncio.gather(ahead[1], return_exceptions=True)
                    await self.budget.give(ahead[0].size)

        # lanes are added when the search raises p (between parts) and stop, each after its part,
        # when it lowers it
        tasks: list[asyncio.Future] = []
        try:
            while True:
                for t in tasks:
                    if t.done() and t.exception() is not None:
                        raise t.exception()
                while queue and lanes[0] < self.p_now(f, p):
                    lanes[0] += 1   # (counted when started: a lane stops itself in ``lane``)
                    tasks.append(asyncio.ensure_future(lane()))
                live = [t for t in tasks if not t.done()]
                if not live:
                    break
                await asyncio.wait(live, timeout=0.1, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        st = os.stat(f.path)
        if st.st_size != f.size or st.st_mtime != f.mtime:
            raise DtuneError(f"{f.path}: changed while it was put (its parts may mix two versions)")
        if crc:
            sent = Sent(f.size, part_crc32s=[crcs[part.number] for part in begun.parts],
                        part_etags=[etags[part.number] for part in begun.parts])
        else:
            sent = Sent(f.size, part_md5s=[md5s[part.number] for part in begun.parts])
        answered = await self.retried(f.relpath, lambda: self.dest.complete(f, begun, sent))
        return answered, sent


def tuned(values: dict[str, Any], files: list[LocalFile], rtt: float | None,
          multipart: bool = True) -> tuple[list[str], dict, dict]:
    """The tuner's plan for these files: each file's partition, θ per partition, the tuning event."""
    fixed = Fixed(cc=values.get("cc"), p=values.get("parallelism"))
    tuner = make_tuner(values.get("tuner") or "auto", fixed=fixed, max_cc=int(values.get("max_cc") or 16),
                       max_partitions=int(values.get("partitions") or 2), files=len(files))
    how = {"rtt": "given" if values.get("rtt") else ("measured" if rtt else "assumed"),
           "bandwidth": "given" if values.get("bandwidth") else "assumed",
           "tcp_buffer": "given" if values.get("tcp_buffer") else "measured"}
    facts = NetworkFacts(rtt=(values.get("rtt") or rtt or ASSUMED_RTT),
                         bandwidth=values.get("bandwidth") or ASSUMED_BANDWIDTH,
                         tcp_buffer=values.get("tcp_buffer") or os_receive_buffer_max() or ASSUMED_BUFFER, how=how)
    plan = tuner.plan([f.size for f in files], facts)
    cap = int(values.get("max_connections_per_host") or 64)
    params = {}
    count = {name: plan.partition_of.count(name) for name in plan.params}
    in_parts = {plan.partition_of[i] for i, f in enumerate(files)
                if multipart and f.size > max(MULTIPART_THRESHOLD, values.get("part_size") or 0)}
    for name, prm in plan.params.items():
        cc, p = max(1, prm.cc), max(1, prm.p)
        if count[name] and cc > count[name] and fixed.p is None:
            # groups the partition has no file for carry parts instead: the same connections
            p, cc = p * -(-cc // count[name]), count[name]
        if fixed.p is None:
            p = max(p, MIN_PARTS_IN_FLIGHT)
        if fixed.cc is None and fixed.p is None:   # (a file sent whole holds one connection)
            while cc * (p if name in in_parts else 1) > cap and cc > 1:
                cc -= 1
        params[name] = {"cc": cc, "p": p}
    notes = [*plan.notes, f"put: cc = files in flight, p = parts of a file in flight (at least "
             f"{MIN_PARTS_IN_FLIGHT} unless -p is given); re-tuned online while the put runs, unless --cc and -p "
             "are both given (or under --limit-rate)"]
    event = {"event": "tuning", "tuner": tuner.label, "settings": tuner.get_params(), "facts": facts.as_dict(),
             "params": params, "fixed": fixed.as_dict(), "reason": notes}
    event["in_parts"] = sorted(in_parts)
    return plan.partition_of, params, event


async def run(put: Put, files: list[LocalFile], *, sync: bool, dry_run: bool, rtt: float | None) -> PutResult:
    """Put ``files`` (already collected) through ``put``'s destination; the result (never raises for
    one file's failure: it is in the result)."""
    result = put.result
    started = put.clock()
    total = sum(f.size for f in files)
    put.emit({"event": "start", "direction": "put", "destination": put.dest.label, "files": len(files),
              "bytes": total})
    existing: dict[str, Remote] = {}
    if sync:
        existing = await put.retried("listing", lambda: put.dest.existing(files))
    todo = []
    for f in files:
        fr = FileResult(f.relpath, f.size)
        result.files.append(fr)
        if sync and unchanged(f, existing.get(f.relpath), s3=put.is_s3):
            fr.status = "skipped"
            put.emit({"event": "file_skipped", "path": f.relpath, "bytes": f.size,
                      "reason": "the destination holds the same size and mtime"})
        else:
            todo.append((f, fr))
    if dry_run:
        result.dry_run = True
        for f, _fr in todo:
            put.emit({"event": "would_put", "path": f.relpath, "bytes": f.size, "url": put.dest.url(f.relpath)})
        result.seconds = put.clock() - started
        return result
    partition_of, params, event = tuned(put.v, files, rtt, put.dest.multipart)
    result.tuning = event
    put.emit(event)
    for warning in await put.retried("prepare", lambda: put.dest.prepare([f for f, _ in todo])):
        put.emit({"event": "warning", "message": warning})
    index = {f.relpath: i for i, f in enumerate(files)}
    groups: dict[str, list] = {}
    for f, fr in sorted(todo, key=lambda item: -item[0].size):   # largest first: the end stays even
        groups.setdefault(partition_of[index[f.relpath]], []).append((f, fr))
    put.p_of = {f.relpath: partition_of[index[f.relpath]] for f, _ in todo}
    put.live = {name: dict(v) for name, v in params.items()}
    ticker = asyncio.ensure_future(_tick(put, total, started))
    tuner = online_for(put.v, event, rtt)
    if tuner is not None and put.v.get("parallelism") is None:
        put.headroom = GROW_ROOM
    control = asyncio.ensure_future(_control(put, tuner, sum(f.size for f, _ in todo))) if tuner is not None else None
    busy = {name: [0] for name in groups}

    async def worker(name: str, queue: list) -> None:
        # a worker takes its next file only while the partition's cc in force allows it
        try:
            while queue and busy[name][0] <= put.live[name]["cc"]:
                f, fr = queue.pop(0)
                await put.put_file(f, fr, params[name]["p"])
        finally:
            busy[name][0] -= 1

    workers: list[asyncio.Future] = []
    try:
        while True:
            for t in workers:
                if t.done() and t.exception() is not None:
                    raise t.exception()
            for name, queue in groups.items():   # the search raised cc: more files in flight
                while queue and busy[name][0] < put.live[name]["cc"]:
                    busy[name][0] += 1
                    workers.append(asyncio.ensure_future(worker(name, queue)))
            live = [t for t in workers if not t.done()]
            if not live:
                break
            await asyncio.wait(live, timeout=0.1, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if control is not None:
            if control.done() and not control.cancelled() and control.exception() is not None:
                put.emit({"event": "warning", "message": f"the online search stopped ({control.exception()!r}); "
                          "the put kept its last cc and p"})
            control.cancel()
            await asyncio.gather(control, return_exceptions=True)
        for task in [*workers, ticker]:
            task.cancel()
        await asyncio.gather(*workers, ticker, return_exceptions=True)
        result.seconds = put.clock() - started
    return result


def online_for(values: dict[str, Any], event: dict, rtt: float | None) -> PutOnline | None:
    """The search over the plan in ``event`` (None under --limit-rate: the limit is
    the bottleneck, the goodput says nothing, as for a get)."""
    if (values.get("limit_rate") or 0) > 0:
        return None
    first = {n: v["cc"] * (v["p"] if n in event["in_parts"] else 1) for n, v in event["params"].items()}
    window = max(MULTIPART_THRESHOLD, values.get("part_size") or 0)
    tuner = PutOnline(event["params"], set(event["in_parts"]), fixed_cc=values.get("cc"),
                      fixed_p=values.get("parallelism"),
                      cap=max(int(values.get("max_connections_per_host") or 64), sum(first.values())),
                      window=window)
    return tuner if tuner.searching else None


async def _control(put: Put, tuner: PutOnline, total: int, tick: float = 0.1) -> None:
    """Feed the search every ``tick`` and apply its steps (``online`` and ``params`` events, as a get)."""
    rtt: float | None = None
    window: float | None = None
    while True:
        await asyncio.sleep(tick)
        if put.req_count:
            rtt = put.req_seconds / put.req_count
            window = put.req_bytes / put.req_count
            put.req_seconds, put.req_bytes, put.req_count = 0.0, 0, 0
        if rtt is None:
            continue   # (no request answered yet: nothing to judge a lane by)
        moved = tuner.observe(put.clock(), put.acked, put.in_flight, rtt, window,
                              bytes_left=max(0, total - put.acked))
        if moved is None:
            continue
        step, params = moved
        put.emit({"event": "online", **step})
        for name, new in params.items():
            old = put.live.get(name)
            if old != new:
                put.emit({"event": "params", "partition": name, "old": old, "new": new, "reason": step["reason"]})
                put.live[name] = dict(new)
        put.result.tuning.setdefault("steps", []).append({**step, "params": params})


async def _tick(put: Put, total: int, started: float) -> None:
    last_bytes, last_t = 0, started
    while True:
        await asyncio.sleep(1.0)
        now = put.clock()
        sent = put.result.sent
        rate = (sent - last_bytes) / max(1e-6, now - last_t)
        last_bytes, last_t = sent, now
        done = sum(1 for f in put.result.files if f.status in ("done", "skipped"))
        put.emit({"event": "progress", "t": round(now - started, 3), "bytes_sent": sent, "bytes_total": total,
                  "rate_mbps": round(rate * 8 / 1e6, 3), "files_done": done, "files": len(put.result.files)})


def selection(values: dict[str, Any]) -> Selection:
    try:
        return Selection.of(values.get("include") or [], values.get("exclude") or [],
                            max_depth=values.get("max_depth"), max_files=values.get("max_files"))
    except ValueError as exc:
        raise UsageError(f"--include/--exclude: {exc}") from None


def pacer(values: dict[str, Any]) -> Pacer | None:
    rate = values.get("limit_rate") or 0
    return Pacer(rate, max(CHUNK, rate * 0.1)) if rate > 0 else None
