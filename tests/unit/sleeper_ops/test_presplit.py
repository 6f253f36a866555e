"""Pre-splitting before a bulk import takes its split points from the whole table (its
own sketches merged with a sample of the new data) and adds only the leaves the import
needs: a small import into a table that already has leaves adds none."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sleeper_ops.bulk_import.job import bulk_import
from sleeper_ops.bulk_import.presplit import (
    leaves_needed,
    plan_split_points,
    planned_leaves,
)
from statestore.properties import BULK_IMPORT_MIN_LEAF_PARTITIONS, BULK_IMPORT_MIN_ROWS_PER_LEAF
from tests.unit.sleeper_ops.test_bulk_import_job import SCHEMA, local_runner

LOW = -(2**63)


def _rows(keys: np.ndarray, tag: str) -> pa.Table:
    return pa.table({"key": pa.array(keys, pa.int64()), "v": [tag] * len(keys)})


def _leaf_records(t, keys: np.ndarray) -> list[int]:  # type: ignore[no-untyped-def]
    """Records of ``keys`` (all the table holds) in each leaf, smallest first (references
    of split partitions reach the leaves only through compaction, so count by range)."""
    leaves = [p.region.ranges[0] for p in t.state().partitions.values() if p.is_leaf]
    return sorted(int(np.count_nonzero((keys >= r.min) & (keys < (r.max if r.max is not None else 2**62))))
                  for r in leaves)


def test_leaves_needed_follow_the_imports_share_of_the_table():
    assert leaves_needed(64, 0, 1_000) == 64
    assert leaves_needed(64, 100_000, 5_000) == 3
    assert leaves_needed(64, 100_000, 100_000) == 32
    assert leaves_needed(64, 10, 0) == 1


@pytest.mark.parametrize("rows, leaves", [(100, 1), (10_000, 1), (1_000_000, 1), (10_000_000, 10),
                                          (100_000_000, 64)])
def test_a_new_table_gets_the_leaves_its_import_rows_justify_with_the_default_properties(rows, leaves):
    """Issue 34 item 2, the table in docs/usage/bulk-import.md: rows -> leaves on a new
    table, planned (the split points over a sample standing for ``rows`` records) with
    the default sleeper.table.bulk.import.min.leaf.partitions (64) and
    sleeper.table.bulk.import.min.rows.per.leaf (1,000,000)."""
    want = int(BULK_IMPORT_MIN_LEAF_PARTITIONS.default or 0)
    min_rows = int(BULK_IMPORT_MIN_ROWS_PER_LEAF.default or 0)
    planned = planned_leaves(want, min_rows, 0, rows)
    sample = [(float(v), rows / 10_000) for v in range(10_000)]  # 10,000 sampled keys standing for the rows
    points = plan_split_points([(LOW, None)], sample, planned)
    assert (planned, len(points) + 1) == (leaves, leaves)
    assert rows // (len(points) + 1) >= min(rows, min_rows), "no leaf made for fewer rows than the minimum"


def test_the_minimum_rows_per_leaf_caps_the_leaves_of_a_table_with_data_too():
    assert planned_leaves(64, 1_000, 0, 3) == 1
    assert planned_leaves(64, 1, 0, 3) == 3, "a minimum of 1 row: as many leaves as rows, up to want"
    assert planned_leaves(64, 1_000, 9_000, 9_000) == 18, "18,000 records after the import: 18 leaves at most"
    assert planned_leaves(64, 1_000, 100_000, 5_000) == 3, "the import's share decides when it is lower"


def test_the_plan_splits_the_fullest_leaf_at_the_weighted_median_of_old_and_new_data():
    old = [(float(v), 10.0) for v in range(100)]  # 1,000 records spread over 0..99
    new = [(float(v), 1.0) for v in range(100, 200)]  # 100 new records above them
    points = plan_split_points([(LOW, None)], sorted(old + new), 4)
    assert len(points) == 3
    assert points[0] == pytest.approx(55, abs=1), "the median of 1,100 records, most of them old"
    assert all(p < 100 for p in points[:2]), "the old data's range gets the splits it needs"
    assert plan_split_points([(LOW, None)], [(5.0, 1.0)] * 10, 4) == [], "equal keys cannot be split"


def test_a_small_import_into_a_table_with_leaves_adds_none_and_spreads_over_them(sleeper, tmp_path):
    rng = np.random.default_rng(7)
    t = sleeper.create_table("t", SCHEMA, split_points=[333_333, 666_666])
    old, new = rng.integers(0, 1_000_000, 100_000), rng.integers(0, 1_000_000, 5_000)
    t.ingest(_rows(old, "old"))
    pq.write_table(_rows(new, "new"), tmp_path / "new.parquet")

    r = bulk_import(sleeper.state_store, sleeper.objects, t.info, [str(tmp_path / "new.parquet")],
                    run=local_runner(sleeper), import_key="small")

    assert r.status == "committed" and r.records == 5_000 and r.presplits == 0
    assert len(t.query(ranges=[(LOW, None)])) == 105_000
    counts = _leaf_records(t, np.concatenate([old, new]))
    assert len(counts) == 3 and sum(counts) == 105_000
    assert min(counts) > 0.9 * max(counts), f"each leaf holds about a third: {counts}"


def test_a_large_import_splits_at_medians_of_the_whole_table(sleeper, tmp_path):
    rng = np.random.default_rng(8)
    t = sleeper.create_table("t", SCHEMA, properties={"sleeper.table.bulk.import.min.leaf.partitions": "8",
                                                      "sleeper.table.bulk.import.min.rows.per.leaf": "1000"})
    old, new = rng.integers(0, 1_000_000, 50_000), rng.integers(1_000_000, 2_000_000, 50_000)
    t.ingest(_rows(old, "old"))  # the table: keys below 1M; the import: above
    pq.write_table(_rows(new, "new"), tmp_path / "new.parquet")

    r = bulk_import(sleeper.state_store, sleeper.objects, t.info, [str(tmp_path / "new.parquet")],
                    run=local_runner(sleeper), import_key="large")

    counts = _leaf_records(t, np.concatenate([old, new]))
    assert len(t.query(ranges=[(LOW, None)])) == 100_000
    assert r.presplits == 3 and len(counts) == 4, "8 x half the table's records are new"
    assert sum(counts) == 100_000
    assert min(counts) > 0.8 * max(counts), f"the leaves split the whole table evenly, not the new data: {counts}"
