"""benchmarks/experiments.py turns dtune bench results into the tables of docs/benchmarks.md."""

from __future__ import annotations

import importlib.util
import json

import pytest
from support.paths import REPO

SCRIPT = REPO / "benchmarks" / "experiments.py"


@pytest.fixture(scope="module")
def experiments():
    spec = importlib.util.spec_from_file_location("experiments", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(dataset, link, tool, variant, seconds, size, servers=(), verified=True):
    return {"dataset": dataset, "link": link, "tool": tool, "variant": variant, "seconds": seconds,
            "bytes": size, "mbps": size * 8 / 1e6 / seconds, "verified": verified,
            "servers": [{"bytes": b, "requests": r} for b, r in servers]}


def _data(runs, tools, datasets, profiles):
    return {"runs": runs, "tools": [{"tool": t, "variant": v} for t, v in tools],
            "datasets": [{"name": n, "files": f, "bytes": b} for n, f, b in datasets],
            "profiles": [{"name": n, "links": links} for n, links in profiles]}


def test_mdtp_table_has_medians_ratios_and_the_share_of_the_links(experiments, capsys, tmp_path):
    size = 75_000_000  # 600 Mbit: 1 s at the 600 Mbit/s the two links give together
    runs = [_run("f", "base", "dtune", "mdtp-4", s, size) for s in (2.0, 1.5, 9.0)]
    runs += [_run("f", "base", "aria2c", "tuned-x", 3.0, size),
             _run("f", "base", "dtune", "static-chunks-4", 4.0, size),
             _run("f", "base", "dtune", "mdtp-4", 0.1, size, verified=False)]  # not counted
    data = _data(runs, [("dtune", "mdtp-4"), ("dtune", "static-chunks-4"), ("aria2c", "tuned-x")],
                 [("f", 1, size)], [("base", ["400 Mbit/s, RTT 20 ms", "200 Mbit/s, RTT 30 ms"])])
    path = tmp_path / "results.json"
    path.write_text(json.dumps(data))
    assert experiments.main(["mdtp", str(tmp_path)]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| f |"))
    # median 2.0 s; 2.0 / 3.0 against aria2c tuned, 2.0 / 4.0 against static, ideal 1 s / 2 s
    assert row.split(" | ")[2:] == ["2.00", "4.00", "3.00", "0.67×", "0.50×", "0.50 |"]


def test_replica_utilisation_is_bits_sent_over_link_rate_times_run_time(experiments, capsys):
    runs = [_run("f", "base", "dtune", "mdtp", 2.0, 150_000_000,
                 servers=[(100_000_000, 10), (50_000_000, 4)])]
    data = _data(runs, [("dtune", "mdtp")], [("f", 1, 150_000_000)],
                 [("base", ["400 Mbit/s, RTT 20 ms", "200 Mbit/s, RTT 30 ms"])])
    experiments.replicas(data, None)
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| f |"))
    # 800 Mbit in 2 s over 400 Mbit/s = 1.00; 400 Mbit over 200 Mbit/s · 2 s = 1.00; sent = size
    assert "100.0 MB / 10 / 1.00" in row and "50.0 MB / 4 / 1.00" in row and row.endswith("| 1.00 |")


def test_maxcc_pivots_variants_by_tuner_partitions_and_maxcc(experiments, capsys):
    runs = [_run("m", "wan", "dtune", f"{t}-k{k}-cc{cc}", 1.0 * cc, 1_000_000)
            for t in ("sc", "promc") for k in (1, 2) for cc in (1, 4)]
    data = _data(runs, [], [("m", 1, 1_000_000)], [("wan", ["1000 Mbit/s, RTT 40 ms"])])
    experiments.maxcc(data, None)
    lines = capsys.readouterr().out.splitlines()
    assert "| tuner, partitions | maxCC 1 | maxCC 4 | best |" in lines
    assert "| ProMC k=2 | 8 | 2 | 8 @ 1 |" in lines   # 8 Mbit / 1 s at maxCC 1, / 4 s at maxCC 4
