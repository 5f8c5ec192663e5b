"""The parent of a cluster transfer: discover, pack, check the nodes, submit, gather, commit.

The Dask side runs with the synchronous ``distributed.Client`` in a thread of its own (the
client keeps its own event loop); its events come back to the transfer's loop through
``call_soon_threadsafe``. Faults (docs/cluster.md):

* a worker that dies mid-shard: Dask runs the task again on another worker (``retries``),
  which resumes every file and piece from its journal on the shared file system;
* a lost scheduler: ``DtuneError`` "cluster ADDRESS: lost the scheduler ..."; what the
  workers journalled stays, and the same command resumes it;
* a node that does not see the output directory: ``NodeError`` before any byte moves;
* a shard that makes no progress for too long (``watch``): ``DtuneError`` naming it, its worker
  and what it last reported; what the workers journalled stays.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import glob
import os
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from dtune.accounting import OriginView, Snapshot
from dtune.cluster import marker as markers
from dtune.cluster import pieces as split
from dtune.cluster.conduct import Conductor
from dtune.cluster.local import Quiet, close_local, local_cluster
from dtune.cluster.messages import ShardResult, ShardTask
from dtune.cluster.shard import ShardPlan, cap_share, pack, pieces_of, place
from dtune.cluster.timeline import relative
from dtune.cluster.watch import ShardWatch, limit_for
from dtune.cluster.worker import NodeError, check_node, forget_limit, run_shard, set_limit
from dtune.dataset import FileSpec, Piece
from dtune.engine.result import TransferResult
from dtune.errors import DtuneError
from dtune.statedir import Place
from dtune.transfer import TransferRequest
from dtune.transfer.events import EventSink
from dtune.transfer.listing import add_unfetched, list_sources, placed
from dtune.tuners.registry import online_default

RETRIES = 2            # a shard whose worker died runs again on another one, at most this often
START_TIMEOUT = 60.0   # seconds to find a worker on the scheduler (reaching it: --connect-timeout)
LOST_AFTER = 10.0      # seconds without the scheduler after which the transfer gives up on it
STOP_POLL = 1.0        # seconds between looks, while waiting for workers, at whether the transfer gave up
POLL = 0.1             # seconds between looks at the shards' futures
LEAD = 1.5             # a node's next shard goes out when its last one has this long to go (s)
TUNER_NOTE = ("cluster: each node searches its own connections within its share of the per-origin cap; "
              "when the aggregate rate stops rising with the nodes' connections (they share a bottleneck), "
              "the parent caps each node's (cluster_tuning events)")


def nodes_summary(results: list[ShardResult]) -> dict[str, dict]:
    """Bytes, rate and files per node from the shards' results (``worker.run_shard``); the rate is
    over the seconds the node spent on its shards. Pure."""
    nodes: dict[str, dict] = {}
    for r in results:
        n = nodes.setdefault(r.node, {"host": r.host, "bytes": 0, "seconds": 0.0, "files": 0,
                                      "pieces": 0, "shards": 0, "retries": 0})
        n["bytes"] += r.bytes
        n["seconds"] += r.seconds
        n["shards"] += 1
        n["retries"] += r.retries
        piece_files = {p[0] for p in r.pieces}
        n["pieces"] += len(r.pieces)
        n["files"] += sum(1 for f in r.files if f.status in ("done", "skipped", "kept") and f.relpath not in piece_files)
    for n in nodes.values():
        n["rate_mbps"] = round(n["bytes"] * 8 / 1e6 / n["seconds"], 3) if n["seconds"] > 0 else 0.0
        n["seconds"] = round(n["seconds"], 3)
    return nodes


def splittable(spec: FileSpec, final: Path, listings: dict[Path, set[str]]) -> bool:
    """May the file be split by range? Its size must be known, and no finished copy may be in
    place (that one the engine judges whole: skip, or fetch again), unless journals say a
    transfer of it is under way. ``listings``: directory → names, read once per directory."""
    if not spec.size:
        return False
    names = listings.get(final.parent)
    if names is None:
        try:
            names = listings[final.parent] = set(os.listdir(final.parent))
        except OSError:
            names = listings[final.parent] = set()
    if final.name not in names:
        return True
    journal = Place.of(str(final), spec.relpath).journal
    return os.path.lexists(journal) or bool(glob.glob(glob.escape(journal) + ".*"))


class Aggregate:
    """The latest progress of every shard, summed into one snapshot for the progress bar."""

    def __init__(self, total: int | None, files: int) -> None:
        self.total, self.files = total, files
        self.start = time.monotonic()
        self.latest: dict[tuple[str, int], dict] = {}   # (node, shard) → its last node_progress
        self.finished: set[tuple[str, int]] = set()
        self.files_done = 0
        self.files_failed = 0

    def event(self, event: dict) -> None:
        key = (str(event.get("node")), int(event.get("shard", -1)))
        kind = event.get("event")
        if kind == "node_progress":
            self.latest[key] = event
        elif kind == "file_done":
            self.files_done += 1
        elif kind == "error":
            self.files_failed += 1

    def snapshot(self) -> Snapshot:
        moved = sum(e.get("bytes", 0) for e in self.latest.values())
        resumed = sum(e.get("bytes_resumed", 0) for k, e in self.latest.items())
        rate = sum(e.get("rate_mbps", 0.0) for k, e in self.latest.items() if k not in self.finished) * 1e6 / 8
        left = None if self.total is None else max(0, self.total - moved - resumed)
        return Snapshot(elapsed=time.monotonic() - self.start, bytes=moved, bytes_resumed=resumed,
                        bytes_total=self.total, rate=rate, rate_inst=rate,
                        eta=None if left is None or rate <= 0 else left / rate, files_total=self.files,
                        files_done=self.files_done, files_skipped=0, files_failed=self.files_failed,
                        retries=sum(e.get("retries", 0) for e in self.latest.values()),
                        connections=sum(e.get("connections", 0) for k, e in self.latest.items()
                                        if k not in self.finished), rtt=None)


class Session:
    """One cluster transfer's Dask side (``run`` in a thread of its own)."""

    def __init__(self, plan: TransferRequest, specs: list[FileSpec], paths: list[Path], emit: EventSink,  # noqa: ANN001
                 aggregate: Aggregate, found: concurrent.futures.Future | None = None) -> None:
        """``found``: when given, the dataset is still being discovered; the session reaches the
        cluster and checks the nodes meanwhile, then waits for ``found``'s (specs, paths)."""
        self.plan, self.specs, self.paths, self.emit, self.aggregate = plan, specs, paths, emit, aggregate
        self.found = found
        self.stop = threading.Event()
        self.topic = f"dtune-{uuid.uuid4().hex[:12]}"
        self.t0 = time.time()   # the parent's start: the shards' timelines count from here
        self.address = plan.cluster or "local"
        self._connected = time.monotonic()
        self.watch = ShardWatch(limit_for(plan.options.stall_timeout), time.monotonic())
        self._watch_lock = threading.Lock()   # (events come on the client's thread)
        self.conductor: Conductor | None = None   # the nodes' caps from the aggregate (``conduct``)
        self._limits_sent = 0

    # ---- the steps -----------------------------------------------------------------------------
    def run(self, client=None) -> TransferResult:  # noqa: ANN001
        from distributed import Client  # (Dask: optional, dtune[cluster])

        own_cluster = own_client = None
        quiet = Quiet() if client is None else None  # (a caller's own client logs as they set it)
        try:
            began = time.monotonic()
            if client is None:
                if self.plan.workers is not None:
                    own_cluster = local_cluster(self.plan.workers)
                    self.address = own_cluster.scheduler_address
                    own_client = client = Client(own_cluster, set_as_default=False)
                else:
                    try:
                        own_client = client = Client(self.plan.cluster, set_as_default=False,
                                                     timeout=max(2.0, self.plan.options.connect_timeout))
                    except (OSError, TimeoutError) as exc:
                        raise DtuneError(f"cluster {self.plan.cluster}: cannot reach the scheduler: {exc}") from None
            else:
                self.address = client.scheduler.address
            return self._run(client, time.monotonic() - began)
        finally:
            if own_client is not None:
                own_client.close()
            if own_cluster is not None:
                close_local(own_cluster)
            if quiet is not None:
                quiet.restore()

    def _run(self, client, started: float) -> TransferResult:  # noqa: ANN001
        try:
            self._wait_for_workers(client)
            workers = sorted(client.scheduler_info(n_workers=-1)["workers"])
            path, token = markers.write_marker(self.plan.outdir)
            try:
                return self._transfer(client, workers, path, token, started)
            finally:
                try:
                    os.unlink(path)
                except OSError:
                    pass
        except DtuneError:
            raise
        except (OSError, TimeoutError, asyncio.CancelledError, concurrent.futures.CancelledError) as exc:
            # (a client that lost its scheduler cancels every future: distributed's FutureCancelledError,
            # a concurrent.futures.CancelledError, comes from result() or exception() of a shard)
            if self.stop.is_set():
                raise
            raise DtuneError(f"cluster {self.address}: lost the scheduler ({type(exc).__name__}: "
                             f"{' '.join(str(exc).split())}); "
                             f"the same command resumes what the workers journalled") from None

    def _wait_for_workers(self, client) -> None:  # noqa: ANN001
        """Until a worker is there (``--workers N``: all N), at most ``START_TIMEOUT``; a session
        whose dataset could not be discovered (``stop``) ends sooner."""
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                client.wait_for_workers(self.plan.workers or 1,
                                        timeout=max(0.1, min(STOP_POLL, deadline - time.monotonic())))
                return
            except TimeoutError:
                if self.stop.is_set():
                    raise _Abandoned() from None
                if time.monotonic() >= deadline:
                    raise

    def _transfer(self, client, workers: list[str], path: str, token: str, started: float) -> TransferResult:  # noqa: ANN001

        # every node sees the parent's output directory, or nothing moves
        try:
            seen = client.run(check_node, path, token)
        except (ImportError, AttributeError, TypeError) as exc:  # an old dtune, or none, on a worker
            raise DtuneError(f"cluster {self.address}: a worker cannot run dtune's shards ({type(exc).__name__}: "
                             f"{exc}): install this dtune on every worker") from None
        for node, problem in sorted(seen.items()):
            if problem is not None:
                raise markers_error(node, problem)
        checked = time.time() - self.t0
        if self.found is not None:
            self.specs, self.paths = self.found.result()
        listed = time.time() - self.t0
        nodes = len(workers)
        listings: dict[Path, set[str]] = {}
        whole = [not splittable(s, p, listings) for s, p in zip(self.specs, self.paths, strict=True)]
        shards = pack([s.size for s in self.specs], nodes, whole=whole)
        split_files = pieces_of(shards)
        for index, ranges in split_files.items():
            spec = self.specs[index]
            split.prepare(Place.of(str(self.paths[index]), spec.relpath), spec.size, [(s, e) for s, e, _ in ranges])
        cap = cap_share(self.plan.max_per_host, nodes)
        if nodes > 1 and conducted(self.plan):
            self.conductor = Conductor(workers, cap)
        self.emit({"event": "cluster", "scheduler": self.address, "workers": workers,
                   "start_seconds": round(started, 3), "checked_at": round(checked, 3), "listed_at": round(listed, 3),
                   "at": round(time.time() - self.t0, 3), "shards": len(shards),
                   "split_files": len(split_files), "cap_per_node": cap, "cap": self.plan.max_per_host,
                   "reason": [TUNER_NOTE]})
        tasks = [self.task(shard, cap, path, token) for shard in shards]
        client.subscribe_topic(self.topic, self._heard)
        # One shard per worker out at a time, each placed on a node (``shard.place``): the next goes
        # out when a node is free and no busy node would finish it sooner. (All at once, Dask sends
        # each worker two to hold: a node at half the rate then kept a third of the data, and the
        # shards' queue balanced nothing.)
        # A node whose shard will be done within ``LEAD`` seconds counts as free: its next shard
        # starts while the last one ends, so that one engine's tail overlaps the next one's start
        # (each boundary cost the node about a second at a lower rate).
        waiting = list(tasks)
        pending: list = []   # submitted, not done
        futures: list = []   # every one submitted (cancelled at the end)
        free = list(workers)
        running: dict[str, list[ShardTask]] = {}      # node → the tasks placed on it, oldest first
        placed: dict[str, tuple[str, ShardTask]] = {}  # future key → (node, task)
        submitted: dict[int, float] = {}               # shard → when it went out (wall clock)

        def submit(i: int, node: str) -> None:
            t = waiting.pop(i)
            future = client.submit(run_shard, t, pure=False, retries=RETRIES, key=f"{self.topic}-{t.shard}",
                                   workers=[node], allow_other_workers=True)
            submitted[t.shard] = time.time()
            futures.append(future)
            pending.append(future)
            if node in free:
                free.remove(node)
            running.setdefault(node, []).append(t)
            placed[future.key] = (node, t)

        def place_next() -> None:
            if not waiting:
                return
            rates = self._rates(results, running)
            ending = [n for n, ts in running.items()
                      if len(ts) == 1 and rates.get(n) and self._left(n, ts[0]) / rates[n] <= LEAD]
            if not free and not ending:
                return
            busy = {n: sum(self._left(n, t) for t in ts) for n, ts in running.items() if n not in ending}
            plan = place([t.bytes for t in waiting], free + ending, busy, rates)
            for i in sorted(plan, reverse=True):
                submit(i, plan[i])

        results: list[ShardResult] = []
        try:
            self.watch.latest = time.monotonic()
            place_next()
            for future in self._completed(client, pending, place_next):
                node, t = placed.pop(future.key, (None, None))
                if node is not None:
                    left = [x for x in running.pop(node, []) if x is not t]
                    if left:
                        running[node] = left
                    else:
                        free.append(node)
                if future.status == "error":
                    exc = future.exception()
                    raise exc if isinstance(exc, DtuneError) else DtuneError(
                        f"cluster {self.address}: shard {future.key}: {type(exc).__name__}: {exc}")
                if future.status == "cancelled":
                    raise asyncio.CancelledError(f"the scheduler cancelled shard {future.key}")
                r = future.result()
                with self._watch_lock:
                    self.watch.finished(r.shard)
                self.aggregate.finished.add((r.node, r.shard))
                results.append(r)
                times = {"submitted": submitted.get(r.shard, self.t0), **r.times, "done": time.time()}
                self.emit({"event": "shard_timeline", "node": r.node, "shard": r.shard, "bytes": r.bytes,
                           **relative(times, self.t0), "done": round(times["done"] - self.t0, 3)})
                place_next()
        finally:
            try:
                client.cancel(futures)
                client.unsubscribe_topic(self.topic)
                if self._limits_sent:
                    client.run(forget_limit, self.topic, on_error="ignore")
            except Exception:  # noqa: BLE001 (the scheduler may be gone: nothing left to tidy there)
                pass
        return self._result(results, split_files)

    def _completed(self, client, pending: list, each_poll: Callable[[], None] = lambda: None):  # noqa: ANN001, ANN202
        """Each future of ``pending`` as it finishes, removed from it (polled: ``as_completed`` wants
        a default client; the caller may add futures between two, and ``each_poll`` runs at every
        look). Raises OSError once the client has lost the scheduler, CancelledError when the
        transfer stops, DtuneError when a shard has made no progress for too long (``watch``)."""
        def shard_of(future) -> int:  # noqa: ANN001 (keys: TOPIC-SHARD)
            return int(str(future.key).rsplit("-", 1)[1])

        while pending:
            if self.stop.is_set():
                raise asyncio.CancelledError()
            if client.status not in ("running", "connecting", "newly-created"):
                raise OSError(f"the client is {client.status}")
            if client.status == "connecting" and time.monotonic() - self._connected > LOST_AFTER:
                raise OSError(f"no answer from the scheduler for {LOST_AFTER:.0f} s")
            if client.status == "running":
                self._connected = time.monotonic()
                self._check_progress(client, {shard_of(f): f.key for f in pending})
                self._conduct(client)
                each_poll()
            ready = [f for f in pending if f.done()]
            for future in ready:
                pending.remove(future)
                yield future
            if not ready:
                time.sleep(POLL)

    def _check_progress(self, client, shards: dict[int, str]) -> None:  # noqa: ANN001
        """DtuneError naming the shard, its worker and what it last reported, once it is overdue
        (``watch``) and its worker still runs it (else it waits to run again elsewhere).
        ``shards``: the shards still out → their futures' keys."""
        with self._watch_lock:
            late = self.watch.overdue(time.monotonic(), shards)
        if late is None:
            return
        if late.shard is not None and shards[late.shard] not in client.processing().get(late.node, ()):
            with self._watch_lock:
                self.watch.forget(late.shard)
            return
        raise DtuneError(f"cluster {self.address}: {late.reason}; stopped: the same command resumes "
                         f"what the workers journalled")

    def _left(self, node: str, task: ShardTask) -> float:
        """Bytes the shard running on ``node`` has still to fetch (its latest report)."""
        e = self.aggregate.latest.get((node, task.shard))
        return max(0.0, task.bytes - (e.get("bytes", 0) + e.get("bytes_resumed", 0) if e else 0))

    def _rates(self, results: list[ShardResult], running: dict[str, list[ShardTask]]) -> dict[str, float]:
        """Each node's rate (bytes/s): its finished shards, and the oldest it runs so far (a shard
        started while that one ends shares the node, and would read as half its rate)."""
        moved: dict[str, list[float]] = {}
        for r in results:
            acc = moved.setdefault(r.node, [0.0, 0.0])
            acc[0] += r.bytes
            acc[1] += r.seconds
        for node, tasks in running.items():
            e = self.aggregate.latest.get((node, tasks[0].shard)) if tasks else None
            if e and e.get("t"):
                acc = moved.setdefault(node, [0.0, 0.0])
                acc[0] += e.get("bytes", 0)
                acc[1] += e["t"]
        return {n: b / s for n, (b, s) in moved.items() if s > 0 and b > 0}

    def _conduct(self, client) -> None:  # noqa: ANN001
        """The conductor's window, when one is due; new caps go to the nodes (``worker.set_limit``)."""

        if self.conductor is None:
            return
        with self._watch_lock:
            caps = self.conductor.tick(time.monotonic())
        if caps is None:
            return
        self._limits_sent += 1
        lifted = bool(caps.event.get("lifted"))
        for node, cap in sorted(caps.caps.items()):
            client.run(set_limit, self.topic, self._limits_sent, None if lifted else cap, caps.reason,
                       workers=[node], on_error="ignore")
        self.emit({"event": "cluster_tuning", "caps": dict(sorted(caps.caps.items())), "reason": caps.reason,
                   **caps.event})

    def task(self, shard: ShardPlan, cap: int, path: str, token: str) -> ShardTask:
        specs, paths = [], []
        for u in shard.units:
            spec = self.specs[u.index]
            if u.start is not None and u.end is not None:
                spec = _with_piece(spec, Piece(u.start, u.end, split.tag(u.start, u.end)))
            specs.append(spec)
            paths.append(str(self.paths[u.index]))
        return ShardTask(shard=shard.id, bytes=shard.bytes, specs=specs, paths=paths,
                         outdir=os.path.abspath(self.plan.outdir), given=self.plan.given, cap=cap,
                         marker=path, token=token, topic=self.topic, note=TUNER_NOTE)

    def _heard(self, event: tuple) -> None:
        e = event[1]
        with self._watch_lock:
            now = time.monotonic()
            self.watch.heard(e, now)
            if self.conductor is not None and e.get("event") == "node_progress":
                try:
                    live, first = e.get("rtt_live_ms"), e.get("rtt_ms")
                    busy = e.get("connections_busy")
                    self.conductor.report(now, str(e["node"]), int(e["shard"]), float(e["t"]), int(e["bytes"]),
                                          int((e.get("connections") if busy is None else busy) or 0),
                                          None if live is None else float(live) / 1000,
                                          None if first is None else float(first) / 1000)
                except (KeyError, TypeError, ValueError):
                    pass   # (a report without its numbers: nothing to learn from it)
        self.emit(e)

    def _result(self, results: list[ShardResult], split_files: dict) -> TransferResult:
        """One result: the whole files as their shards reported them, the split files committed here."""
        out = TransferResult()
        split_names = {self.specs[i].relpath for i in split_files}
        for r in results:
            out.files.extend(f for f in r.files if f.relpath not in split_names)
        for index, ranges in split_files.items():
            spec = self.specs[index]
            f = split.commit(spec, Place.of(str(self.paths[index]), spec.relpath), [(s, e) for s, e, _ in ranges])
            out.files.append(f)
            if f.status == "done":
                self.emit({"event": "file_done", "file": f.relpath, "size": f.size, "checksum": f.checksum,
                           "pieces": len(ranges), "node": "parent"})
            else:
                self.emit({"event": "error", "file": f.relpath, "reason": f.error, "node": "parent"})
        out.nodes = nodes_summary(results)
        moved = sum(n["bytes"] for n in out.nodes.values())
        snap = self.aggregate.snapshot()
        snap.bytes = moved
        snap.bytes_resumed = sum(r.bytes_resumed for r in results)
        snap.files_done = sum(1 for f in out.files if f.status == "done")
        snap.files_skipped = sum(1 for f in out.files if f.status in ("skipped", "kept"))
        snap.files_failed = sum(1 for f in out.files if f.status == "failed")
        for r in results:
            for origin, (nbytes, requests) in r.origins.items():
                view = snap.origins.setdefault(origin, OriginView(0, 0, 0.0))
                view.bytes += nbytes
                view.requests += requests
        out.snapshot = snap
        out.tuning = {"tuner": "cluster", "note": TUNER_NOTE,
                      "shards": {str(r.shard): {"node": r.node, **r.tuning} for r in results}}
        return out


