"""Writes through the buffer and flushes (sleeper_ops.ingest.buffer and .flush) on the
in-memory store: every written record ends in exactly one file, bad input is refused
whole, a full buffer refuses writes with a clear error, concurrent and failed flushes
leave nothing lost or doubled; and the CLI's write and flush commands."""

from __future__ import annotations

import json
import threading
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sleeper_ops.errors import IngestError
from sleeper_ops.ingest.flush import flush_buffer
from statestore.errors import BufferFullError
from tests.unit.sleeper_ops.test_cli import assert_one_line_error, ok
from tests.unit.sleeper_ops.test_cli import home as home
from tests.unit.sleeper_ops.test_cli import run as run

SCHEMA = {"rowKeyFields": [{"name": "key", "type": "LongType"}], "sortKeyFields": [],
          "valueFields": [{"name": "v", "type": "StringType"}, {"name": "b", "type": "ByteArrayType"}]}


@pytest.fixture
def t(sleeper):  # type: ignore[no-untyped-def]
    return sleeper.create_table("t", SCHEMA, split_points=[100, 200])


def _rows(lo: int, hi: int) -> list[dict]:
    return [{"key": i, "v": f"v{i}", "b": bytes([i % 256])} for i in range(lo, hi)]


def test_a_write_returns_growing_sequence_numbers_and_is_buffered_not_filed(t) -> None:  # type: ignore[no-untyped-def]
    first = t.write(_rows(0, 10))
    second = t.write(pa.table({"key": pa.array([5], pa.int64()), "v": ["x"], "b": [b"\x01"]}))
    third = t.write(pa.record_batch({"key": pa.array([7], pa.int64()), "v": ["y"], "b": [None]}))
    assert first.seq < second.seq < third.seq and (first.records, second.records, third.records) == (10, 1, 1)
    assert t.buffer_stats().rows == 12 and t.state().references == {}


def test_bad_input_is_refused_whole_and_nothing_is_stored(t) -> None:  # type: ignore[no-untyped-def]
    t.write(_rows(0, 3))
    for bad, match in [([*_rows(0, 5), {"key": "seven", "v": "x"}], "record 5"),
                       ([{"key": 1, "nope": 2}], "not in the table schema"),
                       ([{"v": "no key"}], "key field 'key' is missing"),
                       (pa.table({"key": ["a"], "v": ["x"], "b": [b""]}), "cannot be read as"),
                       ("not records", "list of dicts")]:
        with pytest.raises(IngestError, match=match):
            t.write(bad)
    assert t.buffer_stats().rows == 3


def test_flush_files_every_buffered_record_exactly_once_one_file_per_leaf(t) -> None:  # type: ignore[no-untyped-def]
    for lo in range(0, 300, 30):
        t.write(_rows(lo, lo + 30))
    r = t.flush()
    assert (r.records, r.entries, r.files, r.rounds) == (300, 10, 3, 1)
    assert t.buffer_stats().rows == 0 and t.buffer_stats().flushes == 1
    got = t.query(ranges=[(0, None)])
    assert got["key"].to_pylist() == list(range(300))
    assert t.flush().records == 0, "a second flush finds nothing"
    assert len(t.state().references) == 3
    assert [j.status for j in t.jobs(kind="flush")] == ["committed"]


def test_flush_in_rounds_of_the_flush_records_property(sleeper) -> None:  # type: ignore[no-untyped-def]
    t = sleeper.create_table("r", SCHEMA, properties={"sleeper.table.write.buffer.flush.records": "25"})
    for lo in range(0, 100, 10):
        t.write(_rows(lo, lo + 10))
    r = t.flush()
    assert (r.records, r.rounds) == (100, 4)
    assert sorted(t.query(ranges=[(0, None)])["key"].to_pylist()) == list(range(100))


def test_a_full_buffer_refuses_writes_with_a_clear_error_until_flushed(sleeper) -> None:  # type: ignore[no-untyped-def]
    t = sleeper.create_table("small", SCHEMA, properties={"sleeper.table.write.buffer.max.records": "20"})
    t.write(_rows(0, 15))
    with pytest.raises(BufferFullError, match="buffer full, flush pending: the write buffer of table 'small'") as e:
        t.write(_rows(15, 21))
    assert t.info.table_id not in str(e.value), "the table is named by its name"
    t.write(_rows(15, 20))
    with pytest.raises(BufferFullError):
        t.write(_rows(20, 21))
    t.flush()
    t.write(_rows(20, 21))
    assert t.flush().records == 1
    assert t.query(ranges=[(0, None)])["key"].to_pylist() == list(range(21))


def test_racing_flushes_file_each_record_once(t) -> None:  # type: ignore[no-untyped-def]
    for lo in range(0, 300, 10):
        t.write(_rows(lo, lo + 10))
    errors: list[BaseException] = []

    def flush() -> None:
        try:
            flush_buffer(t.sleeper.state_store, t.sleeper.objects, t.info)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=flush) for _ in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    assert t.query(ranges=[(0, None)])["key"].to_pylist() == list(range(300))
    assert t.buffer_stats().rows == 0


