"""Measure the emulator: goodput, RTT and its CPU cost on one link.

    python -m dtune_lab.testbed.measure --rate-mbit 1000 --rtt-ms 40 --streams 8 --seconds 5
    python -m dtune_lab.testbed.measure --rate-mbit 10000 --rtt-ms 1 --streams 8   # the ceiling

Brings a one-link testbed up, runs ``dtune_lab.testbed.probe`` (server in srv1,
N parallel streams from the client), and prints one JSON object: goodput,
kernel RTT, the emulator's CPU time per second of wall time (user + system,
which includes the receiving TCP stack run in its ``write()`` calls) and
packets per second through it. Add ``--profile FILE`` to record the
emulator with py-spy meanwhile.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from typing import Any

from dtune.errors import DtuneError
from dtune_lab.testbed import Link, Testbed

PROBE = [sys.executable, "-m", "dtune_lab.testbed.probe"]


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _spy_format(path: str) -> str:
    return {".json": "speedscope", ".txt": "raw"}.get(os.path.splitext(path)[1], "flamegraph")


def measure(link: Link, *, streams: int, seconds: float, warmup: float, client_rmem: int | None,
            mtu: int, profile: str | None = None, congestion_control: str | None = None) -> dict[str, Any]:
    with Testbed.from_profile([link], client_rmem=client_rmem, mtu=mtu, backend="tun",
                              congestion_control=congestion_control) as tb:
        addr = tb.server_addr(0)
        srv = tb.popen("srv1", PROBE + ["serve", addr, "5001", "--lifetime", str(warmup + seconds + 60)],
                       stdout=subprocess.PIPE, text=True)
        srv.stdout.readline()
        rtt = json.loads(tb.run("client", PROBE + ["rtt", addr, "5001", "--count", "5"],
                                capture_output=True, text=True, check=True).stdout)
        emu = tb._links_impl.pid
        client = tb.popen("client", PROBE + ["fetch", addr, "5001", "--streams", str(streams),
                                             "--seconds", str(seconds), "--warmup", str(warmup)],
                          stdout=subprocess.PIPE, text=True)
        time.sleep(warmup)
        spy = None
        if profile and shutil.which("py-spy"):
            spy = subprocess.Popen(["py-spy", "record", "-p", str(emu), "-d", str(int(seconds)), "-r", "200",
                                    "-o", profile, "-f", _spy_format(profile)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        c0, t0, s0 = cpu_seconds(emu), time.monotonic(), tb.link_stats()[0]
        time.sleep(seconds)
        c1, t1, s1 = cpu_seconds(emu), time.monotonic(), tb.link_stats()[0]
        out = json.loads(client.communicate(timeout=60)[0])
        if spy:
            spy.wait(timeout=60)
    wall = t1 - t0
    pkts = sum(s1[d]["packets"] - s0[d]["packets"] for d in ("up", "down"))
    drops = s1["down"]["queue_drops"] - s0["down"]["queue_drops"]
    return {"rate_mbit": link.rate_mbit, "rtt_ms": link.rtt_ms, "streams": streams, "mtu": mtu,
            "goodput_mbit": round(out["mbit"], 1), "kernel_rtt_ms": round(rtt["kernel_median_ms"], 2),
            "connect_rtt_ms": round(rtt["median_ms"], 2),
            "emulator_cpu": round((c1 - c0) / wall, 3), "packets_per_s": round(pkts / wall),
            "queue_drops_per_s": round(drops / wall), "cc": congestion_control, "profile": profile}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dtune_lab.testbed.measure", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rate-mbit", type=float, default=1000)
    p.add_argument("--rtt-ms", type=float, default=40)
    p.add_argument("--streams", type=int, default=8)
    p.add_argument("--seconds", type=float, default=5)
    p.add_argument("--warmup", type=float, default=1.5)
    p.add_argument("--client-rmem", type=int, default=None, help="client tcp_rmem max, bytes")
    p.add_argument("--mtu", type=int, default=9000)
    p.add_argument("--cc", help="TCP congestion control in both namespaces (default: the host's)")
    p.add_argument("--profile", help="py-spy output: .svg flame graph, .json speedscope, .txt collapsed stacks")
    args = p.parse_args(argv)
    try:
        result = measure(Link(rate_mbit=args.rate_mbit, rtt_ms=args.rtt_ms), streams=args.streams,
                         seconds=args.seconds, warmup=args.warmup, client_rmem=args.client_rmem,
                         mtu=args.mtu, profile=args.profile, congestion_control=args.cc)
    except DtuneError as exc:
        print(f"measure: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
