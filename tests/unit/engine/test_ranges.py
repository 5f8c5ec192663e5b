"""``dtune.engine.ranges``: RangeSet arithmetic and the range-size taper, on plain integers."""

from __future__ import annotations

import pytest

from dtune.engine.ranges import RangeSet, next_range_size

MIB = 1 << 20


def rs(*ranges: tuple[int, int]) -> RangeSet:
    return RangeSet(ranges)


# -- add / merge ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("adds", "expected"), [
    ([], []),
    ([(0, 10)], [(0, 10)]),
    ([(5, 5)], []),                                   # empty range ignored
    ([(7, 3)], []),                                   # reversed range ignored
    ([(0, 5), (5, 10)], [(0, 10)]),                   # touching ranges merge
    ([(5, 10), (0, 5)], [(0, 10)]),                   # ... in either order
    ([(0, 5), (6, 10)], [(0, 5), (6, 10)]),           # a one-byte gap stays a gap
    ([(0, 5), (3, 8)], [(0, 8)]),                     # overlap merges
    ([(20, 30), (0, 10)], [(0, 10), (20, 30)]),       # kept sorted
    ([(0, 2), (4, 6), (8, 10), (1, 9)], [(0, 10)]),   # one add swallows several ranges
    ([(0, 2), (4, 6), (8, 10), (5, 8)], [(0, 2), (4, 10)]),
    ([(0, 100), (10, 20)], [(0, 100)]),               # contained add is a no-op
    ([(10, 20), (0, 100)], [(0, 100)]),               # containing add replaces
])
def test_add_keeps_ranges_sorted_disjoint_and_merges_touching_ones(adds, expected) -> None:
    s = RangeSet()
    for start, end in adds:
        s.add(start, end)
    assert list(s) == expected
    assert s.total() == sum(e - b for b, e in expected)
    assert len(s) == len(expected)
    assert bool(s) == bool(expected)


# -- remove ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("initial", "cut", "expected"), [
    ([(0, 10)], (3, 6), [(0, 3), (6, 10)]),           # punch a hole
    ([(0, 10)], (0, 4), [(4, 10)]),                   # trim the front
    ([(0, 10)], (6, 10), [(0, 6)]),                   # trim the back
    ([(0, 10)], (0, 10), []),                         # remove all
    ([(0, 10)], (-5, 50), []),                        # wider than the set
    ([(0, 10)], (10, 20), [(0, 10)]),                 # touching after: nothing removed
    ([(5, 10)], (0, 5), [(5, 10)]),                   # touching before: nothing removed
    ([(0, 10)], (4, 4), [(0, 10)]),                   # empty cut
    ([(0, 5), (10, 15), (20, 25)], (3, 22), [(0, 3), (22, 25)]),
    ([], (0, 10), []),
])
def test_remove_cuts_exactly_the_given_bytes(initial, cut, expected) -> None:
    s = rs(*initial)
    s.remove(*cut)
    assert list(s) == expected


# -- complement ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("initial", "size", "expected"), [
    ([], 10, [(0, 10)]),
    ([], 0, []),
    ([(0, 10)], 10, []),
    ([(2, 5)], 10, [(0, 2), (5, 10)]),
    ([(0, 3), (6, 8)], 10, [(3, 6), (8, 10)]),
    ([(0, 3), (6, 10)], 10, [(3, 6)]),
    ([(5, 20)], 10, [(0, 5)]),                        # ranges past size are clipped away
    ([(15, 20)], 10, [(0, 10)]),
])
def test_complement_is_what_zero_to_size_lacks(initial, size, expected) -> None:
    assert list(rs(*initial).complement(size)) == expected


def test_complement_of_complement_is_the_set_within_size() -> None:
    s = rs((1, 4), (7, 9), (12, 20))
    assert s.complement(20).complement(20) == s


# -- pop_front -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("initial", "size", "taken", "left"), [
    ([(0, 10)], 4, (0, 4), [(4, 10)]),                # part of the first range
    ([(0, 10)], 10, (0, 10), []),                     # exactly the first range
    ([(0, 10)], 99, (0, 10), []),                     # never more than the first range
    ([(5, 8), (20, 30)], 5, (5, 8), [(20, 30)]),      # does not bridge a gap
    ([], 5, None, []),
])
def test_pop_front_takes_up_to_size_bytes_from_the_first_range_only(initial, size, taken, left) -> None:
    s = rs(*initial)
    assert s.pop_front(size) == taken
    assert list(s) == left


