"""Query-time iterators: the table's iterators run over the merged result of all files."""

from __future__ import annotations

import time
from collections import Counter

import pyarrow as pa
import pytest

from sleeper_ops.errors import ConfigError
from sleeper_ops.query.runner import QueryRunner, range_region

SCHEMA = {
    "rowKeyFields": [{"name": "key", "type": "LongType"}],
    "sortKeyFields": [{"name": "ts", "type": "LongType"}],
    "valueFields": [{"name": "count", "type": "LongType"}, {"name": "name", "type": "StringType"}],
}
ARROW = pa.schema([("key", pa.int64()), ("ts", pa.int64()), ("count", pa.int64()), ("name", pa.string())])


def records(keys: list[int], ts: int = 0, count: int = 1, name: str = "n") -> pa.Table:
    return pa.Table.from_pylist([{"key": k, "ts": ts, "count": count, "name": f"{name}{k}"} for k in keys],
                                schema=ARROW)


@pytest.fixture
def two_files(sleeper):
    """Table "t" split at 50: keys 0..99 ingested twice (count 1, then count 10), so each
    key has records in two files; keys 7 and 60 have three records in the first ingest's file."""
    t = sleeper.create_table("t", SCHEMA, split_points=[50])
    t.ingest(records([*list(range(100)), 7, 7, 60, 60], count=1, name="a"))
    t.ingest(records(list(range(100)), count=10, name="b"))
    per_partition = Counter(r.partition_id for r in t.state().references.values())
    assert sorted(per_partition.values()) == [2, 2], "expected two files in each leaf partition"
    return t


def test_query_aggregates_records_of_a_key_from_every_file_into_one(sleeper, two_files):
    assert two_files.query(keys=[7]).num_rows == 4, "without aggregation every record comes back"
    sleeper.set_properties("t", {"sleeper.table.iterator.aggregation": "sum(count),max(name)"})
    t = sleeper.table("t")
    result = t.query(ranges=[(0, None)])
    rows = result.to_pylist()
    assert [r["key"] for r in rows] == list(range(100)), "one record per key, in key order"
    counts = {r["key"]: r["count"] for r in rows}
    assert counts[7] == counts[60] == 13
    assert all(c == 11 for k, c in counts.items() if k not in (7, 60))
    assert {r["name"] for r in rows} == {f"b{k}" for k in range(100)}
    assert t.query(keys=[60]).to_pylist() == [{"key": 60, "ts": 0, "count": 13, "name": "b60"}]


def test_query_ages_off_old_records(sleeper):
    now = int(time.time() * 1000)
    t = sleeper.create_table("t", SCHEMA, properties={"sleeper.table.iterator.ageoff": "ts:3600000"})
    t.ingest(records([1, 2], ts=now - 2 * 3600_000))
    t.ingest(records([2, 3], ts=now))
    assert [(r["key"], r["ts"]) for r in t.query(ranges=[(0, None)]).to_pylist()] == [(2, now), (3, now)]


def test_query_runner_applies_extra_iterators_after_the_tables(sleeper, two_files):
    sleeper.set_properties("t", {"sleeper.table.iterator.aggregation": "sum(count),min(name)"})
    info = sleeper.table("t").info

    def only_tens(batch: pa.RecordBatch) -> pa.RecordBatch:
        import pyarrow.compute as pc
        return batch.filter(pc.equal(batch.column("count"), 10))

    runner = QueryRunner(sleeper.state_store, sleeper.objects, info, iterators=[only_tens])
    try:
        rows = runner.query([range_region(info.schema, 0, 10)]).to_pylist()
    finally:
        runner.close()
    assert [(r["key"], r["count"], r["name"]) for r in rows] == [(k, 10, f"b{k}") for k in range(10)]


def test_an_invalid_iterator_setting_is_refused_when_set(sleeper, two_files):
    with pytest.raises(ConfigError, match="missing name"):
        sleeper.set_properties("t", {"sleeper.table.iterator.aggregation": "sum(count)"})
    assert sleeper.table("t").info.properties == {}


def test_query_of_a_table_already_holding_an_invalid_iterator_names_the_property_to_fix(sleeper, two_files):
    sleeper.state_store.update_properties("t", {"sleeper.table.iterator.aggregation": "sum(count)"})
    with pytest.raises(ConfigError, match="table 't': sleeper.table.iterator.aggregation='sum.count.': .*missing "
                                          "name; .* 'sleeper table unset t sleeper.table.iterator.aggregation'"):
        sleeper.table("t").query(keys=[1])


def test_query_without_iterators_skips_the_chain(sleeper, two_files, monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("the empty iterator chain was applied")
    monkeypatch.setattr("sleeper_ops.engine.iterators.IteratorChain.apply_table", fail)
    assert two_files.query(keys=[7]).num_rows == 4
