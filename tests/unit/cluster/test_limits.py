"""The nodes' caps between the parent and the workers: ``Session`` feeding its conductor from the
nodes' progress and sending what it decides (a stand-in client records the calls), and the
worker's side of ``set_limit`` (plain functions of the worker process)."""

from __future__ import annotations

from dtune.cluster import worker
from dtune.cluster.conduct import Conductor
from dtune.cluster.messages import ShardResult, ShardTask
from dtune.cluster.run import Aggregate, Session
from dtune.config import resolve
from dtune.options import OPTIONS
from dtune.transfer import request_from

NODES = ["tcp://127.0.0.1:4001", "tcp://127.0.0.1:4002"]


class Recorder:
    """What ``Session._conduct`` asks of a Dask client: ``run`` on named workers."""

    def __init__(self) -> None:
        self.calls = []

    def run(self, fn, *args, workers, on_error):  # noqa: ANN001
        assert on_error == "ignore"   # (a worker gone must not stop the transfer)
        self.calls.append((fn, args, tuple(workers)))


def session(events: list) -> Session:
    plan = request_from(["http://127.0.0.1:1/d/"], "out",
                      resolve(OPTIONS, given={"workers": 2}, given_origin="argument", environ={},
                              use_config=False), environ={})
    s = Session(plan, [], [], events.append, Aggregate(None, 0))
    s.conductor = Conductor(NODES, share=32)
    return s


def progress(node: str, t: float, nbytes: int, connections: int) -> tuple:
    return (0.0, {"event": "node_progress", "node": node, "shard": 0, "t": t, "bytes": nbytes,
                  "connections": connections, "rate_mbps": 0.0})


