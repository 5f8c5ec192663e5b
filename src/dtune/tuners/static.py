"""``--tuner static``: fixed cc/p/pp for the whole transfer, the baseline every report compares against.

Values the user did not set come from dtune's size rule (``size_rule``):
a budget of connections, spent on many groups with pipelining for many
small files, or on parallel lanes for few large ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from dtune.netfacts import NetworkFacts
from dtune.params import DEFAULT_SPLIT_THRESHOLD, Params
from dtune.tuners.base import Fixed, Tuner, TunerPlan, apply_fixed

BUDGET = 16  # connections in all: what filled the 1 Gbit/s · 40 ms testbed with 512 KiB buffers


def size_rule(file_count: int, avg_size: float | None, *, budget: int = BUDGET) -> Params:
    """cc/p/pp from the dataset's shape alone.

    ``budget`` TCP connections in total: many small files get many groups
    with pipelining (pp 8); few large files (average above twice the split
    threshold) get the connections as parallel lanes (pp 2).
    """
    files = max(1, file_count)
    cc = min(budget, files)
    large = avg_size is None or avg_size > 2 * DEFAULT_SPLIT_THRESHOLD
    p = max(1, budget // cc) if large else 1
    pp = 2 if large else 8
    return Params(cc=cc, p=min(p, budget), pp=pp)


class StaticTuner(Tuner):
    """Fixed cc/p/pp for the whole transfer: the user's, the rest from ``size_rule``.

    budget   connections the size rule spends (16)
    fixed    the user's explicit cc / p / pp, never changed
    """

    name = label = "static"

    def __init__(self, *, budget: int = BUDGET, fixed: Fixed | Mapping[str, int] | None = None) -> None:
        super().__init__(fixed=fixed)
        self.budget = budget

    def plan(self, sizes: Sequence[int | None], facts: NetworkFacts) -> TunerPlan:
        known = [s for s in sizes if s is not None]
        base = size_rule(len(sizes), sum(known) / len(known) if known else None, budget=self.budget)
        params = apply_fixed(base, self.fixed)
        note = f"static: {params}" + ("" if len(self.fixed.as_dict()) == 3 else
                                      " (unset values from dtune's size rule)")
        return TunerPlan(["all"] * len(sizes), {"all": params}, [note])
