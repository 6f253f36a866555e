"""The prefix-number sort and leaf split of standard ingest (``engine/key_order.py``)
against a plain-Python model: rows sorted by (row key, sort key, input position) with
Python's own comparisons, each row's leaf found by bisecting the split points."""

from __future__ import annotations

import bisect
from unittest import mock

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from sleeper_ops.engine import key_order
from sleeper_ops.engine.key_order import sorted_leaf_slices
from statestore.partitions import PartitionTree, partitions_from_split_points
from statestore.schema import Schema

#: strings that share long prefixes, differ after 8 bytes, hold NULs and non-ASCII, or are empty
TEXT = st.one_of(st.text(alphabet="ab\0é", max_size=12),
                 st.builds(lambda head, tail: "prefix-" + head + "-12345678" + tail,
                           st.text(alphabet="xy", max_size=2), st.text(alphabet="\0cd", max_size=3)))
#: keys sharing a prefix longer than the 8 bytes of one number (found in steps of 8)
LONG_PREFIX = st.builds(lambda tail: "a-shared-prefix-of-24b/" + tail, st.text(alphabet="ab\0é", max_size=10))
#: key kind -> (schema type, Arrow type, keys, split points)
KEYS = {"StringType": ("StringType", pa.string(), TEXT, TEXT),
        "long prefix": ("StringType", pa.string(), LONG_PREFIX, LONG_PREFIX | TEXT),
        "ByteArrayType": ("ByteArrayType", pa.binary(), *[st.one_of(
            st.binary(max_size=12), st.binary(max_size=3).map(lambda b: b"\xff" * 9 + b))] * 2),
        "LongType": ("LongType", pa.int64(), *[st.integers(-2**63, 2**63 - 1) | st.integers(-3, 3)] * 2),
        "IntType": ("IntType", pa.int32(), *[st.integers(-2**31, 2**31 - 1) | st.integers(-3, 3)] * 2)}


@st.composite
def cases(draw: st.DrawFn) -> tuple[Schema, pa.Table, list[object]]:
    key_type, arrow_type, values, point_values = KEYS[draw(st.sampled_from(sorted(KEYS)))]
    keys = draw(st.lists(values, min_size=1, max_size=60))
    if draw(st.booleans()):  # many duplicates
        keys = [keys[i % 3] for i in range(len(keys))]
    sorts = draw(st.lists(st.integers(0, 3), min_size=len(keys), max_size=len(keys)))
    points = sorted(set(draw(st.lists(point_values, max_size=5)) + draw(st.lists(st.sampled_from(keys), max_size=2))))
    if key_type in ("IntType", "LongType"):
        points = [p for p in points if p != (-2**31 if key_type == "IntType" else -2**63)]
    elif key_type == "StringType":
        points = [p for p in points if p != ""]
    else:
        points = [p for p in points if p != b""]
    schema = Schema.from_dict({"rowKeyFields": [{"name": "k", "type": key_type}],
                               "sortKeyFields": [{"name": "s", "type": "LongType"}],
                               "valueFields": [{"name": "i", "type": "LongType"}]})
    table = pa.table({"k": pa.array(keys, arrow_type), "s": pa.array(sorts, pa.int64()),
                      "i": pa.array(range(len(keys)), pa.int64())})
    cut = draw(st.integers(0, len(keys) - 1))  # a slice: its arrays start at an offset in their buffers
    return schema, table.slice(cut, draw(st.integers(1, len(keys) - cut))), points


def _bytes(v: object) -> object:
    return v.encode() if isinstance(v, str) else v


@settings(deadline=None, max_examples=400)
@given(cases())
def test_the_order_and_leaves_equal_a_plain_python_sort_and_bisect(case: tuple[Schema, pa.Table, list[object]]
                                                                   ) -> None:
    schema, table, points = case
    tree = PartitionTree(partitions_from_split_points(schema, points))
    with mock.patch.object(key_order, "MAX_TIED_SHARE", 1):  # never give up on ties: check their settling
        got = sorted_leaf_slices(table, tree, schema)
    assert got is not None
    order, slices = got
    rows = table.to_pylist()
    model = sorted(range(len(rows)), key=lambda i: (_bytes(rows[i]["k"]), rows[i]["s"], i))
    assert order.tolist() == model
    leaf_ids = [p.id for p in sorted((p for p in tree.by_id.values() if p.is_leaf),
                                     key=lambda p: _bytes(p.region.ranges[0].min))]
    want: dict[str, list[int]] = {}
    for i in model:
        leaf = bisect.bisect_right([_bytes(p) for p in points], _bytes(rows[i]["k"]))
        want.setdefault(leaf_ids[leaf], []).append(i)
    assert {leaf.id: order[a:b].tolist() for leaf, a, b in slices} == want
    assert [a for _, a, _ in slices] == sorted(a for _, a, _ in slices)


