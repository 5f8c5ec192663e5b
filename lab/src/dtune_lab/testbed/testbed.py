"""``Testbed``: an emulated WAN made of network namespaces, for tests and benchmarks.

::

    with Testbed.from_profile(servers=[Link(rate_mbit=1000, rtt_ms=40)], client_rmem=512 * 1024) as tb:
        srv = tb.popen("srv1", ["dtune", "serve", "data/", "--port", "8080"])
        tb.run("client", ["curl", "-o", "/dev/null", f"http://{tb.server_addr(0)}:8080/big.bin"])
        tb.set_link(0, rate_mbit=250)          # live change, e.g. throttle a replica

Namespaces: ``dtune-<id>-client`` and ``dtune-<id>-srv1`` ... ``-srvK``.
Link i (0-based) joins the client to ``srv<i+1>``; ``server_addr(i)`` is the
server's address on it. A scenario with nodes (``Scenario.nodes``) is a site
instead: ``dtune-<id>-node1`` ... ``-nodeN``, each behind its own link to a
switch namespace ``dtune-<id>-sw`` that forwards to every server, which sits
behind its own link too; "client" then names node1. Everything the testbed started -- processes,
namespaces, TUN devices, the emulator -- is gone after ``stop()``, after an
exception in the ``with`` block, on SIGTERM, and (through the emulator's
watch pipe) even when the owning process is killed outright.
"""

from __future__ import annotations

import atexit
import os
import secrets
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from dtune.errors import DtuneError
from dtune_lab.procgroup import stop_group
from dtune_lab.testbed import netns
from dtune_lab.testbed.links import (
    NetemLinks,
    Topology,
    TunLinks,
    client_addr,
    netem_available,
    node_addr,
    server_addr,
    site_ends,
    site_server_addr,
)
from dtune_lab.testbed.scenario import DEFAULT_MTU, HostConfig, Link, Scenario, load_scenario

BACKENDS = ("auto", "tun", "netem")


def check_host() -> None:
    """Raise DtuneError unless this process can build namespaces and TUN devices."""
    if os.geteuid() != 0:
        raise DtuneError("testbed: needs root (network namespaces, TUN devices)")
    if not shutil.which("ip"):
        raise DtuneError("testbed: the 'ip' command (iproute2) is not installed")
    if not os.path.exists("/dev/net/tun"):
        raise DtuneError("testbed: /dev/net/tun is missing (no TUN support)")


def _tcp_mem(default: int, cap: int) -> str:
    return f"4096 {min(default, cap)} {cap}"


