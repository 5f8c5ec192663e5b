"""Medians, ratio tables, CSV/JSON and plots of benchmark records (pure, no network)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from dtune_lab.bench.report import (
    RunRecord,
    best_peer,
    csv_text,
    markdown_table,
    mbps,
    read_trace,
    summarize,
    trace_name,
    write_plots,
    write_results,
    write_trace_plots,
)


def rec(tool: str, variant: str, seconds: float, *, verified: bool = True, dataset: str = "html",
        link: str = "1g-40ms", run: int = 1, nbytes: int = 100_000_000) -> RunRecord:
    return RunRecord(scenario="s", dataset=dataset, link=link, tool=tool, variant=variant, run=run,
                     seconds=seconds, bytes=nbytes, mbps=mbps(nbytes, seconds), cpu_seconds=seconds / 10,
                     verified=verified, exit_code=0 if verified else 1,
                     servers=[{"requests": 10, "bytes": nbytes}, {"requests": 2, "bytes": 0}])


def test_mbps_is_decimal_megabits_per_second() -> None:
    assert mbps(125_000_000, 1.0) == 1000.0
    assert mbps(1, 0.0) == 0.0


def test_median_is_over_verified_runs_only() -> None:
    rows = summarize([rec("curl", "z", 1.0), rec("curl", "z", 2.0), rec("curl", "z", 4.0),
                      rec("curl", "z", 0.01, verified=False)])
    (row,) = rows
    assert (row.ok, row.runs) == (3, 4)
    assert row.seconds == 2.0 and row.mbps == pytest.approx(400.0)
    assert row.mbps_max == pytest.approx(800.0)  # the failed 0.01 s run is not the max


def test_ratios_are_to_the_best_peer_and_to_dtune_defaults() -> None:
    rows = summarize([rec("dtune", "default", 2.0), rec("dtune", "fixed", 1.0),
                      rec("aria2c", "x16", 4.0), rec("curl", "z", 8.0)])
    by = {(r.tool, r.variant): r for r in rows}
    assert best_peer(rows) is by[("aria2c", "x16")]
    assert by[("dtune", "default")].vs_best_peer == pytest.approx(2.0)
    assert by[("dtune", "fixed")].vs_best_peer == pytest.approx(4.0)
    assert by[("aria2c", "x16")].vs_best_peer == pytest.approx(1.0)
    assert by[("curl", "z")].vs_best_peer == pytest.approx(0.5)
    assert by[("curl", "z")].vs_dtune_default == pytest.approx(0.25)
    assert by[("dtune", "fixed")].vs_dtune_default == pytest.approx(2.0)


def test_dtune_is_never_its_own_best_peer() -> None:
    rows = summarize([rec("dtune", "default", 1.0), rec("dtune", "fast", 0.5)])
    assert best_peer(rows) is None
    assert all(r.vs_best_peer is None for r in rows)


def test_ratios_stay_within_one_dataset_and_link() -> None:
    rows = summarize([rec("dtune", "default", 1.0, dataset="a"), rec("curl", "z", 2.0, dataset="a"),
                      rec("dtune", "default", 1.0, dataset="b"), rec("curl", "z", 8.0, dataset="b"),
                      rec("curl", "z", 1.0, dataset="a", link="lan")])
    by = {(r.dataset, r.link, r.tool): r for r in rows}
    assert by[("a", "1g-40ms", "dtune")].vs_best_peer == pytest.approx(2.0)
    assert by[("b", "1g-40ms", "dtune")].vs_best_peer == pytest.approx(8.0)
    assert by[("a", "lan", "curl")].vs_dtune_default is None  # no dtune on that link


def test_a_row_with_no_verified_run_has_no_numbers_and_no_ratio() -> None:
    rows = summarize([rec("dtune", "default", 1.0), rec("wget", "seq", 1.0, verified=False)])
    wget = rows[1]
    assert (wget.ok, wget.mbps, wget.vs_best_peer) == (0, None, None)
    assert rows[0].vs_best_peer is None  # the only peer failed
    table = markdown_table(rows)
    assert "| wget | seq | 1 | 0/1 | — |" in table
    assert "best peer none (no peer verified)" in table
    assert "failed runs (excluded from medians): wget seq (1 of 1)" in table


def test_rows_keep_the_order_of_first_appearance() -> None:
    rows = summarize([rec("dtune", "default", 1.0, dataset="b"), rec("curl", "z", 1.0, dataset="a"),
                      rec("aria2c", "x", 1.0, dataset="b")])
    assert [(r.dataset, r.tool) for r in rows] == [("b", "dtune"), ("b", "aria2c"), ("a", "curl")]


def test_markdown_table_has_one_line_per_row_and_the_ratios() -> None:
    rows = summarize([rec("dtune", "default", 1.0), rec("aria2c", "x16", 2.0)])
    lines = markdown_table(rows).splitlines()
    assert lines[0].startswith("| dataset | link | tool |") and lines[1].startswith("|---|")
    assert lines[2] == ("| html | 1g-40ms | dtune | default | 1 | 1/1 | 1.00 | 800.0 | 800–800 | 0.10 | 12 "
                        "| — | — | — | 1.000 | 2.00× | 1.00× |")  # no trace: no tail, no connection count
    assert "best peer aria2c x16 (400.0 Mbit/s)" in lines[-1]


def test_csv_has_the_required_columns_and_per_server_counts(tmp_path: Path) -> None:
    records = [rec("dtune", "default", 1.0), rec("curl", "z", 2.0, verified=False)]
    rows = list(csv.DictReader(csv_text(records).splitlines()))
    for col in ("scenario", "dataset", "link", "tool", "variant", "run", "seconds", "bytes", "mbps",
                "cpu_seconds", "verified", "srv1_requests", "srv1_bytes", "srv2_requests", "srv2_bytes"):
        assert col in rows[0]
    assert [r["verified"] for r in rows] == ["true", "false"]
    assert rows[0]["srv1_requests"] == "10" and rows[0]["requests"] == "12"


def test_mid_run_change_times_are_one_semicolon_joined_csv_column_and_a_json_list(tmp_path: Path) -> None:
    changed = rec("dtune", "default", 4.0)
    changed.changes_at = [1.23456, 2.5]
    rows = list(csv.DictReader(csv_text([changed, rec("curl", "z", 2.0)]).splitlines()))
    assert [r["changes_at"] for r in rows] == ["1.235;2.500", ""]
    write_results(tmp_path, [changed], {})
    assert json.loads((tmp_path / "results.json").read_text())["runs"][0]["changes_at"] == [1.23456, 2.5]


def test_bytes_sent_over_the_dataset_and_each_servers_share_are_medians_in_the_table() -> None:
    runs = []
    for sent in ((60, 50), (70, 40), (80, 30)):   # MB per server; the dataset is 100 MB
        r = rec("dtune", "mirrors", 2.0)
        r.servers = [{"requests": 5, "bytes": sent[0] * 10**6}, {"requests": 5, "bytes": sent[1] * 10**6}]
        runs.append(r)
    (row,) = summarize(runs)
    assert row.sent == pytest.approx(1.10)
    assert row.shares == pytest.approx([70 / 110, 40 / 110])
    text = markdown_table([row])
    assert "| 1.100 |" in text and "srv1 63.6%, srv2 36.4%" in text


def test_tail_and_connections_are_medians_over_verified_runs_in_the_table() -> None:
    runs = [rec("dtune", "default", s, run=i) for i, s in enumerate((1.0, 1.1, 1.2))]
    for r, tail, pace, conns in zip(runs, (0.2, 0.9, 0.4), (0.9, 0.5, 0.8), (10.0, 30.0, 20.0), strict=True):
        r.tail_seconds, r.tail_pace, r.connections_median, r.connections_max = tail, pace, conns, int(conns) + 5
    failed = rec("dtune", "default", 9.0, verified=False, run=4)
    failed.tail_seconds, failed.tail_pace, failed.connections_median = 50.0, 0.01, 99.0
    rows = summarize([*runs, failed])
    assert rows[0].tail_seconds == 0.4 and rows[0].tail_pace == 0.8 and rows[0].connections == 20.0
    assert "| 0.40 | 0.80 | 20 |" in markdown_table(rows)
    csv_rows = list(csv.DictReader(csv_text(runs).splitlines()))
    assert [r["tail_seconds"] for r in csv_rows] == ["0.2000", "0.9000", "0.4000"]
    assert [r["tail_pace"] for r in csv_rows] == ["0.9000", "0.5000", "0.8000"]
    assert csv_rows[1]["connections_max"] == "35"


def test_trace_plots_show_each_variants_median_run(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    runs = [rec("dtune", "default", s, run=i + 1) for i, s in enumerate((1.0, 3.0, 2.0))]
    for r in runs:
        r.tail_seconds = 0.1
    (tmp_path / "traces").mkdir()
    name = trace_name("html", "1g-40ms", "dtune", "default", 3)       # the median run (2.0 s)
    (tmp_path / "traces" / f"{name}.csv").write_text(
        "t,bytes,connections\n" + "".join(f"{t / 10:.1f},{t * 1000},{4 if t % 3 == 0 else ''}\n"
                                          for t in range(20)))
    assert read_trace(tmp_path / "traces" / f"{name}.csv")[3] == (0.3, 3000, 4)
    written = write_trace_plots(tmp_path, runs, "s")
    assert [p.name for p in written] == ["trace-html-1g-40ms.png"] and written[0].stat().st_size > 1000
    assert write_trace_plots(tmp_path, [rec("curl", "z", 1.0)], "s") == []   # no trace: no plot


def test_write_results_writes_csv_and_json(tmp_path: Path) -> None:
    write_results(tmp_path, [rec("dtune", "default", 1.0)], {"scenario": "s"})
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["scenario"] == "s" and data["runs"][0]["tool"] == "dtune"
    assert (tmp_path / "results.csv").read_text().startswith("scenario,")


def test_plots_are_png_files_per_dataset(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    rows = summarize([rec("dtune", "default", 1.0, dataset="a b"), rec("curl", "z", 2.0, dataset="a b"),
                      rec("curl", "z", 2.0, dataset="c", link="x"), rec("curl", "z", 3.0, dataset="c")])
    paths = write_plots(tmp_path, rows, "t")
    assert [p.name for p in paths] == ["plot-a_b.png", "plot-c.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in paths)


def test_dtunes_own_transfer_time_is_noted_under_the_table() -> None:
    r = rec("dtune", "default", 3.0)
    r.reported_seconds = 2.0
    rows = summarize([r, rec("curl", "z", 4.0)])
    assert rows[0].reported_seconds == 2.0
    assert "dtune default: its own summary reports 2.00 s of listing + transfer in the 3.00 s wall time" \
        in markdown_table(rows)
