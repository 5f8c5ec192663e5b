"""Tiny TCP measurement tools for checking the testbed's fidelity.

Run inside the namespaces (``Testbed.popen`` / ``Testbed.run``)::

    python -m dtune_lab.testbed.probe serve 10.77.0.2 5001 [--lifetime 120]
    python -m dtune_lab.testbed.probe fetch 10.77.0.2 5001 --streams 8 --seconds 4 --warmup 1
    python -m dtune_lab.testbed.probe rtt 10.77.0.2 5001 --count 10

``serve`` answers each connection's ``SEND <seconds>`` line by streaming
bytes for that long, sampling the sender's TCP_INFO (the peer's advertised
window ``snd_wnd``, ``min_rtt``) and printing one JSON line per connection
when it ends. ``fetch`` opens N streams at once and prints the goodput
measured after a warm-up (slow start excluded). ``rtt`` times TCP connects:
one SYN / SYN-ACK exchange is one round trip. Everything stops by itself.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import struct
import sys
import threading
import time
from typing import Any

CHUNK = 256 * 1024


def tcp_info(sock: socket.socket) -> dict[str, int]:
    """A few fields of Linux ``struct tcp_info`` (offsets from linux/tcp.h)."""
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    out = {"rtt_us": struct.unpack_from("I", raw, 68)[0],
           "snd_cwnd": struct.unpack_from("I", raw, 80)[0],
           "rcv_space": struct.unpack_from("I", raw, 96)[0],
           "total_retrans": struct.unpack_from("I", raw, 100)[0]}
    if len(raw) >= 152:
        out["min_rtt_us"] = struct.unpack_from("I", raw, 148)[0]
    if len(raw) >= 192:
        out["busy_us"], out["rwnd_limited_us"] = struct.unpack_from("QQ", raw, 168)
    if len(raw) >= 232:
        out["snd_wnd"] = struct.unpack_from("I", raw, 228)[0]
    return out


def _send_for(conn: socket.socket, seconds: float) -> dict[str, Any]:
    payload = bytes(CHUNK)
    start = time.monotonic()
    end = start + seconds
    sent = 0
    windows: list[int] = []
    next_sample = start + 0.1
    try:
        while (now := time.monotonic()) < end:
            conn.sendall(payload)
            sent += CHUNK
            if now >= next_sample:
                windows.append(tcp_info(conn).get("snd_wnd", 0))
                next_sample = now + 0.1
    except OSError:
        pass
    info = tcp_info(conn)
    steady = windows[len(windows) // 3:] or windows or [0]
    return {"sent": sent, "seconds": time.monotonic() - start,
            "snd_wnd_median": int(statistics.median(steady)), "snd_wnd_max": max(steady), **info}


def serve(host: str, port: int, lifetime: float) -> int:
    lsock = socket.create_server((host, port), backlog=64, reuse_port=False)
    lsock.settimeout(0.2)
    print(json.dumps({"ready": True, "host": host, "port": port}), flush=True)
    lock = threading.Lock()
    deadline = time.monotonic() + lifetime

    def handle(conn: socket.socket) -> None:
        with conn:
            conn.settimeout(lifetime)
            line = b""
            while not line.endswith(b"\n") and len(line) < 64:
                data = conn.recv(64)
                if not data:
                    return
                line += data
            words = line.split()
            if len(words) == 2 and words[0] == b"SEND":
                seconds = min(float(words[1]), max(0.0, deadline - time.monotonic()))
                report = _send_for(conn, seconds)
                with lock:
                    print(json.dumps(report), flush=True)

    while time.monotonic() < deadline:
        try:
            conn, _ = lsock.accept()
        except TimeoutError:
            continue
        threading.Thread(target=handle, args=(conn,), daemon=True).start()
    return 0


def fetch(host: str, port: int, streams: int, seconds: float, warmup: float) -> dict[str, Any]:
    """Goodput of ``streams`` parallel downloads, measured after ``warmup`` seconds."""
    counts = [0] * streams
    errors: list[str] = []

    def one(i: int) -> None:
        buf = bytearray(1 << 20)
        try:
            with socket.create_connection((host, port), timeout=10) as s:
                s.sendall(f"SEND {warmup + seconds + 1:.3f}\n".encode())
                while True:
                    n = s.recv_into(buf)
                    if not n:
                        return
                    counts[i] += n
        except OSError as exc:
            errors.append(str(exc))

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(streams)]
    for t in threads:
        t.start()
    time.sleep(warmup)
    t0, b0 = time.monotonic(), list(counts)
    time.sleep(seconds)
    t1, b1 = time.monotonic(), list(counts)
    per = [(b - a) * 8 / (t1 - t0) / 1e6 for a, b in zip(b0, b1, strict=True)]
    return {"streams": streams, "mbit": sum(per), "mbit_per_stream": per, "seconds": t1 - t0,
            "errors": errors}


def rtt(host: str, port: int, count: int) -> dict[str, Any]:
    """Round trips timed as TCP connects (SYN to SYN-ACK), in milliseconds.

    ``median_ms`` is timed around ``connect()`` in this process, so it also
    holds this process's scheduling delay on a busy machine; ``kernel_*``
    is the kernel's own SYN / SYN-ACK sample (TCP_INFO ``tcpi_rtt`` right
    after the handshake), which does not.
    """
    times, kernel = [], []
    for _ in range(count):
        t0 = time.perf_counter()
        with socket.create_connection((host, port), timeout=10) as s:
            times.append((time.perf_counter() - t0) * 1000)
            kernel.append(tcp_info(s)["rtt_us"] / 1000)
        time.sleep(0.01)
    return {"count": count, "median_ms": statistics.median(times), "min_ms": min(times),
            "max_ms": max(times), "kernel_median_ms": statistics.median(kernel),
            "kernel_min_ms": min(kernel), "all_ms": times, "kernel_ms": kernel}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dtune_lab.testbed.probe", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("serve")
    p.add_argument("host")
    p.add_argument("port", type=int)
    p.add_argument("--lifetime", type=float, default=120.0, help="exit after this many seconds")
    p = sub.add_parser("fetch")
    p.add_argument("host")
    p.add_argument("port", type=int)
    p.add_argument("--streams", type=int, default=1)
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--warmup", type=float, default=1.0)
    p = sub.add_parser("rtt")
    p.add_argument("host")
    p.add_argument("port", type=int)
    p.add_argument("--count", type=int, default=10)
    args = parser.parse_args(argv)
    if args.cmd == "serve":
        return serve(args.host, args.port, args.lifetime)
    if args.cmd == "fetch":
        result = fetch(args.host, args.port, args.streams, args.seconds, args.warmup)
    else:
        result = rtt(args.host, args.port, args.count)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
