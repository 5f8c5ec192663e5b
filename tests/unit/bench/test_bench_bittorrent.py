"""The BitTorrent baseline's plan as data: piece size, every process's argv, readiness, the adapter (pure)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from dtune_lab.bench.bittorrent import (
    MAX_PIECES,
    PEER_PORT,
    STALL_TIMEOUT_S,
    Swarm,
    SwarmPlan,
    announce_url,
    client_argv,
    mktorrent_argv,
    piece_exponent,
    seeded,
    swarm_plan,
    uploaded_bytes,
)
from dtune_lab.bench.config import ToolSpec, bench_from_dict
from dtune_lab.bench.peers import Job, is_peer, peer
from dtune_lab.bench.urls import expected_paths

from dtune.errors import DtuneError

MB = 1_000_000


@pytest.mark.parametrize("total, exp", [
    (1, 18), (210 * MB, 18), (510 * MB, 18), (2048 << 18, 18), ((2048 << 18) + 1, 19),
    (5 * 2**30, 22), (10**15, 24),
])
def test_pieces_are_256_kib_until_a_torrent_would_have_too_many(total: int, exp: int) -> None:
    assert piece_exponent(total) == exp
    assert exp == 24 or -(-total // (1 << exp)) <= MAX_PIECES


def test_mktorrent_makes_a_private_dated_nothing_multi_file_torrent_of_the_directory() -> None:
    argv = mktorrent_argv("/w/data/granules-120", "granules-120", "/w/torrents/g.torrent",
                          "http://10.77.0.1:6969/announce", 510 * MB)
    assert argv[0] == "mktorrent" and argv[-1] == "/w/data/granules-120"
    assert {"-p", "-d"} <= set(argv)
    assert argv[argv.index("-l") + 1] == "18" and argv[argv.index("-n") + 1] == "granules-120"
    assert argv[argv.index("-a") + 1] == "http://10.77.0.1:6969/announce"
    assert argv[argv.index("-o") + 1] == "/w/torrents/g.torrent"


def test_the_plan_puts_the_tracker_in_the_client_and_one_bound_seeder_per_replica() -> None:
    servers = [("dtune-x-srv1", "10.77.0.2", "10.77.0.1"), ("dtune-x-srv2", "10.77.1.2", "10.77.1.1")]
    plan = swarm_plan("/w/t/ds.torrent", "/w/data", "dtune-x-client", servers)
    ns, argv = plan.tracker
    assert ns == "dtune-x-client" and argv[:3] == [sys.executable, "-m", "dtune_lab.bench.tracker"]
    assert argv[argv.index("--host") + 1] == "0.0.0.0"  # every link's client address
    assert [(s[0], s[1]) for s in plan.seeders] == [(n, a) for n, a, _ in servers]
    for (_ns, addr, sargv), (_, _, client_addr) in zip(plan.seeders, servers, strict=True):
        assert sargv[0] == "aria2c" and sargv[-1] == "/w/t/ds.torrent"
        assert sargv[sargv.index("-d") + 1] == "/w/data"  # the directory the HTTP servers serve
        assert f"--interface={addr}" in sargv and "--seed-ratio=0.0" in sargv
        assert {"-V", "--bt-seed-unverified", "--enable-dht=false", "--bt-enable-lpd=false",
                "--enable-peer-exchange=false", "--bt-exclude-tracker=*"} <= set(sargv)
        # announced to the client's address on this replica's own link: the only one it can reach
        assert f"--bt-tracker={announce_url(client_addr)}" in sargv


def test_the_client_exits_once_complete_with_the_rows_args_before_the_torrent() -> None:
    argv = client_argv("/w/t/ds.torrent", "/w/run-3/out", ["--bt-max-peers=8"])
    assert argv[0] == "aria2c" and argv[-2:] == ["--bt-max-peers=8", "/w/t/ds.torrent"]
    assert argv[argv.index("-d") + 1] == "/w/run-3/out"
    assert {"--seed-time=0", f"--listen-port={PEER_PORT}", "--enable-dht=false", "--no-conf",
            f"--bt-stop-timeout={STALL_TIMEOUT_S}"} <= set(argv)  # a dead swarm fails in a minute


def _line(**event: object) -> str:
    return json.dumps(event)


def test_ready_once_every_seeder_announced_itself_complete_for_this_torrent() -> None:
    h = "ab" * 20
    lines = [_line(event="listening", port=6969), "not json", "[1]",
             _line(event="announce", info_hash=h, ip="10.77.0.2", left=0, kind="started"),
             _line(event="announce", info_hash=h, ip="10.77.1.2", left=5, kind="started"),   # not complete
             _line(event="announce", info_hash="cd" * 20, ip="10.77.2.2", left=0),           # another torrent
             _line(event="announce", info_hash=h, ip="10.77.9.9", left=0)]                   # not a seeder
    assert seeded(lines, h, ["10.77.0.2", "10.77.1.2", "10.77.2.2"]) == {"10.77.0.2"}


@pytest.mark.parametrize("reply, sent", [
    ('{"id":"dtune","jsonrpc":"2.0","result":[{"uploadLength":"123456"}]}', 123456),
    ('{"result":[{"uploadLength":"1"},{"uploadLength":"2"}]}', 3),
    ('{"result":[]}', 0),
    ("", None), ("<html>", None), ('{"error":{"code":1}}', None), ('{"result":[{"uploadLength":"x"}]}', None),
    ('{"result":5}', None),
])
def test_a_seeders_upload_count_from_its_rpc_reply(reply: str, sent: int | None) -> None:
    assert uploaded_bytes(reply) == sent


def _job(torrent: str = "/w/t/granules.torrent") -> Job:
    return Job(dataset="granules", files=(("g/0001.h5", 10), ("g/0002.h5", 20)), bases=("http://a/", "http://b/"),
               listing_bases=("http://a/", "http://b/"), outdir="/w/out", workdir="/w/lists", torrent=torrent)


def test_the_adapter_downloads_the_runs_torrent_into_a_tree_under_the_dataset_name() -> None:
    spec = ToolSpec("bittorrent", "paper-baseline-4-seeders")
    cmd = peer("bittorrent").command(spec, _job())
    assert cmd.argv == client_argv("/w/t/granules.torrent", "/w/out")
    assert cmd.layout == "tree" and cmd.root == "/w/out/granules" and cmd.files == {}
    assert expected_paths(cmd.layout, cmd.root, ["g/0001.h5"]) == {"g/0001.h5": Path("/w/out/granules/g/0001.h5")}
    assert peer("bittorrent").mirrors(spec) and is_peer("bittorrent")
    assert not peer("bittorrent").mirrors(ToolSpec("bittorrent", "srv1", mirrors=False))
    with pytest.raises(DtuneError, match="no torrent"):
        peer("bittorrent").command(spec, _job(torrent=""))


def test_the_row_is_skipped_when_mktorrent_or_aria2c_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    real = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name: None if name == "mktorrent" else real(name))
    reason = peer("bittorrent").missing()
    assert reason is not None and "mktorrent" in reason
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/" + name)
    assert peer("bittorrent").missing() is None


def test_the_bench_skips_the_row_with_the_reason_when_mktorrent_is_missing(monkeypatch: pytest.MonkeyPatch,
                                                                          tmp_path: Path) -> None:
    from dtune_lab.bench.runner import Bench
    cfg = bench_from_dict({"link": [{"rate_mbit": 100}, {"rate_mbit": 50}], "dataset": [{"preset": "html"}],
                           "tool": [{"tool": "dtune"}, {"tool": "bittorrent", "variant": "paper-baseline"}]})
    monkeypatch.setattr(shutil, "which", lambda name: None if name == "mktorrent" else "/usr/bin/" + name)
    said: list[str] = []
    bench = Bench(cfg, tmp_path, echo=said.append)
    assert [t.tool for t in bench.available_tools()] == ["dtune"]
    reason = "mktorrent not installed (the BitTorrent baseline needs aria2c and mktorrent)"
    assert said == [f"bench: skipping bittorrent paper-baseline: {reason}"]
    assert bench.skipped == [{"tool": "bittorrent", "variant": "paper-baseline", "reason": reason}]


def test_a_scenario_row_of_tool_bittorrent_parses() -> None:
    cfg = bench_from_dict({"link": [{"rate_mbit": 100}, {"rate_mbit": 50}], "dataset": [{"preset": "html"}],
                           "tool": [{"tool": "bittorrent", "variant": "paper-baseline-2-seeders"}]})
    assert cfg.tools[0].label == "bittorrent paper-baseline-2-seeders"


@pytest.mark.parametrize("name", ["replicas4", "replicas4-dataset", "mdtp-filesize", "mdtp-latency",
                                  "mdtp-throttle"])
def test_the_multi_source_scenarios_carry_the_paper_baseline_row(name: str) -> None:
    from dtune_lab.bench.config import load_bench
    cfg = load_bench(Path(__file__).parents[3] / "scenarios" / f"{name}.toml")
    rows = [t for t in cfg.tools if t.tool == "bittorrent"]
    assert [t.variant for t in rows] == ["paper-baseline-4-seeders"] and len(cfg.scenario.links) == 4
    assert peer("bittorrent").mirrors(rows[0])  # all four replicas seed


class _LocalTestbed:
    """Runs a swarm's processes here instead of in namespaces (the tracker on loopback only)."""

    def popen(self, ns: str, argv: list[str], **kwargs: object) -> subprocess.Popen[bytes]:
        return subprocess.Popen(argv, start_new_session=True, **kwargs)  # type: ignore[call-overload]