def conducted(plan: TransferRequest) -> bool:
    """May the parent cap the nodes' connections? Only where the nodes' tuners search them: not
    when the user fixed cc and p, nor without the online search (``--no-online``, a paper tuner
    run as published, ``--limit-rate``)."""
    search = online_default(plan.tuner) if plan.online is None else plan.online
    return bool(search) and plan.options.limit_rate <= 0 and not (plan.cc is not None and plan.p is not None)


def markers_error(node: str, problem: str) -> DtuneError:
    return NodeError(f"worker {node}: {problem}; nothing was fetched")


def _with_piece(spec: FileSpec, piece: Piece) -> FileSpec:
    return dataclasses.replace(spec, piece=piece)


class Cluster:
    """The ``ScaleOut`` of a transfer on a Dask cluster (``dtune.transfer.run``): ``client``, a
    synchronous ``distributed.Client`` already connected, or None for the request's
    ``--cluster`` address or its local ``--workers``."""

    def __init__(self, client=None) -> None:  # noqa: ANN001 (a distributed.Client; imported late)
        self.client = client

    async def fetch(self, request: TransferRequest, emit: EventSink,
                    on_progress: Callable[[Snapshot], None] | None) -> TransferResult:
        return await cluster_transfer(request, emit, on_progress, client=self.client)


