"""Per-node summary and the aggregate progress of a cluster transfer (``dtune.cluster.run``)."""

from __future__ import annotations

import sys

import pytest

from dtune.cluster import require_distributed
from dtune.cluster.messages import ShardResult
from dtune.cluster.run import Aggregate, nodes_summary
from dtune.engine.result import FileResult
from dtune.errors import UsageError


def result(node, shard, nbytes, seconds, files, pieces=()):
    return ShardResult(node, "h", shard, [FileResult(*f) for f in files], [tuple(p) for p in pieces],
                       bytes=nbytes, seconds=seconds, retries=1)


def test_nodes_summary_sums_shards_per_node_and_rates_over_their_busy_seconds():
    results = [result("tcp://a:1", 0, 50_000_000, 2.0, [["x", "done", 1, None, None], ["big", "done", 9, None, None]],
                      pieces=[["big", 0, 9]]),
               result("tcp://a:1", 2, 25_000_000, 2.0, [["y", "done", 1, None, None]]),
               result("tcp://b:1", 1, 10_000_000, 1.0, [["z", "failed", 1, "z: no", None]])]
    nodes = nodes_summary(results)
    assert nodes["tcp://a:1"] == {"host": "h", "bytes": 75_000_000, "seconds": 4.0, "files": 2, "pieces": 1,
                                  "shards": 2, "retries": 2, "rate_mbps": 150.0}
    assert nodes["tcp://b:1"]["files"] == 0 and nodes["tcp://b:1"]["rate_mbps"] == 80.0


def test_aggregate_sums_the_latest_progress_of_each_shard_and_drops_finished_rates():
    agg = Aggregate(1000, 4)
    agg.event({"event": "node_progress", "node": "a", "shard": 0, "bytes": 100, "rate_mbps": 8.0,
               "connections": 2})
    agg.event({"event": "node_progress", "node": "a", "shard": 0, "bytes": 300, "rate_mbps": 8.0,
               "connections": 2})
    agg.event({"event": "node_progress", "node": "b", "shard": 1, "bytes": 200, "rate_mbps": 16.0,
               "connections": 3})
    agg.event({"event": "file_done", "node": "b", "shard": 1})
    snap = agg.snapshot()
    assert (snap.bytes, snap.rate, snap.connections, snap.files_done) == (500, 3e6, 5, 1)
    assert snap.eta == pytest.approx(500 / 3e6)
    agg.finished.add(("a", 0))
    assert agg.snapshot().rate == 2e6 and agg.snapshot().bytes == 500


def test_without_distributed_the_cluster_options_say_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)
    with pytest.raises(UsageError, match=r"pip install 'dtune\[cluster\]'"):
        require_distributed()
