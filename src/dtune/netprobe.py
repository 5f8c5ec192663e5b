"""Measuring the network facts: RTT from TCP connects, bandwidth from a short range probe.

``gather_facts`` fills in what the user did not give and returns
``dtune.netfacts.NetworkFacts``; every fact says how it was obtained.
"""

from __future__ import annotations

import asyncio
import statistics
import time

from dtune.errors import DtuneError, HTTPError
from dtune.http.connection import FutureExchange, open_connection
from dtune.http.message import build_request, split_url
from dtune.netfacts import (
    ASSUMED_BANDWIDTH,
    ASSUMED_BUFFER,
    ASSUMED_RTT,
    NetworkFacts,
    os_receive_buffer_max,
)

RTT_SAMPLES = 5
PROBE_SECONDS = 1.5
PROBE_WARMUP = 0.5                # slow start: only bytes after this count
PROBE_MIN_DATASET = 1 << 30       # below this the probe would cost more than it can save
PROBE_SHARE = 20                  # the probe never discards more than 1/20 of the dataset's bytes
PROBE_STREAMS = 16                # enough to fill 1 Gbit/s·40 ms with 512 KiB buffers
PROBE_RANGE = 4 << 20


async def measure_rtt(url: str, samples: int = RTT_SAMPLES, timeout: float = 5.0) -> float | None:
    """Median TCP connect time to the URL's origin (one SYN/SYN-ACK round trip each).

    The connects run at once, so measuring costs one round trip, not ``samples``.
    """
    origin, _ = split_url(url)

    async def one() -> float | None:
        started = time.perf_counter()
        try:
            conn = await open_connection(origin, timeout=timeout)
        except HTTPError:
            return None
        elapsed = time.perf_counter() - started
        conn.close()
        return elapsed

    times = [t for t in await asyncio.gather(*(one() for _ in range(samples))) if t is not None]
    return statistics.median(times) if times else None


class _Sink(FutureExchange):
    """An exchange that counts body bytes and drops them."""

    def __init__(self, request: bytes, counter: list[int], loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(request, loop)
        self.counter = counter

    def on_headers(self, status: int, headers: dict[str, str]) -> bool:
        return status in (200, 206)

    def on_body(self, data: bytes) -> None:
        self.counter[0] += len(data)


async def probe_bandwidth(url: str, size: int, *, seconds: float = PROBE_SECONDS,
                          streams: int = PROBE_STREAMS, max_bytes: int | None = None) -> float | None:
    """Bytes/s reached by ``streams`` parallel range requests on one file for ``seconds``.

    The bytes are discarded: the probe costs at most ``seconds`` of link time
    and at most ``max_bytes`` (on a fast path the time alone could fetch
    more than the whole dataset).
    """
    origin, target = split_url(url)
    loop = asyncio.get_running_loop()
    counter = [0]
    start = loop.time()
    stop = start + seconds
    marks: list[tuple[float, int]] = []  # (time, bytes so far) at each finished range
    piece = PROBE_RANGE if max_bytes is None else max(64 << 10, min(PROBE_RANGE, max_bytes // (2 * streams)))

    async def stream(i: int) -> None:
        try:
            conn = await open_connection(origin, timeout=5.0)
        except HTTPError:
            return
        try:
            offset = (i * piece) % max(size - piece, 1)
            while loop.time() < stop and (max_bytes is None or counter[0] < max_bytes):
                end = min(size, offset + piece)
                sink = _Sink(build_request("GET", origin, target, (offset, end)), counter, loop)
                conn.send(sink)
                try:
                    await asyncio.wait_for(sink.done, max(0.05, stop - loop.time()))
                except (TimeoutError, DtuneError):
                    return
                if not conn.usable:
                    return
                marks.append((loop.time(), counter[0]))
                offset = end if end < size else 0
        finally:
            conn.close()

    await asyncio.gather(*(stream(i) for i in range(streams)))
    if len(marks) < 2:
        return None
    # skip slow start: measure from the first range finished after the warm-up, if the probe
    # lasted that long, else from the first finished range
    later = [m for m in marks if m[0] >= start + PROBE_WARMUP]
    t0, b0 = later[0] if len(later) >= 2 else marks[0]
    t1, b1 = marks[-1]
    return (b1 - b0) / (t1 - t0) if t1 > t0 and b1 > b0 else None


async def gather_facts(url: str, largest: int, total: int, *, bandwidth: float | None = None,
                       tcp_buffer: int | None = None, rtt: float | None = None,
                       mirrors: list[str] | None = None) -> NetworkFacts:
    """Fill in what the user did not give. ``largest``/``total``: the dataset's sizes.

    With ``mirrors`` (other URLs of the same file) the RTT of every replica
    is measured too, and the bandwidth probe is skipped (each replica has
    its own link; MDTP measures them with its probe ranges).
    """
    replica_urls = [url, *(mirrors or [])]
    replica_rtt: list[float] = []
    how = {}
    if len(replica_urls) > 1:
        measured = await asyncio.gather(*(measure_rtt(u) for u in replica_urls))
        replica_rtt = [m if m is not None else ASSUMED_RTT for m in measured]
        if rtt is None:
            rtt = replica_rtt[0]
            how["rtt"] = "measured" if measured[0] is not None else "assumed"
        if bandwidth is None:
            bandwidth = ASSUMED_BANDWIDTH
            how["bandwidth"] = "assumed"  # each replica is measured by its own MDTP probe ranges
    if rtt is None:
        rtt = await measure_rtt(url)
        how["rtt"] = "measured" if rtt is not None else "assumed"
        rtt = rtt if rtt is not None else ASSUMED_RTT
    else:
        how.setdefault("rtt", "given")
    if tcp_buffer is None:
        tcp_buffer = os_receive_buffer_max()
        how["tcp_buffer"] = "measured" if tcp_buffer else "assumed"
        tcp_buffer = tcp_buffer or ASSUMED_BUFFER
    else:
        how["tcp_buffer"] = "given"
    if bandwidth is None:
        # Probing costs ~1.5 s of link time: only worth it for datasets that take longer.
        if largest >= 8 * PROBE_RANGE and total >= PROBE_MIN_DATASET:
            bandwidth = await probe_bandwidth(url, largest, max_bytes=total // PROBE_SHARE)
        how["bandwidth"] = "measured" if bandwidth else "assumed"
        bandwidth = bandwidth or ASSUMED_BANDWIDTH
    else:
        how.setdefault("bandwidth", "given")
    origins = [str(split_url(u)[0]) for u in replica_urls]
    return NetworkFacts(rtt=rtt, bandwidth=bandwidth, tcp_buffer=tcp_buffer, how=how,
                        replica_origins=origins if len(origins) > 1 else [],
                        replica_rtt=replica_rtt)