def test_a_flush_that_fails_before_its_commit_leaves_the_records_buffered(t, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    t.write(_rows(0, 50))
    store = t.sleeper.state_store
    real = store.commit

    def broken(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise OSError("disk gone")
    monkeypatch.setattr(store, "commit", broken)
    with pytest.raises(OSError):
        t.flush()
    assert t.buffer_stats().rows == 50 and t.state().references == {}
    monkeypatch.setattr(store, "commit", real)
    assert t.flush().records == 50
    assert t.query(ranges=[(0, None)])["key"].to_pylist() == list(range(50))
    statuses = Counter(j.status for j in t.jobs(kind="flush"))
    assert statuses == {"committed": 1, "failed": 1}


# ----- CLI ------------------------------------------------------------------------------------
def test_cli_write_then_flush_then_query(home, run, tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "schema.json").write_text(json.dumps(SCHEMA))
    ok(run("table", "create", "w", "--schema", str(tmp_path / "schema.json"),
           "--property", "sleeper.table.write.buffer.max.records=5"))
    lines = [json.dumps({"key": i, "v": f"v{i}", "b": None}) for i in range(3)]
    (tmp_path / "a.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "b.csv").write_text("key,v,b\n10,x,\n11,y,\n")
    out = ok(run("write", "w", str(tmp_path / "a.jsonl")))
    assert "wrote 3 records" in out.out and "sequence number" in out.out
    full = run("write", "w", str(tmp_path / "b.csv"), str(tmp_path / "a.jsonl"))
    assert full.code == 75
    assert_one_line_error(full, "buffer full, flush pending: the write buffer of table 'w' holds")
    bad = run("write", "w", str(tmp_path / "schema.json"))
    assert_one_line_error(bad)
    assert "flushed 3 records" in ok(run("flush", "w")).out
    pq.write_table(pa.table({"key": pa.array([20], pa.int64()), "v": ["p"], "b": [b"\x00"]}), tmp_path / "c.parquet")
    ok(run("write", "w", str(tmp_path / "b.csv"), str(tmp_path / "c.parquet")))
    ok(run("flush", "w"))
    got = [json.loads(x)["key"] for x in ok(run("query", "w", "--range", "0", "null")).out.splitlines()]
    assert got == [0, 1, 2, 10, 11, 20]


# ----- read your writes -------------------------------------------------------------------------
def test_queries_merge_buffered_records_with_files_in_key_order(t) -> None:  # type: ignore[no-untyped-def]
    t.ingest(pa.table({"key": pa.array(range(0, 300, 2), pa.int64()), "v": ["file"] * 150, "b": [None] * 150}))
    t.write([{"key": k, "v": "buf", "b": None} for k in range(1, 300, 2)])
    every = t.query(ranges=[(0, None)])
    assert every["key"].to_pylist() == list(range(300))
    assert every["v"].to_pylist()[:4] == ["file", "buf", "file", "buf"]
    assert t.query(ranges=[(0, None)], buffer=False)["key"].to_pylist() == list(range(0, 300, 2))
    # several keys and overlapping ranges: each record once, in key order
    got = t.query(keys=[7, 8, 250], ranges=[(95, 105), (100, 110)])["key"].to_pylist()
    assert got == [7, 8, *range(95, 110), 250]
    streamed = list(t.query_batches(ranges=[(90, 210)], limit=15, batch_rows=4))
    assert [k for b in streamed for k in b.column("key").to_pylist()] == list(range(90, 105))
    assert t.sleeper.sql("SELECT count(*) AS n FROM t WHERE key >= 100 AND key < 200")["n"].to_pylist() == [100]


def test_iterators_apply_to_buffered_records(sleeper) -> None:  # type: ignore[no-untyped-def]
    schema = {"rowKeyFields": [{"name": "key", "type": "StringType"}],
              "valueFields": [{"name": "n", "type": "LongType"}]}
    t = sleeper.create_table("agg", schema, properties={"sleeper.table.iterator.aggregation": "sum(n)"})
    t.ingest(pa.table({"key": ["a", "b"], "n": pa.array([1, 10], pa.int64())}))
    t.write([{"key": "a", "n": 2}, {"key": "c", "n": 5}])
    t.write([{"key": "a", "n": 4}])
    assert t.query(ranges=[("", None)]).to_pylist() == [{"key": "a", "n": 7}, {"key": "b", "n": 10},
                                                        {"key": "c", "n": 5}]
    t.flush()
    assert t.query(keys=["a"]).to_pylist() == [{"key": "a", "n": 7}]


def test_a_query_sees_each_record_once_while_a_flush_commits_between_its_reads(t, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    t.write(_rows(0, 50))
    runner = t.sleeper.queries.runner(t.info)
    real = runner._tasks
    flushed = []

    def plan_then_flush(regions, *more):  # type: ignore[no-untyped-def]
        tasks = real(regions, *more)
        if not flushed:  # a flush commits after this query planned on the files
            flushed.append(t.flush())
        return tasks
    monkeypatch.setattr(runner, "_tasks", plan_then_flush)
    # the first query of the runner: the flush commits before the runner planned on any file
    assert t.query(ranges=[(0, None)])["key"].to_pylist() == list(range(50))
    assert flushed and flushed[0].records == 50
    t.write(_rows(50, 60))
    flushed.clear()
    assert t.query(ranges=[(0, None)])["key"].to_pylist() == list(range(60))
    assert flushed and flushed[0].records == 10
