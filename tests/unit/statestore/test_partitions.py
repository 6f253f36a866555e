"""Ranges, regions and the partition tree built from split points."""

from __future__ import annotations

import random

import pytest

from statestore import (
    Partition,
    PartitionError,
    PartitionTree,
    Range,
    Region,
    Schema,
    SchemaError,
    partitions_from_split_points,
)
from statestore.partitions import ROOT_ID, root_region, split_children
from statestore.schema import LONG_MIN

LONG_KEY = Schema.from_dict({"rowKeyFields": [{"name": "k", "type": "LongType"}]})
STRING_KEY = Schema.from_dict({"rowKeyFields": [{"name": "s", "type": "StringType"}]})
BYTES_KEY = Schema.from_dict({"rowKeyFields": [{"name": "b", "type": "ByteArrayType"}]})
TWO_KEYS = Schema.from_dict({"rowKeyFields": [{"name": "s", "type": "StringType"}, {"name": "n", "type": "IntType"}]})


def depth(tree: PartitionTree, p: Partition) -> int:
    return len(tree.ancestors(p.id))


# ----- ranges and regions ---------------------------------------------------------------
def test_range_is_closed_on_the_left_and_open_on_the_right():
    r = Range("k", 10, 20)
    assert r.contains(10) and r.contains(19)
    assert not r.contains(20) and not r.contains(9)


def test_range_with_no_max_is_unbounded_above():
    r = Range("k", 10, None)
    assert r.contains(2**63 - 1) and not r.contains(9)


@pytest.mark.parametrize("lo, hi, overlaps", [
    (0, 10, False), (0, 11, True), (19, 25, True), (20, 30, False), (0, None, True), (25, None, False),
])
def test_range_overlap_with_a_half_open_interval(lo, hi, overlaps):
    assert Range("k", 10, 20).overlaps(lo, hi) is overlaps


def test_region_contains_a_key_only_when_every_dimension_does():
    reg = Region((Range("s", "b", "d"), Range("n", 0, 10)))
    assert reg.contains(("b", 0)) and reg.contains(("c", 9))
    assert not reg.contains(("d", 5)) and not reg.contains(("c", 10))


def test_regions_overlap_only_when_every_dimension_does():
    a = Region((Range("s", "a", "m"), Range("n", 0, 10)))
    assert a.overlaps(Region((Range("s", "l", None), Range("n", 5, 6))))
    assert not a.overlaps(Region((Range("s", "l", None), Range("n", 10, None))))


def test_region_with_bytes_round_trips_through_json_form():
    reg = Region((Range("b", b"", b"\x00\xff"), Range("n", -5, None)))
    d = reg.to_dict()
    assert d[0]["max"] == {"b64": "AP8="}
    assert Region.from_dict(d) == reg


def test_partition_round_trips_through_its_dict_form():
    parent, left, right = split_children(Partition(ROOT_ID, root_region(TWO_KEYS)), 1, 7, "L", "R")
    for p in (parent, left, right):
        assert Partition.from_dict(p.to_dict()) == p
    assert parent.to_dict()["children"] == ["L", "R"] and parent.dimension == 1 and not parent.is_leaf


# ----- split points -> tree -------------------------------------------------------------
def test_no_split_points_give_one_root_leaf_covering_everything():
    (root,) = partitions_from_split_points(LONG_KEY)
    assert root.id == ROOT_ID and root.is_leaf and root.parent_id is None
    assert root.region == Region((Range("k", LONG_MIN, None),))


@pytest.mark.parametrize("n_points", [1, 2, 3, 7, 8, 100])
def test_split_points_give_a_balanced_tree_whose_leaves_cover_the_key_space_in_order(n_points):
    points = random.Random(n_points).sample(range(-1000, 1000), n_points)
    parts = partitions_from_split_points(LONG_KEY, points)
    tree = PartitionTree(parts)
    leaves = sorted(tree.leaves(), key=lambda p: p.region.ranges[0].min)
    assert len(leaves) == n_points + 1 and len(parts) == 2 * n_points + 1
    # contiguous: each leaf starts where the previous ended, the last is unbounded
    edges = [LONG_MIN, *sorted(points)]
    assert [leaf.region.ranges[0].min for leaf in leaves] == edges
    assert [leaf.region.ranges[0].max for leaf in leaves] == [*sorted(points), None]
    # balanced: leaf depths differ by at most one
    depths = {depth(tree, leaf) for leaf in leaves}
    assert max(depths) - min(depths) <= 1
    assert max(depths) == (n_points).bit_length()


def test_every_non_leaf_has_two_children_that_split_it():
    tree = PartitionTree(partitions_from_split_points(LONG_KEY, [10, 20, 30, 40, 50]))
    for p in tree.by_id.values():
        if p.is_leaf:
            assert p.child_ids == () and p.dimension == -1
            continue
        left, right = (tree.by_id[c] for c in p.child_ids)
        assert left.parent_id == right.parent_id == p.id
        assert left.region.ranges[0].min == p.region.ranges[0].min
        assert left.region.ranges[0].max == right.region.ranges[0].min
        assert right.region.ranges[0].max == p.region.ranges[0].max