def test_first_returns_the_lowest_range_or_none() -> None:
    assert rs((30, 40), (5, 6)).first() == (5, 6)
    assert RangeSet().first() is None


# -- covers ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("initial", "query", "covered"), [
    ([(0, 10)], (0, 10), True),
    ([(0, 10)], (2, 8), True),
    ([(0, 10)], (0, 11), False),
    ([(1, 10)], (0, 10), False),
    ([(0, 5), (6, 10)], (0, 10), False),              # a one-byte hole
    ([(0, 5), (5, 10)], (0, 10), True),               # touching adds merged
    ([(0, 5), (8, 10)], (8, 10), True),               # second range
    ([(0, 5), (8, 10)], (6, 7), False),               # inside the gap
    ([], (0, 1), False),
])
def test_covers_is_true_only_without_a_missing_byte(initial, query, covered) -> None:
    assert rs(*initial).covers(*query) is covered


def test_equality_and_repr_show_the_ranges() -> None:
    assert rs((0, 5), (5, 9)) == rs((0, 9))
    assert rs((0, 5)) != rs((0, 6))
    assert rs((0, 5)) != [(0, 5)]
    assert repr(rs((0, 5), (7, 9))) == "RangeSet([0,5), [7,9))"


# -- next_range_size: the taper ------------------------------------------------------------------

@pytest.mark.parametrize(("unassigned", "streams", "pipeline", "expected"), [
    (0, 4, 4, 0),                                     # nothing left
    (-3, 4, 4, 0),
    (1024 * MIB, 4, 4, 32 * MIB),                     # 1 GiB / (2·4·4)
    (10 * 1024 * MIB, 4, 4, 64 * MIB),                # clamped to max_range
    (10 * MIB, 4, 4, 1 * MIB),                        # clamped to min_range
    (MIB // 2, 4, 4, MIB // 2),                       # less than min_range: all of it
    (MIB + MIB // 2 - 1, 1, 1, MIB + MIB // 2 - 1),   # would leave a crumb < min_range/2: take all
    (MIB + MIB // 2, 1, 1, MIB),                      # leaves exactly min_range/2: fine
    (8 * MIB, 1, 1, 4 * MIB),                         # one slot: half of what is left
    (8 * MIB, 0, 0, 4 * MIB),                         # zero streams/pipeline count as one
    (64 * MIB + 1, 1, 1, 32 * MIB),
])
def test_next_range_size_is_half_the_rest_per_slot_clamped_without_crumbs(
        unassigned, streams, pipeline, expected) -> None:
    assert next_range_size(unassigned, streams, pipeline, min_range=MIB, max_range=64 * MIB) == expected


def carve(total: int, streams: int, pipeline: int, min_range: int, max_range: int) -> list[int]:
    sizes = []
    left = total
    while left:
        size = next_range_size(left, streams, pipeline, min_range=min_range, max_range=max_range)
        assert 0 < size <= left
        sizes.append(size)
        left -= size
    return sizes


@pytest.mark.parametrize(("total", "streams", "pipeline"), [
    (1024 * MIB + 12345, 4, 4),
    (200 * MIB, 8, 2),
    (3 * MIB + 1, 2, 1),
    (MIB // 3, 4, 4),
    (1, 1, 1),
])
def test_carving_a_file_tapers_and_leaves_no_crumb(total, streams, pipeline) -> None:
    min_range, max_range = MIB, 64 * MIB
    sizes = carve(total, streams, pipeline, min_range, max_range)
    assert sum(sizes) == total
    assert all(s <= max_range + min_range // 2 for s in sizes)
    body = sizes[:-1]
    assert all(a >= b for a, b in zip(body, body[1:], strict=False)), "ranges grow again"
    assert all(s >= min_range for s in body)
    if total >= min_range // 2:
        assert sizes[-1] >= min_range // 2, "a crumb of a range was left for the tail"
    if len(sizes) > 1:
        assert sizes[-1] < sizes[-2] + min_range // 2
