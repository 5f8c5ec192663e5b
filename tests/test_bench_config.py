"""The [bench], [[profile]], [[dataset]] and [[tool]] tables of scenario files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dtune.bench.config import bench_from_dict, link_label, load_bench
from dtune.errors import DtuneError
from dtune.testbed.scenario import Link

SCENARIOS = Path(__file__).parent.parent / "bench" / "scenarios"
# The scenarios with dtune bench tables (other files there feed other experiments).
BENCH_SCENARIOS = ["lan", "replicas4", "wan1g-large", "wan1g-mixed", "wan1g-small"]


def base(**extra: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"link": [{"rate_mbit": 1000, "rtt_ms": 40}],
                            "dataset": [{"preset": "html", "scale": 0.01}],
                            "tool": [{"tool": "dtune"}]}
    data.update(extra)
    return data


@pytest.mark.parametrize("name", BENCH_SCENARIOS)
def test_every_shipped_scenario_parses_and_has_dtune_defaults(name: str) -> None:
    cfg = load_bench(SCENARIOS / f"{name}.toml")
    assert cfg.datasets and cfg.tools and cfg.runs >= 1
    assert any(t.tool == "dtune" and t.variant == "default" for t in cfg.tools)
    assert any(t.tool != "dtune" for t in cfg.tools)


def test_replicas4_gives_aria2c_every_uri_and_four_links() -> None:
    cfg = load_bench(SCENARIOS / "replicas4.toml")
    assert len(cfg.scenario.links) == 4
    assert {t.variant for t in cfg.tools if t.tool == "aria2c"} >= {"mdtp-paper-4uris"}


def test_defaults() -> None:
    cfg = bench_from_dict(base(), name="x")
    assert (cfg.runs, cfg.server, cfg.port) == (3, "dtune", 8080)
    assert [p.name for p in cfg.profiles] == ["1000M-40ms"]
    assert cfg.datasets[0].name == "html" and cfg.tools[0].variant == "default"


def test_link_label_names_every_link() -> None:
    assert link_label([Link(400, 20), Link(50, 60)]) == "400M-20ms+50M-60ms"


def test_profiles_apply_to_every_link_or_per_link() -> None:
    data = base(link=[{"rate_mbit": 100}, {"rate_mbit": 50}],
                profile=[{"name": "slow", "rtt_ms": 80},
                         {"name": "mixed", "links": [{"rate_mbit": 10}, {}]}])
    cfg = bench_from_dict(data)
    slow, mixed = cfg.profiles[1:]
    assert slow.links == ({"rtt_ms": 80.0}, {"rtt_ms": 80.0})
    assert mixed.links == ({"rate_mbit": 10.0}, {})


@pytest.mark.parametrize("change, message", [
    ({"bench": {"runs": 0}}, "runs must be an integer"),
    ({"bench": {"server": "apache"}}, "server must be one of"),
    ({"bench": {"rnus": 3}}, "unknown key 'rnus'"),
    ({"dataset": []}, "needs at least one \\[\\[dataset\\]\\]"),
    ({"dataset": [{"preset": "nope"}]}, "unknown preset"),
    ({"dataset": [{"preset": "html", "name": "../x"}]}, "plain directory name"),
    ({"dataset": [{"preset": "html"}, {"preset": "html"}]}, "two datasets named 'html'"),
    ({"tool": []}, "needs at least one \\[\\[tool\\]\\]"),
    ({"tool": [{"tool": "scp"}]}, "unknown tool 'scp'"),
    ({"tool": [{"tool": "curl", "args": "-Z"}]}, "args must be a list of strings"),
    ({"tool": [{"tool": "curl"}, {"tool": "curl"}]}, "two tool variants named 'curl default'"),
    ({"tool": [{"tool": "curl", "datasets": ["video"]}]}, "no \\[\\[dataset\\]\\] named 'video'"),
    ({"tool": [{"tool": "curl", "runs": 0}]}, "runs must be an integer"),
    ({"profile": [{"name": "p"}]}, "changes nothing"),
    ({"profile": [{"name": "p", "rtt_ms": -1}]}, "rtt_ms must be between"),
    ({"profile": [{"name": "p", "links": [{}, {}]}]}, "links must list 1 tables"),
])
def test_mistakes_are_one_line_errors(change: dict[str, Any], message: str) -> None:
    with pytest.raises(DtuneError, match=message):
        bench_from_dict(base(**change), name="x")


def test_link_tables_are_still_checked_by_the_testbed() -> None:
    with pytest.raises(DtuneError, match="unknown key 'rtt'"):
        bench_from_dict(base(link=[{"rate_mbit": 1, "rtt": 2}]))


def test_missing_file_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(DtuneError, match="no such file"):
        load_bench(tmp_path / "nope.toml")
