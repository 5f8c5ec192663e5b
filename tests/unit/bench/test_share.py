"""``dtune_lab.bench.share``: per-run rates from ``--json`` logs and Jain's index, on plain data."""

from __future__ import annotations

import json
import math

import pytest
from dtune_lab.bench.share import (
    converged_after,
    jain,
    mean_mbps,
    progress_series,
    rates,
    share_summary,
)
from hypothesis import given
from hypothesis import strategies as st
from support.fuzz import FUZZ


def log(*rows: tuple[float, int, int]) -> str:
    lines = ['{"event": "start", "t": 0.0}', "not json", '{"event": "progress", "t": "x", "bytes": 1}']
    lines += [json.dumps({"event": "progress", "t": t, "bytes": b, "connections": c}) for t, b, c in rows]
    return "\n".join(lines)


def test_jain_is_one_for_equal_shares_and_one_over_n_when_one_takes_all():
    assert jain([300.0, 300.0, 300.0]) == pytest.approx(1.0)
    assert jain([900.0, 0.0, 0.0]) == pytest.approx(1 / 3)
    assert jain([529.0, 291.0]) == pytest.approx(820 ** 2 / (2 * (529 ** 2 + 291 ** 2)))


def test_progress_events_become_a_series_shifted_by_the_runs_start_and_other_lines_are_skipped():
    series = progress_series(log((1.0, 125_000_000, 8), (2.0, 250_000_000, 16)), start=30.0)
    assert series == [(31.0, 125_000_000, 8), (32.0, 250_000_000, 16)]
    assert mean_mbps(series, 31.0, 32.0) == pytest.approx(1000.0)
    assert mean_mbps(series, 31.5, 32.0) == pytest.approx(1000.0)      # linear between events
    assert mean_mbps(series, 0.0, 30.0) == 0.0                         # before the run began
    assert rates(series, 30.0, 32.0, 1.0) == pytest.approx([1000.0, 1000.0])  # nothing before 30 s
    assert rates(series, 20.0, 22.0, 1.0) == [0.0, 0.0]


def test_the_summary_counts_only_after_the_last_start_and_says_when_the_index_settled():
    step = 125_000_000 // 8                         # 125 Mbit/s for one second
    a = [(float(t), step * 4 * t, 20) for t in range(0, 61)]          # 500 Mbit/s from 0
    # b from 30 s: 125 Mbit/s for 10 s, then 500
    b = [(float(t), step * (t - 30) if t < 40 else step * 10 + step * 4 * (t - 40), 10) for t in range(30, 61)]
    s = share_summary([a, b], last_start=30.0, end=60.0, step=5.0, warmup=10.0)
    assert s["window"] == (40.0, 60.0)
    assert s["per_run_mbps"] == pytest.approx([500.0, 500.0])
    assert s["total_mbps"] == pytest.approx(1000.0) and s["jain"] == pytest.approx(1.0)
    assert s["jain_bins"][0] < 0.95 and s["jain_bins"][-1] == pytest.approx(1.0)
    assert s["converged_s"] == 10.0
    assert s["connections"] == [20, 10]


def test_an_index_that_never_stays_above_the_threshold_never_converged():
    assert converged_after([1.0, 0.9, 1.0, 0.9], 5.0) is None
    assert converged_after([0.5, 0.96, 0.99], 5.0) == 5.0


@pytest.mark.fuzz
@FUZZ
@given(st.text(max_size=2000) | st.lists(st.dictionaries(
    st.sampled_from(["event", "t", "bytes", "connections"]),
    st.one_of(st.just("progress"), st.integers(-10, 10**12), st.floats(allow_nan=True), st.none(), st.booleans()),
), max_size=20).map(lambda es: "\n".join(json.dumps(e) for e in es)))
def test_any_log_text_gives_a_sorted_series_of_finite_non_negative_numbers(text):
    series = progress_series(text, start=5.0)
    assert [r[0] for r in series] == sorted(r[0] for r in series)
    for t, b, c in series:
        assert math.isfinite(t) and t >= 5.0 and b >= 0 and c >= 0
    assert mean_mbps(series, 5.0, 100.0) >= 0.0
