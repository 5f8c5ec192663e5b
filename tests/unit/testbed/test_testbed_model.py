"""Pure parts of the testbed: scenario files, the link model, netem arguments, names.

No namespaces or root needed: the link model (``Direction``) is fed a fake clock.
"""

from __future__ import annotations

import pytest
from dtune_lab.testbed import Link, Scenario, links, load_scenario, scenario_from_dict
from dtune_lab.testbed.emulator import Direction, apply_change
from dtune_lab.testbed.links import NetemLinks, Topology, client_addr, netem_args, server_addr
from dtune_lab.testbed.netns import NS_RE, check_run_id, ns_name
from support.paths import SCENARIOS as SCENARIO_DIR

from dtune.cli import build_parser, main
from dtune.errors import DtuneError

SCENARIOS = ["wan1g-large", "wan1g-small", "wan1g-mixed", "lan", "replicas4"]


# --- scenario files -------------------------------------------------------

@pytest.mark.parametrize("name", SCENARIOS)
def test_shipped_scenarios_load(name: str) -> None:

    sc = load_scenario(SCENARIO_DIR / f"{name}.toml")
    assert sc.name == name
    assert sc.client.tcp_rmem_max == 512 * 1024
    assert sc.mtu == 9000


def test_replicas4_has_four_unequal_links() -> None:

    sc = load_scenario(SCENARIO_DIR / "replicas4.toml")
    assert [(x.rate_mbit, x.rtt_ms) for x in sc.links] == [(400, 20), (200, 30), (100, 40), (50, 60)]


def test_other_tables_are_ignored(tmp_path) -> None:
    f = tmp_path / "s.toml"
    f.write_text('[bench]\nrepeat = 3\n[[dataset]]\npreset = "html"\n[[tool]]\nname = "curl"\n'
                 '[client]\ntcp_rmem_max = 524288\n[[link]]\nrate_mbit = 100\nrtt_ms = 10\nloss = 0.01\n')
    sc = load_scenario(f)
    assert sc.links == (Link(rate_mbit=100, rtt_ms=10, loss=0.01),)
    assert sc.client.tcp_rmem_max == 524288 and sc.client.tcp_wmem_max is None
    assert sc.name == "s"


@pytest.mark.parametrize("toml, message", [
    ("[client]\n", "at least one [[link]]"),
    ("[[link]]\nrate_mbit = 0\n", "rate_mbit must be > 0"),
    ("[[link]]\nrtt = 40\n", "unknown key 'rtt'"),
    ("[[link]]\nloss = 1.5\n", "fraction"),
    ("[[link]]\nrate_mbit = 'fast'\n", "must be a number"),
    ("[[link]]\n[client]\nmtu = 9000.5\n", "must be an integer"),
    ("[[link]]\n[client]\nmtu = 100\n", "mtu must be between"),
    ("[[link]]\n[client]\ntcp_rmem_max = 10\n", "tcp_rmem_max must be between"),
    ("[[link]]\n[server]\nmtu = 1500\n", "unknown key 'mtu'"),
    ("[[link]\n", "not valid TOML"),
])
def test_bad_scenarios_are_one_line_errors(tmp_path, toml: str, message: str) -> None:
    f = tmp_path / "bad.toml"
    f.write_text(toml)
    with pytest.raises(DtuneError, match=message.replace("[", r"\[").replace("]", r"\]")) as info:
        load_scenario(f)
    assert "\n" not in str(info.value)


def test_missing_scenario_file_names_it(tmp_path) -> None:
    with pytest.raises(DtuneError, match="no such file"):
        load_scenario(tmp_path / "nope.toml")


@pytest.mark.parametrize("link, mtu, expected", [
    (Link(rate_mbit=1000, rtt_ms=40), 9000, 5_000_000),         # one BDP
    (Link(rate_mbit=1000, rtt_ms=1), 9000, 16 * 9000),          # floor of 16 MTUs
    (Link(rate_mbit=10, rtt_ms=0), 1500, 16 * 1500),
    (Link(rate_mbit=1000, rtt_ms=40, queue_kb=100), 9000, 102_400),
    (Link(rate_mbit=1000, rtt_ms=40, queue_kb=1), 9000, 9000),  # never below one MTU
])
def test_default_queue_is_one_bdp_with_a_floor(link: Link, mtu: int, expected: int) -> None:
    assert link.queue_bytes(mtu) == expected


def test_scenario_from_dict_builds_hosts() -> None:
    sc = scenario_from_dict({"link": [{"rate_mbit": 50}], "server": {"tcp_wmem_max": 1 << 20},
                             "client": {"tcp_congestion_control": "reno"}})
    assert isinstance(sc, Scenario) and sc.server.tcp_wmem_max == 1 << 20 and sc.mtu == 9000
    assert sc.client.tcp_congestion_control == "reno" and sc.server.tcp_congestion_control is None


@pytest.mark.parametrize("value", ["cu bic", "x" * 20, 3])
def test_bad_congestion_control_names_are_refused(value) -> None:
    with pytest.raises(DtuneError, match="tcp_congestion_control"):
        scenario_from_dict({"link": [{}], "client": {"tcp_congestion_control": value}})


# --- the link model -----------------------------------------------------------

def _direction(**kw) -> Direction:
    args = dict(rate_mbit=8, rtt_ms=20, queue_bytes=10_000, loss=0.0, seed=1)  # 1 MB/s: 1 byte = 1 us
    args.update(kw)
    return Direction(**args)


def test_idle_link_delivers_after_serialisation_plus_half_rtt() -> None:
    d = _direction()
    assert d.admit(100.0, 1000) == pytest.approx(100.0 + 0.001 + 0.010)


