"""Link profiles and scenario files: what the emulated WAN looks like.

A scenario is one client namespace and k server namespaces, one emulated
link each (the client is the host with k WAN paths; server N sits behind
link N-1). It is written in TOML::

    [client]                 # the downloading host
    tcp_rmem_max = 524288    # bytes; caps the receive window of one stream
    tcp_wmem_max = 524288    # bytes
    mtu = 9000               # of every emulated link

    tcp_congestion_control = "cubic"   # optional; default: the host's

    [server]                 # optional, applies to every server namespace
    tcp_wmem_max = 4194304
    tcp_congestion_control = "cubic"

    [[link]]                 # one per server, in order: srv1, srv2, ...
    rate_mbit = 1000         # serialisation rate, each direction
    rtt_ms = 40              # round-trip propagation delay (RTT/2 each way)
    queue_kb = 5000          # drop-tail limit, KiB per direction (default 1 BDP)
    loss = 0.0               # random loss per packet, fraction (0.01 = 1 %)

    [[node]]                 # optional: several client nodes instead of one client
    count = 3                # this many nodes with the same link (default 1)
    rate_mbit = 200          # each node's own NIC: its link to the switch
    rtt_ms = 20

With ``[[node]]`` tables the scenario is a site of N transfer nodes
(``node1`` .. ``nodeN``), each behind its own link to a switch namespace
(``sw``), and each ``[[link]]`` is then server k's own link from the switch
(its NIC): the path from node j to server k crosses node j's link, then server
k's link, so its RTT is the sum of both. Without ``[[node]]`` a scenario
means what it always did: one client with one link per server.

Other tables (``[bench]``, ``[[dataset]]``, ``[[tool]]`` ...) belong to other
readers and are ignored here; unknown *keys* inside ``[[link]]``,
``[client]`` and ``[server]`` are errors, because a typo there would silently
change an experiment.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dtune.errors import DtuneError
from dtune_lab.tomlfile import integer as _integer
from dtune_lab.tomlfile import number as _number
from dtune_lab.tomlfile import read_toml
from dtune_lab.tomlfile import table as _table

DEFAULT_MTU = 9000
# A queue shorter than this many full-size packets makes even a LAN link drop
# bursts that a real switch port (hundreds of KB of buffer) would absorb.
MIN_QUEUE_PACKETS = 16
# Every node link is one more pair of TUN devices in the one emulator process.
MAX_NODES = 64


@dataclass(frozen=True, slots=True)
class Link:
    """One emulated path between the client and one server.

    rate_mbit   link rate in Mbit/s (10^6 bit/s), applied to each direction
    rtt_ms      round-trip propagation delay; each direction gets rtt_ms / 2
    queue_kb    drop-tail queue limit per direction in KiB; None = one
                bandwidth-delay product, at least ``MIN_QUEUE_PACKETS`` MTUs
    loss        probability that a packet is dropped at random (0 <= loss < 1)
    """

    rate_mbit: float = 1000.0
    rtt_ms: float = 0.0
    queue_kb: float | None = None
    loss: float = 0.0

    def __post_init__(self) -> None:
        check_link_values(rate_mbit=self.rate_mbit, rtt_ms=self.rtt_ms,
                          queue_kb=self.queue_kb, loss=self.loss)

    def bdp_bytes(self) -> int:
        return int(self.rate_mbit * 1e6 / 8 * self.rtt_ms / 1000)

    def queue_bytes(self, mtu: int = DEFAULT_MTU) -> int:
        """The drop-tail limit in bytes (explicit, or 1 BDP with a floor)."""
        if self.queue_kb is not None:
            return max(int(self.queue_kb * 1024), mtu)
        return max(self.bdp_bytes(), MIN_QUEUE_PACKETS * mtu)

    def describe(self) -> str:
        text = f"{self.rate_mbit:g} Mbit/s, RTT {self.rtt_ms:g} ms"
        if self.queue_kb is not None:
            text += f", queue {self.queue_kb:g} KiB"
        if self.loss:
            text += f", loss {self.loss * 100:g} %"
        return text


def check_link_values(*, rate_mbit: float | None = None, rtt_ms: float | None = None,
                      queue_kb: float | None = None, loss: float | None = None) -> None:
    """Reject values that make no physical sense (raises DtuneError)."""
    if rate_mbit is not None and not rate_mbit > 0:
        raise DtuneError(f"link: rate_mbit must be > 0, got {rate_mbit}")
    if rtt_ms is not None and not 0 <= rtt_ms <= 60_000:
        raise DtuneError(f"link: rtt_ms must be between 0 and 60000, got {rtt_ms}")
    if queue_kb is not None and not queue_kb > 0:
        raise DtuneError(f"link: queue_kb must be > 0, got {queue_kb}")
    if loss is not None and not 0 <= loss <= 1:  # 1: the link is down (an outage)
        raise DtuneError(f"link: loss is a fraction between 0 and 1 (0.01 = 1 %, 1: down), got {loss}")


@dataclass(frozen=True, slots=True)
class HostConfig:
    """Per-namespace TCP settings: buffer caps (the third value of tcp_rmem /
    tcp_wmem) and the congestion control algorithm.

    None keeps the kernel's default for a new namespace (buffers: the
    kernel's built-in values; congestion control: the host's). The client's
    ``tcp_rmem_max`` is what makes one stream window-limited on a long link,
    as on the real WANs the tuners are meant for.
    """

    tcp_rmem_max: int | None = None
    tcp_wmem_max: int | None = None
    tcp_congestion_control: str | None = None

    def __post_init__(self) -> None:
        cc = self.tcp_congestion_control
        if cc is not None and not (cc.isascii() and cc.replace("_", "").isalnum() and len(cc) < 16):
            raise DtuneError(f"tcp_congestion_control must be an algorithm name like cubic or bbr, got {cc!r}")
        for name in ("tcp_rmem_max", "tcp_wmem_max"):
            value = getattr(self, name)
            if value is not None and not 4096 <= value <= 1 << 30:
                raise DtuneError(f"{name} must be between 4096 and 2^30 bytes, got {value}")


@dataclass(frozen=True, slots=True)
class Scenario:
    """Everything the testbed needs to build one emulated WAN."""

    links: tuple[Link, ...]
    client: HostConfig = field(default_factory=HostConfig)
    server: HostConfig = field(default_factory=HostConfig)
    mtu: int = DEFAULT_MTU
    name: str = "custom"
    # client nodes, each with its own link to the switch; () = the one-client layout
    nodes: tuple[Link, ...] = ()

    def __post_init__(self) -> None:
        if not self.links:
            raise DtuneError(f"scenario {self.name}: needs at least one [[link]]")
        if len(self.links) > 64:
            raise DtuneError(f"scenario {self.name}: at most 64 links, got {len(self.links)}")
        if len(self.nodes) > MAX_NODES:
            raise DtuneError(f"scenario {self.name}: at most {MAX_NODES} nodes, got {len(self.nodes)}")
        if not 576 <= self.mtu <= 65000:
            raise DtuneError(f"scenario {self.name}: mtu must be between 576 and 65000, got {self.mtu}")


_LINK_KEYS = {"rate_mbit", "rtt_ms", "queue_kb", "loss"}
_NODE_KEYS = _LINK_KEYS | {"count"}
_CLIENT_KEYS = {"tcp_rmem_max", "tcp_wmem_max", "tcp_congestion_control", "mtu"}
_SERVER_KEYS = {"tcp_rmem_max", "tcp_wmem_max", "tcp_congestion_control"}


def scenario_from_dict(data: dict[str, Any], *, name: str = "custom") -> Scenario:
    """Build a Scenario from parsed TOML; tables other than link/client/server are ignored."""
    raw_links = data.get("link")
    if not isinstance(raw_links, list) or not raw_links:
        raise DtuneError(f"scenario {name}: needs at least one [[link]] table")
    links = [_link(f"scenario {name}: link {i + 1}", _table(f"scenario {name}: link {i + 1}", raw, _LINK_KEYS))
             for i, raw in enumerate(raw_links)]
    nodes = _nodes(name, data.get("node"))
    client = _table(f"scenario {name}: [client]", data.get("client", {}), _CLIENT_KEYS)
    server = _table(f"scenario {name}: [server]", data.get("server", {}), _SERVER_KEYS)

    def host(where: str, raw: dict[str, Any]) -> HostConfig:
        values: dict[str, Any] = {k: _integer(where, k, raw[k]) for k in ("tcp_rmem_max", "tcp_wmem_max")
                                  if k in raw}
        if "tcp_congestion_control" in raw:
            cc = raw["tcp_congestion_control"]
            if not isinstance(cc, str):
                raise DtuneError(f"{where}: tcp_congestion_control must be a string, got {cc!r}")
            values["tcp_congestion_control"] = cc
        try:
            return HostConfig(**values)
        except DtuneError as exc:
            raise DtuneError(f"{where}: {exc}") from None

    mtu = _integer(f"scenario {name}: [client]", "mtu", client.get("mtu", DEFAULT_MTU))
    return Scenario(links=tuple(links), client=host(f"scenario {name}: [client]", client),
                    server=host(f"scenario {name}: [server]", server), mtu=mtu, name=name,
                    nodes=nodes)


def _link(where: str, raw: dict[str, Any]) -> Link:
    kwargs = {k: _number(where, k, v) for k, v in raw.items()}
    try:
        return Link(**kwargs)
    except DtuneError as exc:
        raise DtuneError(f"{where}: {exc}") from None


def _nodes(name: str, raw_nodes: Any) -> tuple[Link, ...]:
    """The ``[[node]]`` tables as one Link per node (``count`` repeats a table)."""
    if raw_nodes is None:
        return ()
    if not isinstance(raw_nodes, list) or not raw_nodes:
        raise DtuneError(f"scenario {name}: node must be an array of tables ([[node]])")
    nodes: list[Link] = []
    for i, raw in enumerate(raw_nodes):
        where = f"scenario {name}: node {i + 1}"
        raw = dict(_table(where, raw, _NODE_KEYS))
        count = _integer(where, "count", raw.pop("count", 1))
        if not 1 <= count <= MAX_NODES:
            raise DtuneError(f"{where}: count must be between 1 and {MAX_NODES}, got {count}")
        nodes += [_link(where, raw)] * count
    return tuple(nodes)


def load_scenario(path: str | Path) -> Scenario:
    """Read a scenario TOML file (link parts only; see the module docstring)."""
    return scenario_from_dict(read_toml(path, "scenario"), name=Path(path).stem)
