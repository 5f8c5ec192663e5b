"""benchmarks/cost.py: how py-spy's samples are read and put into stages, on plain data."""

from __future__ import annotations

import pytest
from support.paths import benchmark_script


@pytest.fixture(scope="module")
def cost():
    with benchmark_script("cost") as module:
        yield module


@pytest.mark.parametrize(("path", "module"), [
    ("dtune/engine/request.py", "dtune.engine.request"),
    ("/work/x/src/dtune/http/connection.py", "dtune.http.connection"),
    ("/usr/lib/python3.11/site-packages/dtune/discovery/__init__.py", "dtune.discovery"),
    ("/usr/lib/python3.11/concurrent/futures/thread.py", "concurrent.futures.thread"),
    ("<frozen importlib._bootstrap>", "<frozen importlib._bootstrap>"),
])
def test_module_of_names_a_file_as_its_dotted_module(cost, path, module):
    assert cost.module_of(path) == module


LOOP = [("runpy", "_run_code"), ("dtune.cli", "main"), ("dtune.loop", "run_async"), ("uvloop", "run")]


@pytest.mark.parametrize(("tail", "stage"), [
    ([], "event loop"),                                                     # uvloop in C: epoll or recv
    ([("dtune.http.connection", "data_received"), ("dtune.engine.request", "on_body"),
      ("dtune.engine.request", "_write")], "write"),
    ([("dtune.http.connection", "Connection.data_received"), ("dtune.http.connection", "Connection.on_body"),
      ("dtune.engine.request", "RangeJob.on_body"), ("dtune.engine.request", "RangeJob._write"),
      ("dtune.engine.files", "FileState.record"), ("dtune.engine.ranges", "RangeSet.add")], "journal"),
    ([("dtune.engine.request", "RangeJob._accept_full"), ("dtune.engine.request", "RangeJob._open"),
      ("dtune.engine.files", "FileState.open_for_write"), ("dtune.fileio", "open_nofollow")], "create"),
    ([("dtune.engine.ticker", "Ticker.run.<locals>.<lambda>"), ("dtune.engine.files", "FileState.write_back"),
      ("dtune.fileio", "start_writeback")], "write-back"),
    ([("dtune.http.connection", "data_received"), ("dtune.http.connection", "on_headers_complete")], "response"),
    ([("dtune.engine.scheduler", "next_range")], "request"),
    ([("dtune.engine.journal", "save")], "journal"),
    ([("dtune.history.record", "record")], "history"),
    ([("dtune.tuners.heuristic", "update")], "tuner"),
    ([("dtune.discovery.nginx", "parse")], "listing"),
    ([("dtune.engine.files", "verify"), ("dtune.fileio", "digest_fd")], "verify"),
    ([("dtune.engine.files", "commit_batch")], "commit"),
    ([("dtune.engine.files", "commit_batch"), ("dtune.engine.files", "FileState.finish")], "commit"),
    ([("dtune.engine.core", "_x"), ("<frozen importlib._bootstrap>", "_find_and_load")], "start-up (imports)"),
])
def test_stage_of_goes_by_the_deepest_dtune_frame(cost, tail, stage):
    assert cost.stage_of(LOOP + tail) == stage


def test_read_raw_parses_thread_frames_and_counts(cost, tmp_path):
    raw = tmp_path / "raw.txt"
    raw.write_text("thread (4046): MainThread;<module> (dtune/__main__.py:3);_write (dtune/engine/request.py:341) 7\n"
                   "thread (0x1f): uvloop_0;_worker (concurrent/futures/thread.py:81) 3\n"
                   "garbage line\n")
    rows = cost.read_raw(raw)
    assert rows[0] == (4046, "MainThread", [("dtune.__main__", "<module>"), ("dtune.engine.request", "_write")], 7)
    assert rows[1][0] == 0x1f and rows[1][3] == 3
    assert cost.idle(rows[1][2]) and not cost.idle(rows[0][2])
    assert len(rows) == 2