def test_a_tree_split_on_another_field_or_null_keys_take_the_other_path() -> None:
    schema = Schema.from_dict({"rowKeyFields": [{"name": "a", "type": "LongType"}, {"name": "b", "type": "LongType"}],
                               "valueFields": []})
    from statestore.partitions import split_children
    root = partitions_from_split_points(schema, [])[0]
    parent, left, right = split_children(root, 1, 5, "l", "r")
    table = pa.table({"a": pa.array([2, 1], pa.int64()), "b": pa.array([9, 1], pa.int64())})
    assert sorted_leaf_slices(table, PartitionTree([parent, left, right]), schema) is None
    one = Schema.from_dict({"rowKeyFields": [{"name": "a", "type": "StringType"}], "valueFields": []})
    nulls = pa.table({"a": pa.array(["x", None])})
    assert sorted_leaf_slices(nulls, PartitionTree(partitions_from_split_points(one, [])), one) is None


def test_a_chunk_of_many_rows_sorts_exactly() -> None:
    rng = np.random.default_rng(7)
    n = 150_000  # over two of the 65,536-row blocks
    keys = [f"key-{v:09d}" for v in rng.integers(0, 10**6, n)]  # many equal in their first 8 differing bytes
    schema = Schema.from_dict({"rowKeyFields": [{"name": "k", "type": "StringType"}],
                               "sortKeyFields": [{"name": "s", "type": "LongType"}], "valueFields": []})
    table = pa.table({"k": keys, "s": pa.array(rng.integers(0, 5, n), pa.int64())})
    points = ["key-000250000", "key-000500000", "key-000750000"]
    order, slices = sorted_leaf_slices(table, PartitionTree(partitions_from_split_points(schema, points)), schema)
    ss = table.column("s").to_pylist()
    assert order.tolist() == sorted(range(n), key=lambda i: (keys[i], ss[i], i))
    assert [b - a for _, a, b in slices] == [sum(1 for k in keys if lo <= k < hi) for lo, hi in
                                             zip(["", *points], [*points, "~"])]


def test_keys_mostly_alike_in_their_first_distinct_bytes_take_the_other_path() -> None:
    schema = Schema.from_dict({"rowKeyFields": [{"name": "k", "type": "StringType"}], "valueFields": []})
    urls = [f"https://example.org/{i:06d}" for i in range(1000)] + ["a", "z"]  # 1,000 alike after "a"/"z"
    tree = PartitionTree(partitions_from_split_points(schema, ["m"]))
    assert sorted_leaf_slices(pa.table({"k": urls}), tree, schema) is None
    spread = [f"{i:06d}-https://example.org/" for i in range(1000)]
    assert sorted_leaf_slices(pa.table({"k": spread}), tree, schema) is not None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1) | st.integers(0, 5) | st.sampled_from([2**63, 2**64 - 1, 1 << 16]),
                max_size=300))
def test_the_radix_sort_gives_the_order_of_a_stable_sort_by_python(values: list[int]) -> None:
    numbers = np.array(values, dtype=np.uint64)
    model = sorted(range(len(values)), key=lambda i: values[i])  # Python's sort is stable
    assert key_order.radix_argsort(numbers).tolist() == model


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=300), st.integers(0, 2**64 - 1),
       st.integers(0, 2**64 - 1))
def test_the_radix_sort_of_numbers_sharing_some_bits_gives_the_order_of_a_stable_sort(
        values: list[int], mask: int, base: int) -> None:
    """Numbers that agree on the bits outside ``mask`` (as keys of one alphabet agree on
    some bits of every byte): the shared bits are dropped before sorting."""
    values = [(v & mask) | (base & ~mask) for v in values]
    model = sorted(range(len(values)), key=lambda i: values[i])
    assert key_order.radix_argsort(np.array(values, dtype=np.uint64)).tolist() == model


def test_decimal_keys_sort_in_one_sort_of_packed_bits_and_positions() -> None:
    """Keys of decimal digits vary in 4 bits of each byte: 8 bytes make 32 varying bits,
    which with the rows' positions fit one 64-bit word: one plain sort, no radix pass."""
    keys = pa.array([f"key-{v:09d}" for v in np.random.default_rng(3).integers(0, 10**9, 5000)])
    numbers, _ = key_order._key_numbers(keys)
    assert numbers is not None
    with mock.patch.object(key_order.np, "argsort", wraps=np.argsort) as argsort:
        order = key_order.radix_argsort(numbers)
    assert argsort.call_count == 0
    assert order.tolist() == sorted(range(len(keys)), key=lambda i: (keys[i].as_py(), i))


def test_numbers_too_wide_to_pack_with_their_positions_take_the_radix_passes() -> None:
    """64 varying bits leave no room for the positions: the 16-bit passes, still stable."""
    rng = np.random.default_rng(5)
    values = rng.integers(0, 2**63, 3000, dtype=np.uint64) * np.uint64(2) + rng.integers(0, 2, 3000, dtype=np.uint64)
    values[::7] = values[3]  # ties, kept in input order
    values[0] = np.uint64(2**64 - 1)
    with mock.patch.object(key_order.np, "argsort", wraps=np.argsort) as argsort:
        order = key_order.radix_argsort(values)
    assert argsort.call_count == 4
    assert order.tolist() == sorted(range(len(values)), key=lambda i: (int(values[i]), i))
