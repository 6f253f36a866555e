"""Row key sketches built without a Python call per value: the same KLL sketch as one
fed value by value (count, min and max exact, quantiles within the sketch's rank error),
stored, read back and merged with any other sketch."""

from __future__ import annotations

import bisect
import random

import datasketches as ds
import numpy as np
import pyarrow as pa
import pytest

from sleeper_ops.engine.leaves import leaf_indices, leaf_indices_sliced
from sleeper_ops.io.sketches import RUN_ROWS, FieldSketch, K, Utf8SerDe
from statestore.partitions import PartitionTree

RANKS = (0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99)


def _strings(n: int, seed: int, distinct: int = 10**9) -> list[str]:
    rng = random.Random(seed)
    return [f"key-{rng.randrange(distinct):09d}" for _ in range(n)]


def _rank_error(values: list, sketch: FieldSketch) -> float:
    """The largest distance, in normalised rank, between a sketch's quantile and the truth."""
    truth = sorted(values)
    worst = 0.0
    for q in RANKS:
        got = sketch.quantile(q)
        lo, hi = bisect.bisect_left(truth, got) / len(truth), bisect.bisect_right(truth, got) / len(truth)
        worst = max(worst, 0.0 if lo <= q <= hi else min(abs(q - lo), abs(q - hi)))
    return worst


@pytest.mark.parametrize("n", [1, 2, 199, 200, 201, 5_000, 60_000])
def test_string_sketch_counts_every_value_and_finds_quantiles_within_its_error(n):
    values = _strings(n, seed=n)
    sketch = FieldSketch("StringType")
    for start in range(0, n, 4_096):  # batches, unsorted, as a writer gives them
        sketch.update(pa.array(values[start:start + 4_096], pa.string()))

    assert sketch.count == n
    assert (sketch.min(), sketch.max()) == (min(values), max(values))
    assert _rank_error(values, sketch) <= ds.kll_items_sketch(K).normalized_rank_error(False)


def test_string_sketch_with_many_duplicates_keeps_its_quantiles():
    values = _strings(30_000, seed=3, distinct=7)
    sketch = FieldSketch("StringType")
    sketch.update(pa.array(values, pa.string()))
    assert sketch.count == 30_000
    assert _rank_error(values, sketch) <= ds.kll_items_sketch(K).normalized_rank_error(False)


def test_bytes_sketch_orders_bytes_unsigned_and_returns_bytes():
    rng = np.random.default_rng(5)
    values = [bytes(rng.integers(0, 256, 3, dtype=np.uint8)) for _ in range(10_000)]
    sketch = FieldSketch("ByteArrayType")
    sketch.update(pa.array(values, pa.binary()))
    assert sketch.count == 10_000
    assert (sketch.min(), sketch.max()) == (min(values), max(values))
    assert _rank_error(values, sketch) <= ds.kll_items_sketch(K).normalized_rank_error(False)


def test_sketch_survives_storage_and_merges_with_a_sketch_fed_value_by_value():
    ours_values, theirs_values = _strings(RUN_ROWS + 1_000, seed=1), _strings(20_000, seed=2)
    ours = FieldSketch("StringType")
    ours.update(pa.array(ours_values, pa.string()))
    theirs = ds.kll_items_sketch(K)
    for v in theirs_values:
        theirs.update(v)

    stored = FieldSketch.deserialize("StringType", ours.serialize())
    stored.merge(FieldSketch.deserialize("StringType", theirs.serialize(Utf8SerDe())))

    assert stored.count == len(ours_values) + len(theirs_values)
    assert _rank_error(ours_values + theirs_values, stored) <= ds.kll_items_sketch(K).normalized_rank_error(False)


def test_leaf_indices_over_slices_equal_those_of_the_whole_table(sleeper):
    from sleeper_ops.demo import SYSTEM_TEST_SCHEMA, generate_rows, split_points

    t = sleeper.create_table("slices", SYSTEM_TEST_SCHEMA, split_points=split_points(5))
    tree = PartitionTree(sleeper.state_store.partitions(t.info.table_id))
    data = generate_rows(100_000, seed=9)

    whole = {leaf.id: idx for leaf, idx in leaf_indices(data, tree)}
    sliced = {leaf.id: idx for leaf, idx in leaf_indices_sliced(data, tree, 3)}

    assert whole.keys() == sliced.keys()
    for pid, idx in whole.items():
        assert np.array_equal(idx, sliced[pid])


def test_non_ascii_and_empty_strings_read_back_from_a_stored_sketch():
    values = ["", "é", "日本語", "key-1", "zzz", "Ωmega"] * 50
    sketch = FieldSketch("StringType")
    sketch.update(pa.array(values, pa.string()).slice(3))  # a slice: its offsets do not start at 0

    stored = FieldSketch.deserialize("StringType", sketch.serialize())

    assert stored.count == len(values) - 3
    assert (stored.min(), stored.max()) == ("", "日本語")
    assert {item for item, _ in stored.sketch} <= set(values)
