"""Connections → partitions: how a total of connections is laid over a tuner's split (pure).

``OnlineSearch`` (``tuners.online``) decides how many connections there are
in all; ``shape`` lays that total over the tuner's ``Params`` per partition,
and ``pipeline_for`` caps the requests a connection keeps in flight for
whole files. ``total_lanes`` and ``busiest_share`` read a plan's connections.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from dtune.params import Params
from dtune.tuners.base import Fixed, apply_fixed, split_lanes


def pipeline_for(avg_size: float, window: float, windows: float) -> int:
    """Requests one connection keeps in flight for files of ``avg_size`` bytes sent whole: enough to
    hold ``windows`` windows of ``window`` bytes, plus one.

    Algorithm 1's pp fills the BDP with one connection (``BDP / avg_size``), but a connection
    carries at most its window per round trip: on a 1 Gbit/s · 40 ms path with 512 KiB buffers
    it gives pp 51 for 100 KB files, 5 MB queued per connection, which the last connections
    still hold after the others have finished (0.4 s of tail at the ~70 Mbit/s a window carries).
    Measured there, 2000 × 100 KB, three interleaved runs by hand: pp 51 2.57–2.68 s, pp 16
    2.14–2.34 s, pp 9 (this rule) 2.12–2.20 s of transfer.
    """
    if avg_size <= 0:
        return 1
    return math.ceil(windows * window / avg_size) + 1


def total_lanes(params: Mapping[str, Params]) -> int:
    """Connections a plan may hold at once: Σ cc·p over the partitions."""
    return sum(p.cc * p.p for p in params.values())


def busiest_share(params: Mapping[str, Params]) -> float:
    """The largest fraction of all lanes that serves one replica (1.0 with one replica)."""
    total = total_lanes(params)
    if not total:
        return 1.0
    per: dict[int, int] = {}
    for p in params.values():
        for r, n in enumerate(p.lanes_per_replica()):
            per[r] = per.get(r, 0) + p.cc * n
    return max(per.values()) / total


def shape(base: Mapping[str, Params], total: int, *, ranged: Mapping[str, bool], fixed: Fixed,
          bytes_share: Mapping[str, float] | None = None) -> dict[str, Params]:
    """``base``'s split between partitions, scaled to ``total`` connections in all.

    A partition whose files travel as ranges (``ranged``) takes as many lanes
    per file (p) as the count needs over its files in flight, and then as few
    files in flight (cc, never more than the tuner's) as give the count; one of
    small files scales the files in flight (cc). The user's
    fixed values stay: a fixed p makes cc scale, a fixed cc makes p scale, and
    both fixed leave the partition as it is. With ``bytes_share`` (each
    partition's share of the dataset's bytes) no partition gets a smaller
    share of the connections than of the bytes (up to rounding): a tuner that gives 8 files in
    flight to small files and 8 × 14 streams to large ones would, scaled down
    to 30 connections, leave 1928 small files to two connections, and they
    would be the last 6 s of the transfer.
    """
    active = {n: p for n, p in base.items() if p.cc > 0}
    base_total = total_lanes(active)
    out = dict(base)
    if not base_total:
        return out
    weight = {n: p.cc * p.p / base_total for n, p in active.items()}
    if bytes_share:  # the partitions under their share of the bytes get it; the rest share the others'
        under = {n: bytes_share[n] for n, w in weight.items() if bytes_share.get(n, 0.0) > w}
        over = sum(w for n, w in weight.items() if n not in under)
        left = max(0.0, 1.0 - sum(under.values()))
        weight = {n: under[n] if n in under else (w * left / over if over else 0.0) for n, w in weight.items()}
    for name, p in active.items():
        want = max(1, round(total * weight[name]))
        if fixed.cc is not None and fixed.p is not None:
            continue
        if fixed.cc is None and fixed.p is None and p.lanes is None and ranged.get(name, False):
            # as many lanes per file as ``want`` needs over the tuner's files in flight, then as few
            # files in flight as give ``want`` with them: any count, not only multiples of cc (with
            # 8 large files in flight, p alone gave 8, 16 or 24 lanes: from 16 the one step down was 8)
            per = math.ceil(want / p.cc)
            new = p.with_(cc=max(1, min(p.cc, round(want / per))), p=per)
        elif fixed.cc is not None or (ranged.get(name, False) and fixed.p is None):
            lanes = max(1, round(want / p.cc))
            new = p.with_(p=lanes) if p.lanes is None else p.spread(split_lanes(lanes, p.lanes))
        else:
            new = p.with_(cc=max(1, round(want / p.p)))
        out[name] = apply_fixed(new, fixed, cc=False)
    return out
