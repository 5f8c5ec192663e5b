"""The parent's watch on its shards (``dtune.cluster.watch``): pure, the clock passed in."""

from __future__ import annotations

from dtune.cluster.watch import ShardWatch, describe, limit_for


def progress(shard: int, nbytes: int, node: str = "tcp://a:1", **extra: object) -> dict:
    return {"event": "node_progress", "node": node, "shard": shard, "t": 2.0, "bytes": nbytes,
            "bytes_resumed": 0, "bytes_total": 3_900_000, "files_done": 6, "files_total": 7,
            "files_failed": 0, "retries": 0, "connections": 1, **extra}


def test_the_limit_is_a_minute_or_four_stall_timeouts():
    assert limit_for(5.0) == 60.0 and limit_for(30.0) == 120.0


def test_a_shard_that_reports_without_progress_is_overdue_after_the_limit_with_what_it_last_said():
    watch = ShardWatch(60.0, now=0.0)
    watch.heard({"event": "start", "node": "tcp://a:1", "shard": 7}, 1.0)
    watch.heard(progress(7, 1_948_576), 2.0)
    for t in range(3, 62):                      # a report every second, the same bytes
        watch.heard(progress(7, 1_948_576), float(t))
        assert watch.overdue(float(t), [7]) is None
    late = watch.overdue(62.5, [7])
    assert late is not None and (late.shard, late.node) == (7, "tcp://a:1")
    assert late.reason == ("shard 7 on worker tcp://a:1 made no progress for 60 s (it last reported "
                           "1948576 of 3900000 bytes, 6 of 7 files, 1 connection, at 2 s into the shard)")


def test_bytes_a_file_a_retry_or_a_commit_count_as_progress():
    watch = ShardWatch(60.0, now=0.0)
    watch.heard(progress(1, 100), 0.0)
    watch.heard(progress(1, 200), 50.0)                      # bytes moved
    watch.heard({"event": "file_done", "node": "tcp://a:1", "shard": 1}, 100.0)
    watch.heard(progress(1, 200, retries=1), 150.0)          # the engine works through a failure
    watch.heard(progress(1, 200, retries=1, committing=True), 200.0)   # verifying a large file
    assert watch.overdue(250.0, [1]) is None
    watch.heard({"event": "params", "node": "tcp://a:1", "shard": 1}, 255.0)  # a tuner's step is not
    assert watch.overdue(260.5, [1]).shard == 1


def test_a_finished_or_forgotten_shard_is_not_watched_and_a_rerun_elsewhere_starts_afresh():
    watch = ShardWatch(60.0, now=0.0)
    watch.heard(progress(0, 10), 0.0)
    watch.heard(progress(1, 10, node="tcp://b:1"), 0.0)
    watch.finished(0)
    watch.forget(1)                                          # its worker died: Dask runs it again
    watch.heard(progress(1, 10, node="tcp://c:1"), 30.0)     # (elsewhere, from its journal)
    assert watch.overdue(80.0, [1]) is None
    assert watch.overdue(90.5, [1]).node == "tcp://c:1"


def test_when_no_shard_progresses_the_silent_ones_are_named():
    watch = ShardWatch(60.0, now=0.0)
    watch.heard(progress(0, 10), 5.0)
    assert watch.overdue(60.0, [0, 1, 2]) is None
    late = watch.overdue(65.5, [1, 2])                        # shard 0 done; 1 and 2 never reported
    assert late is not None and late.shard is None
    assert late.reason == "no shard made progress for 60 s (still out: shard 1, 2)"


def test_events_without_a_shard_or_node_and_odd_values_never_crash():
    watch = ShardWatch(60.0, now=0.0)
    for event in ({}, {"event": "node_progress"}, {"shard": "7", "node": 1}, {"shard": 1, "node": "x",
                                                                               "event": None}):
        watch.heard(event, 1.0)
    assert describe(None) == "no progress yet"
    assert describe({"bytes": 5, "bytes_total": None, "files_done": 0, "files_total": 1,
                     "connections": 2, "t": "?"}) == "5 bytes, 0 of 1 files, 2 connections"
