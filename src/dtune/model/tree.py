"""Decision search tree over the history's key attributes (docs/algorithms.md §2.2, Algorithm 1).

Theory of operation
-------------------
A tree groups history logs whose key attributes (average file size, file
count, RTT, TCP buffer, bandwidth) are alike, so that the surfaces of
Algorithm 2 are fitted over comparable transfers only.

Building (breadth first, the root always being cut as in Algorithm 1):

1. In the node, every key column is normalised by its own maximum in that
   node (``v / max|v|``).
2. The attribute to cut is the one with the highest score: the **diversity
   index** ``DI = (max_norm − min_norm) × Σ_{distinct v} 1/count(v)`` (tree 1)
   or the sample **standard deviation** (N−1) of the normalised column
   (tree 2). Only columns with two or more distinct values can be cut; ties
   go to the first attribute in ``KEYS`` order. When no column can be cut
   the node stays a leaf, whatever its size.
3. The node's range ``[lo, hi]`` on that attribute is cut into
   ``cut_number`` equal-width intervals ``[lo + k·w, lo + (k+1)·w)`` (the
   last one closed); a child is made for every interval that holds logs,
   never for an empty one.
4. A child is a leaf when it holds ``<= leaf_threshold`` logs, or when its
   logs all share one value — see ``same_value`` below; other children are
   queued to be cut in turn.

Nodes are numbered 1, 2, 3 … in the order they are made (root 1, then each
cut's children by ascending interval), which is the numbering of the
paper's Figure 1.

``same_value``: Algorithm 1's ``sameChildNodeAttributeValue`` is not defined
in the paper's text. Read as "all logs share one value of the attribute
just cut" (``"cut-attribute"``), the paper's own Figure 1(b) could not be
drawn: its node 4 holds only 100 kB logs (one value of the file size it was
cut on) and is still cut, on the file count. Read as "all logs share every
key attribute" (``"all-keys"``, the default) — i.e. nothing is left to cut —
the figure follows. Both readings are available.

Querying: from the root, follow the child whose interval holds the query's
value of the node's attribute. A value outside every child's interval (out
of the node's range, or in the gap left by an empty interval) goes to the
nearest child — unless it is farther than ``nearest_within`` node spans
from all of them, or the query does not give that attribute: then no child
fits and the node reached so far answers ("unseen attributes", §III-B).
``nearest_within=None`` always takes the nearest child.

Pure: arrays in, nodes and matches out.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from dtune.model import defaults
from dtune.model.columns import KEYS

Criterion = str | Sequence[str]
SAME_VALUE_RULES = ("all-keys", "cut-attribute")


def normalise(values: np.ndarray) -> np.ndarray:
    """``values / max|values|``; all zeros stay zeros."""
    v = np.asarray(values, dtype=float)
    top = float(np.max(np.abs(v))) if v.size else 0.0
    return v / top if top > 0 else np.zeros_like(v)


def diversity_index(values: Sequence[float] | np.ndarray) -> float:
    """DI of one column: ``(max_norm − min_norm) × Σ_{distinct v} 1/count(v)`` (paper §III-D1)."""
    v = np.asarray(values, dtype=float)
    if v.size == 0:
        return 0.0
    n = normalise(v)
    _, counts = np.unique(v, return_counts=True)
    return float((n.max() - n.min()) * np.sum(1.0 / counts))


def standard_deviation(values: Sequence[float] | np.ndarray) -> float:
    """Sample standard deviation (N−1, paper eq. 8) of the max-normalised column; 0 for one value."""
    v = np.asarray(values, dtype=float)
    if v.size < 2:
        return 0.0
    return float(np.std(normalise(v), ddof=1))


CRITERIA: dict[str, Callable[[np.ndarray], float]] = {"di": diversity_index, "sd": standard_deviation}


@dataclass(slots=True, eq=False)
class Node:
    """A tree node: the logs (row indices) it holds and, unless a leaf, how it is cut.

    ``interval`` is the parent's interval on the parent's attribute that this
    node covers (None for the root); ``slot`` is that interval's index.
    ``attribute`` is the index in ``KEYS`` this node is cut on, ``lo``/``hi``
    its range in the node, ``cut_number`` the intervals it was cut into.
    """

    id: int
    depth: int
    rows: np.ndarray
    parent: int | None = None
    slot: int | None = None
    interval: tuple[float, float] | None = None
    attribute: int | None = None
    lo: float = math.nan
    hi: float = math.nan
    cut_number: int = 0
    children: list[Node] = field(default_factory=list)

    @property
    def is_leaf(self) -> bool:
        return not self.children

    @property
    def attribute_name(self) -> str | None:
        return None if self.attribute is None else KEYS[self.attribute]

    def __repr__(self) -> str:
        cut = "leaf" if self.is_leaf else f"cut on {self.attribute_name} into {len(self.children)}"
        return f"<Node {self.id} depth {self.depth}: {len(self.rows)} logs, {cut}>"


@dataclass(frozen=True, slots=True)
class TreeMatch:
    """Where a query ends: the node, the path of node ids, and why it stopped early (if it did).

    ``nearest`` lists the attributes whose value lay outside every child's
    interval and were sent to the nearest child.
    """

    node: Node
    path: tuple[int, ...]
    unseen: str | None = None
    nearest: tuple[str, ...] = ()

    @property
    def rows(self) -> np.ndarray:
        return self.node.rows


class DecisionSearchTree:
    """One decision search tree (Algorithm 1).

    criterion       "di" (diversity index, tree 1), "sd" (standard deviation,
                    tree 2), or a sequence of attribute names cut in that
                    order by depth (to draw a tree by hand, as the paper's
                    Figure 1 does); a node deeper than the sequence is a leaf
    cut_number      equal-width intervals per cut (reference default 8)
    leaf_threshold  a child with <= this many logs is a leaf (reference
                    default 100; the paper's toy example uses 2)
    same_value      "all-keys" or "cut-attribute": when a child whose logs
                    share one value is a leaf (module docstring)
    nearest_within  how far (in node spans) a value may lie from the nearest
                    child's interval and still go to it; None: no limit
    """

    def __init__(self, *, criterion: Criterion = "di", cut_number: int = defaults.CUT_NUMBER,
                 leaf_threshold: int = defaults.LEAF_THRESHOLD, same_value: str = defaults.SAME_VALUE,
                 nearest_within: float | None = defaults.NEAREST_WITHIN) -> None:
        self.criterion = criterion
        self.cut_number = cut_number
        self.leaf_threshold = leaf_threshold
        self.same_value = same_value
        self.nearest_within = nearest_within

    def get_params(self) -> dict:
        crit = self.criterion if isinstance(self.criterion, str) else list(self.criterion)
        return {"criterion": crit, "cut_number": self.cut_number, "leaf_threshold": self.leaf_threshold,
                "same_value": self.same_value, "nearest_within": self.nearest_within}

    def _check(self) -> None:
        if isinstance(self.criterion, str):
            if self.criterion not in CRITERIA:
                raise ValueError(f"criterion must be 'di', 'sd' or a list of attributes, got {self.criterion!r}")
        elif any(name not in KEYS for name in self.criterion):
            raise ValueError(f"criterion attributes must be among {', '.join(KEYS)}, got {self.criterion!r}")
        if not isinstance(self.cut_number, int) or self.cut_number < 2:
            raise ValueError(f"cut_number must be an integer >= 2, got {self.cut_number!r}")
        if self.leaf_threshold < 0:
            raise ValueError(f"leaf_threshold must be >= 0, got {self.leaf_threshold!r}")
        if self.same_value not in SAME_VALUE_RULES:
            raise ValueError(f"same_value must be one of {', '.join(SAME_VALUE_RULES)}, got {self.same_value!r}")

    # -- building ---------------------------------------------------------------

    def fit(self, keys: np.ndarray) -> DecisionSearchTree:
        """Build the tree over ``keys`` (n × 5, the ``KEYS`` columns, no NaN)."""
        self._check()
        x = np.asarray(keys, dtype=float)
        if x.ndim != 2 or x.shape[1] != len(KEYS):
            raise ValueError(f"keys must be an n×{len(KEYS)} array, got shape {x.shape}")
        if np.isnan(x).any():
            raise ValueError("keys must not contain missing values")
        self.keys_ = x
        root = Node(1, 0, np.arange(x.shape[0]))
        self.nodes_: dict[int, Node] = {1: root}
        self.root_ = root
        queue = deque([root])   # Algorithm 1: availableNodeToCutList = [root]
        while queue:
            node = queue.popleft()
            for child in self._cut(node):
                if not self._is_leaf(child, node.attribute):
                    queue.append(child)
        return self

    def _choose(self, sub: np.ndarray, depth: int) -> int | None:
        cuttable = [j for j in range(sub.shape[1]) if np.ptp(sub[:, j]) > 0]
        if not cuttable:
            return None
        if not isinstance(self.criterion, str):
            if depth >= len(self.criterion):
                return None
            j = KEYS.index(self.criterion[depth])
            return j if j in cuttable else None
        score = CRITERIA[self.criterion]
        scores = {j: score(sub[:, j]) for j in cuttable}
        best = max(scores.values())
        tol = 1e-12 * max(1.0, abs(best))
        return next(j for j in cuttable if scores[j] >= best - tol)

    def _cut(self, node: Node) -> list[Node]:
        sub = self.keys_[node.rows]
        j = self._choose(sub, node.depth)
        if j is None:
            return []
        col = sub[:, j]
        lo, hi, c = float(col.min()), float(col.max()), self.cut_number
        slots = _slots(col, lo, hi, c)
        node.attribute, node.lo, node.hi, node.cut_number = j, lo, hi, c
        for k in np.unique(slots).tolist():
            child = Node(len(self.nodes_) + 1, node.depth + 1, node.rows[slots == k], parent=node.id,
                         slot=int(k), interval=_interval(lo, hi, c, int(k)))
            node.children.append(child)
            self.nodes_[child.id] = child
        return node.children

    def _is_leaf(self, child: Node, attribute: int | None) -> bool:
        if len(child.rows) <= self.leaf_threshold:
            return True
        sub = self.keys_[child.rows]
        if self.same_value == "cut-attribute":
            return bool(np.ptp(sub[:, attribute]) == 0)
        return bool((np.ptp(sub, axis=0) == 0).all())

    # -- querying ----------------------------------------------------------------

    def match(self, attrs: Sequence[float] | np.ndarray) -> TreeMatch:
        """Descend with a query's key attributes (``KEYS`` order, NaN = not given)."""
        x = np.asarray(attrs, dtype=float)
        node, path, nearest = self.root_, [self.root_.id], []
        while not node.is_leaf:
            name = KEYS[node.attribute]
            v = float(x[node.attribute])
            if not math.isfinite(v):
                why = "not given" if math.isnan(v) else f"={v} is not a finite number"
                return TreeMatch(node, tuple(path), f"{name} {why}", tuple(nearest))
            child, exact = self._child_for(node, v)
            if child is None:
                return TreeMatch(node, tuple(path), f"{name}={v:g} is near no child of node {node.id} "
                                 f"(range {node.lo:g}..{node.hi:g})", tuple(nearest))
            if not exact:
                nearest.append(name)
            node = child
            path.append(node.id)
        return TreeMatch(node, tuple(path), None, tuple(nearest))

    def _child_for(self, node: Node, v: float) -> tuple[Node | None, bool]:
        span = node.hi - node.lo
        k = node.cut_number - 1 if v == node.hi else math.floor((v - node.lo) * node.cut_number / span)
        for child in node.children:
            if child.slot == k:
                return child, True
        dist = [_distance(v, child.interval) for child in node.children]
        best = int(np.argmin(dist))  # ties: the lower interval
        if self.nearest_within is not None and dist[best] > self.nearest_within * span:
            return None, False
        return node.children[best], False

    # -- inspection and persistence -------------------------------------------------

    @property
    def height(self) -> int:
        """Levels in the tree (a lone root has height 1; the paper's tree 1 has 2)."""
        return 1 + max(n.depth for n in self.nodes_.values())

    def leaves(self) -> list[Node]:
        return [n for n in self.nodes_.values() if n.is_leaf]

    def to_dict(self) -> dict:
        nodes = []
        for n in self.nodes_.values():
            item: dict = {"id": n.id, "depth": n.depth, "parent": n.parent, "slot": n.slot,
                          "interval": list(n.interval) if n.interval else None}
            if n.is_leaf:
                item["rows"] = n.rows.tolist()
            else:
                item.update(attribute=KEYS[n.attribute], lo=n.lo, hi=n.hi, cut_number=n.cut_number,
                            children=[c.id for c in n.children])
            nodes.append(item)
        return {"params": self.get_params(), "nodes": nodes}

    @classmethod
    def from_dict(cls, data: dict, keys: np.ndarray) -> DecisionSearchTree:
        tree = cls(**data["params"])
        tree._check()
        tree.keys_ = np.asarray(keys, dtype=float)
        nodes: dict[int, Node] = {}
        for item in data["nodes"]:
            interval = tuple(item["interval"]) if item["interval"] else None
            node = Node(item["id"], item["depth"], np.asarray(item.get("rows", []), dtype=int),
                        parent=item["parent"], slot=item["slot"], interval=interval)
            if "attribute" in item:
                node.attribute = KEYS.index(item["attribute"])
                node.lo, node.hi, node.cut_number = item["lo"], item["hi"], item["cut_number"]
            nodes[node.id] = node
        for item in data["nodes"]:
            nodes[item["id"]].children = [nodes[c] for c in item.get("children", [])]
        for node in sorted(nodes.values(), key=lambda n: -n.depth):  # inner nodes hold their leaves' logs
            if node.children:
                node.rows = np.sort(np.concatenate([c.rows for c in node.children]))
        tree.nodes_, tree.root_ = nodes, nodes[1]
        return tree

    def __repr__(self) -> str:
        if not hasattr(self, "root_"):
            return f"DecisionSearchTree({self.get_params()}) [not fitted]"
        return (f"<DecisionSearchTree {self.criterion}: {len(self.nodes_)} nodes, "
                f"{len(self.leaves())} leaves, height {self.height}>")


def _slots(col: np.ndarray, lo: float, hi: float, c: int) -> np.ndarray:
    """Interval index of each value in ``[lo, hi]`` cut into ``c`` equal widths (hi in the last)."""
    k = np.floor((col - lo) * c / (hi - lo)).astype(int)
    return np.clip(k, 0, c - 1)


def _interval(lo: float, hi: float, c: int, k: int) -> tuple[float, float]:
    return (lo + (hi - lo) * k / c, hi if k == c - 1 else lo + (hi - lo) * (k + 1) / c)


def _distance(v: float, interval: tuple[float, float] | None) -> float:
    a, b = interval  # type: ignore[misc]
    return max(a - v, 0.0, v - b)
