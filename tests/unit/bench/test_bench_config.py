"""The [bench], [[profile]], [[dataset]] and [[tool]] tables of scenario files."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest
from dtune_lab.bench.config import bench_from_dict, link_label, load_bench
from dtune_lab.testbed.scenario import Link
from support.paths import SCENARIOS

from dtune.errors import DtuneError

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
    ({"profile": [{"name": "p", "during": []}]}, "profile 1: during must be a non-empty array"),
    ({"profile": [{"name": "p", "during": {"at_fraction": 0.5}}]}, "during must be a non-empty array"),
    ({"profile": [{"name": "p", "during": [7]}]}, "profile 1: during 1: must be a table"),
    ({"profile": [{"name": "p", "during": [{"link": 1, "rate_mbit": 1}]}]}, "during 1: needs at_fraction"),
    ({"profile": [{"name": "p", "during": [{"at_fraction": 0.5, "rate_mbit": 1}]}]}, "during 1: needs link"),
    ({"profile": [{"name": "p", "during": [{"at_fraction": 0, "link": 1, "rate_mbit": 1}]}]},
     "during 1: at_fraction must be a number between 0 and 1"),
    ({"profile": [{"name": "p", "during": [{"at_fraction": 1, "link": 1, "rate_mbit": 1}]}]},
     "at_fraction must be a number between 0 and 1"),
    ({"profile": [{"name": "p", "during": [{"at_fraction": "half", "link": 1, "rate_mbit": 1}]}]},
     "at_fraction must be a number between 0 and 1"),
    ({"profile": [{"name": "p", "during": [{"at_fraction": True, "link": 1, "rate_mbit": 1}]}]},
     "at_fraction must be a number between 0 and 1"),
    ({"profile": [{"name": "p", "during": [{"at_fraction": 0.5, "link": 2, "rate_mbit": 1}]}]},
     "during 1: link must be an integer in 1..1"),
    ({"profile": [{"name": "p", "during": [{"at_fraction": 0.5, "link": 0, "rate_mbit": 1}]}]},
     "link must be an integer in 1..1"),
    ({"profile": [{"name": "p", "during": [{"at_fraction": 0.5, "link": 1}]}]}, "during 1: changes nothing"),
    ({"profile": [{"name": "p", "during": [{"at_fraction": 0.5, "link": 1, "rate_mbit": 0}]}]},
     "during 1: link: rate_mbit must be > 0"),
    ({"profile": [{"name": "p", "during": [{"at_fraction": 0.5, "link": 1, "rate": 10}]}]},
     "during 1: unknown key 'rate'"),
    ({"dataset": [{"preset": "html", "small_factor": 2}]}, "dataset 1: small_factor needs small_below"),
    ({"dataset": [{"preset": "html", "small_below": 0, "small_factor": 2}]},
     "dataset 1: small_below must be an integer"),
    ({"dataset": [{"preset": "html", "small_below": "1k", "small_factor": 2}]}, "small_below must be an integer"),
    ({"dataset": [{"preset": "html", "small_below": 1000, "small_factor": 0}]},
     "dataset 1: small_factor must be an integer"),
    ({"dataset": [{"preset": "html", "small_below": 1000, "small_factor": 2.5}]}, "small_factor must be an integer"),
    ({"dataset": [{"preset": "html", "small_below": 1000, "small_factor": 10**6}]}, "small_factor must be an integer"),
])
def test_mistakes_are_one_line_errors(change: dict[str, Any], message: str) -> None:
    with pytest.raises(DtuneError, match=message):
        bench_from_dict(base(**change), name="x")


def test_mid_run_changes_are_parsed_0_based_and_sorted_by_fraction() -> None:
    data = base(link=[{"rate_mbit": 400}, {"rate_mbit": 200}],
                profile=[{"name": "drops", "rtt_ms": 40,
                          "during": [{"at_fraction": 0.6, "link": 1, "rtt_ms": 80},
                                     {"at_fraction": 0.3, "link": 2, "rate_mbit": 50, "loss": 0.01}]}])
    (profile,) = bench_from_dict(data).profiles[1:]
    assert profile.links == ({"rtt_ms": 40.0}, {"rtt_ms": 40.0})
    assert [(c.at_fraction, c.link, c.values) for c in profile.during] == [
        (0.3, 1, {"rate_mbit": 50.0, "loss": 0.01}), (0.6, 0, {"rtt_ms": 80.0})]


def one_link_toml(profile: str) -> dict[str, Any]:
    """A scenario file's tables: one 400 Mbit/s link, the html preset, dtune, and this [[profile]] text."""
    return tomllib.loads(f"""
        [[link]]
        rate_mbit = 400
        [[profile]]
        {profile}
        [[dataset]]
        preset = "html"
        [[tool]]
        tool = "dtune"
    """)


def test_a_profile_may_have_only_mid_run_changes() -> None:
    cfg = bench_from_dict(one_link_toml("""
        name = "srv1-quarter-at-30pct"
        during = [{at_fraction = 0.3, link = 1, rate_mbit = 100}]"""))
    base_profile, profile = cfg.profiles
    assert base_profile.during == ()
    assert profile.name == "srv1-quarter-at-30pct" and profile.links == ({},)
    assert [(c.at_fraction, c.link, c.values) for c in profile.during] == [(0.3, 0, {"rate_mbit": 100.0})]


def test_mid_run_changes_may_be_written_as_an_array_of_tables() -> None:
    (change,) = bench_from_dict(one_link_toml("""
        name = "p"
        [[profile.during]]
        at_fraction = 0.5
        link = 1
        queue_kb = 64""")).profiles[1].during
    assert (change.at_fraction, change.link, change.values) == (0.5, 0, {"queue_kb": 64.0})


def test_small_files_settings_default_to_no_copies_and_are_kept() -> None:
    cfg = bench_from_dict(base(dataset=[{"preset": "html"},
                                        {"preset": "mixed", "small_below": 100000, "small_factor": 2},
                                        {"preset": "genome", "small_below": 100000}]))
    html, mixed, genome = cfg.datasets
    assert (html.small_below, html.small_factor) == (None, 1)
    assert (mixed.small_below, mixed.small_factor) == (100000, 2)
    assert (genome.small_below, genome.small_factor) == (100000, 1)


def test_link_tables_are_still_checked_by_the_testbed() -> None:
    with pytest.raises(DtuneError, match="unknown key 'rtt'"):
        bench_from_dict(base(link=[{"rate_mbit": 1, "rtt": 2}]))


def test_missing_file_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(DtuneError, match="no such file"):
        load_bench(tmp_path / "nope.toml")