class Testbed:
    """One emulated WAN: a client namespace, k server namespaces, k links.

    scenario  the links and per-namespace TCP buffer caps (see ``Scenario``)
    run_id    names the namespaces (``dtune-<run_id>-client``); random if None
    backend   "auto" (netem when the kernel has it, else TUN), "tun" or "netem"
    detach    leave everything running after this process exits
              (``dtune testbed up --detach``); ``dtune testbed down`` removes it
    seed      seeds the emulator's random loss, for repeatable lossy runs
    """

    __test__ = False  # not a pytest test class, despite the name

    def __init__(self, scenario: Scenario, *, run_id: str | None = None, backend: str = "auto",
                 detach: bool = False, seed: int | None = None) -> None:
        if backend not in BACKENDS:
            raise DtuneError(f"testbed: backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        self.scenario = scenario
        self.id = netns.check_run_id(run_id) if run_id else secrets.token_hex(3)
        self.backend = backend
        self.detach = detach
        self.seed = seed
        self.links: list[Link] = list(scenario.links)
        self.node_links: list[Link] = list(scenario.nodes)
        self.mtu = scenario.mtu
        self._links_impl: TunLinks | NetemLinks | None = None
        self._procs: list[subprocess.Popen[Any]] = []
        self._state: netns.RunState | None = None
        self._started = False
        self._stopped = False
        self._old_sigterm: Any = None

    # --- construction ------------------------------------------------------

    @classmethod
    def from_profile(cls, servers: Sequence[Link], *, client_rmem: int | None = None,
                     client_wmem: int | None = None, server_rmem: int | None = None,
                     server_wmem: int | None = None, congestion_control: str | None = None,
                     mtu: int = DEFAULT_MTU, **kwargs: Any) -> Testbed:
        """A testbed with one link per entry of ``servers``; buffer caps in bytes;
        ``congestion_control`` (e.g. "cubic") applies to every namespace."""
        scenario = Scenario(links=tuple(servers),
                            client=HostConfig(client_rmem, client_wmem, congestion_control),
                            server=HostConfig(server_rmem, server_wmem, congestion_control),
                            mtu=mtu, name="profile")
        return cls(scenario, **kwargs)

    @classmethod
    def from_toml(cls, path: str | Path, **kwargs: Any) -> Testbed:
        return cls(load_scenario(path), **kwargs)

    # --- names and addresses ------------------------------------------------

    @property
    def client_ns(self) -> str:
        """The downloading namespace: the client, or node1 of a site."""
        return self.node_ns(0) if self.node_links else netns.ns_name(self.id, "client")

    def server_ns(self, index: int) -> str:
        self._check_index(index)
        return netns.ns_name(self.id, f"srv{index + 1}")

    def node_ns(self, index: int) -> str:
        """Node ``index`` (0-based; ``node<index+1>``) of a site."""
        self._check_node(index)
        return netns.ns_name(self.id, f"node{index + 1}")

    @property
    def node_namespaces(self) -> list[str]:
        """Every client node: node1..nodeN of a site, or the one client."""
        if not self.node_links:
            return [self.client_ns]
        return [self.node_ns(j) for j in range(len(self.node_links))]

    @property
    def switch_ns(self) -> str | None:
        return netns.ns_name(self.id, "sw") if self.node_links else None

    @property
    def namespaces(self) -> list[str]:
        middle = [self.switch_ns] if self.switch_ns else []
        return self.node_namespaces + middle + [self.server_ns(i) for i in range(len(self.links))]

    def ns(self, name: str) -> str:
        """Resolve "client", "srv1".."srvK", "node1".."nodeN", "sw" or a full namespace name."""
        if name == "client":
            return self.client_ns
        full = name if name.startswith(netns.PREFIX) else netns.ns_name(self.id, name)
        if full not in self.namespaces:
            roles = ", ".join(["client"] + [n.rsplit("-", 1)[1] for n in self.namespaces])
            raise DtuneError(f"testbed {self.id}: no namespace {name!r} (have {roles})")
        return full

    def server_addr(self, index: int) -> str:
        """The address of server ``index`` (0-based; ``srv<index+1>``) as the client sees it."""
        self._check_index(index)
        return site_server_addr(index) if self.node_links else server_addr(index)

    def client_addr(self, index: int) -> str:
        """The client's address on link ``index``, as server ``index`` sees it (node1's on a site)."""
        self._check_index(index)
        return node_addr(0) if self.node_links else client_addr(index)

    def node_addr(self, index: int) -> str:
        """Node ``index``'s address (on its own link), as the servers and other nodes see it."""
        self._check_node(index)
        return node_addr(index)

    def _check_node(self, index: int) -> None:
        if not 0 <= index < len(self.node_links):
            raise DtuneError(f"testbed {self.id}: no node {index} (have {len(self.node_links)})")

    def _check_index(self, index: int) -> None:
        if not 0 <= index < len(self.links):
            raise DtuneError(f"testbed {self.id}: no link {index} (have {len(self.links)})")

    def topology(self) -> Topology:
        """The facts a link back-end is built from (links as they are now)."""
        servers = tuple(self.server_ns(i) for i in range(len(self.links)))
        if not self.node_links:
            return Topology(run_id=self.id, client_ns=self.client_ns, server_ns=servers,
                            links=tuple(self.links), mtu=self.mtu, seed=self.seed, detach=self.detach)
        assert self.switch_ns is not None
        return Topology(run_id=self.id, client_ns=self.client_ns, server_ns=servers,
                        links=tuple(self.links) + tuple(self.node_links), mtu=self.mtu, seed=self.seed,
                        detach=self.detach, ends=site_ends(self.switch_ns, servers, self.node_namespaces))

    @property
    def backend_name(self) -> str | None:
        return self._links_impl.name if self._links_impl else None

    @property
    def control_path(self) -> str | None:
        return self._links_impl.control if self._links_impl else None

    # --- lifecycle ----------------------------------------------------------

    def start(self) -> Testbed:
        if self._started:
            return self
        check_host()
        self._started = True
        with netns.registry_lock():
            netns.reap_stale()
            existing = netns.read_state(self.id)
            if existing is not None or any(n in netns.list_netns() for n in self.namespaces):
                raise DtuneError(f"testbed {self.id}: already up (dtune testbed down --id {self.id})")
            self._state = netns.RunState(
                run_id=self.id, owner_pid=os.getpid(), owner_start=netns.proc_start_time(os.getpid()),
                namespaces=self.namespaces, detached=self.detach, created=time.time(),
                scenario=self.scenario.name,
                addresses=[{"server": self.server_ns(i), "server_addr": self.server_addr(i),
                            "client_addr": self.client_addr(i), "link": self.links[i].describe()}
                           for i in range(len(self.links))]
                + [{"node": self.node_ns(j), "node_addr": node_addr(j), "link": link.describe()}
                   for j, link in enumerate(self.node_links)])
            netns.write_state(self._state)  # before anything exists, so a crash is reapable
        atexit.register(self.stop)
        try:
            self._build()
        except BaseException:
            self.stop()
            raise
        return self

    def _build(self) -> None:
        sc = self.scenario
        for name in self.namespaces:
            netns.add_netns(name)
        quiet = {"net.ipv6.conf.all.disable_ipv6": "1", "net.ipv6.conf.default.disable_ipv6": "1"}
        for name in self.namespaces:
            values = dict(quiet)
            if name == self.switch_ns:
                # the site's switch forwards between node and server links; it holds no TCP
                values.update({"net.ipv4.ip_forward": "1", "net.ipv4.conf.all.rp_filter": "0",
                               "net.ipv4.conf.default.rp_filter": "0"})
                netns.sysctl_in(name, values)
                continue
            host = sc.client if name in self.node_namespaces else sc.server
            if host.tcp_rmem_max:
                values["net.ipv4.tcp_rmem"] = _tcp_mem(131072, host.tcp_rmem_max)
            if host.tcp_wmem_max:
                values["net.ipv4.tcp_wmem"] = _tcp_mem(16384, host.tcp_wmem_max)
            if host.tcp_congestion_control:
                _check_congestion_control(host.tcp_congestion_control)
                values["net.ipv4.tcp_congestion_control"] = host.tcp_congestion_control
            netns.sysctl_in(name, values)
        backend = self.backend
        if backend == "auto":
            backend = "netem" if netem_available(self.client_ns) else "tun"
        topo = self.topology()
        self._links_impl = TunLinks(topo) if backend == "tun" else NetemLinks(topo)
        self._links_impl.setup()
        if self.node_links:
            self._site_routes()
        assert self._state is not None
        self._state.backend = backend
        self._state.control = self._links_impl.control
        pid = self._links_impl.pid
        if pid:
            self._state.emulator_pid = pid
            self._state.emulator_start = netns.proc_start_time(pid)
        if self.detach:
            # The emulator owns a detached run: when it dies the run is stale.
            self._state.owner_pid = pid or os.getpid()
            self._state.owner_start = netns.proc_start_time(self._state.owner_pid)
        netns.write_state(self._state)

    def _site_routes(self) -> None:
        """Every node and server has one link, to the switch: everything else lies behind it."""
        for name in self.node_namespaces:
            netns.ip_batch(["route add default dev wan1"], what=f"testbed {self.id}: {name}", netns=name)
        for i in range(len(self.links)):
            ns = self.server_ns(i)
            netns.ip_batch(["route add default dev wan0"], what=f"testbed {self.id}: {ns}", netns=ns)

    def stop(self) -> None:
        """Kill started processes, stop the emulator, delete namespaces. Idempotent."""
        if not self._started or self._stopped:
            return
        self._stopped = True
        atexit.unregister(self.stop)
        self._restore_sigterm()
        if self.detach and self._links_impl is not None and self._state and self._state.owner_pid != os.getpid():
            return  # a detached run lives on; `dtune testbed down` removes it
        for proc in self._procs:
            stop_group(proc, grace=2.0)
        if self._links_impl is not None:
            self._links_impl.close()
        netns.destroy_run(self.id)

    def __enter__(self) -> Testbed:
        self.start()
        if threading.current_thread() is threading.main_thread() and \
                signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            self._old_sigterm = signal.signal(signal.SIGTERM, _sigterm_to_exit)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _restore_sigterm(self) -> None:
        if self._old_sigterm is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._old_sigterm)
            self._old_sigterm = None

    def __repr__(self) -> str:
        state = "up" if self._started and not self._stopped else ("down" if self._stopped else "new")
        links = "; ".join([f"node{j + 1} {link.describe()}" for j, link in enumerate(self.node_links)]
                          + [f"srv{i + 1} {link.describe()}" for i, link in enumerate(self.links)])
        running = sum(1 for p in self._procs if p.poll() is None)
        return f"<Testbed {self.id} {state} [{self.backend_name or self.backend}] {links} | {running} processes>"

    # --- processes -----------------------------------------------------------

    def command(self, ns: str, argv: Sequence[str]) -> list[str]:
        """The argv that runs ``argv`` inside namespace ``ns`` (``ip netns exec``)."""
        return netns.ns_exec_argv(self.ns(ns), [str(a) for a in argv])

    def popen(self, ns: str, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` inside ``ns`` ("client", "srv1", ...); killed at ``stop()``."""
        self._require_up()
        kwargs.setdefault("start_new_session", True)
        proc = subprocess.Popen(self.command(ns, argv), **kwargs)
        self._procs.append(proc)
        return proc

    def run(self, ns: str, argv: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[Any]:
        """``subprocess.run`` inside ``ns``; same keyword arguments (timeout, capture_output ...)."""
        self._require_up()
        return subprocess.run(self.command(ns, argv), **kwargs)

    def _require_up(self) -> None:
        if not self._started or self._stopped:
            raise DtuneError(f"testbed {self.id}: not running (use start() or a with block)")

    # --- links ---------------------------------------------------------------

    def set_link(self, index: int, *, rate_mbit: float | None = None, rtt_ms: float | None = None,
                 loss: float | None = None, queue_kb: float | None = None,
                 direction: str | None = None) -> Link:
        """Change link ``index`` while traffic flows; None keeps a value.

        ``direction`` "down" (server to client) or "up" changes one direction
        only (TUN back-end); the returned ``Link`` reflects the download side.
        """
        self._require_up()
        self._check_index(index)
        values = {"rate_mbit": rate_mbit, "rtt_ms": rtt_ms, "loss": loss, "queue_kb": queue_kb}
        link = replace(self.links[index], **{k: v for k, v in values.items() if v is not None})
        assert self._links_impl is not None
        self._links_impl.set(index, dict(values, direction=direction))
        if direction in (None, "down"):
            self.links[index] = link
        return link

    def set_node_link(self, index: int, *, rate_mbit: float | None = None, rtt_ms: float | None = None,
                      loss: float | None = None, queue_kb: float | None = None,
                      direction: str | None = None) -> Link:
        """Change node ``index``'s own link (a site's NIC) while traffic flows; as ``set_link``."""
        self._require_up()
        self._check_node(index)
        values = {"rate_mbit": rate_mbit, "rtt_ms": rtt_ms, "loss": loss, "queue_kb": queue_kb}
        link = replace(self.node_links[index], **{k: v for k, v in values.items() if v is not None})
        assert self._links_impl is not None
        self._links_impl.set(len(self.links) + index, dict(values, direction=direction))
        if direction in (None, "down"):
            self.node_links[index] = link
        return link

    def link_stats(self) -> list[dict[str, Any]]:
        """Per server link, counters for each direction ("up": towards the server, "down": back).

        On a site a server link carries what every node fetches from that server.
        """
        self._require_up()
        assert self._links_impl is not None
        return self._links_impl.stats()[:len(self.links)]

    def node_link_stats(self) -> list[dict[str, Any]]:
        """Per node of a site, its own link's counters (as ``link_stats``); [] without nodes."""
        self._require_up()
        assert self._links_impl is not None
        return self._links_impl.stats()[len(self.links):]


def _check_congestion_control(name: str) -> None:
    """A namespace may only use algorithms the host allows (loaded is not enough)."""
    try:
        with open("/proc/sys/net/ipv4/tcp_allowed_congestion_control") as f:
            allowed = f.read().split()
    except OSError:
        return
    if name not in allowed:
        raise DtuneError(f"testbed: tcp_congestion_control {name!r} is not allowed in namespaces here "
                         f"(net.ipv4.tcp_allowed_congestion_control = {' '.join(allowed)})")


def _sigterm_to_exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)

