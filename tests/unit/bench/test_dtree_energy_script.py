"""benchmarks/dtree_energy.py: the oracle part (the history's best θ per cell) on plain data."""

from __future__ import annotations

import csv
import json

import pytest
from support.paths import benchmark_script


@pytest.fixture(scope="module")
def de():
    with benchmark_script("dtree_energy") as module:
        yield module


def _log(path, rows):
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=["tuner_settings", "throughput_mbps"])
        w.writeheader()
        for profile, dataset, (cc, p, pp, cores), mbps in rows:
            sweep = {"profile": profile, "dataset": dataset,
                     "theta": {"cc": cc, "p": p, "pp": pp, "cpu_num": cores, "cpu_freq": None}}
            w.writerow({"tuner_settings": json.dumps({"sweep": sweep}), "throughput_mbps": mbps})


def test_history_top_ranks_the_cells_distinct_theta_by_their_fastest_run(de, tmp_path):
    log = tmp_path / "sweep.csv"
    _log(log, [("fast", "html", (8, 8, 2, 1), 400.0), ("fast", "html", (8, 8, 2, 1), 490.0),
               ("fast", "html", (16, 2, 4, 2), 450.0), ("fast", "video", (32, 8, 1, 1), 900.0),
               ("slow", "html", (1, 1, 1, 1), 95.0), ("fast", "html", (1, 1, 1, 2), 100.0)])
    top = [de.history_top("fast", "html", k, log) for k in (1, 2, 3, 4)]
    assert [(t.cc, t.p, t.pp, t.cpu_num) for t in top[:3]] == [(8, 8, 2, 1), (16, 2, 4, 2), (1, 1, 1, 2)]
    assert top[3] is None                                   # only three distinct θ ran on that cell
    assert de.history_top("slow", "video", 1, log) is None


def _run(profile, dataset, tool, mbps, notes=()):
    return {"experiment": "oracle", "profile": profile, "dataset": dataset, "tool": tool, "verified": True,
            "mbps_transfer": mbps, "mbps_wall": mbps, "energy_est_j": 1.0, "energy_meter_j": 1.0, "t90_s": None,
            "decisions": [], "tuner": tool, "notes": list(notes)}


def test_the_oracle_takes_each_cells_fastest_theta_and_bounds_the_target_by_the_link(de):
    runs = []
    for rep in range(3):
        runs += [_run("gig", "html", "oracle-1", 600.0 + rep, ["static: cc=8 p=8 pp=2"]),
                 _run("gig", "html", "oracle-2", 640.0 + rep, ["static: cc=16 p=2 pp=4"]),
                 _run("gig", "html", "oracle-3", 500.0),
                 _run("gig", "html", "dtree-max", 450.0), _run("gig", "html", "ditacchio-max", 400.0),
                 _run("hundred", "html", "oracle-1", 93.0, ["static: cc=1 p=8 pp=1"]),
                 _run("hundred", "html", "dtree-max", 90.0), _run("hundred", "html", "ditacchio-max", 92.0)]
    runs.append({**_run("gig", "html", "oracle-2", 9999.0), "verified": False})   # a failed run counts for nothing
    data = {"runs": runs, "meta": {"profiles": [{"name": "gig", "rate_mbit": 1000},
                                                {"name": "hundred", "rate_mbit": 100}]}}
    o = de._oracle(data)
    gig, hundred = o[("gig", "html")], o[("hundred", "html")]
    assert gig["theta"] == "cc=16 p=2 pp=4" and gig["best"] == 641.0 and gig["n"] == 3
    assert gig["ratio"] == pytest.approx(641 / 400) and gig["dtree_ratio"] == pytest.approx(450 / 400)
    assert hundred["link_ratio"] == pytest.approx(100 / 92)
    # mean over profiles, then datasets; a cell whose link is under 1.2 × Di Tacchio counts at the link
    assert de._grid_mean({k: v["ratio"] for k, v in o.items()}) == pytest.approx((641 / 400 + 93 / 92) / 2)
    text = "\n".join(de._oracle_lines(o))
    assert "| gig | html | cc=16 p=2 pp=4 | 641.0 | 400.0 | 1.60 | 1.12 | 2.50 |" in text
    assert f"**{(641 / 400 + 100 / 92) / 2:.2f}×**" in text
