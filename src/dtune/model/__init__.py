"""Offline decision-tree model: history in, θ = (cc, p, pp, cpu_num, cpu_freq) out.

ALGORITHMS.md §2.2–2.3 after the seed paper ``decision-tree-energy``:
``DecisionSearchTree`` (Algorithm 1), surfaces and the SLA search
(Algorithm 2), and the ``LookupTable`` the online phase reads. ``Model``
ties them together; see ``docs/model.md``.

    model = Model().fit(rows)                       # rows: history dicts or an array
    theta = model.query({"avg_file_size": 2.4e6, "file_count": 5000, "rtt": 38,
                         "buf": 4 << 20, "bandwidth": 1000}, "max-throughput")
    table = model.table_for(attrs, "min-energy")    # online: table.lookup(rtt_ms, energy_j)
    model.save("model.json"); Model.load("model.json")
"""

from dtune.model.columns import COLUMNS, KEYS, OUTCOMES, THETA, LogTable, as_table
from dtune.model.core import Answer, Match, Model
from dtune.model.search import SLAS, Theta
from dtune.model.surface import Design, Surface, fit_surface
from dtune.model.table import LookupTable, TableEntry
from dtune.model.tree import DecisionSearchTree, Node, TreeMatch, diversity_index, standard_deviation

__all__ = [
    "COLUMNS", "KEYS", "OUTCOMES", "SLAS", "THETA",
    "Answer", "DecisionSearchTree", "Design", "LogTable", "LookupTable", "Match", "Model", "Node",
    "Surface", "TableEntry", "Theta", "TreeMatch",
    "as_table", "diversity_index", "fit_surface", "standard_deviation",
]