def test_back_to_back_packets_queue_behind_each_other() -> None:
    d = _direction()
    dues = [d.admit(100.0, 1000) for _ in range(3)]
    assert dues == pytest.approx([100.011, 100.012, 100.013])


def test_queue_past_limit_is_dropped_tail_first() -> None:
    d = _direction(queue_bytes=3000)
    dues = [d.admit(100.0, 1000) for _ in range(5)]
    assert [x >= 0 for x in dues] == [True, True, True, False, False]
    assert d.queue_drops == 2 and d.packets == 3


def test_queue_drains_at_link_rate() -> None:
    d = _direction(queue_bytes=3000)
    for _ in range(3):
        d.admit(100.0, 1000)
    assert d.admit(100.0, 1000) < 0          # full
    assert d.admit(100.0015, 1000) >= 0      # 1.5 ms later 1.5 packets have left


def test_rate_sets_throughput() -> None:
    d = _direction(rate_mbit=80, queue_bytes=10**9)   # 10 MB/s
    last = 0.0
    for _ in range(1000):
        last = d.admit(0.0, 10_000)
    assert last - 0.010 == pytest.approx(1.0)         # 10 MB took one second


def test_lowering_delay_keeps_packets_in_order() -> None:
    d = _direction()
    first = d.admit(100.0, 1000)
    apply_change(d, {"rtt_ms": 0}, mtu=1500)
    second = d.admit(100.0, 1000)
    assert second >= first


def test_live_change_of_rate_and_auto_queue() -> None:
    d = Direction(rate_mbit=1000, rtt_ms=40, queue_bytes=5_000_000, queue_auto=True)
    apply_change(d, {"rate_mbit": 100, "rtt_ms": 540}, mtu=9000)
    assert d.bytes_per_s == 12.5e6 and d.delay == 0.27
    assert d.qlimit == 6_750_000                       # re-derived: 1 BDP of the new link
    apply_change(d, {"queue_kb": 64}, mtu=9000)
    assert d.qlimit == 65536 and not d.queue_auto
    apply_change(d, {"rate_mbit": 10}, mtu=9000)
    assert d.qlimit == 65536                           # explicit queue stays


def test_random_loss_rate_is_close_to_the_setting() -> None:
    d = _direction(loss=0.1, queue_bytes=10**12)
    results = [d.admit(float(i), 100) for i in range(20_000)]
    lost = sum(r < 0 for r in results)
    assert 1800 < lost < 2200 and d.loss_drops == lost


def test_same_seed_same_losses() -> None:
    a, b = _direction(loss=0.3, seed=7), _direction(loss=0.3, seed=7)
    assert [a.admit(float(i), 10) < 0 for i in range(200)] == [b.admit(float(i), 10) < 0 for i in range(200)]


# --- netem, names, addresses ------------------------------------------------

def test_netem_args_hold_the_in_flight_packets() -> None:
    args = netem_args(Link(rate_mbit=1000, rtt_ms=40, loss=0.01), 9000)
    assert args[:4] == ["delay", "20ms", "rate", "1000mbit"]
    limit = int(args[args.index("limit") + 1])
    assert limit >= (2_500_000 + 5_000_000) / 9000      # one-way BDP + queue
    assert args[-3:] == ["loss", "random", "1%"]


def test_a_netem_change_keeps_what_an_earlier_change_set(monkeypatch) -> None:
    commands: list[list[str]] = []
    monkeypatch.setattr(links.netns, "run_cmd", lambda argv, **kw: commands.append(list(argv)))
    topo = Topology(run_id="t", client_ns="dtune-t-client", server_ns=("dtune-t-srv1",),
                    links=(Link(rate_mbit=1000, rtt_ms=40),), mtu=1500)
    backend = NetemLinks(topo)
    backend.set(0, {"rate_mbit": 250, "rtt_ms": None, "direction": None})
    reply = backend.set(0, {"rtt_ms": 80, "rate_mbit": None, "direction": None})
    assert (reply["rate_mbit"], reply["rtt_ms"]) == (250, 80)
    assert commands[-1][-6:-2] == ["delay", "40ms", "rate", "250mbit"]
    assert [c[2] for c in commands] == ["dtune-t-client", "dtune-t-srv1"] * 2
    assert topo.links[0].rate_mbit == 1000  # the topology itself stays as the run started


def test_addresses_and_names() -> None:
    assert (client_addr(0), server_addr(0), server_addr(3)) == ("10.77.0.1", "10.77.0.2", "10.77.3.2")
    assert ns_name("abc", "srv2") == "dtune-abc-srv2"
    assert NS_RE.match("dtune-abc-srv12").groups() == ("abc", "srv12")
    assert NS_RE.match("dtune-a-b-client") is None
    assert check_run_id("run_1") == "run_1"
    with pytest.raises(DtuneError):
        check_run_id("bad-id")


# --- CLI wiring ----------------------------------------------------------------

def test_testbed_and_dataset_commands_are_registered() -> None:
    text = build_parser().format_help()
    assert "testbed" in text and "dataset" in text


@pytest.mark.parametrize("argv", [["testbed", "--help"], ["testbed", "up", "--help"],
                                  ["testbed", "exec", "--help"], ["dataset", "make", "--help"]])
def test_help_explains(argv, capsys) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 0
    assert "dtune" in capsys.readouterr().out


def test_exec_without_command_is_a_usage_error(capsys) -> None:
    assert main(["testbed", "exec", "client"]) == 2
    assert "give a command" in capsys.readouterr().err
