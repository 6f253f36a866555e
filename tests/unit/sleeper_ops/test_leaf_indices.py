"""``leaf_indices``: each leaf's row numbers, checked against a model that places each
row in plain Python (bisect over the split points: a row at a split point belongs to
the leaf it starts), for trees split on one field (each row compared with every split
point) and trees split on two fields or with many splits (the tree walked)."""

from __future__ import annotations

import bisect
import random

import pyarrow as pa
import pytest

from sleeper_ops.engine.leaves import MAX_FLAT_SPLITS, leaf_indices
from sleeper_ops.io.arrow_schema import arrow_schema
from statestore.partitions import (
    ROOT_ID,
    Partition,
    PartitionTree,
    partitions_from_split_points,
    root_region,
    split_children,
)
from statestore.schema import Schema


def _schema(key_type: str, second_key: bool = False) -> Schema:
    keys = [{"name": "k", "type": key_type}] + ([{"name": "k2", "type": "LongType"}] if second_key else [])
    return Schema.from_dict({"rowKeyFields": keys, "valueFields": [{"name": "v", "type": "LongType"}]})


def _table(schema: Schema, keys: list, k2: list | None = None) -> pa.Table:
    cols = {"k": keys, **({"k2": k2} if k2 is not None else {}), "v": list(range(len(keys)))}
    return pa.Table.from_pydict(cols, schema=arrow_schema(schema))


def _model(keys: list, points: list) -> dict[int, list[int]]:
    """Row numbers per leaf number (the leaves in key order), ascending."""
    out: dict[int, list[int]] = {}
    for row, key in enumerate(keys):
        out.setdefault(bisect.bisect_right(points, key), []).append(row)
    return out


def _got(table: pa.Table, tree: PartitionTree, field: int = 0) -> dict[int, list[int]]:
    """leaf_indices as row numbers per leaf number (the leaves ordered by their minimum)."""
    found = leaf_indices(table, tree)
    leaves = sorted((p for p in tree.by_id.values() if p.is_leaf), key=lambda p: p.region.ranges[field].min)
    number = {leaf.id: i for i, leaf in enumerate(leaves)}
    return {number[leaf.id]: list(range(table.num_rows)) if idx is None else idx.tolist() for leaf, idx in found}


@pytest.mark.parametrize("key_type,points,draw", [
    ("StringType", ["g", "m", "mm", "t"], lambda r: r.choice(["", "a", "g", "m", "mm", "t", "zz"]) + r.choice("a ")),
    ("LongType", [-5, 0, 7, 1000], lambda r: r.choice([-6, -5, 0, 6, 7, 999, 1000, 5000]) + r.randrange(-1, 2)),
    ("ByteArrayType", [b"\x10", b"\x80"], lambda r: bytes([r.randrange(256)]) * r.randrange(1, 3)),
    ("StringType", [f"k{i:03d}" for i in range(1, MAX_FLAT_SPLITS + 5)],  # too many splits: the tree walk
     lambda r: f"k{r.randrange(0, 40):03d}" + r.choice(["", "x"])),
])
def test_each_row_goes_to_the_leaf_whose_range_holds_its_key(key_type, points, draw):
    schema = _schema(key_type)
    rng = random.Random(7)
    keys = [draw(rng) for _ in range(3000)] + list(points)  # every split point itself too
    rng.shuffle(keys)
    tree = PartitionTree(partitions_from_split_points(schema, points))

    assert _got(_table(schema, keys), tree) == _model(keys, sorted(points))


def test_rows_all_in_one_leaf_and_a_tree_of_one_leaf():
    schema = _schema("LongType")
    tree = PartitionTree(partitions_from_split_points(schema, [10, 20]))
    assert _got(_table(schema, [12, 15, 11]), tree) == {1: [0, 1, 2]}
    assert _got(_table(schema, [1, 30]), PartitionTree(partitions_from_split_points(schema, []))) == {0: [0, 1]}
    assert leaf_indices(_table(schema, []), tree) == []


def test_a_tree_split_on_two_fields_is_walked():
    schema = _schema("LongType", second_key=True)
    root, low, high = split_children(Partition(ROOT_ID, root_region(schema)), 1, 50)
    low, low_a, low_b = split_children(low, 0, 0)  # then the low half on the first field
    rng = random.Random(3)
    k, k2 = [rng.randrange(-9, 9) for _ in range(500)], [rng.choice([0, 49, 50, 51, 99]) for _ in range(500)]

    found = {leaf.id: idx.tolist() for leaf, idx in leaf_indices(_table(schema, k, k2),
                                                                PartitionTree([root, low, high, low_a, low_b]))}

    assert found == {low_a.id: [i for i in range(500) if k2[i] < 50 and k[i] < 0],
                     low_b.id: [i for i in range(500) if k2[i] < 50 and k[i] >= 0],
                     high.id: [i for i in range(500) if k2[i] >= 50]}