def test_a_seeder_that_dies_fails_the_start_with_its_last_words_and_nothing_is_left(tmp_path: Path) -> None:
    tracker = [sys.executable, "-m", "dtune_lab.bench.tracker", "--host", "127.0.0.1", "--port", "0"]
    dead = ["sh", "-c", "echo 'Exception: no such file'; exit 3"]
    plan = SwarmPlan(tracker=("client", tracker), seeders=(("srv1", "127.0.0.2", dead),))
    swarm = Swarm(_LocalTestbed(), plan, b"\x01" * 20, tmp_path / "bt", ready_timeout=20)  # type: ignore[arg-type]
    with pytest.raises(DtuneError, match=r"seeder 1 \(srv1\) exited \(3\).*no such file"):
        swarm.start()
    assert swarm.procs == []  # stopped and reaped: the tracker too
    assert '"listening"' in (tmp_path / "bt" / "tracker.log").read_text()


def test_a_swarm_that_never_gets_ready_times_out(tmp_path: Path) -> None:
    tracker = [sys.executable, "-m", "dtune_lab.bench.tracker", "--host", "127.0.0.1", "--port", "0"]
    idle = ["sleep", "30"]  # alive, but never announces
    plan = SwarmPlan(tracker=("client", tracker), seeders=(("srv1", "127.0.0.2", idle),))
    swarm = Swarm(_LocalTestbed(), plan, b"\x01" * 20, tmp_path / "bt", ready_timeout=1.5)  # type: ignore[arg-type]
    procs: list[subprocess.Popen[bytes]] = []
    real_start = swarm._start

    def start(*args: object) -> object:
        p = real_start(*args)  # type: ignore[arg-type]
        procs.append(p.proc)
        return p
    swarm._start = start  # type: ignore[method-assign]
    with pytest.raises(DtuneError, match="still waiting for all 1 seeders to announce"):
        with swarm:
            pass
    assert len(procs) == 2 and all(p.returncode is not None for p in procs)
