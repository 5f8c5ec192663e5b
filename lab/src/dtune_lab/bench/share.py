"""Sharing one bottleneck: per-run rates from ``dtune get --json`` logs, and Jain's fairness index.

Pure: ``progress_series`` reads the NDJSON text of one run (any text: lines that are not JSON, or
events without numbers, are skipped), ``rates`` turns cumulative bytes into Mbit/s per time bin,
``jain`` is Jain's index of a set of rates, ``share_summary`` the figures ``benchmarks/share.py``
prints. Times are seconds since the benchmark's own zero (each run's ``start`` is added to the
``t`` of its events).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence


def progress_series(text: str, start: float = 0.0) -> list[tuple[float, int, int]]:
    """``(t, bytes, connections)`` of every ``progress`` event in ``text``, in order of t."""
    out: list[tuple[float, int, int]] = []
    for line in text.splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if not isinstance(e, dict) or e.get("event") != "progress":
            continue
        t, b, c = e.get("t"), e.get("bytes"), e.get("connections")
        if not _num(t) or not _num(b) or isinstance(b, float) and not b.is_integer():
            continue
        out.append((start + float(t), int(b), int(c) if _num(c) and c >= 0 and float(c).is_integer() else 0))
    out.sort(key=lambda r: r[0])
    return out


def _num(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) and x >= 0


def bytes_at(series: Sequence[tuple[float, int, int]], t: float) -> float:
    """Bytes moved by time ``t``, linear between events (0 before the first, the last after it)."""
    if not series or t <= series[0][0]:
        return 0.0 if not series or t < series[0][0] else float(series[0][1])
    prev = series[0]
    for row in series[1:]:
        if row[0] >= t:
            span = row[0] - prev[0]
            frac = (t - prev[0]) / span if span > 0 else 1.0
            return prev[1] + frac * (row[1] - prev[1])
        prev = row
    return float(prev[1])


def mean_mbps(series: Sequence[tuple[float, int, int]], t0: float, t1: float) -> float:
    """Mean Mbit/s of one run between t0 and t1."""
    if t1 <= t0:
        return 0.0
    return max(0.0, bytes_at(series, t1) - bytes_at(series, t0)) * 8 / 1e6 / (t1 - t0)


def rates(series: Sequence[tuple[float, int, int]], t0: float, t1: float, step: float) -> list[float]:
    """Mbit/s in each bin of ``step`` seconds from t0 to t1."""
    n = max(0, int((t1 - t0) / step + 1e-9))
    return [mean_mbps(series, t0 + i * step, t0 + (i + 1) * step) for i in range(n)]


def jain(xs: Iterable[float]) -> float:
    """Jain's fairness index (Σx)² / (n Σx²): 1 for equal shares, 1/n when one takes all."""
    xs = [max(0.0, x) for x in xs]
    sq = sum(x * x for x in xs)
    if not xs or sq <= 0:
        return 1.0
    return sum(xs) ** 2 / (len(xs) * sq)


def converged_after(index: Sequence[float], step: float, threshold: float = 0.95) -> float | None:
    """Seconds from the first bin until Jain's index stays at or above ``threshold`` (None: never)."""
    for i in range(len(index)):
        if all(j >= threshold for j in index[i:]):
            return i * step
    return None


def share_summary(runs: Sequence[Sequence[tuple[float, int, int]]], last_start: float, end: float, *,
                  step: float = 5.0, warmup: float = 10.0) -> dict:
    """Per-run and total Mbit/s after the last start (skipping ``warmup`` s of it), Jain's index per
    bin from the last start, and how long the index took to stay ≥ 0.95."""
    t0 = min(end, last_start + warmup)
    per = [mean_mbps(s, t0, end) for s in runs]
    bins = [rates(s, last_start, end, step) for s in runs]
    index = [jain(col) for col in zip(*bins, strict=True)] if bins else []
    conns = []
    for s in runs:
        cs = [c for t, _, c in s if t0 <= t <= end and c > 0]
        conns.append(sorted(cs)[len(cs) // 2] if cs else 0)
    return {"per_run_mbps": per, "total_mbps": sum(per), "jain": jain(per), "jain_bins": index,
            "converged_s": converged_after(index, step), "connections": conns, "window": (t0, end)}
