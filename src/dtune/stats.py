"""Small order statistics on plain numbers, without importing ``statistics``.

The standard module pulls in ``fractions`` and ``decimal`` at import time: a few milliseconds of
every ``dtune get`` start-up for one median (``benchmarks/startup.py``).
"""

from __future__ import annotations

from collections.abc import Iterable


def median(values: Iterable[float]) -> float:
    """The middle value (the mean of the two middle ones for an even count), as ``statistics.median``."""
    ordered = sorted(values)
    n = len(ordered)
    if not n:
        raise ValueError("median of no values")
    mid = n // 2
    return ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2
