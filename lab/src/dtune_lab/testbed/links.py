"""Link back-ends: how packets get from the client namespace to a server namespace.

``TunLinks``   two TUN devices per link and the userspace emulator process
               (``dtune_lab.testbed.emulator``); works on kernels without netem.
``NetemLinks`` a veth pair per link with a ``netem`` qdisc on each end; used
               only when the kernel has netem (``netem_available``).

Both give link i the addresses ``10.77.i.1`` (client, interface ``wan<i+1>``)
and ``10.77.i.2`` (server ``srv<i+1>``, interface ``wan0``), a /30 each. The
addresses exist only inside the run's namespaces.

A back-end knows its run only as a ``Topology``: the frozen facts the
``Testbed`` fixes when it starts (run id, namespace names, links, MTU, seed,
detach). Live link changes go through ``set``; the netem back-end keeps the
links it has configured so that a change keeps the values it does not name.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dtune.errors import DtuneError
from dtune_lab.procgroup import stop_group
from dtune_lab.testbed import netns
from dtune_lab.testbed.scenario import Link
from dtune_lab.testbed.tun import open_tun

TXQUEUELEN = 1000


def client_addr(index: int) -> str:
    return f"10.77.{index}.1"


def server_addr(index: int) -> str:
    return f"10.77.{index}.2"


# The site layout (scenarios with [[node]] tables): node j's link is
# 10.77.j.1 (node, wan1) <-> 10.77.j.2 (switch, n<j+1>); server k's link is
# 10.78.k.1 (switch, s<k+1>) <-> 10.78.k.2 (server, wan0).

def node_addr(index: int) -> str:
    return f"10.77.{index}.1"


def site_server_addr(index: int) -> str:
    return f"10.78.{index}.2"


@dataclass(frozen=True)
class LinkEnd:
    """One end of an emulated link: the namespace, the interface name and its /30 address."""

    ns: str
    ifname: str
    addr: str


def classic_ends(client_ns: str, server_ns: Sequence[str]) -> tuple[tuple[LinkEnd, LinkEnd], ...]:
    """One client, link i to server i: the layout of scenarios without nodes."""
    return tuple((LinkEnd(client_ns, f"wan{i + 1}", client_addr(i)), LinkEnd(ns, "wan0", server_addr(i)))
                 for i, ns in enumerate(server_ns))


def site_ends(switch_ns: str, server_ns: Sequence[str],
              node_ns: Sequence[str]) -> tuple[tuple[LinkEnd, LinkEnd], ...]:
    """Server links first (so link i is still server i's), then one link per node.

    The first end of every link is the side towards the clients: its "down"
    direction carries what the servers send.
    """
    servers = tuple((LinkEnd(switch_ns, f"s{k + 1}", f"10.78.{k}.1"), LinkEnd(ns, "wan0", site_server_addr(k)))
                    for k, ns in enumerate(server_ns))
    nodes = tuple((LinkEnd(ns, "wan1", node_addr(j)), LinkEnd(switch_ns, f"n{j + 1}", f"10.77.{j}.2"))
                  for j, ns in enumerate(node_ns))
    return servers + nodes


@dataclass(frozen=True)
class Topology:
    """What a link back-end needs to know of its testbed run, fixed when the run starts.

    run_id     names the run directory (emulator log, control socket)
    client_ns  the client's namespace
    server_ns  the namespace of server i, one per link
    links      link i as the run starts (client to ``server_ns[i]``)
    mtu        of every link device
    seed       the emulator's loss seed (None: random)
    detach     the run outlives the process that built it
    ends       per link, its (client side, server side) ends; None: the one-client
               layout (``classic_ends``). With nodes, ``links`` holds the server
               links and then the node links, in the order of ``ends``.
    """

    run_id: str
    client_ns: str
    server_ns: tuple[str, ...]
    links: tuple[Link, ...]
    mtu: int
    seed: int | None = None
    detach: bool = False
    ends: tuple[tuple[LinkEnd, LinkEnd], ...] | None = None

    def link_ends(self) -> tuple[tuple[LinkEnd, LinkEnd], ...]:
        return self.ends if self.ends is not None else classic_ends(self.client_ns, self.server_ns)


def control_request(path: str | Path, request: dict[str, Any], *, timeout: float = 5.0) -> dict[str, Any]:
    """Send one JSON request to an emulator's control socket and return its reply."""
    what = f"testbed control {path}"
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(str(path))
            s.sendall(json.dumps(request).encode() + b"\n")
            buf = b""
            while not buf.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
    except (OSError, TimeoutError) as exc:
        raise DtuneError(f"{what}: {exc.strerror or exc}") from None
    try:
        reply = json.loads(buf)
    except ValueError:
        raise DtuneError(f"{what}: no reply") from None
    if not reply.get("ok"):
        raise DtuneError(f"{what}: {reply.get('error', 'request failed')}")
    return reply


def _link_commands(end: LinkEnd, dev: str, mtu: int) -> list[str]:
    """ip -batch lines that name, address and raise one end of a link."""
    name = end.ifname
    return [f"link set dev {dev} name {name}",
            f"link set dev {name} mtu {mtu} txqueuelen {TXQUEUELEN}",
            f"addr add {end.addr}/30 dev {name}",
            f"link set dev {name} up"]


class TunLinks:
    """TUN devices + the userspace emulator process."""

    name = "tun"

    def __init__(self, topo: Topology) -> None:
        self.topo = topo
        self.proc: subprocess.Popen[bytes] | None = None
        self.control = str(netns.run_dir(topo.run_id) / "ctl.sock")
        self._watch_w: int | None = None

    def setup(self) -> None:
        topo = self.topo
        fds: list[int] = []
        link_cfg = []
        per_ns: dict[str, list[str]] = {}
        try:
            for i, (link, (cend, send)) in enumerate(zip(topo.links, topo.link_ends(), strict=True)):
                tag = secrets.token_hex(4)
                cdev, sdev = f"dtt{tag}c", f"dtt{tag}s"
                cfd = open_tun(cdev)
                fds.append(cfd)
                sfd = open_tun(sdev)
                fds.append(sfd)
                netns.ip_batch([f"link set dev {cdev} netns {cend.ns}",
                                f"link set dev {sdev} netns {send.ns}"],
                               what=f"testbed {topo.run_id}: link {i}")
                per_ns.setdefault(cend.ns, []).extend(_link_commands(cend, cdev, topo.mtu))
                per_ns.setdefault(send.ns, []).extend(_link_commands(send, sdev, topo.mtu))
                link_cfg.append({"rate_mbit": link.rate_mbit, "rtt_ms": link.rtt_ms,
                                 "queue_bytes": link.queue_bytes(topo.mtu), "loss": link.loss,
                                 "queue_auto": link.queue_kb is None, "client_fd": cfd, "server_fd": sfd})
            for ns, commands in per_ns.items():
                netns.ip_batch(commands, what=f"testbed {topo.run_id}: {ns}", netns=ns)
            self._spawn(link_cfg, fds)
        finally:
            for fd in fds:  # the emulator holds its own copies now
                os.close(fd)

    def _spawn(self, link_cfg: list[dict[str, Any]], fds: list[int]) -> None:
        topo = self.topo
        config: dict[str, Any] = {"links": link_cfg, "mtu": topo.mtu, "control": self.control,
                                  "run_id": topo.run_id, "seed": topo.seed, "owns_run": topo.detach,
                                  "realtime": os.environ.get("DTUNE_TESTBED_REALTIME", "1") != "0"}
        pass_fds = list(fds)
        watch_r = None
        if not topo.detach:
            watch_r, self._watch_w = os.pipe()
            config["watch_fd"] = watch_r
            pass_fds.append(watch_r)
        log = open(netns.run_dir(topo.run_id) / "emulator.log", "ab")
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "dtune_lab.testbed.emulator", json.dumps(config)],
                pass_fds=pass_fds, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                start_new_session=True)
        finally:
            log.close()
            if watch_r is not None:
                os.close(watch_r)
        deadline = time.monotonic() + 10.0
        while True:
            if self.proc.poll() is not None:
                tail = (netns.run_dir(topo.run_id) / "emulator.log").read_text(errors="replace").strip()
                last = tail.splitlines()[-1] if tail else f"exit code {self.proc.returncode}"
                raise DtuneError(f"testbed {topo.run_id}: link emulator did not start: {last}")
            if os.path.exists(self.control):
                with contextlib.suppress(DtuneError):
                    control_request(self.control, {"op": "ping"}, timeout=1.0)
                    return
            if time.monotonic() > deadline:
                raise DtuneError(f"testbed {topo.run_id}: link emulator did not answer within 10 s")
            time.sleep(0.01)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def set(self, index: int, change: dict[str, Any]) -> dict[str, Any]:
        return control_request(self.control, {"op": "set", "link": index, **change})["link"]

    def stats(self) -> list[dict[str, Any]]:
        return control_request(self.control, {"op": "stats"})["links"]

    def close(self) -> None:
        """Stop the emulator (its TUN devices vanish with it)."""
        if self._watch_w is not None:
            # Closing the pipe alone would make the emulator tear the run
            # down itself; SIGTERM first says "stop, the owner cleans up".
            if self.proc is not None:
                stop_group(self.proc, grace=3.0, group=False)
            os.close(self._watch_w)
            self._watch_w = None
        elif self.proc and self.proc.poll() is None and not self.topo.detach:
            self.proc.kill()
            self.proc.wait()


