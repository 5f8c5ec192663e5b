"""Scenarios with client nodes: the [[node]] tables, multi-node [[tool]] rows, the nodes column."""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest
from dtune_lab.bench.config import bench_from_dict, load_bench
from dtune_lab.bench.peers import Job, node_shares, peer
from dtune_lab.bench.report import RunRecord, csv_text, markdown_table, summarize
from dtune_lab.testbed import load_scenario
from dtune_lab.testbed.links import site_ends
from dtune_lab.testbed.netns import NS_RE
from dtune_lab.testbed.scenario import scenario_from_dict
from support.paths import SCENARIOS

from dtune.errors import DtuneError

CLUSTER_CMD = ["{python}", "-m", "dtune", "get", "{url}", "-o", "{out}", "--cluster", "{scheduler}"]


def site(**extra: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"node": [{"count": 3, "rate_mbit": 200, "rtt_ms": 20}],
                            "link": [{"rate_mbit": 1000, "rtt_ms": 20}],
                            "dataset": [{"preset": "html", "scale": 0.01}],
                            "tool": [{"tool": "dtune"}]}
    data.update(extra)
    return data


def test_cluster3_is_three_200_mbit_nodes_one_gigabit_server_and_a_one_and_a_three_node_row() -> None:
    cfg = load_bench(SCENARIOS / "cluster3.toml")
    assert [(n.rate_mbit, n.rtt_ms) for n in cfg.scenario.nodes] == [(200, 20)] * 3
    assert [link.rate_mbit for link in cfg.scenario.links] == [1000]
    rows = {t.variant: t for t in cfg.tools}
    assert rows["1-node"].tool == "dtune" and rows["1-node"].nodes == 1
    cluster = rows["3-nodes-cluster"]
    assert cluster.nodes == 3 and cluster.cluster and cluster.command[:4] == ("{python}", "-m", "dtune", "get")
    assert "--cluster" in cluster.command and "{scheduler}" in cluster.command
    (ds,) = cfg.datasets
    assert ds.preset == "mixed"


def test_one_client_scenarios_have_no_nodes_and_keep_their_links() -> None:
    sc = load_scenario(SCENARIOS / "replicas4.toml")
    assert sc.nodes == ()
    assert [(link.rate_mbit, link.rtt_ms) for link in sc.links] == [(400, 20), (200, 30), (100, 40), (50, 60)]


def test_node_tables_repeat_with_count_and_reject_typos() -> None:
    sc = scenario_from_dict({"link": [{"rate_mbit": 1000}],
                             "node": [{"count": 2, "rate_mbit": 200}, {"rate_mbit": 50, "rtt_ms": 80}]})
    assert [n.rate_mbit for n in sc.nodes] == [200, 200, 50] and sc.nodes[2].rtt_ms == 80
    with pytest.raises(DtuneError, match="node 1.*rate_mbt"):
        scenario_from_dict({"link": [{}], "node": [{"rate_mbt": 200}]})
    with pytest.raises(DtuneError, match="count must be between 1 and 64"):
        scenario_from_dict({"link": [{}], "node": [{"count": 0}]})
    with pytest.raises(DtuneError, match="node 1: link: rate_mbit must be > 0"):
        scenario_from_dict({"link": [{}], "node": [{"rate_mbit": 0}]})


@pytest.mark.parametrize(("tool", "message"), [
    ({"tool": "command", "variant": "x", "nodes": 4, "command": ["true"]}, "nodes = 4 but the scenario has 3"),
    ({"tool": "command", "variant": "x", "command": CLUSTER_CMD}, "uses {scheduler} but cluster is not true"),
    ({"tool": "command", "variant": "x"}, "needs command"),
    ({"tool": "dtune", "variant": "x", "command": ["true"]}, "command is for tool"),
    ({"tool": "dtune", "variant": "x", "nodes": 3}, "only tool = \"command\" runs on several nodes"),
    ({"tool": "command", "variant": "x", "cluster": "yes", "command": ["true"]}, "cluster must be true or false"),
])
def test_bad_multi_node_rows_are_errors(tool: dict[str, Any], message: str) -> None:
    with pytest.raises(DtuneError, match=message.replace("{", r"\{").replace("}", r"\}")):
        bench_from_dict(site(tool=[{"tool": "dtune"}, tool]), name="s")


