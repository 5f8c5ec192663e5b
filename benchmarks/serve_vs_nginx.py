#!/usr/bin/env python3
"""``dtune serve`` next to nginx on loopback: one big file with curl, many pipelined small requests.

    python benchmarks/serve_vs_nginx.py [--size-mib 1024] [--rounds 5] [--requests 40000] [--depth 64]

Both servers serve the same temporary directory on 127.0.0.1 and are
measured alternately, round after round, so that other load on the machine
hits both alike; the table shows medians and the dtune/nginx ratio. Besides
wall-clock throughput it reports the CPU time each server process used,
which is steadier than throughput on a shared machine.

* big file: ``curl -s -o /dev/null -w %{speed_download} URL`` (the page
  cache is warmed first);
* pipelined: one connection, ``--depth`` requests in flight, ``--requests``
  GETs spread over 1000 files of ``--small-size`` bytes. The client only
  counts bytes (every answer has the same length, learned from a first
  request), so it costs far less CPU than either server.

nginx runs with ``dtune_lab.bench.nginx``'s configuration: one worker (dtune
serve is one process), ``sendfile on``, ``tcp_nopush on``, ``access_log
off``; dtune with ``--quiet``. A benchmark, not a test: it needs ``nginx``
and ``curl`` on PATH.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dtune_lab.bench.nginx import Listing, LocalNginx
from dtune_lab.serveproc import ServerProcess

# Far more than one round sends on one connection: nginx must never close it mid-measurement.
KEEPALIVE_REQUESTS = 10_000_000


def _cpu_seconds(pids: list[int]) -> float:
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime + stime
    return total / ticks


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def make_dataset(root: Path, size_mib: int, small_size: int) -> None:
    root.mkdir(parents=True, exist_ok=True)
    big = root / "big.bin"
    if not big.exists() or big.stat().st_size != size_mib << 20:
        block = os.urandom(1 << 20)
        with open(big, "wb") as f:
            for _ in range(size_mib):
                f.write(block)
    small = root / "small"
    small.mkdir(exist_ok=True)
    for i in range(1000):
        p = small / f"{i:04d}.bin"
        if not p.exists() or p.stat().st_size != small_size:
            p.write_bytes(os.urandom(small_size))


def _read_one(sock: socket.socket, request: bytes) -> int:
    """Send one request, return the length in bytes of its whole answer (head + body)."""
    sock.sendall(request)
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, rest = data.partition(b"\r\n\r\n")
    m = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    if not head.startswith(b"HTTP/1.1 200") or m is None:
        raise RuntimeError(f"unexpected answer: {head[:200]!r}")
    length = int(m.group(1))
    while len(rest) < length:
        rest += sock.recv(65536)
    return len(head) + 4 + length


def pipelined(port: int, total: int, depth: int) -> float:
    """Requests per second for ``total`` GETs over one connection with ``depth`` in flight."""
    reqs = [f"GET /small/{i % 1000:04d}.bin HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode() for i in range(total)]
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        answer = _read_one(sock, reqs[0])
        buf = bytearray(1 << 20)
        sent = received = 0
        step = max(1, depth // 2)
        t0 = time.perf_counter()
        sock.sendall(b"".join(reqs[:depth]))
        sent = min(depth, total)
        expected = total * answer
        while received < expected:
            n = sock.recv_into(buf)
            if n == 0:
                raise RuntimeError("server closed the connection")
            received += n
            done = received // answer
            if sent < total and sent - done <= depth - step:
                more = min(total, done + depth) - sent
                sock.sendall(b"".join(reqs[sent:sent + more]))
                sent += more
        elapsed = time.perf_counter() - t0
        if received != expected:
            raise RuntimeError("answer lengths differ: cannot count answers by bytes")
    return total / elapsed


def curl_speed(url: str) -> float:
    out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{speed_download} %{http_code}", url],
                         capture_output=True, text=True, check=True).stdout.split()
    if out[1] != "200":
        raise RuntimeError(f"curl {url}: HTTP {out[1]}")
    return float(out[0])


@dataclass
class _Server:
    name: str
    port: int
    cpu_pids: Callable[[], list[int]]
    stop: Callable[[], None]

    def cpu(self) -> float:
        return _cpu_seconds(self.cpu_pids())


def start_nginx(work: Path, root: Path) -> _Server:
    nginx = LocalNginx(work, [Listing(root, "html")], sendfile=True, tcp_nopush=True,
                       keepalive_requests=KEEPALIVE_REQUESTS).start()
    master = nginx.proc
    assert master is not None
    return _Server("nginx", nginx.port, lambda: _children(master.pid), nginx.stop)  # the worker's CPU


def start_dtune(root: Path, loop: str) -> _Server:
    server = ServerProcess(str(root), extra=["--loop", loop], stderr=sys.stderr).start()
    pid = server.pid
    return _Server(f"dtune ({loop})", server.port, lambda: [pid], server.close)


def _measure(servers: list[_Server], rounds: int, one: Callable[[_Server], float]) -> dict[str, tuple[list[float], list[float]]]:
    results: dict[str, tuple[list[float], list[float]]] = {s.name: ([], []) for s in servers}
    for r in range(rounds):
        order = servers if r % 2 == 0 else list(reversed(servers))
        for s in order:
            cpu0 = s.cpu()
            value = one(s)
            results[s.name][0].append(value)
            results[s.name][1].append(s.cpu() - cpu0)
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python benchmarks/serve_vs_nginx.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mib", type=int, default=1024, help="big file size (default: %(default)s)")
    ap.add_argument("--small-size", type=int, default=4096, help="small file size (default: %(default)s)")
    ap.add_argument("--requests", type=int, default=40000, help="pipelined GETs per round (default: %(default)s)")
    ap.add_argument("--depth", type=int, default=64, help="requests in flight (default: %(default)s)")
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds (default: %(default)s)")
    ap.add_argument("--loop", action="append", choices=("uvloop", "asyncio"),
                    help="dtune event loop(s) to measure (default: uvloop and asyncio)")
    ap.add_argument("--data-dir", type=Path, help="reuse (or create) the dataset here instead of a temp dir")
    args = ap.parse_args(argv)
    loops = args.loop or ["uvloop", "asyncio"]

    work = Path(tempfile.mkdtemp(prefix="dtune-serve-bench-"))
    root = args.data_dir or work / "data"
    servers: list[_Server] = []
    try:
        make_dataset(root, args.size_mib, args.small_size)
        servers.append(start_nginx(work / "nginx", root.resolve()))
        for loop in loops:
            servers.append(start_dtune(root, loop))
        for s in servers:  # warm the page cache and the servers
            curl_speed(f"http://127.0.0.1:{s.port}/big.bin")
            pipelined(s.port, 2000, args.depth)

        big = _measure(servers, args.rounds, lambda s: curl_speed(f"http://127.0.0.1:{s.port}/big.bin"))
        small = _measure(servers, args.rounds, lambda s: pipelined(s.port, args.requests, args.depth))

        base_big = statistics.median(big["nginx"][0])
        base_small = statistics.median(small["nginx"][0])
        print(f"{args.size_mib} MiB file with curl, {args.requests} pipelined GETs of {args.small_size} B "
              f"(depth {args.depth}), median of {args.rounds} alternating rounds")
        print(f"{'server':<18}{'big MB/s':>10}{'ratio':>7}{'CPU s/GiB':>11}"
              f"{'small req/s':>13}{'ratio':>7}{'CPU µs/req':>12}")
        for s in servers:
            bs, bc = big[s.name]
            ss, sc = small[s.name]
            mbps = statistics.median(bs) / 1e6
            cpu_gib = statistics.median(bc) / (args.size_mib / 1024)
            rps = statistics.median(ss)
            cpu_req = statistics.median(sc) / args.requests * 1e6
            print(f"{s.name:<18}{mbps:>10.0f}{statistics.median(bs) / base_big:>7.2f}{cpu_gib:>11.2f}"
                  f"{rps:>13.0f}{rps / base_small:>7.2f}{cpu_req:>12.1f}")
        print("per-round big MB/s:", {n: [round(v / 1e6) for v in big[n][0]] for n in big})
        print("per-round small req/s:", {n: [round(v) for v in small[n][0]] for n in small})
    finally:
        for s in servers:
            s.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
