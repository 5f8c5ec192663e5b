"""The BitTorrent baseline row end to end: two replicas seed, aria2c downloads, the bench verifies.

A real testbed (two server namespaces behind unequal links), real mktorrent,
real seeding and downloading aria2c, dtune's own tracker in the client
namespace. Proves that the swarm comes up, that the client's output is the
dataset byte for byte, that both replicas' seeders are used (the record's
per-server bytes are what each seeder uploaded), and that nothing the row
started -- tracker, seeders, namespaces, temporary directories -- is left.
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.marks import NETNS
from support.procs import processes_mentioning, remove_namespaces

pytestmark = [*NETNS, pytest.mark.peers,
              pytest.mark.skipif(shutil.which("aria2c") is None, reason="needs aria2c"),
              pytest.mark.skipif(shutil.which("mktorrent") is None, reason="needs mktorrent")]

SCENARIO = """\
[client]
tcp_rmem_max = 524288
tcp_wmem_max = 524288

[[link]]
rate_mbit = 200
rtt_ms = 10

[[link]]
rate_mbit = 100
rtt_ms = 20

[bench]
runs = 1
timeout_s = 60

[[dataset]]
name = "tiny"
preset = "images"
scale = 0.02

[[tool]]
tool = "bittorrent"
variant = "paper-baseline-2-seeders"
"""


def test_bittorrent_row_downloads_from_both_seeders_verified_and_leaves_nothing(tmp_path: Path) -> None:
    scenario = tmp_path / "bt.toml"
    scenario.write_text(SCENARIO)
    out, tmp = tmp_path / "out", tmp_path / "tmp"
    tmp.mkdir()
    run_id = f"bt{os.getpid()}"
    env = dict(os.environ, TMPDIR=str(tmp))
    proc = subprocess.run([sys.executable, "-m", "dtune", "bench", str(scenario), "--out", str(out),
                           "--id", run_id, "--no-plots"], capture_output=True, text=True, timeout=120, env=env)
    try:
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
        rows = list(csv.DictReader((out / "results.csv").open()))
        assert [(r["tool"], r["variant"], r["verified"]) for r in rows] == [
            ("bittorrent", "paper-baseline-2-seeders", "true")]
        row = rows[0]
        assert int(row["files"]) == 5 and int(row["extra_files"]) == 0 and float(row["seconds"]) > 0
        # what each replica's seeder uploaded: both took part, together at least the dataset
        sent = [int(row["srv1_bytes"]), int(row["srv2_bytes"])]
        assert all(s > 0 for s in sent), sent
        assert sum(sent) >= int(row["bytes"])
        assert "torrent of tiny made" in proc.stderr + proc.stdout
    finally:
        left = remove_namespaces(run_id)
    assert left == []
    assert processes_mentioning(str(tmp)) == []  # no tracker, no seeder
    assert list(tmp.iterdir()) == []  # the working directory (torrent, logs) is gone
