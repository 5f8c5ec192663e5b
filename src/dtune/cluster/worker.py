"""What a Dask worker runs for one shard: the ordinary engine, with its own tuner.

``run_shard`` is the Dask task. It checks the shared-output marker first (``marker``), builds
its own ``TransferRequest`` from the option values the parent was given (an ``Access`` holds TLS
contexts and credential sources that do not travel; each node reads its own .netrc and
environment), with the per-origin connection cap shared among the nodes, and runs
it (``dtune.transfer.run``) with the shard's files and pieces as its ``Shard``. Its events go to the parent through
the scheduler's event log (``Worker.log_event``), each with the node's address.

The parent may cap this node's connections while it runs (``conduct``): it calls ``set_limit``
on the worker (``Client.run``), and every shard of that transfer running here reads the cap at
its next control tick and hands its part to its tuner.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

from dtune.cluster.marker import check_marker
from dtune.cluster.messages import ShardResult, ShardTask
from dtune.cluster.timeline import Stamps
from dtune.config import Value
from dtune.engine import Engine
from dtune.errors import DtuneError
from dtune.loop import run_quietly
from dtune.transfer import Shard, TransferRequest, request_from, run
from dtune.transfer.events import progress_event

# topic → (sequence, cap or None, why): the caps the parent set on this worker (``set_limit``)
_LIMITS: dict[str, tuple[int, int | None, str]] = {}
# topic → shards of that transfer running on this worker now (a cap is shared among them)
_RUNNING: dict[str, int] = {}
# topic → the engines of those shards (their open connections: ``_room``)
_ENGINES: dict[str, list[Engine]] = {}
_ENGINES_LOCK = threading.Lock()
ROOM_POLL = 0.05   # seconds between looks at the other shards' connections (``_room``)


def set_limit(topic: str, seq: int, cap: int | None, why: str) -> None:
    """Run on a worker by the parent (``Client.run``): this node's connections, at most ``cap``
    in all from now on (None: the node's share of the per-origin cap again). An older ``seq``
    than the one held is ignored."""
    held = _LIMITS.get(topic)
    if held is None or seq > held[0]:
        _LIMITS[topic] = (seq, cap, why)


def forget_limit(topic: str) -> None:
    """Run on every worker by the parent when its transfer ends: the caps it set go."""
    _LIMITS.pop(topic, None)


def limit_reader(topic: str, cap: int | None = None):  # noqa: ANN201 (a callable for ``Shard.limits``)
    """For one shard: each call returns the (cap, why) set since the last call (shared among the
    shards of the topic running on this worker), else None. ``cap``: the node's share of the
    per-origin cap; given, a change in the shards running here shares it afresh (the parent
    starts a node's next shard while the last one ends: two engines then hold one share), and
    once fewer shards run, (cap, why, True): the search starts again (``OnlineTuner.limit``)."""
    seen = [0, max(1, _RUNNING.get(topic, 1))]   # the parent's sequence, the shards running here

    def read() -> tuple[int | None, str] | None:
        held = _LIMITS.get(topic)
        running = max(1, _RUNNING.get(topic, 1))
        seq = held[0] if held is not None else 0
        moved = seq > seen[0]
        if not moved and (cap is None or running == seen[1]):
            return None
        was = seen[1]
        seen[0], seen[1] = max(seen[0], seq), running
        limit, why = (held[1], held[2]) if held is not None else (None, "")
        if not moved:
            why = (f"{running} shards of this transfer run on this node: its share is split"
                   if running > was else "the other shard on this node ended: its share is whole again")
        if limit is None:
            limit = cap
        share = None if limit is None else max(1, limit // running)
        return (share, why, True) if running < was and not moved else (share, why)

    return read


def check_node(marker: str, token: str) -> str | None:
    """Run on every worker by the parent while it lists the dataset: the shared-output marker's
    check (``marker.check_marker``). Called here, in the module of ``run_shard``, it also loads
    the engine on the worker then, not when the first shard arrives."""
    return check_marker(marker, token)


class NodeError(DtuneError):
    """This node must not fetch: it does not see the parent's output directory."""


def _plain(event: dict) -> dict:
    """The event as msgpack-able plain data (what the event log carries)."""
    return json.loads(json.dumps(event, default=str))


def run_shard(task: ShardTask) -> ShardResult:
    """Fetch one shard; return what it did.

    Runs in a worker thread: the engine gets an event loop of its own (``loop.run_quietly``:
    uvloop when installed, no signal handler: the thread is Dask's)."""
    from distributed import get_worker  # (Dask's own: installed where workers run, not for a plain get)

    stamps = Stamps()
    stamps.mark("started", time.time())
    worker = get_worker()
    node = worker.address
    problem = check_marker(task.marker, task.token)
    if problem is not None:
        raise NodeError(f"worker {node}: {problem}")
    topic = task.topic
    pieces = {spec.relpath for spec in task.specs if spec.piece is not None}

    def send(event: dict) -> None:
        event = {**event, "node": node, "shard": task.shard}
        if event.get("event") == "file_done" and event.get("file") in pieces:
            event["event"] = "piece_done"  # the parent commits the file once all its pieces are in
        elif event.get("event") == "tuning":
            event["reason"] = [*(event.get("reason") or []), task.note]
        worker.log_event(topic, _plain(event))

    _RUNNING[topic] = _RUNNING.get(topic, 0) + 1
    try:
        # (uvloop where installed, as the ``dtune`` program runs; docs/benchmarks.md "Scale-out")
        result = run_quietly(_run(task, node, send, stamps))
        stamps.mark("ended", time.time())
        result.times = dict(stamps.times)
        return result
    finally:
        _RUNNING[topic] -= 1
        if _RUNNING[topic] <= 0:
            del _RUNNING[topic]


def shard_request(task: ShardTask, running: int = 1) -> TransferRequest:
    """This node's request: the parent's options, its share of the per-origin cap (split among the
    ``running`` shards of the transfer on this node), no cluster."""
    values = dict(task.given["values"])
    values.update(cluster=None, workers=None, max_connections_per_host=max(1, task.cap // max(1, running)),
                  dry_run=False)
    request = request_from(task.given["sources"], task.outdir,
                           {name: Value(value, "cluster parent") for name, value in values.items()})
    request.energy = False  # one meter per node would each count the host's whole package power
    request.record_history = False  # the parent records the transfer
    return request


def open_elsewhere(topic: str) -> int:
    """Connections the other shards of ``topic`` on this worker hold open now."""
    return sum(e.acct.open_connections for e in list(_ENGINES.get(topic, ())))


async def _room(topic: str, share: int, mine: int) -> None:
    """Wait until this shard's ``mine`` connections fit in the node's ``share`` beside those the
    other shards here hold: a shard started while the last one ends (``run.LEAD``) opens none
    before that one has shed to its half (its cap is halved at its next control tick, and its
    lanes close as their ranges end), so the per-origin cap holds across the overlap too."""
    while open_elsewhere(topic) + mine > share:
        await asyncio.sleep(ROOM_POLL)


async def _run(task: ShardTask, node: str, send: Callable[[dict], None], stamps: Stamps) -> ShardResult:
    topic = task.topic
    request = shard_request(task, _RUNNING.get(topic, 1))
    paths = [Path(p) for p in task.paths]
    engines: list[Engine] = []   # (the shard's engine, once it is built)

    def progress(snap) -> None:  # noqa: ANN001
        # (committing: the parent's watch (``watch``) counts a file being verified as progress)
        # connections with requests in flight: a lane whose partition has no work left keeps its
        # connection open (idle); the parent's conductor judges the busy ones
        busy = sum(1 for lane in engines[0].lanes() if lane.conn is not None and lane.outstanding) if engines else None
        send({**progress_event(snap), "event": "node_progress", "connections_busy": busy,
              "rtt_live_ms": None if snap.rtt_live is None else round(snap.rtt_live * 1000, 2),
              "committing": bool(engines) and engines[0].committing})

    def built(engine: Engine) -> None:
        stamps.mark("engine", time.time())
        engine.control_listeners.append(lambda snap: stamps.note(time.time(), snap.bytes))
        engines.append(engine)
        with _ENGINES_LOCK:
            _ENGINES.setdefault(topic, []).append(engine)

    await _room(topic, task.cap, request.max_per_host)
    request.shard = Shard(task.specs, paths, limits=limit_reader(topic, task.cap), on_engine=built)
    try:
        result = await run(request, on_event=send, on_progress=progress)
    finally:
        with _ENGINES_LOCK:   # (the shards of a node run in the worker's threads)
            held = [e for e in _ENGINES.pop(topic, []) if e not in engines]
            if held:
                _ENGINES[topic] = held
    snap = result.snapshot
    pieces = [(s.relpath, s.piece.start, s.piece.end) for s in task.specs if s.piece is not None]
    if snap is None:
        return ShardResult(node, socket.gethostname(), task.shard, result.files, pieces, tuning=_plain(result.tuning))
    return ShardResult(node, socket.gethostname(), task.shard, result.files, pieces, bytes=snap.bytes,
                       bytes_resumed=snap.bytes_resumed, seconds=snap.elapsed, retries=snap.retries,
                       origins={o: (v.bytes, v.requests) for o, v in snap.origins.items()},
                       tuning=_plain(result.tuning))
