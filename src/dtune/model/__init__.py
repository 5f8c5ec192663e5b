"""Offline decision-tree model: history in, θ = (cc, p, pp, cpu_num, cpu_freq) out.

docs/algorithms.md §2.2–2.3 after the seed paper ``decision-tree-energy``:
``DecisionSearchTree`` (Algorithm 1), surfaces and the SLA search
(Algorithm 2), and the ``LookupTable`` the online phase reads. ``Model``
ties them together; see ``docs/model.md``.

    model = Model().fit(rows)                       # rows: history dicts or an array
    theta = model.query({"avg_file_size": 2.4e6, "file_count": 5000, "rtt": 38,
                         "buf": 4 << 20, "bandwidth": 1000}, "max-throughput")
    table = model.table_for(attrs, "min-energy")    # online: table.lookup(rtt_ms, energy_j)
    model.save("model.json"); Model.load("model.json")
"""

import importlib

# Names are loaded on first use (PEP 562): importing ``dtune.model.cli`` for the
# command line must not pull in numpy for every dtune command.
_WHERE = {
    **dict.fromkeys(("COLUMNS", "KEYS", "OUTCOMES", "THETA", "LogTable", "as_table"), "columns"),
    **dict.fromkeys(("Answer", "Match", "Model"), "core"),
    **dict.fromkeys(("SLAS", "Theta"), "search"),
    **dict.fromkeys(("Design", "Surface", "fit_surface"), "surface"),
    **dict.fromkeys(("LookupTable", "TableEntry"), "table"),
    **dict.fromkeys(("DecisionSearchTree", "Node", "TreeMatch", "diversity_index", "standard_deviation"),
                    "tree"),
}


def __getattr__(name: str) -> object:
    if name not in _WHERE:
        raise AttributeError(f"module 'dtune.model' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"dtune.model.{_WHERE[name]}"), name)
    globals()[name] = value
    return value


__all__ = [
    "COLUMNS", "KEYS", "OUTCOMES", "SLAS", "THETA",
    "Answer", "DecisionSearchTree", "Design", "LogTable", "LookupTable", "Match", "Model", "Node",
    "Surface", "TableEntry", "Theta", "TreeMatch",
    "as_table", "diversity_index", "fit_surface", "standard_deviation",
]