def test_the_session_caps_nodes_that_share_a_bottleneck_and_tells_each_its_own(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr("dtune.cluster.run.time.monotonic", lambda: clock[0])
    events: list = []
    s, client = session(events), Recorder()
    sent = dict.fromkeys(NODES, 0)
    for second in range(1, 30):
        conns = 2 if second <= 8 else 16          # the nodes climb; the aggregate stays at 200 Mbit/s
        for tenth in range(10):
            clock[0] = second - 1 + (tenth + 1) / 10
            if tenth == 9:
                for node in NODES:
                    sent[node] += 12_500_000
                    s._heard(progress(node, float(second), sent[node], conns))
            s._conduct(client)
        if client.calls:
            break
    assert [c[2] for c in client.calls] == [(NODES[0],), (NODES[1],)]
    assert all(c[0] is worker.set_limit and c[1][:2] == (s.topic, 1) for c in client.calls)
    assert sorted(c[1][2] for c in client.calls) == [2, 3]            # 1.25 × the 4 that gave it all
    tuning = [e for e in events if e["event"] == "cluster_tuning"]
    assert len(tuning) == 1 and sorted(tuning[0]["caps"].values()) == [2, 3] and tuning[0]["total"] == 5
    assert "32 connections on 2 nodes give 200 Mbit/s" in tuning[0]["reason"]
    assert sum(e["event"] == "node_progress" for e in events) >= 2 * 10   # every report still goes out


def test_a_report_without_its_numbers_is_passed_on_and_teaches_nothing():
    events: list = []
    s = session(events)
    s._heard((0.0, {"event": "node_progress", "node": NODES[0], "shard": "x", "t": None}))
    s._heard((0.0, {"event": "node_progress", "node": NODES[0]}))
    assert len(events) == 2 and s.conductor.nodes[NODES[0]].seen == {}


def test_a_worker_hands_the_latest_cap_once_to_each_shard_shared_among_those_running():
    topic = "dtune-test-limits"
    try:
        first, second = worker.limit_reader(topic), worker.limit_reader(topic)
        assert first() is None
        worker.set_limit(topic, 1, 8, "capped")
        worker._RUNNING[topic] = 2
        assert first() == (4, "capped") and first() is None           # once, half each: two shards run
        assert second() == (4, "capped")
        worker.set_limit(topic, 0, 1, "stale")                          # an older move: ignored
        assert first() is None
        worker.set_limit(topic, 2, None, "lifted")
        assert first() == (None, "lifted")
        late = worker.limit_reader(topic)                               # a shard that starts later
        assert late() == (None, "lifted")
        worker.forget_limit(topic)                                      # the transfer ended
        assert worker.limit_reader(topic)() is None and topic not in worker._LIMITS
    finally:
        worker._LIMITS.pop(topic, None)
        worker._RUNNING.pop(topic, None)



def shard_task(shard: int, nbytes: int) -> ShardTask:
    return ShardTask(shard=shard, bytes=nbytes, specs=[], paths=[], outdir="", given={}, cap=1, marker="",
                     token="", topic="", note="")


def test_the_session_reads_each_nodes_rate_and_what_its_running_shard_has_left():
    s = session([])
    s.aggregate.event({"event": "node_progress", "node": NODES[0], "shard": 4, "t": 2.0, "bytes": 30_000_000,
                       "bytes_resumed": 10_000_000})
    s.aggregate.event({"event": "node_progress", "node": NODES[1], "shard": 5, "t": 0.0, "bytes": 0})
    s.aggregate.event({"event": "node_progress", "node": NODES[0], "shard": 6, "t": 0.5, "bytes": 1_000_000})
    running = {NODES[0]: [shard_task(4, 100_000_000), shard_task(6, 90_000_000)],
               NODES[1]: [shard_task(5, 50_000_000)]}
    assert s._left(NODES[0], running[NODES[0]][0]) == 60_000_000   # (what resumed from a journal is in)
    assert s._left(NODES[1], running[NODES[1]][0]) == 50_000_000
    assert s._left(NODES[1], shard_task(9, 7)) == 7          # no report yet
    done = [ShardResult(NODES[1], "h", 5, [], bytes=40_000_000, seconds=4.0)]
    # a node's rate from its oldest running shard: the one started as it ends shares the node
    assert s._rates(done, running) == {NODES[0]: 15_000_000, NODES[1]: 10_000_000}
    assert s._rates([], {}) == {}


def test_a_shard_started_on_a_node_while_its_last_one_ends_splits_the_nodes_share_of_the_cap():
    topic = "dtune-test-overlap"
    try:
        worker._RUNNING[topic] = 1
        old = worker.limit_reader(topic, 20)
        assert old() is None                                            # alone: its plan's cap holds
        worker._RUNNING[topic] = 2                                      # the next shard starts here
        new = worker.limit_reader(topic, 20)
        cap, why = old()
        assert cap == 10 and "2 shards" in why and old() is None        # half each, said once
        assert new() is None                                            # (its plan had half already)
        worker._RUNNING[topic] = 1                                      # the old one ended
        cap, why, fresh = new()
        assert cap == 20 and "whole again" in why and fresh              # … and its search starts again
        worker.set_limit(topic, 1, 6, "capped by the parent")
        worker._RUNNING[topic] = 2
        assert new() == (3, "capped by the parent")                     # the parent's cap, shared
    finally:
        worker._LIMITS.pop(topic, None)
        worker._RUNNING.pop(topic, None)


def test_a_shard_started_beside_another_opens_nothing_until_its_connections_fit_in_the_share():
    import asyncio
    from types import SimpleNamespace

    topic = "dtune-test-room"
    old = SimpleNamespace(acct=SimpleNamespace(open_connections=2))
    worker._ENGINES[topic] = [old]
    try:
        async def scenario() -> list[int]:
            seen = []

            async def shed() -> None:          # the old shard drains to its half, then ends
                await asyncio.sleep(0.12)
                old.acct.open_connections = 1
                seen.append(1)
                await asyncio.sleep(0.12)
                worker._ENGINES.pop(topic)

            task = asyncio.ensure_future(shed())
            await worker._room(topic, 2, 1)     # share 2: room for 1 once the old holds 1
            seen.append(worker.open_elsewhere(topic))
            await task
            return seen

        assert asyncio.run(scenario()) == [1, 1]   # it waited for the shed, not for the end
        assert worker.open_elsewhere(topic) == 0
    finally:
        worker._ENGINES.pop(topic, None)
