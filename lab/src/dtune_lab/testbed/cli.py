"""``dtune testbed``: bring an emulated WAN up, run commands in it, change it, take it down."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from typing import Any

from dtune.errors import DtuneError, UsageError
from dtune_lab.testbed import netns
from dtune_lab.testbed.links import control_request
from dtune_lab.testbed.testbed import BACKENDS, Testbed, check_host

HELP = """\
An emulated WAN on this machine: a client network namespace and one server
namespace per [[link]] of a scenario file, joined by links with a set rate,
round-trip time, queue and loss (a userspace emulator here, netem where the
kernel has it). Needs root. Namespaces are named dtune-ID-client and
dtune-ID-srv1..N; server N is at 10.77.(N-1).2, the client at 10.77.(N-1).1.

  dtune testbed up scenarios/wan1g-large.toml            # Ctrl-C to stop
  dtune testbed up SCENARIO.toml --id wan --detach             # keeps running
  dtune testbed exec --id wan srv1 -- dtune serve data/ --port 8080
  dtune testbed exec --id wan client -- curl -o /dev/null http://10.77.0.2:8080/f
  dtune testbed set --id wan srv1 --rate-mbit 250 --rtt-ms 540
  dtune testbed list
  dtune testbed down --id wan        (or --all)
"""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("testbed", help="emulated WAN: namespaces, rate, RTT, buffers, replicas",
                              description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="testbed_command", metavar="ACTION", required=True)

    up = sub.add_parser("up", help="build the testbed of a scenario file",
                        description="Build the namespaces and links of SCENARIO (a TOML file with "
                        "[[link]] tables, see docs/testbed.md), print them, and stay in the foreground "
                        "until Ctrl-C or SIGTERM, then remove everything. --detach leaves it running.")
    up.add_argument("scenario", metavar="SCENARIO.toml")
    up.add_argument("--id", dest="run_id", help="names the namespaces dtune-ID-...; random if not given")
    up.add_argument("--detach", action="store_true",
                    help="return at once and leave the testbed up; remove it with 'dtune testbed down'")
    up.add_argument("--backend", choices=BACKENDS, default="auto",
                    help="link emulation: netem if the kernel has it, else the TUN emulator (default auto)")
    up.add_argument("--json", action="store_true", help="print the run's state as JSON")
    up.set_defaults(func=cmd_up)

    down = sub.add_parser("down", help="remove a testbed (namespaces, processes, links)",
                          description="Kill every process in the testbed's namespaces, stop its link "
                          "emulator and delete the namespaces.")
    which = down.add_mutually_exclusive_group()
    which.add_argument("--id", dest="run_id", help="the testbed to remove (default: the only one up)")
    which.add_argument("--all", action="store_true",
                       help="remove every dtune testbed on this machine, and stale leftovers")
    down.set_defaults(func=cmd_down)

    ex = sub.add_parser("exec", aliases=["run"], help="run a command inside a testbed namespace",
                        description="Run CMD inside namespace NS (client, srv1, srv2, ...) of a "
                        "testbed that is up; exits with CMD's exit code.")
    ex.add_argument("--id", dest="run_id", help="the testbed (default: the only one up)")
    ex.add_argument("ns", metavar="NS", help="client, srv1, srv2, ... or a full namespace name")
    ex.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- CMD ...")
    ex.set_defaults(func=cmd_exec)

    st = sub.add_parser("set", help="change a link while it carries traffic",
                        description="Change the link to server SRV (srv1, srv2, ...) of a running "
                        "testbed; unspecified values stay as they are.")
    st.add_argument("--id", dest="run_id", help="the testbed (default: the only one up)")
    st.add_argument("server", metavar="SRV", help="srv1, srv2, ... (the link to that server)")
    st.add_argument("--rate-mbit", type=float, help="link rate in Mbit/s")
    st.add_argument("--rtt-ms", type=float, help="round-trip time in ms")
    st.add_argument("--loss", type=float, help="random loss, fraction (0.01 = 1 %%)")
    st.add_argument("--queue-kb", type=float, help="drop-tail queue limit in KiB")
    st.add_argument("--direction", choices=("up", "down"),
                    help="change one direction only (down = server to client)")
    st.set_defaults(func=cmd_set)

    ls = sub.add_parser("list", aliases=["status"], help="show the testbeds that are up",
                        description="List testbed runs, their namespaces, links and counters.")
    ls.add_argument("--json", action="store_true", help="print JSON")
    ls.set_defaults(func=cmd_list)


def _describe(tb: Testbed) -> str:
    sc = tb.scenario
    lines = [f"testbed {tb.id} up: scenario {sc.name}, {tb.backend_name} links, mtu {tb.mtu}"]
    width = max(len(n) for n in tb.namespaces)
    client_caps = _caps(sc.client.tcp_rmem_max, sc.client.tcp_wmem_max)
    if tb.node_links:
        for j, link in enumerate(tb.node_links):
            lines.append(f"  node{j + 1:<3} {tb.node_ns(j):<{width}}  {tb.node_addr(j):<11} "
                         f"{link.describe()}  {client_caps}")
        lines.append(f"  switch  {tb.switch_ns:<{width}}  (forwards between node and server links)")
    else:
        lines.append(f"  client  {tb.client_ns:<{width}}  {client_caps}")
    for i, link in enumerate(tb.links):
        lines.append(f"  srv{i + 1:<4} {tb.server_ns(i):<{width}}  {tb.server_addr(i):<11} "
                     f"(client {tb.client_addr(i)})  {link.describe()}")
    if tb.control_path:
        lines.append(f"  control {tb.control_path}")
    lines.append(f"use:  dtune testbed exec --id {tb.id} srv1 -- dtune serve DIR --port 8080")
    lines.append(f"      dtune testbed exec --id {tb.id} client -- curl http://{tb.server_addr(0)}:8080/")
    lines.append(f"      dtune testbed set --id {tb.id} srv1 --rate-mbit 250")
    return "\n".join(lines)


def _caps(rmem: int | None, wmem: int | None) -> str:
    parts = []
    if rmem:
        parts.append(f"tcp_rmem max {rmem}")
    if wmem:
        parts.append(f"tcp_wmem max {wmem}")
    return ", ".join(parts) or "kernel default TCP buffers"


class _Interrupted(Exception):
    pass


def cmd_up(args: argparse.Namespace) -> int:
    check_host()
    tb = Testbed.from_toml(args.scenario, run_id=args.run_id, backend=args.backend, detach=args.detach)

    def on_term(signum: int, frame: object) -> None:
        raise _Interrupted()

    old = signal.signal(signal.SIGTERM, on_term)
    try:
        tb.start()
        state = netns.read_state(tb.id)
        if args.json:
            print(json.dumps(state.__dict__ if state else {}, indent=1), flush=True)
        else:
            print(_describe(tb), flush=True)
        if args.detach:
            print(f"detached; remove with: dtune testbed down --id {tb.id}", flush=True)
            return 0
        print("Ctrl-C to stop.", flush=True)
        impl = tb._links_impl
        while True:
            time.sleep(0.5)
            proc = getattr(impl, "proc", None)
            if proc is not None and proc.poll() is not None:
                raise DtuneError(f"testbed {tb.id}: link emulator exited (code {proc.returncode})")
    except (KeyboardInterrupt, _Interrupted):
        print(f"\ntestbed {tb.id}: stopping", file=sys.stderr, flush=True)
        return 0
    finally:
        try:
            tb.stop()
        finally:
            signal.signal(signal.SIGTERM, old)


def _live_runs() -> list[netns.RunState]:
    states = [netns.read_state(r) for r in netns.list_runs()]
    return [s for s in states if s is not None and s.owner_alive()]


def resolve_run(run_id: str | None) -> netns.RunState:
    """The state of run ``run_id``, or of the only live run when it is None."""
    if run_id:
        state = netns.read_state(netns.check_run_id(run_id))
        if state is None or not state.owner_alive():
            raise DtuneError(f"testbed {run_id}: not up (see dtune testbed list)")
        return state
    live = _live_runs()
    if not live:
        raise DtuneError("testbed: none is up (start one with dtune testbed up SCENARIO.toml)")
    if len(live) > 1:
        raise UsageError(f"testbed: several are up ({', '.join(s.run_id for s in live)}); pass --id")
    return live[0]


def cmd_down(args: argparse.Namespace) -> int:
    check_host()
    if args.all:
        ids = netns.list_runs()
        for run_id in ids:
            gone = netns.destroy_run(run_id)
            print(f"testbed {run_id}: removed {len(gone)} namespaces")
        with netns.registry_lock():
            leftovers = netns.reap_stale(grace=0.0)
        for name in leftovers:
            print(f"removed leftover {name}")
        if not ids and not leftovers:
            print("testbed: nothing to remove")
        return 0
    if args.run_id:
        run_id = netns.check_run_id(args.run_id)
        if netns.read_state(run_id) is None and not any(
                (m := netns.NS_RE.match(n)) and m.group(1) == run_id for n in netns.list_netns()):
            raise DtuneError(f"testbed {run_id}: not up")
    else:
        run_id = resolve_run(None).run_id
    gone = netns.destroy_run(run_id)
    print(f"testbed {run_id}: removed {len(gone)} namespaces")
    return 0


def _full_ns(state: netns.RunState, name: str) -> str:
    full = name if name.startswith(netns.PREFIX) else netns.ns_name(state.run_id, name)
    if full not in state.namespaces:
        roles = ", ".join(n.removeprefix(f"{netns.PREFIX}{state.run_id}-") for n in state.namespaces)
        raise UsageError(f"testbed {state.run_id}: no namespace {name!r} (have {roles})")
    return full


def cmd_exec(args: argparse.Namespace) -> int:
    argv = list(args.argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise UsageError("testbed exec: give a command after --, e.g. dtune testbed exec client -- ip addr")
    check_host()
    state = resolve_run(args.run_id)
    full = _full_ns(state, args.ns)
    sys.stdout.flush()
    try:
        os.execvp("ip", netns.ns_exec_argv(full, argv))
    except OSError as exc:
        raise DtuneError(f"testbed exec: cannot run ip: {exc.strerror}") from None


def cmd_set(args: argparse.Namespace) -> int:
    check_host()
    state = resolve_run(args.run_id)
    full = _full_ns(state, args.server)
    servers = state.namespaces[1:]
    if full not in servers:
        raise UsageError(f"testbed set: {args.server} is not a server (use srv1 .. srv{len(servers)})")
    if not state.control:
        raise DtuneError(f"testbed {state.run_id}: live changes need the TUN back-end's control socket")
    change = {"rate_mbit": args.rate_mbit, "rtt_ms": args.rtt_ms, "loss": args.loss,
              "queue_kb": args.queue_kb, "direction": args.direction}
    if all(v is None for k, v in change.items() if k != "direction"):
        raise UsageError("testbed set: nothing to change (--rate-mbit, --rtt-ms, --loss, --queue-kb)")
    reply = control_request(state.control, {"op": "set", "link": servers.index(full), **change})
    link = reply["link"]
    print(f"testbed {state.run_id}: {args.server} now {link['rate_mbit']:g} Mbit/s, RTT {link['rtt_ms']:g} ms, "
          f"queue {link['queue_bytes'] // 1024} KiB, loss {link['loss'] * 100:g} %")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    runs = []
    for run_id in netns.list_runs():
        state = netns.read_state(run_id)
        if state is None:
            continue
        entry: dict[str, Any] = dict(state.__dict__, alive=state.owner_alive())
        if entry["alive"] and state.control:
            try:
                entry["links"] = control_request(state.control, {"op": "stats"}, timeout=2.0)["links"]
            except DtuneError:
                pass
        runs.append(entry)
    if args.json:
        print(json.dumps(runs, indent=1))
        return 0
    if not runs:
        print("no testbed is up")
    for entry in runs:
        status = "up" if entry["alive"] else "stale (owner gone; removed on the next start or 'down')"
        mode = "detached" if entry["detached"] else f"owned by pid {entry['owner_pid']}"
        print(f"testbed {entry['run_id']}: {status}, {mode}, scenario {entry['scenario']}")
        for i, addr in enumerate(entry["addresses"]):
            text = addr["link"]
            if "links" in entry:  # the emulator's current values, after any live change
                down = entry["links"][i]["down"]
                text = (f"{down['rate_mbit']:g} Mbit/s, RTT {down['rtt_ms']:g} ms, "
                        f"queue {down['queue_bytes'] // 1024} KiB, loss {down['loss'] * 100:g} %  "
                        f"[{down['bytes'] / 1e6:.1f} MB down, {down['queue_drops']} queue drops, "
                        f"{down['loss_drops']} lost]")
            # a site records its nodes after its servers, as the emulator orders their links
            name, where = (addr["server"], addr["server_addr"]) if "server" in addr else (addr["node"], addr["node_addr"])
            print(f"  {name}  {where}  {text}")
    return 0