def netem_available(netns_name: str) -> bool:
    """True when ``tc netem`` works in this kernel (probed on ``lo`` of our own namespace)."""
    probe = netns.run_cmd(["tc", "-n", netns_name, "qdisc", "add", "dev", "lo", "root", "netem",
                           "delay", "1ms"], what="netem probe", check=False)
    if probe.returncode != 0:
        return False
    netns.run_cmd(["tc", "-n", netns_name, "qdisc", "del", "dev", "lo", "root"],
                  what="netem probe", check=False)
    return True


def netem_args(link: Link, mtu: int) -> list[str]:
    """The netem parameters for one direction of ``link``.

    netem's ``limit`` counts every packet it holds, including those still
    "on the wire" (delayed), so it is the one-way BDP plus the queue, in MTUs.
    """
    one_way = link.rate_mbit * 1e6 / 8 * link.rtt_ms / 2000
    limit = max(16, math.ceil((one_way + link.queue_bytes(mtu)) / mtu))
    args = ["delay", f"{link.rtt_ms / 2:g}ms", "rate", f"{link.rate_mbit:g}mbit", "limit", str(limit)]
    if link.loss:
        args += ["loss", "random", f"{link.loss * 100:g}%"]
    return args


class NetemLinks:
    """A veth pair per link with netem on both ends (kernels that have netem)."""

    name = "netem"
    pid = None
    control = None

    def __init__(self, topo: Topology) -> None:
        self.topo = topo
        self._links = list(topo.links)  # as configured now (set changes them)

    def setup(self) -> None:
        topo = self.topo
        for i, (link, (cend, send)) in enumerate(zip(topo.links, topo.link_ends(), strict=True)):
            tag = secrets.token_hex(4)
            cdev, sdev = f"dtv{tag}c", f"dtv{tag}s"
            what = f"testbed {topo.run_id}: link {i}"
            netns.ip_batch([f"link add {cdev} type veth peer name {sdev}",
                            f"link set dev {cdev} netns {cend.ns}",
                            f"link set dev {sdev} netns {send.ns}"], what=what)
            netns.ip_batch(_link_commands(cend, cdev, topo.mtu), what=what, netns=cend.ns)
            netns.ip_batch(_link_commands(send, sdev, topo.mtu), what=what, netns=send.ns)
            self._qdisc(i, link, "add")

    def _qdisc(self, index: int, link: Link, verb: str) -> None:
        topo = self.topo
        for end in topo.link_ends()[index]:
            ns, dev = end.ns, end.ifname
            netns.run_cmd(["tc", "-n", ns, "qdisc", verb, "dev", dev, "root", "netem",
                           *netem_args(link, topo.mtu)], what=f"testbed {topo.run_id}: link {index}")

    def set(self, index: int, change: dict[str, Any]) -> dict[str, Any]:
        if change.get("direction"):
            raise DtuneError("testbed: the netem back-end changes both directions only")
        values = {k: v for k, v in change.items() if v is not None and k != "direction"}
        link = replace(self._links[index], **values)
        self._qdisc(index, link, "change")
        self._links[index] = link
        return {"rate_mbit": link.rate_mbit, "rtt_ms": link.rtt_ms, "loss": link.loss,
                "queue_bytes": link.queue_bytes(self.topo.mtu)}

    def stats(self) -> list[dict[str, Any]]:
        return [{} for _ in self.topo.links]

    def close(self) -> None:
        pass  # veth pairs go away with their namespaces
