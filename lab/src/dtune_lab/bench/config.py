"""The benchmark tables of a scenario file, next to the testbed's ``[client]`` / ``[[link]]``.

::

    [bench]
    runs = 3                 # repetitions of every (tool variant x dataset x link profile)
    server = "dtune"         # "dtune" (dtune serve) or "nginx", in every server namespace
    port = 8080              # the servers' port (nginx also serves an HTML listing on port + 1)
    timeout_s = 600          # one client run is killed (and recorded failed) after this long
    link = "1g-40ms"         # name of the scenario's own link profile (default: from the links)

    [[profile]]              # optional: more link profiles, applied live between runs
    name = "1g-80ms"
    rtt_ms = 80              # rate_mbit / rtt_ms / loss / queue_kb for every link, or
    # links = [{rate_mbit = 400}, {rate_mbit = 200}]   per link (srv1, srv2, ...)
    during = [{at_fraction = 0.3, link = 1, rate_mbit = 100}]
                             # optional, mid-run changes: link 1 (srv1) drops to 100 Mbit/s once
                             # 30 % of the dataset's bytes crossed the links towards the client
                             # (emulator "down" counters, all links, headers included; 0 < x < 1).
                             # Keys: at_fraction, link, rate_mbit / rtt_ms / loss / queue_kb.
                             # A profile may have only `during`. Each run starts and ends with
                             # the profile's own links; results.csv's changes_at holds the
                             # seconds after client start at which changes fired (at_fraction
                             # order). Needs the TUN back-end, which the benchmark then uses.

    [[dataset]]
    preset = "html"          # see dtune_lab.testbed.datasets
    scale = 1.0
    seed = 0
    files = 1                # optional: keep only the first N files of the plan
    name = "html"            # default: the preset
    small_below = 100000     # optional: files smaller than this many bytes count as small ...
    small_factor = 2         # ... and each gets small_factor - 1 copies of the same size
                             # (obj-00012.dat -> obj-00012-copy1.dat; default 1: none);
                             # applied after `files`

    [[tool]]
    tool = "aria2c"          # dtune, aria2c, curl, wget, lftp, rclone, bittorrent (the MDTP
                             # paper's baseline: every server seeds a torrent of the dataset,
                             # aria2c downloads it; needs mktorrent; see bench.bittorrent)
    variant = "x16"          # default: "default"
    args = ["-x16", "-s16", "-j16"]
    mode = "..."             # tool-specific (dtune: auto/dir/list; lftp: mirror/pget)
    mirrors = true           # give every server's URL (aria2c default; dtune: --mirror)
    datasets = ["html"]      # optional: only these datasets
    runs = 1                 # optional: fewer repetitions than [bench] runs (for a tool
                             # that is an order of magnitude slower than the rest)

    [[tool]]                 # a command of the scenario's own, e.g. a transfer over several nodes
    tool = "command"
    variant = "3-nodes-cluster"
    nodes = 3                # how many of the scenario's [[node]]s the row uses (results.csv
                             # "nodes"; default 1; more than 1 needs [[node]] tables)
    cluster = true           # start a Dask scheduler in node1 and a worker inside each of
                             # those nodes before the run ({scheduler} is its address)
    mode = "node1"           # run the command in node1 (default), or "each": in every node
                             # of the row at once, each with its own share of the files
    command = ["{python}", "-m", "dtune", "get", "{url}", "-o", "{out}", "--cluster", "{scheduler}"]
                             # placeholders: {python} {url} (the dataset directory on srv1)
                             # {out} {scheduler} {share} (mode "each": a URL list of this
                             # node's files, aria2c input format) {node} (1-based) {nodes}

Unknown keys are errors, as in the testbed's tables: a typo would silently
change an experiment.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dtune.errors import DtuneError
from dtune_lab.testbed.datasets import MAX_SMALL_FACTOR, PRESETS
from dtune_lab.testbed.scenario import MAX_NODES, Link, Scenario, check_link_values, scenario_from_dict
from dtune_lab.tomlfile import number, read_toml, table, tables

SERVERS = ("dtune", "nginx")
TOOLS = ("dtune", "aria2c", "curl", "wget", "lftp", "rclone", "bittorrent", "command")
# Three runs is the least that gives a median that one outlier cannot move.
DEFAULT_RUNS = 3
DEFAULT_PORT = 8080
# Long enough for one 300 MB file at a single window-limited stream (~70 Mbit/s
# on the 40 ms profiles, ~35 s) many times over; short enough that a hung peer
# does not eat the afternoon.
DEFAULT_TIMEOUT_S = 600.0

_BENCH_KEYS = {"runs", "server", "port", "timeout_s", "link"}
_PROFILE_KEYS = {"name", "rate_mbit", "rtt_ms", "loss", "queue_kb", "links", "during"}
_LINK_VALUE_KEYS = {"rate_mbit", "rtt_ms", "loss", "queue_kb"}
_CHANGE_KEYS = {"at_fraction", "link"} | _LINK_VALUE_KEYS
_DATASET_KEYS = {"name", "preset", "scale", "seed", "files", "small_below", "small_factor"}
_TOOL_KEYS = {"tool", "variant", "args", "mode", "mirrors", "datasets", "runs", "nodes", "cluster", "command"}


@dataclass(frozen=True, slots=True)
class LinkChange:
    """A mid-run change: link ``link`` (0-based) gets ``values`` once ``at_fraction`` of the bytes passed."""

    at_fraction: float
    link: int
    values: dict[str, float]


@dataclass(frozen=True, slots=True)
class Profile:
    """A named set of link values; ``links[i]`` is applied to link i (None: unchanged).

    ``during``: changes made while a client runs, in ``at_fraction`` order.
    """

    name: str
    links: tuple[dict[str, float], ...]
    during: tuple[LinkChange, ...] = ()


@dataclass(frozen=True, slots=True)
class DatasetSpec:
    name: str
    preset: str
    scale: float = 1.0
    seed: int = 0
    files: int | None = None
    small_below: int | None = None
    small_factor: int = 1


@dataclass(frozen=True, slots=True)
class ToolSpec:
    tool: str
    variant: str = "default"
    args: tuple[str, ...] = ()
    mode: str | None = None
    mirrors: bool | None = None
    datasets: tuple[str, ...] | None = None
    runs: int | None = None
    # the client nodes the row runs on (1: the client, or node1 of a site)
    nodes: int = 1
    # start a Dask scheduler (node1) and one worker per node of the row before each run
    cluster: bool = False
    # tool "command": the argv template (see the module docstring for placeholders)
    command: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return f"{self.tool} {self.variant}"


@dataclass(frozen=True, slots=True)
class BenchConfig:
    """Everything ``dtune bench`` reads from one scenario file."""

    name: str
    scenario: Scenario
    runs: int = DEFAULT_RUNS
    server: str = "dtune"
    port: int = DEFAULT_PORT
    timeout_s: float = DEFAULT_TIMEOUT_S
    profiles: tuple[Profile, ...] = ()
    datasets: tuple[DatasetSpec, ...] = ()
    tools: tuple[ToolSpec, ...] = field(default=())


def link_label(links: tuple[Link, ...] | list[Link]) -> str:
    """A short name for a set of links: ``1000M-40ms``, or ``400M-20ms+200M-30ms`` for several."""
    return "+".join(f"{link.rate_mbit:g}M-{link.rtt_ms:g}ms" for link in links)


def _int(where: str, key: str, value: Any, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise DtuneError(f"{where}: {key} must be an integer in {lo}..{hi}, got {value!r}")
    return value


def _num(where: str, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise DtuneError(f"{where}: {key} must be a positive number, got {value!r}")
    return float(value)


def _str(where: str, key: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise DtuneError(f"{where}: {key} must be a non-empty string, got {value!r}")
    return value


def _str_list(where: str, key: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise DtuneError(f"{where}: {key} must be a list of strings, got {value!r}")
    return tuple(value)


def _link_values(where: str, raw: dict[str, Any]) -> dict[str, float]:
    values = {key: number(where, key, raw[key]) for key in _LINK_VALUE_KEYS & set(raw)}
    try:
        check_link_values(**values)
    except DtuneError as exc:
        raise DtuneError(f"{where}: {exc}") from None
    return values


def _change(where: str, raw: Any, n_links: int) -> LinkChange:
    raw = table(where, raw, _CHANGE_KEYS)
    if "at_fraction" not in raw:
        raise DtuneError(f"{where}: needs at_fraction (the share of the dataset's bytes, 0 < x < 1)")
    fraction = raw["at_fraction"]
    if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not 0 < fraction < 1:
        raise DtuneError(f"{where}: at_fraction must be a number between 0 and 1 (exclusive), got {fraction!r}")
    if "link" not in raw:
        raise DtuneError(f"{where}: needs link (1-based: 1 is srv1)")
    link = _int(where, "link", raw["link"], 1, n_links)
    values = _link_values(where, raw)
    if not values:
        raise DtuneError(f"{where}: changes nothing (set rate_mbit, rtt_ms, loss or queue_kb)")
    return LinkChange(at_fraction=float(fraction), link=link - 1, values=values)


def _profile(where: str, raw: Any, n_links: int) -> Profile:
    raw = table(where, raw, _PROFILE_KEYS)
    name = _str(where, "name", raw.get("name"))
    common = _link_values(where, raw)
    during: tuple[LinkChange, ...] = ()
    if "during" in raw:
        changes = raw["during"]
        if not isinstance(changes, list) or not changes:
            got = "an empty array" if changes == [] else f"a {type(changes).__name__}"
            raise DtuneError(f"{where}: during must be a non-empty array of tables, got {got}")
        during = tuple(sorted((_change(f"{where}: during {i + 1}", c, n_links) for i, c in enumerate(changes)),
                              key=lambda c: c.at_fraction))
    if "links" in raw:
        if common:
            raise DtuneError(f"{where}: give either per-link 'links' or values for every link, not both")
        per = raw["links"]
        if not isinstance(per, list) or len(per) != n_links:
            raise DtuneError(f"{where}: links must list {n_links} tables (one per [[link]])")
        links = tuple(_link_values(f"{where}: link {i + 1}", table(f"{where}: link {i + 1}", t, _LINK_VALUE_KEYS))
                      for i, t in enumerate(per))
    else:
        if not common and not during:
            raise DtuneError(f"{where}: changes nothing (set rate_mbit, rtt_ms, loss, queue_kb or during)")
        links = tuple(dict(common) for _ in range(n_links))
    return Profile(name=name, links=links, during=during)


def _dataset(where: str, raw: Any) -> DatasetSpec:
    raw = table(where, raw, _DATASET_KEYS)
    preset = _str(where, "preset", raw.get("preset"))
    if preset not in PRESETS:
        raise DtuneError(f"{where}: unknown preset {preset!r} (have {', '.join(PRESETS)})")
    name = _str(where, "name", raw.get("name", preset))
    if "/" in name or name.startswith(".") or name != name.strip():
        raise DtuneError(f"{where}: name {name!r} must be a plain directory name")
    files = raw.get("files")
    below = raw.get("small_below")
    if below is not None:
        below = _int(where, "small_below", below, 1, 2**63)
    factor = _int(where, "small_factor", raw.get("small_factor", 1), 1, MAX_SMALL_FACTOR)
    if "small_factor" in raw and below is None:
        raise DtuneError(f"{where}: small_factor needs small_below (the size in bytes under which "
                         "a file counts as small)")
    return DatasetSpec(
        name=name, preset=preset,
        scale=_num(where, "scale", raw.get("scale", 1.0)),
        seed=_int(where, "seed", raw.get("seed", 0), 0, 2**63),
        files=None if files is None else _int(where, "files", files, 1, 10**7),
        small_below=below, small_factor=factor,
    )


def _tool(where: str, raw: Any, dataset_names: set[str], n_nodes: int = 0) -> ToolSpec:
    raw = table(where, raw, _TOOL_KEYS)
    tool = _str(where, "tool", raw.get("tool"))
    if tool not in TOOLS:
        raise DtuneError(f"{where}: unknown tool {tool!r} (have {', '.join(TOOLS)})")
    datasets = None
    if "datasets" in raw:
        datasets = _str_list(where, "datasets", raw["datasets"])
        unknown = sorted(set(datasets) - dataset_names)
        if unknown:
            raise DtuneError(f"{where}: no [[dataset]] named {unknown[0]!r}")
    mirrors = raw.get("mirrors")
    if mirrors is not None and not isinstance(mirrors, bool):
        raise DtuneError(f"{where}: mirrors must be true or false")
    mode = raw.get("mode")
    runs = raw.get("runs")
    cluster = raw.get("cluster", False)
    if not isinstance(cluster, bool):
        raise DtuneError(f"{where}: cluster must be true or false")
    command = _str_list(where, "command", raw["command"]) if "command" in raw else ()
    if tool == "command" and not command:
        raise DtuneError(f"{where}: tool \"command\" needs command = [argv template]")
    if tool != "command" and command:
        raise DtuneError(f"{where}: command is for tool = \"command\" only (use args for {tool})")
    if any("{scheduler}" in part for part in command) and not cluster:
        raise DtuneError(f"{where}: command uses {{scheduler}} but cluster is not true")
    nodes = _int(where, "nodes", raw.get("nodes", 1), 1, MAX_NODES)
    if tool != "command" and (nodes > 1 or cluster):
        raise DtuneError(f"{where}: only tool = \"command\" runs on several nodes or a cluster")
    if nodes > max(n_nodes, 1):
        have = f"{n_nodes} [[node]] tables" if n_nodes else "no [[node]] tables"
        raise DtuneError(f"{where}: nodes = {nodes} but the scenario has {have}")
    if cluster and not n_nodes:
        raise DtuneError(f"{where}: cluster = true needs [[node]] tables (the workers run inside nodes)")
    return ToolSpec(tool=tool, variant=_str(where, "variant", raw.get("variant", "default")),
                    args=_str_list(where, "args", raw.get("args", [])),
                    mode=None if mode is None else _str(where, "mode", mode),
                    mirrors=mirrors, datasets=datasets,
                    runs=None if runs is None else _int(where, "runs", runs, 1, 1000),
                    nodes=nodes, cluster=cluster, command=command)


def bench_from_dict(data: dict[str, Any], *, name: str = "custom") -> BenchConfig:
    """Parse the benchmark tables (and, through the testbed, the link tables)."""
    scenario = scenario_from_dict(data, name=name)
    where = f"scenario {name}"
    bench = table(f"{where}: [bench]", data.get("bench", {}), _BENCH_KEYS)
    server = bench.get("server", "dtune")
    if server not in SERVERS:
        raise DtuneError(f"{where}: [bench] server must be one of {', '.join(SERVERS)}, got {server!r}")
    base = Profile(name=_str(f"{where}: [bench]", "link", bench.get("link", link_label(scenario.links))),
                   links=tuple({} for _ in scenario.links))
    profiles = [base] + [_profile(f"{where}: profile {i + 1}", raw, len(scenario.links))
                         for i, raw in enumerate(tables(f"{where}: profile", data.get("profile")))]
    datasets = [_dataset(f"{where}: dataset {i + 1}", raw)
                for i, raw in enumerate(tables(f"{where}: dataset", data.get("dataset")))]
    if not datasets:
        raise DtuneError(f"{where}: needs at least one [[dataset]] table to benchmark")
    _unique(where, "dataset", [d.name for d in datasets])
    _unique(where, "profile", [p.name for p in profiles])
    tools = [_tool(f"{where}: tool {i + 1}", raw, {d.name for d in datasets}, len(scenario.nodes))
             for i, raw in enumerate(tables(f"{where}: tool", data.get("tool")))]
    if not tools:
        raise DtuneError(f"{where}: needs at least one [[tool]] table to benchmark")
    _unique(where, "tool variant", [t.label for t in tools])
    return BenchConfig(
        name=name, scenario=scenario,
        runs=_int(f"{where}: [bench]", "runs", bench.get("runs", DEFAULT_RUNS), 1, 1000),
        server=server,
        port=_int(f"{where}: [bench]", "port", bench.get("port", DEFAULT_PORT), 1, 65534),
        timeout_s=_num(f"{where}: [bench]", "timeout_s", bench.get("timeout_s", DEFAULT_TIMEOUT_S)),
        profiles=tuple(profiles), datasets=tuple(datasets), tools=tuple(tools),
    )


def _unique(where: str, what: str, names: list[str]) -> None:
    seen = set()
    for n in names:
        if n in seen:
            raise DtuneError(f"{where}: two {what}s named {n!r}")
        seen.add(n)


def load_bench(path: str | Path) -> BenchConfig:
    return bench_from_dict(read_toml(path, "bench: scenario"), name=Path(path).stem)