def test_a_cluster_row_needs_nodes() -> None:
    data = site(tool=[{"tool": "command", "cluster": True, "command": ["true"]}])
    del data["node"]
    with pytest.raises(DtuneError, match="cluster = true needs \\[\\[node\\]\\]"):
        bench_from_dict(data, name="s")


def test_shares_split_by_size_and_keep_every_file_once() -> None:
    files = [(f"f{i}", size) for i, size in enumerate([100, 10, 60, 50, 40, 30, 5, 5])]
    shares = node_shares(files, 3)
    assert sorted(f for share in shares for f in share) == sorted(files)
    loads = [sum(s for _, s in share) for share in shares]
    assert max(loads) - min(loads) <= 100  # at most the largest file apart
    assert all(share == sorted(share, key=files.index) for share in shares)  # dataset order kept


def job(**kw: Any) -> Job:
    return Job(dataset="d", files=(("a/x.bin", 10), ("b/y.bin", 20), ("c.bin", 30)),
               bases=("http://10.78.0.2:8080/d/",), listing_bases=("http://10.78.0.2:8081/d/",),
               outdir="/o", workdir="/w", **kw)


def test_a_cluster_command_gets_the_scheduler_and_one_each_command_per_node() -> None:
    cfg = load_bench(SCENARIOS / "cluster3.toml")
    rows = {t.variant: t for t in cfg.tools}
    cmd = peer("command").command(rows["3-nodes-cluster"], job(nodes=3, scheduler="tcp://10.77.0.1:8786"))
    assert cmd.argv[3:] == ["get", "http://10.78.0.2:8080/d/", "-o", "/o", "--cluster", "tcp://10.77.0.1:8786",
                            "--json", "--no-progress"] and not cmd.node_argvs
    each = peer("command").command(rows["3-nodes-static-split"], job(nodes=3))
    assert [a[4] for a in each.node_argvs] == [f"/w/share-node{j}.txt" for j in (1, 2, 3)]
    listed = "".join(each.files.values())
    assert all(f"http://10.78.0.2:8080/d/{rel}" in listed for rel in ("a/x.bin", "b/y.bin", "c.bin"))


def test_a_bad_placeholder_names_the_ones_there_are() -> None:
    data = site(tool=[{"tool": "command", "command": ["{nope}"]}])
    spec = bench_from_dict(data, name="s").tools[0]
    with pytest.raises(DtuneError, match="bad placeholder.*nope.*\\{url\\}"):
        peer("command").command(spec, job())


def record(tool: str, variant: str, nodes: int, mbps: float) -> RunRecord:
    return RunRecord(scenario="s", dataset="d", link="l", tool=tool, variant=variant, run=1, seconds=1.0,
                     bytes=1, mbps=mbps, cpu_seconds=0.1, verified=True, nodes=nodes)


def test_results_have_a_nodes_column_one_for_ordinary_rows() -> None:
    records = [record("dtune", "default", 1, 190.0), record("command", "3-nodes-cluster", 3, 560.0)]
    rows = list(csv.DictReader(io.StringIO(csv_text(records))))
    assert [r["nodes"] for r in rows] == ["1", "3"]
    table = markdown_table(summarize(records))
    assert "| command | 3-nodes-cluster | 3 |" in table and "| dtune | default | 1 |" in table


def test_site_addresses_and_namespace_names() -> None:
    ends = site_ends("dtune-x-sw", ["dtune-x-srv1"], ["dtune-x-node1", "dtune-x-node2"])
    assert [(a.ns, a.addr, b.ns, b.addr) for a, b in ends] == [
        ("dtune-x-sw", "10.78.0.1", "dtune-x-srv1", "10.78.0.2"),
        ("dtune-x-node1", "10.77.0.1", "dtune-x-sw", "10.77.0.2"),
        ("dtune-x-node2", "10.77.1.1", "dtune-x-sw", "10.77.1.2")]
    assert all(NS_RE.match(f"dtune-x-{role}") for role in ("client", "srv2", "node12", "sw"))
    assert not NS_RE.match("dtune-x-nodeA")
