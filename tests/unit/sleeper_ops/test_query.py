"""Queries: exact keys, [min, max) ranges, several at once, ancestors, pruning, bad queries.

Every answer is compared with a plain Python filter over the rows ingested.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Callable, Iterable, Optional

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sleeper_ops.errors import QueryError
from sleeper_ops.io.datafile import ParquetSettings, new_data_key, write_data_file
from sleeper_ops.query.runner import exact_key_region, range_region
from statestore.files import FileReference
from statestore.partitions import split_children
from statestore.transactions import AddFiles, SplitPartition

LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1

SCHEMA = {
    "rowKeyFields": [{"name": "key", "type": "LongType"}],
    "sortKeyFields": [{"name": "ts", "type": "LongType"}],
    "valueFields": [{"name": "id", "type": "LongType"}, {"name": "name", "type": "StringType"}],
}
ARROW = pa.schema([("key", pa.int64()), ("ts", pa.int64()), ("id", pa.int64()), ("name", pa.string())])


def make_rows(n: int, key_range: int = 400, seed: int = 1, first_id: int = 0) -> list[dict]:
    rnd = random.Random(seed)
    return [{"key": rnd.randrange(key_range), "ts": rnd.randrange(1000), "id": first_id + i, "name": f"n{first_id + i}"}
            for i in range(n)]


def as_table(rows: list[dict], schema: pa.Schema = ARROW) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=schema)


def counter(rows: Iterable[dict], names: Optional[list[str]] = None) -> Counter:
    return Counter(tuple(r[n] for n in names) if names else tuple(r.values()) for r in rows)


def expect(rows: list[dict], pred: Callable[[dict], bool]) -> Counter:
    return counter(r for r in rows if pred(r))


def got(result: pa.Table) -> Counter:
    return counter(result.to_pylist())


def assert_in_key_order(result: pa.Table, names: tuple[str, ...] = ("key", "ts")) -> None:
    keys = [tuple(r[n] for n in names) for r in result.to_pylist()]
    assert keys == sorted(keys), "result is not in key order"


@pytest.fixture
def loaded(sleeper):
    """A table split at 100, 200 and 300 holding 4000 rows with keys in [0, 400), ingested twice
    (so each leaf has two files to merge)."""
    rows = make_rows(4000)
    t = sleeper.create_table("t", SCHEMA, split_points=[100, 200, 300])
    t.ingest(as_table(rows[:2500]))
    t.ingest(as_table(rows[2500:]))
    assert len(t.state().references) == 8
    return t, rows


# ----- exact keys ---------------------------------------------------------------------------

@pytest.mark.parametrize("key", [0, 7, 99, 100, 101, 200, 299, 300, 399])
def test_exact_key_returns_every_record_with_that_key_and_no_other(loaded, key):
    t, rows = loaded
    result = t.query(keys=[key])
    assert result.num_rows > 0
    assert got(result) == expect(rows, lambda r: r["key"] == key)
    assert_in_key_order(result)


@pytest.mark.parametrize("key", [-1, 400, 10**12, LONG_MIN, LONG_MAX])
def test_exact_key_that_is_absent_returns_an_empty_table_with_the_schema(loaded, key):
    t, _ = loaded
    result = t.query(keys=[key])
    assert result.num_rows == 0
    assert result.schema.names == ["key", "ts", "id", "name"]


def test_exact_keys_at_the_extremes_of_long_are_found(sleeper):
    t = sleeper.create_table("t", SCHEMA, split_points=[0])
    keys = [LONG_MIN, LONG_MIN + 1, -1, 0, LONG_MAX - 1, LONG_MAX]
    rows = [{"key": k, "ts": 1, "id": i, "name": "x"} for i, k in enumerate(keys)]
    t.ingest(as_table(rows))
    for r in rows:
        assert got(t.query(keys=[r["key"]])) == counter([r]), f"key {r['key']}"
    assert got(t.query(ranges=[(LONG_MAX - 1, None)])) == counter(rows[-2:])
    assert got(t.query(ranges=[(LONG_MIN, LONG_MIN + 1)])) == counter(rows[:1])


def test_exact_key_does_not_match_longer_strings_or_bytes_with_that_prefix(sleeper):
    t = sleeper.create_table("s", {"rowKeyFields": [{"name": "k", "type": "StringType"}]})
    t.ingest(pa.table({"k": ["ab", "ab\x00", "ab\x00\x00", "abc", "a"]}))
    assert t.query(keys=["ab"]).column("k").to_pylist() == ["ab"]
    assert t.query(keys=["ab\x00"]).column("k").to_pylist() == ["ab\x00"]
    b = sleeper.create_table("b", {"rowKeyFields": [{"name": "k", "type": "ByteArrayType"}]})
    b.ingest(pa.table({"k": pa.array([b"", b"\x00", b"\x00\x00", b"\xff"], pa.binary())}))
    assert b.query(keys=[b""]).column("k").to_pylist() == [b""]
    assert b.query(keys=[b"\x00"]).column("k").to_pylist() == [b"\x00"]


# ----- ranges ---------------------------------------------------------------------------------

@pytest.mark.parametrize("lo,hi", [(0, 1), (100, 200), (99, 101), (150, 250), (10, 390), (0, 400), (-50, 5),
                                   (LONG_MIN, 50), (399, 400)])
def test_range_returns_records_from_min_inclusive_to_max_exclusive(loaded, lo, hi):
    t, rows = loaded
    result = t.query(ranges=[(lo, hi)])
    assert got(result) == expect(rows, lambda r: lo <= r["key"] < hi)
    assert_in_key_order(result)


@pytest.mark.parametrize("lo", [LONG_MIN, 0, 250, 399, 400])
def test_range_with_max_none_is_unbounded_above(loaded, lo):
    t, rows = loaded
    result = t.query(ranges=[(lo, None)])
    assert got(result) == expect(rows, lambda r: r["key"] >= lo)
    assert_in_key_order(result)


def test_string_and_bytes_ranges_follow_code_point_and_unsigned_byte_order(sleeper):
    s = sleeper.create_table("s", {"rowKeyFields": [{"name": "k", "type": "StringType"}]}, split_points=["b"])
    words = ["", "A", "Z", "a", "aa", "b", "ba", "z", "~"]
    s.ingest(pa.table({"k": words}))
    assert s.query(ranges=[("Z", "b")]).column("k").to_pylist() == ["Z", "a", "aa"]
    assert s.query(ranges=[("b", None)]).column("k").to_pylist() == ["b", "ba", "z", "~"]

    b = sleeper.create_table("b", {"rowKeyFields": [{"name": "k", "type": "ByteArrayType"}]}, split_points=[b"\x80"])
    blobs = [b"\x00", b"\x01", b"\x7f", b"\x80", b"\x80\x00", b"\x90", b"\xff"]
    b.ingest(pa.table({"k": pa.array(list(reversed(blobs)), pa.binary())}))
    assert b.query(ranges=[(b"\x01", b"\x90")]).column("k").to_pylist() == [b"\x01", b"\x7f", b"\x80", b"\x80\x00"]
    assert b.query(ranges=[(b"\x7f", None)]).column("k").to_pylist() == blobs[2:]


# ----- several keys and ranges in one call ------------------------------------------------------

def test_several_keys_and_ranges_in_one_call_return_their_union_in_key_order(loaded):
    t, rows = loaded
    keys, ranges = [5, 150, 333], [(10, 20), (290, 310)]
    result = t.query(keys=keys, ranges=ranges)
    assert got(result) == expect(rows, lambda r: r["key"] in keys or any(lo <= r["key"] < hi for lo, hi in ranges))
    assert_in_key_order(result)


@pytest.mark.parametrize("keys,ranges", [
    ([], [(10, 50), (40, 60)]),
    ([], [(10, 50), (10, 50)]),
    ([], [(0, None), (100, 200)]),
    ([], [(150, 250), (100, 160), (240, 300)]),
    ([15, 15, 45], [(10, 20)]),
    ([199, 200], [(190, 210), (200, 201)]),
], ids=["overlapping", "identical", "inside-unbounded", "chained", "key-inside-range", "split-point"])
def test_overlapping_keys_and_ranges_return_each_record_once(loaded, keys, ranges):
    t, rows = loaded

    def wanted(r: dict) -> bool:
        return r["key"] in keys or any(lo <= r["key"] and (hi is None or r["key"] < hi) for lo, hi in ranges)
    result = t.query(keys=keys, ranges=ranges)
    assert got(result) == expect(rows, wanted)
    assert_in_key_order(result)


MULTI_SCHEMA = {
    "rowKeyFields": [{"name": "k1", "type": "LongType"}, {"name": "k2", "type": "StringType"}],
    "sortKeyFields": [{"name": "ts", "type": "LongType"}],
    "valueFields": [{"name": "id", "type": "LongType"}],
}
MULTI_ARROW = pa.schema([("k1", pa.int64()), ("k2", pa.string()), ("ts", pa.int64()), ("id", pa.int64())])


@pytest.fixture
def multi(sleeper):
    rnd = random.Random(3)
    rows = [{"k1": rnd.randrange(50), "k2": rnd.choice(["a", "b", "c"]), "ts": rnd.randrange(100), "id": i}
            for i in range(2000)]
    t = sleeper.create_table("m", MULTI_SCHEMA, split_points=[25])
    t.ingest(as_table(rows, MULTI_ARROW))
    return t, rows


def test_multi_field_keys_match_all_fields_or_a_prefix(multi):
    t, rows = multi
    full = t.query(keys=[(7, "b")])
    assert got(full) == expect(rows, lambda r: r["k1"] == 7 and r["k2"] == "b")
    prefix = t.query(keys=[(30,)])
    assert got(prefix) == expect(rows, lambda r: r["k1"] == 30)
    ranged = t.query(ranges=[(20, 30)])
    assert got(ranged) == expect(rows, lambda r: 20 <= r["k1"] < 30)
    assert_in_key_order(ranged, ("k1", "k2", "ts"))


@pytest.mark.parametrize("keys,ranges", [([], [(0, 10), (5, 15)]), ([7], [(5, 15)]), ([(7, "a"), (7,)], [])],
                         ids=["two-ranges", "key-in-range", "key-and-its-prefix"])
def test_overlapping_queries_on_several_row_key_fields_return_each_record_once(multi, keys, ranges):
    t, rows = multi
    key_set = [k if isinstance(k, tuple) else (k,) for k in keys]

    def wanted(r: dict) -> bool:
        in_key = any((r["k1"], r["k2"])[:len(k)] == k for k in key_set)
        return in_key or any(lo <= r["k1"] < hi for lo, hi in ranges)
    assert got(t.query(keys=keys, ranges=ranges)) == expect(rows, wanted)


# ----- ancestors ------------------------------------------------------------------------------

def test_records_in_a_partition_split_after_ingest_are_found_through_the_parent(loaded, sleeper):
    t, rows = loaded
    state = t.state()
    leaf = state.tree().leaf_for_key([150])
    with_files = {r.filename for r in state.references.values() if r.partition_id == leaf.id}
    assert len(with_files) == 2
    parent, left, right = split_children(leaf, 0, 160)
    sleeper.state_store.commit(t.info.table_id, SplitPartition(parent, left, right))
    after = t.state()
    assert not after.partitions[leaf.id].is_leaf
    assert {r.filename for r in after.references.values() if r.partition_id == leaf.id} == with_files

    for key in (100, 159, 160, 199):
        assert got(t.query(keys=[key])) == expect(rows, lambda r, k=key: r["key"] == k), f"key {key}"
    for lo, hi in ((150, 170), (160, None), (0, 400)):
        result = t.query(ranges=[(lo, hi)])
        assert got(result) == expect(rows, lambda r: lo <= r["key"] and (hi is None or r["key"] < hi))
        assert_in_key_order(result)


def test_records_referenced_from_the_root_of_a_split_table_are_found_with_the_leaves(loaded, sleeper):
    t, rows = loaded
    state = t.state()
    root = state.tree().root
    assert root is not None and not root.is_leaf
    extra = sorted(make_rows(300, key_range=450, seed=9, first_id=100_000), key=lambda r: (r["key"], r["ts"]))
    key = new_data_key(t.info.table_id, root.id)
    written = write_data_file(sleeper.objects, key, t.schema, as_table(extra), ParquetSettings())
    sleeper.state_store.commit(t.info.table_id, AddFiles((FileReference(key, root.id, written.record_count),)))
    everything = rows + extra

    for probe in (0, 150, 250, 399, 420):
        assert got(t.query(keys=[probe])) == expect(everything, lambda r, k=probe: r["key"] == k), f"key {probe}"
    for lo, hi in ((90, 110), (250, None), (395, 440)):
        result = t.query(ranges=[(lo, hi)])
        assert got(result) == expect(everything, lambda r: lo <= r["key"] and (hi is None or r["key"] < hi))
        assert_in_key_order(result)
    assert got(t.query(ranges=[(LONG_MIN, None)])) == counter(everything)


# ----- bad queries ----------------------------------------------------------------------------

@pytest.mark.parametrize("query", [
    {"keys": ["abc"]}, {"keys": [1.5]}, {"keys": [True]}, {"keys": [None]}, {"keys": [b"\x01"]},
    {"keys": [2**63]}, {"keys": [(1, 2)]}, {"ranges": [("a", "b")]}, {"ranges": [(1, "b")]},
    {"ranges": [(1.0, 5)]}, {"ranges": [(None, 5)]},
], ids=lambda q: repr(q))
def test_a_key_of_the_wrong_type_raises_query_error(loaded, query):
    t, _ = loaded
    with pytest.raises(QueryError):
        t.query(**query)


def test_multi_field_key_with_wrong_type_or_too_many_values_raises_query_error(multi):
    t, _ = multi
    with pytest.raises(QueryError, match="k2"):
        t.query(keys=[(1, 2)])
    with pytest.raises(QueryError):
        t.query(keys=[(1, "a", 3)])
    with pytest.raises(QueryError):
        t.query(keys=[()])


@pytest.mark.parametrize("lo,hi", [(5, 5), (10, 5), (LONG_MAX, LONG_MIN)])
def test_an_empty_range_raises_query_error(loaded, lo, hi):
    t, _ = loaded
    with pytest.raises(QueryError, match="empty"):
        t.query(ranges=[(lo, hi)])


def test_a_query_with_no_keys_or_ranges_raises_query_error(loaded):
    t, _ = loaded
    with pytest.raises(QueryError):
        t.query()


def test_query_of_an_empty_table_returns_no_records(sleeper):
    t = sleeper.create_table("t", SCHEMA, split_points=[10])
    assert t.query(keys=[1], ranges=[(0, None)]).num_rows == 0


# ----- row-group pruning ------------------------------------------------------------------------

def test_small_row_groups_still_answer_every_query_correctly(sleeper):
    rows = make_rows(20_000, key_range=2000, seed=5)
    # 2,500 records of key 777 span several row groups of 1,000.
    rows += [{"key": 777, "ts": i, "id": 1_000_000 + i, "name": "hot"} for i in range(2500)]
    t = sleeper.create_table("t", SCHEMA, split_points=[1000],
                             properties={"sleeper.table.parquet.rowgroup.rows.max": "1000"})
    t.ingest(as_table(rows))
    for ref in t.state().references.values():
        with sleeper.objects.open_input(ref.filename) as f:
            md = pq.read_metadata(f)
        assert md.num_row_groups >= 10
        assert max(md.row_group(i).num_rows for i in range(md.num_row_groups)) <= 1000

    for key in (0, 1, 500, 777, 999, 1000, 1999, 2000):
        assert got(t.query(keys=[key])) == expect(rows, lambda r, k=key: r["key"] == k), f"key {key}"
    assert t.query(keys=[777]).num_rows >= 2500
    for lo, hi in ((776, 778), (950, 1050), (1500, None), (0, 2000)):
        result = t.query(ranges=[(lo, hi)])
        assert got(result) == expect(rows, lambda r: lo <= r["key"] and (hi is None or r["key"] < hi))
        assert_in_key_order(result)


# ----- a long-lived runner ------------------------------------------------------------------------

def test_a_reused_query_runner_answers_many_queries(loaded):
    t, rows = loaded
    runner = t.query_runner(threads=2)
    try:
        for key in (3, 150, 399):
            result = runner.query([exact_key_region(t.schema, [key])])
            assert got(result) == expect(rows, lambda r, k=key: r["key"] == k)
    finally:
        runner.close()


def test_a_reused_query_runner_sees_records_ingested_after_its_last_query(sleeper):
    t = sleeper.create_table("t", SCHEMA, split_points=[100])
    first, second = make_rows(500, seed=1), make_rows(500, seed=2, first_id=500)
    t.ingest(as_table(first))
    runner = t.query_runner(threads=2)
    try:
        everything = [range_region(t.schema, LONG_MIN, None)]
        assert got(runner.query(everything)) == counter(first)
        t.ingest(as_table(second))
        assert got(runner.query(everything)) == counter(first + second)
    finally:
        runner.close()
