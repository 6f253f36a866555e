"""Streamed queries (``QueryRunner.stream``, ``Table.query_batches``): the same records in
the same order as ``query``, the limit pushed down (reading stops), iterators applied as
the batches go, and files opened only when the merge reaches them."""

from __future__ import annotations

import random
import threading
from collections import Counter
from typing import Any, Iterator

import pyarrow as pa
import pytest

from sleeper_ops.errors import QueryError
from sleeper_ops.io.datafile import ParquetSettings, new_data_key, write_data_file
from sleeper_ops.query.runner import QueryRunner, exact_key_region, range_region
from statestore.files import FileReference
from statestore.partitions import split_children
from statestore.transactions import AddFiles, SplitPartition

SCHEMA = {
    "rowKeyFields": [{"name": "key", "type": "LongType"}],
    "sortKeyFields": [{"name": "ts", "type": "LongType"}],
    "valueFields": [{"name": "id", "type": "LongType"}, {"name": "name", "type": "StringType"}],
}
ARROW = pa.schema([("key", pa.int64()), ("ts", pa.int64()), ("id", pa.int64()), ("name", pa.string())])
MULTI_SCHEMA = {
    "rowKeyFields": [{"name": "k1", "type": "LongType"}, {"name": "k2", "type": "StringType"}],
    "sortKeyFields": [{"name": "ts", "type": "LongType"}],
    "valueFields": [{"name": "id", "type": "LongType"}],
}
MULTI_ARROW = pa.schema([("k1", pa.int64()), ("k2", pa.string()), ("ts", pa.int64()), ("id", pa.int64())])
SPLITS = [50, 100, 150, 200, 250, 300, 350]


def rows_of(n: int, seed: int, first_id: int = 0, key_range: int = 400) -> list[dict]:
    rnd = random.Random(seed)
    return [{"key": rnd.randrange(key_range), "ts": rnd.randrange(50), "id": first_id + i, "name": f"n{i}"}
            for i in range(n)]


@pytest.fixture
def loaded(sleeper):
    """8 leaves, each with three files (three ingests), 6000 rows with keys in [0, 400)."""
    t = sleeper.create_table("t", SCHEMA, split_points=SPLITS)
    rows = rows_of(6000, 1)
    for part in (rows[:2000], rows[2000:4000], rows[4000:]):
        t.ingest(pa.Table.from_pylist(part, schema=ARROW))
    assert len(t.state().references) == 24
    return t, rows


def streamed(t: Any, regions: list, **kw: Any) -> pa.Table:
    runner = t.query_runner()
    try:
        batches = list(runner.stream(regions, **kw))
    finally:
        runner.close()
    assert all(b.num_rows for b in batches), "no empty batches"
    return pa.Table.from_batches(batches, schema=runner.target)


def same(got: pa.Table, expected: pa.Table) -> bool:
    """The same records in the same key order (records with equal keys in any order)."""
    keys = [f.name for f in expected.schema if not f.nullable]
    every = [(n, "ascending") for n in expected.schema.names]
    return (got.select(keys).equals(expected.select(keys))
            and got.sort_by(every).equals(expected.sort_by(every)))


def regions(t: Any, keys: list = (), ranges: list = ()) -> list:  # type: ignore[assignment]
    return ([exact_key_region(t.schema, [k]) for k in keys]
            + [range_region(t.schema, lo, hi) for lo, hi in ranges])


@pytest.mark.parametrize("keys,ranges", [
    ([], [(-(2**63), None)]), ([], [(120, 260)]), ([7, 150, 399], []), ([42], [(40, 60), (55, 130)]),
    ([], [(0, 10), (390, None)]), ([1000], []),
], ids=["everything", "range", "keys", "key-in-overlapping-ranges", "two-ranges", "absent"])
@pytest.mark.parametrize("batch_rows", [1, 7, 32_768])
def test_stream_returns_exactly_what_query_returns_in_the_same_order(loaded, keys, ranges, batch_rows):
    t, _ = loaded
    rs = regions(t, keys, ranges)
    expected = t.query(regions=rs)
    got = streamed(t, rs, batch_rows=batch_rows)
    assert same(got, expected), f"streamed {got.num_rows} rows, query {expected.num_rows}"
    assert all(b.num_rows <= batch_rows for b in streamed(t, rs, batch_rows=batch_rows).to_batches())


def test_stream_of_a_split_table_with_files_on_the_root_and_a_parent(loaded, sleeper):
    t, rows = loaded
    state = t.state()
    leaf = state.tree().leaf_for_key([120])
    parent, left, right = split_children(leaf, 0, 125)
    sleeper.state_store.commit(t.info.table_id, SplitPartition(parent, left, right))
    root = t.state().tree().root
    extra = sorted(rows_of(500, 9, first_id=100_000, key_range=450), key=lambda r: (r["key"], r["ts"]))
    key = new_data_key(t.info.table_id, root.id)
    written = write_data_file(sleeper.objects, key, t.schema, pa.Table.from_pylist(extra, schema=ARROW),
                              ParquetSettings())
    sleeper.state_store.commit(t.info.table_id, AddFiles((FileReference(key, root.id, written.record_count),)))
    for rs in (regions(t, ranges=[(-(2**63), None)]), regions(t, ranges=[(110, 140)]), regions(t, keys=[124, 125])):
        expected = t.query(regions=rs)
        assert same(streamed(t, rs, batch_rows=13), expected)
    assert streamed(t, regions(t, ranges=[(-(2**63), None)])).num_rows == len(rows) + len(extra)


