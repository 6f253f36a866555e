"""The row group index a point read searches: against a scan of every row group's
rows (an independent model), on sorted files with duplicate keys across groups."""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sleeper_ops.io.datafile import ParquetFileCache, RowGroupIndex
from sleeper_ops.io.storage import ObjectStore


def _write(tmp_path, name: str, keys: list, row_group_size: int, **kw) -> pq.FileMetaData:
    path = tmp_path / name
    pq.write_table(pa.table({"key": keys, "v": list(range(len(keys)))}), path, row_group_size=row_group_size, **kw)
    return pq.read_metadata(path)


@pytest.mark.parametrize("seed", range(25))
def test_the_groups_found_are_exactly_those_holding_keys_in_range(tmp_path, seed):
    rng = random.Random(seed)
    strings = rng.random() < 0.5
    keys = sorted(rng.randint(0, 60) for _ in range(rng.randint(1, 400)))  # many duplicates
    if strings:
        keys = sorted(f"k{k:02d}" for k in keys)
    size = rng.randint(1, 50)
    md = _write(tmp_path, "f.parquet", keys, size)
    index = RowGroupIndex.of(md, "key")
    assert index is not None
    groups = [keys[i:i + size] for i in range(0, len(keys), size)]  # the model: the rows of each group
    for _ in range(50):
        lo, hi = sorted(rng.randint(-2, 63) for _ in range(2))
        unbounded = rng.random() < 0.2
        if strings:
            lo, hi = f"k{lo:02d}" if lo >= 0 else "", f"k{hi:02d}"
        want = [i for i, g in enumerate(groups) if any(lo <= k and (unbounded or k < hi) for k in g)]
        got = list(index.groups(lo, None if unbounded else hi))
        # every group with a key in range is found; a group found but holding none may only
        # be one whose min/max straddle the range (a boundary group), never a far one
        assert set(want) <= set(got)
        assert all(groups[i][-1] >= lo and (unbounded or groups[i][0] < hi) for i in got)


def test_a_file_not_sorted_on_the_column_or_without_statistics_has_no_index(tmp_path):
    assert RowGroupIndex.of(_write(tmp_path, "u.parquet", [5, 6, 1, 2], 2), "key") is None
    assert RowGroupIndex.of(_write(tmp_path, "n.parquet", [1, 2, 3, 4], 2, write_statistics=False), "key") is None
    assert RowGroupIndex.of(_write(tmp_path, "s.parquet", [1, 2, 3, 4], 2), "missing") is None


def test_the_cache_builds_each_index_once_and_forgets_it_with_the_footer(tmp_path):
    store = ObjectStore(str(tmp_path))
    for name in ("a.parquet", "b.parquet"):
        _write(tmp_path, name, list(range(10)), 3)
    cache = ParquetFileCache(capacity=1)
    _, first = cache.row_group_index(store, "a.parquet", "key")
    _, again = cache.row_group_index(store, "a.parquet", "key")
    assert first is again and first is not None and list(first.groups(4, 7)) == [1, 2]
    cache.row_group_index(store, "b.parquet", "key")  # evicts a's footer, and its index with it
    _, rebuilt = cache.row_group_index(store, "a.parquet", "key")
    assert rebuilt is not first and rebuilt == first
