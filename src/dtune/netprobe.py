"""Measuring the network facts: RTT from TCP connects; the bandwidth is not probed.

``gather_facts`` fills in what the user did not give and returns
``dtune.netfacts.NetworkFacts``; every fact says how it was obtained.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Mapping
from typing import TYPE_CHECKING

from dtune.errors import HTTPError
from dtune.http.access import DIRECT, Access
from dtune.http.message import split_url
from dtune.netfacts import (
    ASSUMED_BANDWIDTH,
    ASSUMED_BUFFER,
    ASSUMED_RTT,
    NetworkFacts,
    os_receive_buffer_max,
)
from dtune.stats import median

if TYPE_CHECKING:
    from dtune.http.connection import Connection

RTT_SAMPLES = 5                   # concurrent connects: the median of 5 costs one round trip


async def measure_rtt(url: str, samples: int = RTT_SAMPLES, timeout: float = 5.0,
                      access: Access = DIRECT, keep: list[Connection] | None = None) -> float | None:
    """Median TCP connect time to the URL's origin (one SYN/SYN-ACK round trip each).

    The connects run at once, so measuring costs one round trip, not ``samples``. Through a
    proxy (``access``'s route, ``http.proxy``) a connect is the one to the proxy, plus CONNECT
    and the TLS handshake for https: the RTT is then the proxy's, not the origin's. ``keep``:
    the connections go there, open, for the engine (``WarmPool.adopt``; the caller closes
    what is not taken), instead of being closed.
    """
    origin, _ = split_url(url)

    async def one() -> float | None:
        started = time.perf_counter()
        try:
            conn = await access.connect(origin, timeout=timeout)
        except HTTPError:
            return None
        elapsed = time.perf_counter() - started
        if keep is not None:
            keep.append(conn)
        else:
            conn.close()
        return elapsed

    times = [t for t in await asyncio.gather(*(one() for _ in range(samples))) if t is not None]
    return median(times) if times else None


async def gather_facts(url: str, *, bandwidth: float | None = None, tcp_buffer: int | None = None,
                       rtt: float | None = None, seen_rtt: float | None = None,
                       mirrors: list[str] | None = None,
                       early: Mapping[str, Awaitable[float | None]] | None = None,
                       access: Access = DIRECT, samples: int = RTT_SAMPLES) -> NetworkFacts:
    """Fill in what the user did not give.

    ``seen_rtt`` is a connect time already measured to ``url``'s origin (the
    discovery's): one round trip, so no other connection is opened for it.
    With ``mirrors`` (other URLs of the same file) the RTT of every replica is
    measured too, or taken from ``early`` (origin → the measurement started
    while discovery ran: at +500 ms that saves a second), each from ``samples`` connects at once
    (no more than ``--max-connections-per-host``). The bandwidth is never probed — a probe moves bytes only to
    throw them away: unless given, it is assumed for the first plan, and the
    transfer's own goodput revises what it drives (the online search, MDTP's
    probe ranges).
    """
    replica_urls = [url, *(mirrors or [])]
    replica_rtt: list[float] = []
    how = {}
    if len(replica_urls) > 1:
        async def replica(i: int, u: str) -> float | None:
            if i == 0 and seen_rtt is not None:
                return seen_rtt
            pending = (early or {}).get(str(split_url(u)[0]))
            return await pending if pending is not None else await measure_rtt(u, samples, access=access)
        measured = await asyncio.gather(*(replica(i, u) for i, u in enumerate(replica_urls)))
        replica_rtt = [m if m is not None else ASSUMED_RTT for m in measured]
        if rtt is None:
            rtt = replica_rtt[0]
            how["rtt"] = "measured" if measured[0] is not None else "assumed"
        if bandwidth is None:
            bandwidth = ASSUMED_BANDWIDTH
            how["bandwidth"] = "assumed"  # each replica is measured by its own MDTP probe ranges
    if rtt is None and seen_rtt is not None:
        rtt = seen_rtt
        how["rtt"] = "measured"
    if rtt is None:
        rtt = await measure_rtt(url, samples, access=access)
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
        bandwidth = ASSUMED_BANDWIDTH
        how["bandwidth"] = "assumed"
    else:
        how.setdefault("bandwidth", "given")
    origins = [str(split_url(u)[0]) for u in replica_urls]
    return NetworkFacts(rtt=rtt, bandwidth=bandwidth, tcp_buffer=tcp_buffer, how=how,
                        replica_origins=origins if len(origins) > 1 else [],
                        replica_rtt=replica_rtt)
