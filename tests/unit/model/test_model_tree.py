"""Decision search tree: the two indexes, cutting, nearest child, unseen attributes, persistence."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dtune.model import KEYS, DecisionSearchTree, diversity_index, standard_deviation

RTT = KEYS.index("rtt")


@pytest.mark.parametrize(("values", "di", "sd"), [
    ([5, 5, 5], 0.0, 0.0),                               # one value: nothing to cut
    ([3], 0.0, 0.0),
    ([0, 0], 0.0, 0.0),
    ([1, 2], 0.5 * 2, math.sqrt(0.125)),                 # norm .5, 1: range .5 × (1 + 1)
    ([2, 2, 4], 0.5 * 1.5, math.sqrt(1 / 12)),           # a repeated value counts 1/2
    ([1, 2, 3, 4], 0.75 * 4, float(np.std([0.25, 0.5, 0.75, 1.0], ddof=1))),
    ([10, 20, 20, 20, 20], 0.5 * 1.25, float(np.std([0.5, 1, 1, 1, 1], ddof=1))),
])
def test_diversity_index_and_sample_sd_on_tiny_columns(values: list[float], di: float, sd: float) -> None:
    assert diversity_index(values) == pytest.approx(di)
    assert standard_deviation(values) == pytest.approx(sd)


def test_indexes_do_not_depend_on_units() -> None:
    col = np.array([40.0, 50, 100, 100, 150])
    assert diversity_index(col * 1000) == pytest.approx(diversity_index(col))
    assert standard_deviation(col * 1000) == pytest.approx(standard_deviation(col))


def rtt_keys(rtts: list[float], reps: int = 3) -> np.ndarray:
    """Rows alike in every key attribute but RTT."""
    rows = [[1e6, 100, r, 4e6, 1000] for r in rtts for _ in range(reps)]
    return np.array(rows, dtype=float)


def at(rtt: float) -> list[float]:
    return [1e6, 100, rtt, 4e6, 1000]


@pytest.fixture
def rtt_tree() -> DecisionSearchTree:
    # RTT 10, 20, 80 cut into 7 intervals of 10 ms: children at intervals 0, 1 and 6 (70..80)
    return DecisionSearchTree(cut_number=7, leaf_threshold=3).fit(rtt_keys([10, 20, 80]))


def test_cut_makes_no_empty_children_and_names_intervals(rtt_tree: DecisionSearchTree) -> None:
    root = rtt_tree.root_
    assert root.attribute_name == "rtt" and (root.lo, root.hi) == (10, 80)
    assert [c.slot for c in root.children] == [0, 1, 6]
    assert [c.interval for c in root.children] == [(10, 20), (20, 30), (70, 80)]
    assert [len(c.rows) for c in root.children] == [3, 3, 3]


@pytest.mark.parametrize(("rtt", "node", "nearest"), [
    (10, 2, ()), (19.9, 2, ()), (20, 3, ()), (80, 4, ()), (75, 4, ()),
    (85, 4, ("rtt",)),          # above the range: the last child
    (0, 2, ("rtt",)),           # below it: the first
    (55, 4, ("rtt",)),          # in an empty interval: 15 from 70..80, 25 from 20..30
    (50, 3, ("rtt",)),          # 20 from both: the lower interval
])
def test_value_outside_every_interval_goes_to_the_nearest_child(rtt_tree: DecisionSearchTree, rtt: float,
                                                                 node: int, nearest: tuple) -> None:
    m = rtt_tree.match(at(rtt))
    assert m.node.id == node and m.nearest == nearest and m.unseen is None


def test_value_far_from_every_child_stops_at_the_last_matched_node(rtt_tree: DecisionSearchTree) -> None:
    m = rtt_tree.match(at(200))           # 120 ms beyond 70..80, the node spans 70 ms
    assert m.node.id == 1 and m.path == (1,)
    assert "rtt=200" in m.unseen and len(m.rows) == 9     # the root answers with all its logs
    free = DecisionSearchTree(cut_number=7, leaf_threshold=3, nearest_within=None).fit(rtt_keys([10, 20, 80]))
    assert free.match(at(200)).node.id == 4


def test_missing_attribute_stops_where_it_is_needed() -> None:
    keys = np.array([[s, 100, r, 4e6, 1000] for s in (1e5, 1e8) for r in (10, 50) for _ in range(3)], float)
    tree = DecisionSearchTree(criterion=("avg_file_size", "rtt"), cut_number=4, leaf_threshold=3).fit(keys)
    assert tree.height == 3
    m = tree.match([1e8, 100, math.nan, 4e6, 1000])
    assert m.unseen == "rtt not given"
    assert len(m.path) == 2 and not m.node.is_leaf
    assert sorted(m.rows.tolist()) == [6, 7, 8, 9, 10, 11]   # the 100 MB logs, both RTTs


def test_node_that_cannot_be_cut_stays_a_leaf_whatever_its_size() -> None:
    tree = DecisionSearchTree(leaf_threshold=1).fit(np.tile([1e6, 10, 20, 4e6, 100], (5, 1)))
    assert tree.root_.is_leaf and tree.height == 1
    assert tree.match([5e6, 1, 1, 1, 1]).node is tree.root_


def test_leaf_threshold_ends_the_cutting() -> None:
    keys = rtt_keys([10, 20, 30, 40], reps=5)
    assert DecisionSearchTree(leaf_threshold=100).fit(keys).height == 2   # the root is always cut (Algorithm 1)
    deep = DecisionSearchTree(cut_number=2, leaf_threshold=5).fit(keys)
    assert deep.height == 3 and all(len(leaf.rows) == 5 for leaf in deep.leaves())


def test_every_log_lands_in_exactly_one_leaf() -> None:
    rng = np.random.default_rng(3)
    keys = np.column_stack([rng.choice([1e5, 2e6, 2e8], 400), rng.integers(1, 1000, 400),
                            rng.uniform(1, 80, 400), rng.choice([1e6, 4e6], 400), rng.choice([100, 1000], 400)])
    for criterion in ("di", "sd"):
        tree = DecisionSearchTree(criterion=criterion, leaf_threshold=20).fit(keys)
        rows = np.concatenate([leaf.rows for leaf in tree.leaves()])
        assert sorted(rows.tolist()) == list(range(400))
        for i in (0, 17, 399):           # a log's own attributes lead to the leaf holding it
            assert i in tree.match(keys[i]).rows


def test_round_trip_keeps_structure_and_matches() -> None:
    rng = np.random.default_rng(5)
    keys = np.column_stack([rng.uniform(1e4, 1e8, 200), rng.integers(1, 500, 200), rng.uniform(1, 60, 200),
                            rng.choice([1e6, 4e6], 200), rng.choice([100, 1000], 200)])
    tree = DecisionSearchTree(criterion="sd", leaf_threshold=15).fit(keys)
    back = DecisionSearchTree.from_dict(tree.to_dict(), keys)
    assert back.get_params() == tree.get_params() and len(back.nodes_) == len(tree.nodes_)
    for q in keys[::13]:
        assert back.match(q).path == tree.match(q).path
        assert back.match(q).rows.tolist() == tree.match(q).rows.tolist()
    assert back.root_.rows.tolist() == list(range(200))


@pytest.mark.parametrize("bad", [dict(criterion="gini"), dict(criterion=("colour",)), dict(cut_number=1),
                                 dict(same_value="maybe")])
def test_bad_settings_are_refused(bad: dict) -> None:
    with pytest.raises(ValueError):
        DecisionSearchTree(**bad).fit(rtt_keys([1, 2]))


def test_repr_reveals_size() -> None:
    tree = DecisionSearchTree(cut_number=7, leaf_threshold=3).fit(rtt_keys([10, 20, 80]))
    assert repr(tree) == "<DecisionSearchTree di: 4 nodes, 3 leaves, height 2>"
    assert "not fitted" in repr(DecisionSearchTree())
