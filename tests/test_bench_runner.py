"""The runner's pure parts: interleaving, link profiles, datasets, stale working directories."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

from dtune.bench.config import DatasetSpec, Profile
from dtune.bench.runner import (
    OWNER_FILE,
    build_dataset,
    last_error_line,
    make_workdir,
    profile_links,
    reap_stale_workdirs,
    reported_seconds,
    schedule,
)
from dtune.testbed.datasets import plan_dataset
from dtune.testbed.scenario import Link


def test_every_repetition_runs_every_combo_once_rotated() -> None:
    plan = schedule(["a", "b", "c"], 3)
    assert plan == [(0, "a"), (0, "b"), (0, "c"), (1, "b"), (1, "c"), (1, "a"), (2, "c"), (2, "a"), (2, "b")]


def test_interleaving_never_runs_one_combo_twice_before_the_others_once() -> None:
    combos = list("abcde")
    plan = schedule(combos, 4)
    assert Counter(c for _, c in plan) == {c: 4 for c in combos}
    for rep in range(4):
        assert sorted(c for r, c in plan if r == rep) == combos


def test_a_combo_with_fewer_runs_takes_part_in_the_first_repetitions_only() -> None:
    plan = schedule(["fast", "slow"], 3, lambda c: 1 if c == "slow" else None)
    assert Counter(c for _, c in plan) == {"fast": 3, "slow": 1}
    assert (0, "slow") in plan


def test_no_combos_no_runs() -> None:
    assert schedule([], 3) == []


def test_the_base_profile_keeps_the_links_and_others_change_them() -> None:
    links = [Link(400, 20), Link(50, 60)]
    assert profile_links(links, Profile("base", ({}, {}))) == links
    assert profile_links(links, Profile("far", ({"rtt_ms": 80.0}, {"rate_mbit": 10.0}))) == [
        Link(400, 80), Link(10, 60)]


def test_build_dataset_keeps_the_first_n_files_of_the_plan(tmp_path: Path) -> None:
    spec = DatasetSpec(name="v", preset="video", scale=0.001, files=1)
    files = build_dataset(spec, tmp_path)
    assert files == plan_dataset("video", 0.001, 0)[:1]
    rel, size = files[0]
    assert (tmp_path / rel).stat().st_size == size
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == [rel.rsplit("/", 1)[-1]]


def test_build_dataset_without_a_limit_is_the_preset(tmp_path: Path) -> None:
    files = build_dataset(DatasetSpec(name="h", preset="html", scale=0.005), tmp_path)
    assert files == plan_dataset("html", 0.005, 0) and len(files) == 10


def test_stale_workdirs_of_dead_owners_are_removed_and_others_left(tmp_path: Path) -> None:
    mine = make_workdir(str(tmp_path))
    dead = make_workdir(str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    owner = json.loads((dead / OWNER_FILE).read_text())
    owner["pid"] = int(proc.stdout)  # a process that has exited
    (dead / OWNER_FILE).write_text(json.dumps(owner))
    foreign = tmp_path / "dtune-bench-wan-foreign"  # no owner file: not ours to judge
    foreign.mkdir()
    os.utime(foreign, (0, 0))
    other = tmp_path / "dtune-bench-xyz"  # another benchmark's prefix
    other.mkdir()
    assert reap_stale_workdirs(str(tmp_path)) == [str(dead)]
    assert mine.exists() and foreign.exists() and other.exists() and not dead.exists()


def test_last_error_line_skips_progress_and_reads_dtune_failures(tmp_path: Path) -> None:
    log = tmp_path / "log"
    log.write_text('{"event": "progress", "bytes": 1}\n'
                   '{"event": "summary", "failed": [{"file": "a.bin", "reason": "range 3: 416"}]}\n\n')
    assert last_error_line(log) == "1 failed, e.g. a.bin: range 3: 416"
    log.write_text("curl: (22) The requested URL returned error: 404\n\n")
    assert last_error_line(log) == "curl: (22) The requested URL returned error: 404"
    assert last_error_line(tmp_path / "none") == ""


def test_reported_seconds_come_from_dtunes_last_summary_event(tmp_path: Path) -> None:
    log = tmp_path / "log"
    log.write_text('{"event": "start"}\n{"event": "summary", "seconds": 1.25, "failed": []}\nnoise\n')
    assert reported_seconds(log) == 1.25
    log.write_text("curl output\n")
    assert reported_seconds(log) is None
