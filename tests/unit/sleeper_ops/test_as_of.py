"""History and as-of reads (issue 22) through the API and the CLI on the in-memory
store: a query as of a transaction before a delete returns the deleted records, exactly,
even after compaction and GC within the retention; the write buffer is excluded and
the answer says so; GC after the retention deletes those files and the read is then
refused in one line; bad ``--as-of`` values are refused in one line."""

from __future__ import annotations

import datetime
import json
import time

import pyarrow as pa
import pytest

from sleeper_ops.query.as_of import AS_OF_KEY, BUFFER_KEY, resolve
from statestore.history import HistoryError
from tests.unit.sleeper_ops.test_cli import assert_one_line_error, ok
from tests.unit.sleeper_ops.test_cli import files as files
from tests.unit.sleeper_ops.test_cli import home as home
from tests.unit.sleeper_ops.test_cli import run as run
from tests.unit.sleeper_ops.test_cli import table as table

SCHEMA = {"rowKeyFields": [{"name": "key", "type": "LongType"}], "valueFields": [{"name": "v", "type": "StringType"}]}
MINUTE = 60_000


def _rows(t) -> list[tuple[int, str]]:  # type: ignore[no-untyped-def]
    return [(r["key"], r["v"]) for r in t.to_pylist()]


def test_a_query_as_of_before_a_delete_returns_the_deleted_records_until_the_retention_ends(sleeper):
    t = sleeper.create_table("t", SCHEMA, split_points=[50], properties={
        "sleeper.table.delete.purge.hours": "0", "sleeper.table.history.retention.minutes": "60"})
    ingested = t.ingest(pa.table({"key": pa.array([10, 20, 60], pa.int64()), "v": ["a", "b", "c"]})).files
    t.write([{"key": 30, "v": "buffered"}])
    before_delete = t.history(1)[0]
    while time.time_ns() // 1_000_000 <= before_delete.time_ms:  # a time names the state after every
        time.sleep(0.001)  # transaction of its millisecond: the delete must come in a later one
    t.delete(ranges=[(15, 70)])
    t.flush()
    t.compact(runner="local")
    assert _rows(t.query(ranges=[(0, None)])) == [(10, "a")]

    now = t.history(1)[0].time_ms
    assert t.gc(now_ms=now + 30 * MINUTE).deleted == [], "the files the earlier state reads are kept"
    old = t.query(ranges=[(0, None)], as_of=before_delete.number)
    assert _rows(old) == [(10, "a"), (20, "b"), (60, "c")], "the buffered write was not in a file then"
    assert old.schema.metadata[BUFFER_KEY] == b"excluded"
    assert old.schema.metadata[AS_OF_KEY] == str(before_delete.number).encode()
    at = datetime.datetime.fromtimestamp(before_delete.time_ms / 1000, datetime.UTC)
    assert _rows(t.query(keys=[20], as_of=at)) == [(20, "b")]
    assert _rows(t.query(keys=[20], as_of=at.isoformat())) == [(20, "b")]
    assert _rows(sleeper.sql("SELECT key, v FROM t ORDER BY key", as_of=before_delete.number)) == \
        [(10, "a"), (20, "b"), (60, "c")]

    gone = t.gc(now_ms=now + 61 * MINUTE + 15 * MINUTE)  # the retention and the GC delay have passed
    assert sorted(gone.deleted) == sorted({f.filename for f in ingested}), gone.summary()
    # at the time that GC ran, the state is refused (its history forgotten by that GC, as on every backend)
    with pytest.raises(HistoryError, match="replaced at|has no transaction 1 in its history"):
        resolve(sleeper.state_store, sleeper.table("t").info, before_delete.number, now_ms=now + 76 * MINUTE)


def test_history_lists_number_time_kind_files_records_and_job(table, run):  # type: ignore[no-untyped-def]
    ok(run("delete", "t", "--range", '"b"', '"h"'))
    rows = [json.loads(line) for line in ok(run("history", "t", "--json")).out.splitlines()]
    assert [r["kind"] for r in rows] == ["delete_records", "add_files"]
    # one ingest of 9 records over 3 leaves: one file, shared by the leaves
    assert (rows[1]["files_added"], rows[1]["records_added"], rows[1]["files_removed"]) == (1, 9, 0)
    text = ok(run("history", "t", "--limit", "1")).out
    assert "delete_records" in text and "add_files" not in text and 'delete 1: 1 region of key, sha256 ' in text


def test_query_and_sql_as_of_say_on_stderr_that_the_buffer_is_excluded(table, run, files):  # type: ignore[no-untyped-def]
    first = json.loads(ok(run("history", "t", "--json")).out.splitlines()[0])["number"]
    ok(run("delete", "t", "--range", '"a"', '"z"'))
    r = ok(run("query", "t", "--range", '""', "null", "--as-of", str(first)))
    assert len(r.jsonl()) == 9 and "exclude the write buffer" in r.err and f"transaction {first}" in r.err
    assert [x["key"] for x in ok(run("query", "t", "--range", '""', "null")).jsonl()] == ["zucchini", "zz"]
    r = ok(run("sql", "SELECT count(*) AS n FROM t", "--as-of", str(first)))
    assert r.jsonl() == [{"n": 9}] and "exclude the write buffer" in r.err


@pytest.mark.parametrize(("as_of", "fragments"), [
    ("999", ("no transaction 999",)),
    ("2001-01-01T00:00:00Z", ("minutes of history", "before")),
    ("yesterday", ("neither a transaction number nor",)),
])
def test_as_of_refuses_bad_input_in_one_line(table, run, as_of, fragments):  # type: ignore[no-untyped-def]
    assert_one_line_error(run("query", "t", "--key", '"kiwi"', "--as-of", as_of), *fragments)
    assert_one_line_error(run("sql", "SELECT * FROM t", "--as-of", as_of), *fragments)


def test_repeated_as_of_reads_rebuild_the_state_once_and_apply_the_current_iterators(sleeper, monkeypatch):
    schema = {"rowKeyFields": [{"name": "key", "type": "LongType"}], "valueFields": [{"name": "n", "type": "LongType"}]}
    t = sleeper.create_table("agg", schema)
    t.ingest(pa.table({"key": pa.array([1], pa.int64()), "n": pa.array([2], pa.int64())}))
    t.ingest(pa.table({"key": pa.array([1], pa.int64()), "n": pa.array([3], pa.int64())}))
    number = t.history(1)[0].number
    t.delete(keys=[1])
    store, rebuilt = sleeper.state_store, []
    real = store.state_as_of
    monkeypatch.setattr(store, "state_as_of", lambda tid, n: rebuilt.append(n) or real(tid, n))

    assert sorted(r["n"] for r in t.query(keys=[1], as_of=number).to_pylist()) == [2, 3]
    sleeper.set_properties("agg", {"sleeper.table.iterator.aggregation": "sum(n)"})
    assert sleeper.table("agg").query(keys=[1], as_of=number).to_pylist() == [{"key": 1, "n": 5}]
    assert rebuilt == [number], "the second read took the state from the cache"
    with pytest.raises(HistoryError, match="no transaction"):
        t.query(keys=[1], as_of=number + 100)
