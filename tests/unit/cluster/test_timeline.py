"""A cluster transfer's timeline per shard and per node (``dtune.cluster.timeline``): plain data."""

from __future__ import annotations

from dtune.cluster.timeline import Stamps, nodes, relative


def test_stamps_note_the_first_byte_once_and_the_last_time_the_count_grew():
    s = Stamps()
    s.mark("started", 100.0)
    s.mark("started", 101.0)          # (a step is noted once)
    s.note(100.5, 0)                  # nothing yet
    s.note(100.7, 10)
    s.note(100.9, 50)
    s.note(101.2, 50)                 # no growth: not the last byte
    assert s.times == {"started": 100.0, "first_byte": 100.7, "last_byte": 100.9}


def test_relative_counts_from_the_parents_start_and_keeps_only_the_steps():
    got = relative({"started": 1000.25, "first_byte": 1001.0, "other": 5.0}, 1000.0)
    assert got == {"started": 0.25, "first_byte": 1.0}


def test_nodes_fold_shards_into_start_bytes_and_the_gaps_a_node_waited():
    shards = [
        {"node": "a", "shard": 0, "bytes": 100, "started": 0.5, "engine": 0.6, "first_byte": 0.9, "last_byte": 10.0},
        # a's next shard began 2 s after its first one's last byte: a gap of 2 s
        {"node": "a", "shard": 3, "bytes": 50, "started": 11.9, "engine": 12.0, "first_byte": 12.3, "last_byte": 15.0},
        {"node": "b", "shard": 1, "bytes": 120, "started": 0.7, "engine": 0.8, "first_byte": 1.1, "last_byte": 9.0},
        # b's next shard overlapped its first one's end: no gap
        {"node": "b", "shard": 4, "bytes": 30, "started": 8.0, "engine": 8.1, "first_byte": 8.4, "last_byte": 14.0},
    ]
    got = nodes(shards)
    assert got["a"] == {"start": 0.5, "first_byte": 0.9, "last_byte": 15.0, "bytes": 150, "shards": 2, "gap": 2.0}
    assert got["b"] == {"start": 0.7, "first_byte": 1.1, "last_byte": 14.0, "bytes": 150, "shards": 2, "gap": 0.0}


def test_nodes_of_a_shard_that_moved_nothing_have_no_bytes_times():
    got = nodes([{"node": "c", "shard": 2, "bytes": 0, "started": 1.0, "engine": 1.1}])
    assert got["c"]["first_byte"] is None and got["c"]["last_byte"] is None and got["c"]["gap"] == 0.0
