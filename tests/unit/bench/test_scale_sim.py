"""benchmarks/scale_sim.py: the scaling model of docs/scale.md and its failure Monte Carlo."""

from __future__ import annotations

from dataclasses import replace

import pytest
from support.paths import benchmark_script


@pytest.fixture(scope="module")
def sim():
    with benchmark_script("scale_sim") as module:
        yield module


def test_the_limit_moves_from_the_nics_to_the_shared_cap(sim) -> None:
    site = sim.Site(node_gbit=10, origin_gbit=100, origin_cap=128, conn_gbit=0.65)
    one, ten, hundred = (sim.model(site, n) for n in (1, 10, 100))
    assert (one.limit, one.aggregate_gbit) == ("node NICs", 10)
    assert ten.limit == "origin cap" and ten.aggregate_gbit == pytest.approx(128 * 0.65)
    # the cap is divided, never multiplied: 100 nodes hold 128 connections in all
    assert hundred.conns_per_node * 100 == pytest.approx(128)
    assert hundred.aggregate_gbit == ten.aggregate_gbit
    wide = sim.model(replace(site, origin_cap=10**6), 100)
    assert wide.limit == "origin NIC" and wide.aggregate_gbit == 100


def test_scheduler_load_is_tasks_per_second_times_the_overhead(sim) -> None:
    site = sim.Site(node_gbit=10, origin_gbit=10**4, origin_cap=10**6, shard_bytes=64 * sim.MIB,
                    progress_hz=0)
    row = sim.model(site, 100)
    assert row.tasks_per_s == pytest.approx(1e12 / 8 / (64 * sim.MIB))
    assert row.scheduler_cpu == pytest.approx(row.tasks_per_s * 1e-3)


def test_journals_lose_at_most_the_in_flight_bytes_per_failure(sim) -> None:
    site = sim.Site(dataset_bytes=2 * 10**12, shard_bytes=4 * sim.GIB, fail_per_node_hour=2.0, repair_s=60)
    inflight = 256 * sim.MIB
    hours, journal, restart, failures = sim.monte_carlo(site, 10, 10.0, inflight, seed=3)
    assert failures > 5  # the rate is high enough that failures happen
    assert journal <= failures * inflight / sim.GIB
    assert restart > journal
    assert hours >= site.dataset_bytes * 8 / 10e9 / 3600  # never faster than the links
    no_fail = sim.monte_carlo(replace(site, fail_per_node_hour=0.0), 10, 10.0, inflight, seed=3)
    assert no_fail[1:] == (0.0, 0.0, 0)


def test_main_prints_the_table_and_writes_csv_and_plot(sim, tmp_path, capsys) -> None:
    assert sim.main(["--nodes", "1", "3", "--testbed", "--trials", "2", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| nodes |" in out and "node NICs" in out
    assert (tmp_path / "scale.csv").read_text().count("\n") == 3 and (tmp_path / "scale.png").stat().st_size > 0