def test_stream_on_several_row_key_fields(sleeper):
    rnd = random.Random(3)
    rows = [{"k1": rnd.randrange(50), "k2": rnd.choice(["a", "b", "c"]), "ts": rnd.randrange(100), "id": i}
            for i in range(3000)]
    t = sleeper.create_table("m", MULTI_SCHEMA, split_points=[25])
    t.ingest(pa.Table.from_pylist(rows[:1500], schema=MULTI_ARROW))
    t.ingest(pa.Table.from_pylist(rows[1500:], schema=MULTI_ARROW))
    # split a leaf on the second row key field: its children share their first-field range
    leaf = t.state().tree().leaf_for_key([30, "a"])
    parent, left, right = split_children(leaf, 1, "b")
    sleeper.state_store.commit(t.info.table_id, SplitPartition(parent, left, right))
    for rs in ([exact_key_region(t.schema, [7, "b"]), exact_key_region(t.schema, [30])],
               [range_region(t.schema, 20, 40)], [range_region(t.schema, -(2**63), None)]):
        assert same(streamed(t, rs, batch_rows=11), t.query(regions=rs))


@pytest.mark.parametrize("limit", [0, 1, 5, 777, 6000, 10**9])
def test_limit_gives_the_first_records_of_the_result(loaded, limit):
    t, rows = loaded
    rs = regions(t, ranges=[(-(2**63), None)])
    expected = t.query(regions=rs)
    got = streamed(t, rs, limit=limit, batch_rows=100)
    n = min(limit, len(rows))
    assert got.num_rows == n
    assert got.select(["key", "ts"]).equals(expected.slice(0, n).select(["key", "ts"])), "the first keys"
    assert not Counter(map(tuple, got.to_pylist() and [r.values() for r in got.to_pylist()])) - Counter(
        tuple(r.values()) for r in expected.to_pylist()), "only records of the result"


class CountingRunner(QueryRunner):
    """Counts the rows read from files and the files opened, and the most open at once."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.rows_read = 0
        self.files_opened = 0
        self.open_now = 0
        self.most_open = 0
        self._lock = threading.Lock()

    def _read_batches(self, task: Any, batch_rows: int) -> Iterator[pa.RecordBatch]:
        with self._lock:
            self.files_opened += 1
            self.open_now += 1
            self.most_open = max(self.most_open, self.open_now)
        try:
            for b in super()._read_batches(task, batch_rows):
                with self._lock:
                    self.rows_read += b.num_rows
                yield b
        finally:
            with self._lock:
                self.open_now -= 1


def counting_runner(sleeper, t) -> CountingRunner:
    return CountingRunner(sleeper.state_store, sleeper.objects, t.info, threads=4)


def test_reading_stops_once_the_limit_is_reached(loaded, sleeper):
    t, rows = loaded
    runner = counting_runner(sleeper, t)
    got = list(runner.stream(regions(t, ranges=[(-(2**63), None)]), limit=10, batch_rows=50))
    runner.close()
    assert sum(b.num_rows for b in got) == 10
    # the first leaf's three files, a batch each plus one read ahead, and the next leaf's files started ahead
    assert runner.rows_read <= 12 * 50, f"read {runner.rows_read} of {len(rows)} rows for 10"
    assert runner.files_opened <= 6, f"opened {runner.files_opened} of 24 files"


def test_a_table_scan_opens_the_files_of_about_one_leaf_at_a_time(loaded, sleeper):
    t, rows = loaded
    runner = counting_runner(sleeper, t)
    n = sum(b.num_rows for b in runner.stream(regions(t, ranges=[(-(2**63), None)]), batch_rows=64))
    runner.close()
    assert n == len(rows) and runner.files_opened == 24
    assert runner.most_open <= 3 * 3, f"{runner.most_open} of 24 files open at once"


def test_closing_the_stream_early_closes_its_files(loaded, sleeper):
    t, _ = loaded
    runner = counting_runner(sleeper, t)
    stream = runner.stream(regions(t, ranges=[(-(2**63), None)]), batch_rows=10)
    next(stream)
    assert runner.open_now > 0
    stream.close()
    assert runner.open_now == 0
    runner.close()


def test_iterators_apply_to_the_stream_across_batches(sleeper):
    t = sleeper.create_table("agg", {**SCHEMA, "valueFields": [{"name": "id", "type": "LongType"},
                                                               {"name": "name", "type": "StringType"}]},
                             split_points=[10])
    for copy in range(3):
        t.ingest(pa.Table.from_pylist([{"key": k % 20, "ts": 1, "id": copy, "name": "x"} for k in range(200)],
                                      schema=ARROW))
    sleeper.set_properties("agg", {"sleeper.table.iterator.aggregation": "sum(id),max(name)"})
    everything = [range_region(t.schema, -(2**63), None)]
    expected = t.query(regions=everything)
    assert expected.num_rows == 20
    got = pa.Table.from_batches(list(t.query_batches(regions=everything, batch_rows=3)))
    assert got.equals(expected), "each key's records from every file and batch aggregated into one"
    assert pa.Table.from_batches(list(t.query_batches(regions=everything, limit=4))).equals(expected.slice(0, 4))


def test_query_batches_checks_the_query_before_reading(loaded):
    t, _ = loaded
    with pytest.raises(QueryError):
        t.query_batches(keys=["not a long"])
    with pytest.raises(QueryError):
        t.query_batches()
    assert sum(b.num_rows for b in t.query_batches(keys=[7])) == t.query(keys=[7]).num_rows
