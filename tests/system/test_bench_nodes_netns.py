"""``dtune bench`` on a site of three nodes (root only): the multi-node plumbing, not the cluster transfer.

The rows here are plumbing checks of the benchmark, labelled as such:

* ``1-node``: plain ``dtune get`` in node1 (nodes = 1);
* ``each-node-a-share``: every node runs its own ``dtune get`` on its share of
  the files, all at once -- the ``mode = "each"`` path, verified like any run;
* ``dask-plumbing``: ``cluster = true`` starts the scheduler in node1 and a
  worker in each node; the command checks from node1 that three workers, one
  per node address, are registered, and then fetches with plain ``dtune get``
  (this is *not* ``--cluster``: it proves the scheduler and workers the
  cluster row will use are there);
* ``fails``: a command that exits 3 is recorded as "tool failed: ...".

Afterwards no namespace, no scheduler or worker process and no temp dir is left.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

from support.marks import NETNS
from support.procs import processes_mentioning, remove_namespaces

pytestmark = NETNS

CHECK_WORKERS = (
    "import sys; from distributed import Client; c = Client(sys.argv[1], timeout=20); "
    "w = c.scheduler_info(n_workers=-1)['workers'].values(); "
    "hosts = sorted(x['host'] for x in w); print('workers', hosts); "
    "sys.exit(0 if hosts == ['10.77.0.1', '10.77.1.1', '10.77.2.1'] else 'wrong workers: %s' % hosts)")

SCENARIO = f"""\
[client]
tcp_rmem_max = 4194304

[[node]]
count = 3
rate_mbit = 100
rtt_ms = 4

[[link]]
rate_mbit = 1000
rtt_ms = 2

[bench]
runs = 1
timeout_s = 90

[[dataset]]
name = "tiny"
preset = "html"
scale = 0.02

[[tool]]
tool = "dtune"
variant = "1-node"

[[tool]]
tool = "command"
variant = "each-node-a-share"
nodes = 3
mode = "each"
command = ["{{python}}", "-m", "dtune", "get", "{{share}}", "-o", "{{out}}", "--no-progress"]

[[tool]]
tool = "command"
variant = "dask-plumbing"
nodes = 3
cluster = true
command = ["sh", "-c", '"$0" -c "$1" "$2" && "$0" -m dtune get "$3" -o "$4" --no-progress',
           "{{python}}", "{CHECK_WORKERS}", "{{scheduler}}", "{{url}}", "{{out}}"]

[[tool]]
tool = "command"
variant = "fails"
command = ["sh", "-c", "echo 'no such option: --frobnicate' >&2; exit 3"]
"""


def test_bench_on_three_nodes_records_nodes_and_cleans_up(tmp_path: Path) -> None:
    scenario = tmp_path / "site.toml"
    scenario.write_text(SCENARIO)
    out, tmp = tmp_path / "out", tmp_path / "tmp"
    tmp.mkdir()
    run_id = f"bn{os.getpid()}"
    proc = subprocess.run([sys.executable, "-m", "dtune", "bench", str(scenario), "--out", str(out),
                           "--id", run_id], capture_output=True, text=True, timeout=150,
                          env=dict(os.environ, TMPDIR=str(tmp)))
    try:
        # the "fails" row fails, so the benchmark says so in its exit code
        assert proc.returncode == 1 and "1 of 4 runs failed" in proc.stderr, proc.stderr[-3000:]
        rows = {r["variant"]: r for r in csv.DictReader((out / "results.csv").open())}
        assert {v: (r["nodes"], r["verified"]) for v, r in rows.items()} == {
            "1-node": ("1", "true"), "each-node-a-share": ("3", "true"), "dask-plumbing": ("3", "true"),
            "fails": ("1", "false")}, rows
        assert rows["fails"]["error"].startswith("tool failed: exit code 3: no such option: --frobnicate")
        for v in ("1-node", "each-node-a-share", "dask-plumbing"):
            assert int(rows[v]["srv1_bytes"]) >= int(rows[v]["bytes"]) > 0
        assert "| command | each-node-a-share | 3 | 1/1 |" in proc.stdout
    finally:
        left = remove_namespaces(run_id)
    assert left == []
    assert processes_mentioning(str(tmp)) == []  # no scheduler or worker survived
    assert list(tmp.iterdir()) == []


def test_ctrl_c_during_a_cluster_row_leaves_no_scheduler_worker_namespace_or_temp_dir(tmp_path: Path) -> None:
    import signal
    import time

    scenario = tmp_path / "site.toml"
    head = SCENARIO.split("[[tool]]")[0]
    scenario.write_text(head + '[[tool]]\ntool = "command"\nvariant = "sleeps"\nnodes = 3\ncluster = true\n'
                        'command = ["sh", "-c", "sleep 60", "{scheduler}"]\n')
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    run_id = f"bc{os.getpid()}"
    # a child of a non-interactive shell may inherit SIGINT ignored: restore Python's handler
    code = ("import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
            "from dtune.cli import main; sys.exit(main(sys.argv[1:]))")
    proc = subprocess.Popen([sys.executable, "-c", code, "bench", str(scenario), "--out", str(tmp_path / "out"),
                             "--id", run_id], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=dict(os.environ, TMPDIR=str(tmp)))
    try:
        deadline = time.monotonic() + 60
        while not any("sleep 60" in p for p in processes_mentioning("tcp://10.77.0.1:8786")):
            assert proc.poll() is None and time.monotonic() < deadline, "the cluster row never started"
            time.sleep(0.2)
        assert len([p for p in processes_mentioning(str(tmp)) if "dask_worker" in p]) == 3
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