async def cluster_transfer(plan: TransferRequest, emit: EventSink, on_progress: Callable[[Snapshot], None] | None,
                           client=None) -> TransferResult:  # noqa: ANN001
    """A transfer on a Dask cluster, once ``run`` has made and locked the output directory."""
    loop = asyncio.get_running_loop()

    def heard(event: dict) -> None:  # on the client's thread
        loop.call_soon_threadsafe(_deliver, event)

    def _deliver(event: dict) -> None:
        session.aggregate.event(event)
        emit(event)

    # The cluster is reached, and its nodes checked, while the dataset is listed: importing
    # distributed, connecting and the nodes' round trip cost the parent about 0.35 s before its
    # first shard went out (a local cluster's start, a second or two).
    found: concurrent.futures.Future = concurrent.futures.Future()
    session = Session(plan, [], [], heard, Aggregate(None, 0), found=found)
    dask_side = asyncio.ensure_future(asyncio.to_thread(session.run, client))
    try:
        dataset = (await _while_alive(list_sources(plan), dask_side)).dataset
        specs, paths = placed(plan, dataset, emit)
    except BaseException:
        found.set_exception(_Abandoned())
        session.stop.set()
        with contextlib.suppress(BaseException):   # (its own error, if any, is not the first one)
            await dask_side                       # (the client and a local cluster close)
        raise
    session.aggregate = aggregate = Aggregate(
        sum(s.size or 0 for s in specs) if all(s.size is not None for s in specs) else None, len(specs))
    found.set_result((specs, paths))
    ticker = asyncio.ensure_future(_tick(aggregate, on_progress))
    try:
        result = await dask_side
    finally:
        session.stop.set()
        ticker.cancel()
    await asyncio.sleep(0)  # (events handed over by the client's thread are delivered first)
    add_unfetched(result, dataset, specs)
    return result


class _Abandoned(BaseException):
    """Handed to a session waiting for a dataset whose discovery failed: it closes and ends."""


async def _while_alive(work, side: asyncio.Future):  # noqa: ANN001, ANN202
    """``work``'s result; if ``side`` ends first (the cluster could not be reached), its error."""
    task = asyncio.ensure_future(work)
    try:
        await asyncio.wait({task, side}, return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            side.result()   # (raises: the session cannot end before the dataset is handed over)
        return await task
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


async def _tick(aggregate: Aggregate, on_progress: Callable[[Snapshot], None] | None) -> None:
    while on_progress is not None:
        await asyncio.sleep(1.0)
        on_progress(aggregate.snapshot())
