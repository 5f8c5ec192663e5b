"""A site of client nodes in real namespaces (root only): own links, a Dask worker in each, clean teardown.

* Three nodes with unequal links (40 / 80 / 120 Mbit/s) fetch from one server
  (1 Gbit/s link) at the same time: each node's goodput is near its *own*
  link's rate, so the nodes do not share one emulated NIC.
* A Dask scheduler in node1 and one worker inside each node register, each
  with its own node's address (the worker really runs in that namespace).
* After ``stop()`` no namespace of this test is left.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
from dtune_lab.testbed import Link, Testbed, netns
from dtune_lab.testbed.cluster import DaskSite
from dtune_lab.testbed.scenario import HostConfig, Scenario
from support.marks import NETNS

pytestmark = NETNS

TAG = f"tn{os.getpid()}"
PROBE = [sys.executable, "-m", "dtune_lab.testbed.probe"]
RATES = (40.0, 80.0, 120.0)


def our_namespaces() -> list[str]:
    return [n for n in netns.list_netns() if n.startswith(f"dtune-{TAG}")]


def site() -> Testbed:
    scenario = Scenario(links=(Link(rate_mbit=1000, rtt_ms=2),),
                        nodes=tuple(Link(rate_mbit=r, rtt_ms=8) for r in RATES),
                        client=HostConfig(tcp_rmem_max=4 << 20), name="site3")
    return Testbed(scenario, run_id=f"{TAG}a", backend="tun")


def fetch_from_every_node(tb: Testbed, port: int) -> list[dict]:
    """Every node runs the probe's fetch at the same moment; their JSON reports, in node order."""
    results: list[dict | str] = [""] * len(RATES)

    def one(j: int) -> None:
        out = tb.run(f"node{j + 1}", PROBE + ["fetch", tb.server_addr(0), str(port), "--streams", "4",
                                              "--seconds", "3", "--warmup", "1"],
                     capture_output=True, text=True, timeout=60)
        results[j] = json.loads(out.stdout) if out.returncode == 0 else out.stderr

    threads = [threading.Thread(target=one, args=(j,)) for j in range(len(RATES))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for j, r in enumerate(results):
        assert isinstance(r, dict), f"node{j + 1}: {r}"
    return results  # type: ignore[return-value]


def test_site_nodes_own_links_and_dask_workers() -> None:
    tb = site()
    try:
        with tb, tempfile.TemporaryDirectory(prefix="dtune-site-") as tmp:
            assert {n.rsplit("-", 1)[1] for n in tb.namespaces} == {"node1", "node2", "node3", "sw", "srv1"}
            assert tb.ns("client") == tb.node_ns(0)
            srv = tb.popen("srv1", PROBE + ["serve", tb.server_addr(0), "5001", "--lifetime", "40"],
                           stdout=subprocess.PIPE, text=True)
            assert json.loads(srv.stdout.readline())["ready"]
            results = fetch_from_every_node(tb, 5001)
            for rate, r in zip(RATES, results, strict=True):
                mbps = r["mbit"]
                # its own link, not a share of one NIC: 3 x equal shares would be 80 each
                assert 0.8 * rate <= mbps <= 1.05 * rate, (rate, results)
            nodes = tb.node_link_stats()
            assert len(nodes) == 3 and all(s["down"]["bytes"] > 0 for s in nodes)
            server_down = tb.link_stats()[0]["down"]["bytes"]
            assert server_down >= sum(s["down"]["bytes"] for s in nodes) * 0.95  # all of it crossed srv1's link

            with DaskSite(tb, Path(tmp) / "dask") as dask:
                workers = dask.registered(timeout=30)
                by_name = {w["name"]: w["host"] for w in workers.values()}
                assert by_name == {f"node{j + 1}": tb.node_addr(j) for j in range(3)}
    finally:
        tb.stop()
    assert our_namespaces() == []


def test_site_scenario_file_parses_and_classic_files_mean_the_same() -> None:
    """cluster3.toml is a site; a one-client file builds no nodes and no switch (no root needed, but cheap)."""
    from dtune_lab.testbed import load_scenario
    from support.paths import SCENARIOS
    sc = load_scenario(SCENARIOS / "cluster3.toml")
    assert [n.rate_mbit for n in sc.nodes] == [200, 200, 200] and sc.links[0].rate_mbit == 1000
    tb = Testbed(load_scenario(SCENARIOS / "replicas4.toml"), run_id=f"{TAG}b")
    assert tb.switch_ns is None and tb.node_namespaces == [tb.client_ns]
    assert tb.server_addr(3) == "10.77.3.2"


@pytest.fixture(autouse=True)
def _leftovers():
    yield
    for name in our_namespaces():
        netns.delete_netns(name)
