"""`dtune history sweep` for real: one small grid in network namespaces (root only), rows recorded."""

from __future__ import annotations

import os
import shutil

import pytest
from dtune_lab.bench.sweep import Sweep, sweep_from_dict

from dtune.history import open_store


@pytest.mark.netns
@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0 or not shutil.which("ip"),
                    reason="needs root and ip netns")
def test_sweep_appends_rows_and_leaves_no_namespace(tmp_path):
    from dtune_lab.testbed import netns
    data = {"sweep": {"sample": "grid", "seed": 0, "timeout_s": 60,
                      "theta": {"cc": [2], "p": [1], "pp": [1, 4], "cpu_num": [1]}},
            "profile": [{"name": "tiny", "rate_mbit": 200, "rtt_ms": 10, "tcp_buffer": 524288}],
            "dataset": [{"name": "html", "preset": "html", "files": 8}]}
    cfg = sweep_from_dict(data, name="smoke")
    db = f"sqlite:///{tmp_path / 'h.db'}"
    lines: list[str] = []
    report = Sweep(cfg, history=db, echo=lines.append, tmp=str(tmp_path)).run()
    assert report.recorded == 2, lines
    with open_store(db) as store:
        rows = list(store.rows(["origin", "cc", "pp", "cpu_num", "throughput_mbps", "energy_j", "energy_kind",
                                "bandwidth_mbps", "tcp_buffer", "rtt_ms", "file_count", "dataset_id"]))
    assert {(r["cc"], r["pp"]) for r in rows} == {(2, 1), (2, 4)}
    for r in rows:
        assert r["origin"] == "sweep" and r["cpu_num"] == 1 and r["dataset_id"] == "html"
        assert r["throughput_mbps"] > 0 and r["energy_j"] is not None and r["energy_kind"] in ("measured", "estimated")
        assert r["bandwidth_mbps"] == 200 and r["tcp_buffer"] == 524288 and r["rtt_ms"] is not None
        assert r["file_count"] == 8
    ids = [line.split()[2] for line in lines if line.startswith("sweep: testbed ")]
    assert ids
    assert not [n for n in netns.list_netns() for i in ids if n.startswith(f"dtune-{i}-")]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("dtune-sweep-")]
