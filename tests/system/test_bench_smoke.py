"""``dtune bench`` end to end on a real testbed: one link, 20 files, dtune and curl, one run.

Proves correctness, not speed (the machine is shared): both tools' runs are
recorded verified in results.csv, the summary and plot are written, and
nothing the benchmark made -- namespaces, working directory -- is left.
"""

from __future__ import annotations

import csv
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.marks import NEEDS_CURL, NETNS
from support.procs import processes_mentioning, remove_namespaces

pytestmark = [*NETNS, NEEDS_CURL]

SCENARIO = """\
[client]
tcp_rmem_max = 524288
tcp_wmem_max = 524288

[[link]]
rate_mbit = 200
rtt_ms = 10

[bench]
runs = 1
timeout_s = 60

[[dataset]]
name = "tiny"
preset = "html"
scale = 0.01

[[tool]]
tool = "dtune"

[[tool]]
tool = "curl"
variant = "parallel4"
args = ["-Z", "--parallel-max", "4"]
"""


@pytest.mark.parametrize("server", ["dtune", "nginx"])
def test_bench_runs_dtune_and_curl_verified_and_leaves_nothing(tmp_path: Path, server: str) -> None:
    if server == "nginx" and shutil.which("nginx") is None:
        pytest.skip("needs nginx")
    scenario = tmp_path / "smoke.toml"
    scenario.write_text(SCENARIO.replace("runs = 1", f'runs = 1\nserver = "{server}"'))
    out, tmp = tmp_path / "out", tmp_path / "tmp"
    tmp.mkdir()
    run_id = f"bs{os.getpid()}"
    env = dict(os.environ, TMPDIR=str(tmp))
    keep = ["--keep-logs"] if server == "dtune" else []
    proc = subprocess.run([sys.executable, "-m", "dtune", "bench", str(scenario), "--out", str(out),
                           "--id", run_id, *keep], capture_output=True, text=True, timeout=120, env=env)
    try:
        assert proc.returncode == 0, proc.stderr[-2000:]
        rows = list(csv.DictReader((out / "results.csv").open()))
        assert sorted((r["tool"], r["verified"]) for r in rows) == [("curl", "true"), ("dtune", "true")]
        for r in rows:
            assert int(r["files"]) == 20 and int(r["bytes"]) > 0 and float(r["seconds"]) > 0
            assert int(r["srv1_bytes"]) >= int(r["bytes"])  # the server sent at least the payload
            assert int(r["srv1_requests"]) >= 20
        assert "| tiny | 200M-10ms | dtune | default | 1 | 1/1 |" in proc.stdout
        assert (out / "summary.md").exists() and (out / "results.json").exists()
        logs = sorted(p.name for p in (out / "logs").iterdir()) if keep else []
        assert logs == (["tiny-200M-10ms-curl-parallel4-run1.log", "tiny-200M-10ms-dtune-default-run1.log"]
                        if keep else [])
        if keep:   # dtune's --json events, whole
            assert '"event": "summary"' in (out / "logs" / logs[1]).read_text()
        assert not (out / "failed-logs").exists() and (keep or not (out / "logs").exists())
    finally:
        left = remove_namespaces(run_id)
    assert left == []
    assert list(tmp.iterdir()) == []  # the working directory is gone


def test_ctrl_c_during_a_run_removes_namespaces_processes_and_temp_dir(tmp_path: Path) -> None:
    scenario = tmp_path / "slow.toml"
    # 20 MB over 20 Mbit/s: the curl run lasts ~8 s, long enough to be interrupted
    scenario.write_text(SCENARIO.replace("rate_mbit = 200", "rate_mbit = 20").replace("scale = 0.01", "scale = 0.1")
                        .replace('tool = "dtune"', 'tool = "curl"\nvariant = "seq"'))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    run_id = f"bi{os.getpid()}"
    # a child of a non-interactive shell may inherit SIGINT ignored: restore Python's handler
    code = ("import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
            "from dtune.cli import main; sys.exit(main(sys.argv[1:]))")
    proc = subprocess.Popen([sys.executable, "-c", code,
                             "bench", str(scenario), "--out", str(tmp_path / "out"), "--id", run_id],
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ, TMPDIR=str(tmp)))
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if "testbed" in line and " up " in line:
                break
        else:
            pytest.fail(f"bench never brought the testbed up (exit {proc.wait()})")
        time.sleep(1.5)  # inside the first curl run
        assert processes_mentioning(str(tmp)), "nothing was running in the benchmark"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        left = remove_namespaces(run_id)
    assert left == []
    assert processes_mentioning(str(tmp)) == []
    assert list(tmp.iterdir()) == []
