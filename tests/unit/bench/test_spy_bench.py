"""benchmarks/spy_bench.py: which processes it profiles, and the line it makes of one run."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support.paths import benchmark_script


@pytest.fixture(scope="module")
def spy():
    with benchmark_script("spy_bench") as module:
        yield module


@pytest.mark.parametrize(("argv", "profiled"), [
    ([b"/usr/bin/python3", b"-m", b"dtune", b"get", b"http://h/", b"-o", b"out"], True),
    ([b"/usr/local/bin/dtune", b"get", b"http://h/"], True),
    ([b"py-spy", b"record", b"--", b"python", b"-m", b"dtune", b"get", b"http://h/"], False),
    ([b"python", b"-m", b"dtune", b"bench", b"scenarios/wan1g-small.toml"], False),
    ([b"curl", b"-Z", b"http://h/dtune/get"], False),
    ([b""], False),
])
def test_only_dtune_get_processes_are_profiled(spy, argv, profiled):
    assert spy.is_dtune_get(argv) is profiled


def test_a_child_descends_from_its_parent_and_not_the_other_way(spy):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    try:
        assert spy.descends_from(child.pid, os.getpid())
        assert not spy.descends_from(os.getpid(), child.pid)
        assert spy.parent_of(child.pid) == os.getpid()
    finally:
        child.kill()
        child.wait()


def test_a_run_line_splits_the_main_thread_by_schedstat_and_by_stage(spy, tmp_path):
    (tmp_path / "run1.json").write_text(json.dumps(
        {"pid": 4046, "wall": 8.0, "sched": {"4046": [1.5, 6.0], "4050": [0.5, 0.2]}}))
    (tmp_path / "run1.txt").write_text(
        "thread (4046): MainThread;<module> (dtune/__main__.py:3);"
        "RangeJob._open (dtune/engine/request.py:314);FileState.open_for_write (dtune/engine/files.py:385) 3\n"
        "thread (4046): MainThread;<module> (dtune/__main__.py:3);run_async (dtune/loop.py:72) 1\n"
        "thread (4050): uvloop_0;commit_batch (dtune/engine/files.py:590) 9\n")
    row = spy.summarize(tmp_path, 1)
    assert row[:5] == ["1", "8.00", "1.50", "6.00", "0.50"]       # sleeping = wall - on CPU - waiting
    assert row[5] == "create 6.00, event loop 2.00"                # the main thread's samples only
    assert spy.summarize(tmp_path, 2) is None                      # no such run
