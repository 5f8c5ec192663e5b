"""Mid-run link changes (``[[profile]] during``) on a real testbed (root only).

One 20 MB file over a 200 Mbit/s link, two repetitions of the base profile and
of one whose link drops to 50 Mbit/s once 30 % of the bytes crossed. Proves the
watcher fires once per run at a plausible time, the runs are still verified,
the link is back at 200 Mbit/s after every run (no leak into the next), and no
namespace is left.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from dtune_lab.bench.config import bench_from_dict
from dtune_lab.bench.runner import Bench
from dtune_lab.testbed import netns
from support.marks import NEEDS_CURL, NETNS

pytestmark = [*NETNS, NEEDS_CURL]

SCENARIO: dict[str, Any] = {
    "client": {"tcp_rmem_max": 4 * 1024 * 1024},
    "link": [{"rate_mbit": 200, "rtt_ms": 4}],
    "bench": {"runs": 2, "timeout_s": 60},
    "profile": [{"name": "drop-at-30pct", "during": [{"at_fraction": 0.3, "link": 1, "rate_mbit": 50}]}],
    "dataset": [{"name": "one", "preset": "video", "scale": 0.09, "files": 1}],  # one ~19 MB file
    "tool": [{"tool": "curl"}],
}


class WatchedBench(Bench):
    """Notes the testbed's link rate after every run (what the next run would start from)."""

    rates_after: list[float]

    def _run_one(self, tb: Any, *args: Any) -> Any:
        record = super()._run_one(tb, *args)
        self.rates_after.append(tb.links[0].rate_mbit)
        return record


def test_a_mid_run_change_fires_once_per_run_and_never_leaks(tmp_path: Path) -> None:
    cfg = bench_from_dict(SCENARIO, name="during")
    run_id = f"bd{os.getpid()}"
    bench = WatchedBench(cfg, tmp_path / "out", echo=lambda text: None, run_id=run_id, tmp=str(tmp_path))
    bench.rates_after = []
    try:
        records = bench.run()
    finally:
        left = [n for n in netns.list_netns() if n.startswith(f"dtune-{run_id}-")]
        for name in left:
            netns.delete_netns(name)
    assert left == []
    # interleaved: base, drop | drop, base -- a drop run is followed by one of each
    assert [r.link for r in records] == ["200M-4ms", "drop-at-30pct", "drop-at-30pct", "200M-4ms"]
    assert all(r.verified for r in records), [r.error for r in records]
    for r in records[1:3]:
        (fired,) = r.changes_at
        # 30 % of ~19 MB at 200 Mbit/s is ~0.23 s of transfer; the rest runs at 50 Mbit/s
        assert 0.05 < fired < r.seconds
        assert r.seconds > 1.5  # ~13 MB at 50 Mbit/s alone takes 2 s
    assert records[0].changes_at == records[3].changes_at == []
    assert records[3].seconds < min(r.seconds for r in records[1:3])  # the base run after a drop is at 200
    assert bench.rates_after == [200.0] * 4
    assert "changes_at" in (tmp_path / "out" / "results.csv").read_text().splitlines()[0]
