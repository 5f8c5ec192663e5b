"""The runner's pure parts: interleaving, link profiles, datasets, stale working directories."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from dtune_lab.bench.client import last_error_line, reported_seconds
from dtune_lab.bench.config import DatasetSpec, LinkChange, Profile, ToolSpec, bench_from_dict
from dtune_lab.bench.during import (
    ChangeSchedule,
    ChangeWatcher,
    Sample,
    down_bytes,
    established,
    rate_series,
    tail_pace,
    tail_seconds,
)
from dtune_lab.bench.report import RunRecord
from dtune_lab.bench.runner import (
    OWNER_FILE,
    Bench,
    Combo,
    build_dataset,
    dataset_plan,
    make_workdir,
    profile_links,
    reap_stale_workdirs,
    schedule,
)
from dtune_lab.testbed.datasets import multiply_small, plan_dataset
from dtune_lab.testbed.scenario import Link

from dtune.errors import DtuneError


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


def test_build_dataset_copies_small_files_after_keeping_the_first_n(tmp_path: Path) -> None:
    spec = DatasetSpec(name="m", preset="mixed", scale=0.25, files=8, small_below=1_000_000, small_factor=2)
    files = build_dataset(spec, tmp_path)
    assert files == dataset_plan(spec) == multiply_small(plan_dataset("mixed", 0.25, 0)[:8], 1_000_000, 2)
    assert len(files) > 8
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert written == sorted(rel for rel, _ in files)
    assert all((tmp_path / rel).stat().st_size == size for rel, size in files)


# --- mid-run link changes -------------------------------------------------------

def change(fraction: float, link: int = 0, **values: float) -> LinkChange:
    return LinkChange(at_fraction=fraction, link=link, values=values or {"rate_mbit": 100.0})


def stats(*down: int) -> list[dict[str, Any]]:
    return [{"up": {"bytes": 7}, "down": {"bytes": d}} for d in down]


def test_down_bytes_sum_the_download_direction_of_every_link() -> None:
    assert down_bytes(stats(100, 250)) == 350
    assert down_bytes([{}, {"down": {}}]) == 0  # a back-end without counters (netem) counts nothing


def test_a_change_is_due_once_its_share_of_bytes_crossed_since_the_start() -> None:
    sched = ChangeSchedule([change(0.6, link=1), change(0.3)], total_bytes=1000, start_bytes=5000)
    assert sched.due(5299) == []
    assert sched.due(5300) == [change(0.3)]              # exactly the fraction is enough
    assert sched.due(5500) == []                         # each change fires once
    assert sched.due(6000) == [change(0.6, link=1)]
    assert sched.done and sched.due(9999) == []
    assert repr(sched) == "<ChangeSchedule 2 of 2 fired | 1000 bytes>"


def test_changes_passed_in_one_poll_all_fire_in_fraction_order() -> None:
    sched = ChangeSchedule([change(0.5, rtt_ms=80.0), change(0.2), change(0.5, link=1)], 100, 0)
    assert sched.due(60) == [change(0.2), change(0.5, rtt_ms=80.0), change(0.5, link=1)]


class FakeTestbed:
    """link_stats() returns the next of ``readings`` (then the last forever); set_link is recorded."""

    def __init__(self, readings: list[int], fail_at: int | None = None) -> None:
        self.readings = readings
        self.fail_at = fail_at
        self.calls = 0
        self.set: list[tuple[int, dict[str, Any]]] = []
        self.lock = threading.Lock()

    def link_stats(self) -> list[dict[str, Any]]:
        with self.lock:
            self.calls += 1
            if self.fail_at is not None and self.calls >= self.fail_at:
                raise DtuneError("testbed control /x: Connection refused")
            return stats(self.readings[min(self.calls - 1, len(self.readings) - 1)])

    def set_link(self, index: int, **values: Any) -> None:
        self.set.append((index, values))


def wait_for(predicate: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.002)


def test_the_watcher_applies_each_change_once_and_ends_with_one_stats_call_per_poll() -> None:
    tb = FakeTestbed([1000, 1100, 1200, 1300, 1400, 1500, 1600])  # 10 % of 1000 bytes per poll
    applied: list[LinkChange] = []
    watcher = ChangeWatcher(tb, [change(0.3), change(0.6, link=1)], 1000, applied.append, interval=0.001)
    with watcher:
        wait_for(lambda: watcher._thread is not None and not watcher._thread.is_alive())
    assert applied == [change(0.3), change(0.6, link=1)]
    assert tb.calls == 7  # the baseline, then one per poll until the last change fired
    assert len(watcher.fired) == 2 and 0 <= watcher.fired[0] <= watcher.fired[1]
    assert watcher.error == "" and "2 of 2 fired | stopped" in repr(watcher)


def test_the_watcher_stops_with_the_client_even_when_no_change_was_due() -> None:
    tb = FakeTestbed([0])  # a client that transfers nothing, then times out
    applied: list[LinkChange] = []
    watcher = ChangeWatcher(tb, [change(0.5)], 1000, applied.append, interval=0.001)
    with watcher:
        wait_for(lambda: tb.calls > 3)
    assert watcher._thread is not None and not watcher._thread.is_alive()
    assert applied == [] and watcher.fired == [] and watcher.error == ""
    calls = tb.calls
    time.sleep(0.02)
    assert tb.calls == calls  # no polling after stop


def test_the_watcher_thread_stops_when_the_client_run_raises() -> None:
    tb = FakeTestbed([0])
    watcher = ChangeWatcher(tb, [change(0.5)], 1000, lambda c: None, interval=0.001)
    with pytest.raises(KeyboardInterrupt), watcher:
        raise KeyboardInterrupt
    assert watcher._thread is not None and not watcher._thread.is_alive()


def test_a_failing_emulator_ends_the_watcher_with_an_error_for_the_record() -> None:
    tb = FakeTestbed([0], fail_at=3)
    watcher = ChangeWatcher(tb, [change(0.5)], 1000, lambda c: None, interval=0.001)
    with watcher:
        wait_for(lambda: watcher.error != "")
    assert watcher.error == "mid-run link change: testbed control /x: Connection refused"


def toml_bench(tmp_path: Path, during: list[dict[str, Any]]) -> Bench:
    cfg = bench_from_dict({"bench": {"runs": 3},
                           "link": [{"rate_mbit": 400, "rtt_ms": 20}, {"rate_mbit": 200, "rtt_ms": 20}],
                           "profile": [{"name": "drops", "rtt_ms": 40, "during": during}],
                           "dataset": [{"preset": "html", "scale": 0.01}], "tool": [{"tool": "curl"}]})
    return Bench(cfg, tmp_path, echo=lambda text: None)


def test_mid_run_changes_add_up_on_the_profiles_links() -> None:
    bench = toml_bench(Path("/nonexistent"), [{"at_fraction": 0.2, "link": 2, "rate_mbit": 50},
                                              {"at_fraction": 0.4, "link": 2, "rtt_ms": 100}])
    tb = FakeTestbed([0])
    profile = bench.cfg.profiles[1]
    apply = bench._change_applier(tb, profile)  # type: ignore[arg-type]
    for c in profile.during:
        apply(c)
    # queue: one BDP of the changed link (50 Mbit/s x 40 ms = 250 kB, then x 100 ms), as a profile sets it
    assert tb.set == [(1, {"rate_mbit": 50.0, "rtt_ms": 40.0, "loss": 0.0, "queue_kb": 250000 / 1024}),
                      (1, {"rate_mbit": 50.0, "rtt_ms": 100.0, "loss": 0.0, "queue_kb": 625000 / 1024})]
    # the next run's applier starts again from the profile's own links
    bench._change_applier(tb, profile)(profile.during[1])  # type: ignore[arg-type]
    assert tb.set[-1] == (1, {"rate_mbit": 200.0, "rtt_ms": 100.0, "loss": 0.0, "queue_kb": 2500000 / 1024})


def test_a_profile_with_mid_run_changes_is_applied_before_every_one_of_its_runs(tmp_path: Path) -> None:
    bench = toml_bench(tmp_path, [{"at_fraction": 0.5, "link": 1, "rate_mbit": 50}])
    tb = FakeTestbed([0])
    tool = ToolSpec("curl")
    combos = [Combo("html", "400M-20ms+200M-20ms", tool), Combo("html", "drops", tool)]
    runs: list[str] = []

    def run_one(tb: Any, servers: Any, ds: Any, combo: Combo, rep: int, rundir: Path) -> RunRecord:
        runs.append(combo.profile)
        return RunRecord(scenario="s", dataset="html", link=combo.profile, tool="curl", variant="default",
                         run=rep + 1, seconds=1.0, bytes=1, mbps=0.0, cpu_seconds=0.0, verified=True)

    bench._run_one = run_one  # type: ignore[method-assign]
    dataset = SimpleNamespace(spec=SimpleNamespace(name="html"))
    bench._run_all(tb, [], [dataset], combos, tmp_path)  # type: ignore[arg-type, list-item]
    # base, drops | drops, base | base, drops: "drops" is set before each of its three runs (also
    # right after itself), the base profile only when the links change back to it (once)
    assert runs == ["400M-20ms+200M-20ms", "drops", "drops", "400M-20ms+200M-20ms",
                    "400M-20ms+200M-20ms", "drops"]
    drops = {"rate_mbit": 400.0, "rtt_ms": 40.0, "loss": 0.0, "queue_kb": 2_000_000 / 1024}
    assert [values for index, values in tb.set if index == 0] == [drops, drops, {**drops, "rtt_ms": 20.0,
                                                                                "queue_kb": 1_000_000 / 1024}, drops]


# --- the run's trace: tail seconds and connections --------------------------------

def test_tail_seconds_run_from_the_first_sample_past_95_percent_to_the_exit() -> None:
    samples = [Sample(0.5, 100), Sample(1.0, 900), Sample(1.5, 949), Sample(2.0, 950), Sample(2.5, 1000)]
    assert tail_seconds(samples, 1000, end=3.2) == pytest.approx(1.2)
    assert tail_seconds(samples, 1000, end=3.2, share=0.5) == pytest.approx(2.2)
    assert tail_seconds(samples[:3], 1000, end=3.2) is None   # never reached: no tail to report
    assert tail_seconds([], 1000, end=1.0) is None


def test_tail_seconds_count_from_what_the_trace_counted_when_that_is_more_than_the_dataset() -> None:
    # 1.2x the dataset crossed (segments sent again): 95 % of 1200, not of 1000
    samples = [Sample(1.0, 500), Sample(2.0, 950), Sample(3.0, 1150), Sample(3.5, 1200)]
    assert tail_seconds(samples, 1000, end=4.0) == pytest.approx(1.0)


def test_tail_pace_is_the_last_5_percent_rate_over_the_steady_rate() -> None:
    steady = [Sample(0.1 * i, 100 * i) for i in range(11)]          # 1000 bytes/s up to 1000 bytes …
    assert tail_pace(steady) == pytest.approx(1.0, abs=0.05)         # … an even pace: no tail
    slow_end = [s for s in steady if s.bytes < 950] + [Sample(1.0, 950), Sample(1.5, 975), Sample(2.0, 1000)]
    assert tail_pace(slow_end) == pytest.approx(0.05, abs=0.005)    # the last 50 bytes took 1 s, not 0.05 s
    assert tail_pace([]) is None and tail_pace([Sample(0.0, 0), Sample(1.0, 0)]) is None
    assert tail_pace([Sample(0.0, 1000)]) is None                    # one sample: no rate at all


def test_rates_are_taken_over_windows_of_at_least_the_given_length() -> None:
    samples = [Sample(t / 10, int(t * 12_500)) for t in range(0, 21)]   # 125 kB/s = 1 Mbit/s
    rates = rate_series(samples, window=0.5)
    assert [round(t, 1) for t, _ in rates] == [0.5, 1.0, 1.5, 2.0]
    assert all(v == pytest.approx(1.0) for _, v in rates)
    assert rate_series(samples[:3], window=0.5) == []


def test_established_counts_only_established_sockets_of_the_pids_namespace() -> None:
    import socket
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    before = established(os.getpid())
    assert before is not None
    c = socket.create_connection(srv.getsockname())
    a, _ = srv.accept()
    try:
        assert established(os.getpid()) == before + 2           # both ends live in this namespace
    finally:
        c.close()
        a.close()
        srv.close()
    assert established(2 ** 22 + 12345) is None                  # no such process


def test_a_tracing_watcher_samples_every_poll_after_its_changes_and_counts_connections() -> None:
    tb = FakeTestbed([1000, 1300, 1600, 1900, 2000])
    applied: list[LinkChange] = []
    watcher = ChangeWatcher(tb, [change(0.3)], 1000, applied.append, interval=0.001, trace=True)
    watcher.client_pid = os.getpid()
    with watcher:
        wait_for(lambda: len(watcher.samples) >= 6)
    assert applied == [change(0.3)]
    assert [s.bytes for s in watcher.samples[:4]] == [300, 600, 900, 1000]   # since the baseline
    assert watcher.samples[0].connections is not None                         # counted on the first
    assert all(a.t <= b.t for a, b in zip(watcher.samples, watcher.samples[1:], strict=False))
    tail = tail_seconds(watcher.samples, 1000, end=watcher.samples[-1].t + 1.0)
    assert tail is not None and tail >= 1.0


def test_a_trace_only_watcher_names_the_trace_when_the_counters_fail() -> None:
    tb = FakeTestbed([0], fail_at=2)
    watcher = ChangeWatcher(tb, [], 1000, lambda c: None, interval=0.001, trace=True)
    with watcher:
        wait_for(lambda: watcher.error != "")
    assert watcher.error.startswith("run trace: ")
