"""``--tuner golike``: one partition, parameters from a table by average file size (docs/algorithms.md §1.6).

Globus Online's exact values are not published; the table follows what the
literature describes (cc 2, pipelining ≈ 20 for small files, up to ≈ 8
streams for large ones). It is labelled an approximation everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from dtune.netfacts import NetworkFacts
from dtune.params import Params
from dtune.tuners.base import Fixed, Tuner, TunerPlan, apply_fixed

GO_TABLE = (  # (upper bound of average file size in bytes, cc, p, pp)
    (50_000_000, 2, 2, 20),
    (250_000_000, 2, 4, 8),
    (float("inf"), 2, 8, 4),
)


class GoLikeTuner(Tuner):
    """GO-like (approximation): one partition, cc/p/pp from ``table`` by average size.

    table   rows of (upper bound of the average file size in bytes, cc, p, pp)
    fixed   the user's explicit cc / p / pp, never changed
    """

    name = "golike"
    label = "GO-like (approximation)"

    def __init__(self, *, table: Sequence[tuple[float, int, int, int]] = GO_TABLE,
                 fixed: Fixed | Mapping[str, int] | None = None) -> None:
        super().__init__(fixed=fixed)
        self.table = tuple(table)

    def plan(self, sizes: Sequence[int | None], facts: NetworkFacts) -> TunerPlan:
        known = [s for s in sizes if s is not None]
        avg = sum(known) / len(known) if known else 0
        row = next((r for r in self.table if avg < r[0]), self.table[-1])
        _, cc, p, pp = row
        params = apply_fixed(Params(cc=cc, p=p, pp=pp), self.fixed)
        return TunerPlan(["all"] * len(sizes), {"all": params},
                         [f"{self.label}: average {avg:.0f} bytes → {params}"])