def test_leaf_for_key_finds_the_leaf_containing_the_key_and_split_points_go_right():
    parts = partitions_from_split_points(LONG_KEY, [10, 20, 30])
    tree = PartitionTree(parts)
    for key in [LONG_MIN, -1, 9, 10, 11, 19, 20, 29, 30, 2**63 - 1]:
        leaf = tree.leaf_for_key((key,))
        assert leaf.is_leaf and leaf.region.contains((key,))
    assert tree.leaf_for_key((10,)).region.ranges[0].min == 10


def test_string_and_bytes_trees_use_code_point_and_unsigned_byte_order():
    s_tree = PartitionTree(partitions_from_split_points(STRING_KEY, ["é", "Z", "a"]))
    assert s_tree.leaf_for_key(("b",)).region.ranges[0].min == "a"  # "Z" < "a" < "b" < "é"
    assert s_tree.leaf_for_key(("zz",)).region.ranges[0].max == "é"
    b_tree = PartitionTree(partitions_from_split_points(BYTES_KEY, [b"\x80"]))
    assert b_tree.leaf_for_key((b"\x7f\xff",)).region.ranges[0].max == b"\x80"
    assert b_tree.leaf_for_key((b"\x80",)).region.ranges[0].min == b"\x80"


def test_ancestors_run_from_parent_up_to_the_root():
    tree = PartitionTree(partitions_from_split_points(LONG_KEY, [10, 20, 30]))
    leaf = tree.leaf_for_key((25,))
    chain = tree.ancestors(leaf.id)
    assert chain[-1].id == ROOT_ID
    assert chain[0].id == leaf.parent_id
    for child, parent in zip([leaf, *chain], chain):
        assert child.id in parent.child_ids
    assert tree.ancestors(ROOT_ID) == []


def test_depth_first_visits_left_children_first():
    tree = PartitionTree(partitions_from_split_points(LONG_KEY, [10, 20, 30]))
    order = tree.depth_first()
    assert order[0] == (0, tree.root)
    leaves_in_order = [p.region.ranges[0].min for _, p in order if p.is_leaf]
    assert leaves_in_order == sorted(leaves_in_order)
    assert len(order) == 7


def test_leaves_overlapping_a_region():
    tree = PartitionTree(partitions_from_split_points(LONG_KEY, [10, 20, 30]))
    found = tree.leaves_overlapping(Region((Range("k", 15, 21),)))
    assert sorted(p.region.ranges[0].min for p in found) == [10, 20]


def test_empty_tree_has_no_root_and_no_depth_first_order():
    tree = PartitionTree([])
    assert tree.root is None and tree.depth_first() == [] and tree.leaves() == []


@pytest.mark.parametrize("points, message", [
    ([5, 5], "given twice"),
    ([LONG_MIN], "least value"),
    (["a"], "is LongType"),
    ([2**63], "out of range"),
])
def test_bad_split_points_are_refused(points, message):
    with pytest.raises(SchemaError, match=message):
        partitions_from_split_points(LONG_KEY, points)


def test_empty_string_split_point_is_refused_as_the_least_string():
    with pytest.raises(SchemaError, match="least value"):
        partitions_from_split_points(STRING_KEY, [""])


# ----- splitting one partition ----------------------------------------------------------
def test_split_children_divide_the_parent_on_the_dimension():
    root = Partition(ROOT_ID, root_region(TWO_KEYS))
    parent, left, right = split_children(root, 1, 0)
    assert parent.child_ids == (left.id, right.id) and parent.dimension == 1
    assert left.region.ranges[1] == Range("n", -(2**31), 0) and right.region.ranges[1] == Range("n", 0, None)
    assert left.region.ranges[0] == right.region.ranges[0] == root.region.ranges[0]


def test_split_of_a_partition_that_is_already_split_is_refused():
    parent, _, _ = split_children(Partition(ROOT_ID, root_region(LONG_KEY)), 0, 5)
    with pytest.raises(PartitionError, match="already split"):
        split_children(parent, 0, 7)


@pytest.mark.parametrize("dimension, point, message", [
    (0, LONG_MIN, "not inside"),
    (0, 2**70, "not inside"),
    (1, 5, "no row key dimension 1"),
    (-1, 5, "no row key dimension -1"),
])
def test_split_at_a_point_outside_the_partition_or_a_missing_dimension_is_refused(dimension, point, message):
    leaf = Partition("p", Region((Range("k", LONG_MIN, 2**64),)))
    with pytest.raises(PartitionError, match=message):
        split_children(leaf, dimension, point)
