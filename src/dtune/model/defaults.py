"""Every default of the offline decision-tree model (docs/algorithms.md §2), named once.

Each is a constructor argument of ``DecisionSearchTree`` or ``Model``; the
value here is only what you get when you do not say otherwise.
"""

from __future__ import annotations

import math

# --- decision search tree (§2.2, the paper's Algorithm 1) -------------------
CUT_NUMBER = 8            # equal-width intervals per cut: the reference implementation's default
LEAF_THRESHOLD = 100      # a node with <= this many logs is a leaf: reference default (the paper's toy uses 2)
SAME_VALUE = "all-keys"   # a child whose logs share every key attribute is a leaf; see tree.py for why
NEAREST_WITHIN = 1.0      # ours: a value farther than 1 node span from every child's interval "fits no child"

# --- surfaces (§2.3, Algorithm 2) ---------------------------------------------
DEGREES = (2, 3, 4)       # the same lab's earlier surface code tried these, lowest first
R2_THRESHOLD = 0.7        # keep the lowest degree whose train and test R² both exceed this
TEST_SIZE = 0.2           # the 80/20 split
RANDOM_STATE = 0          # the split is seeded so that a model build is reproducible
MIN_SURFACE_LOGS = 10     # ours: fewer logs leave < 2 for the test split, where R² means nothing;
#                           below it the search uses the matched logs themselves

# --- SLA search -------------------------------------------------------------
GRID_MAX_VALUES = 12      # ours: at most this many values per θ column on the search grid (12^5 ≈ 250 k points)
MAX_OUTSIDE_RATIO = 4.0   # ours: a query attribute more than 4× beyond the history's range is "nothing close"

# --- lookup table (§2.3, §2.4) ----------------------------------------------
RTT_BIN_MS = 10.0         # the paper's table is keyed by RTT in 10 ms bins
MAX_TABLES = 16           # ours: tables pre-built at fit time, one per most frequent scenario


def throughput_bin_width(bandwidth_mbps: float | None, top: float | None = None) -> float:
    """Width (Mbit/s) of a throughput bin: a tenth of the link's order of magnitude.

    The paper bins throughput by 100 Mbit/s on its 1 Gbit/s testbeds and by
    1000 Mbit/s on its 10 Gbit/s one; ``10**floor(log10(b)) / 10`` gives
    exactly those and keeps ten-ish bins on the scaled-down links of dtune's
    testbed (10 Mbit/s bins on a 100 Mbit/s link, where a fixed 100 Mbit/s
    bin would hold everything). Without a bandwidth, ``top`` (the largest
    predicted throughput) stands in for it.
    """
    ref = bandwidth_mbps if bandwidth_mbps and bandwidth_mbps > 0 else top
    if not ref or ref <= 0 or not math.isfinite(ref):
        return 1.0
    return 10.0 ** math.floor(math.log10(ref)) / 10.0


def energy_bin_width(top_joules: float | None) -> float:
    """Width (J) of an energy bin, "alike" the throughput bins: a tenth of the largest energy's order."""
    if not top_joules or top_joules <= 0 or not math.isfinite(top_joules):
        return 1.0
    return 10.0 ** math.floor(math.log10(top_joules)) / 10.0
