"""The query path's metadata (``sleeper_ops.query.metadata``, ``sleeper_ops.query.shared``)
on every state store backend: read-your-writes after ingest, compaction, split and GC;
an unchanged table is never reloaded; queries racing commits return exactly the
committed records; one runner per table, shared, with property changes applied."""

from __future__ import annotations

import threading
import time
from typing import Iterator

import pyarrow as pa
import pytest

from sleeper_ops import Sleeper
from sleeper_ops.io.storage import ObjectStore
from statestore import StateStore, TableNotFoundError
from statestore.schema import LONG_MIN
from tests.integration.statestore.conftest import BACKENDS, open_backend, serial_moto_server

SCHEMA = {"rowKeyFields": [{"name": "key", "type": "LongType"}], "sortKeyFields": [],
          "valueFields": [{"name": "v", "type": "LongType"}]}
EVERYTHING = [(LONG_MIN, None)]
DAY_MS = 24 * 3600 * 1000


@pytest.fixture(scope="module")
def moto_endpoint_url() -> Iterator[str]:
    with pytest.MonkeyPatch.context() as mp, serial_moto_server() as url:
        mp.setenv("AWS_EC2_METADATA_DISABLED", "true")
        yield url


class CountingStore:
    """Counts the calls a state store gets, by method name (a transparent wrapper)."""

    def __init__(self, inner: StateStore) -> None:
        self._inner = inner
        self.calls: dict[str, int] = {}

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        def counted(*a, **kw):  # type: ignore[no-untyped-def]
            self.calls[name] = self.calls.get(name, 0) + 1
            return attr(*a, **kw)
        return counted


@pytest.fixture(params=BACKENDS)
def sleeper(request, tmp_path) -> Iterator[Sleeper]:
    store = CountingStore(open_backend(request, request.param))
    s = Sleeper(state_store=store, objects=ObjectStore(str(tmp_path / "data")))  # type: ignore[arg-type]
    yield s
    s.close()


def rows(first: int, n: int, step: int = 1) -> pa.Table:
    keys = list(range(first, first + n * step, step))
    return pa.table({"key": pa.array(keys, pa.int64()), "v": pa.array([1] * n, pa.int64())})


def count(t) -> int:  # type: ignore[no-untyped-def]
    return t.query(ranges=EVERYTHING).num_rows


def meta(s: Sleeper, t):  # type: ignore[no-untyped-def]
    return s.queries.runner(t.info).metadata


# ----- read-your-writes -----------------------------------------------------------------------
def test_queries_see_every_ingest_compaction_split_and_gc_that_returned_before_them(sleeper):
    t = sleeper.create_table("t", SCHEMA, split_points=[1000], properties={
        "sleeper.table.compaction.strategy": "basic", "sleeper.table.compaction.files.batch.size": "4",
        "sleeper.table.partition.splitting.threshold": "200", "sleeper.table.gc.delay.minutes": "1"})
    assert count(t) == 0
    for i in range(3):  # ingest: each is seen by the very next query
        t.ingest(rows(i, 200, step=10))
        assert count(t) == 200 * (i + 1)
        assert t.query(keys=[i]).num_rows == 1
    before = {r.filename for r in sleeper.state_store.file_references(t.info.table_id)}

    report = t.compact()  # compaction: the next query reads the outputs, not the inputs
    assert report.count("committed") >= 1
    now = {r.filename for r in sleeper.state_store.file_references(t.info.table_id)}
    assert now != before and count(t) == 600
    planned = {name for refs in meta(sleeper, t).references.values() for name in refs}
    assert planned == now

    split = t.split()  # split: the next query plans on the new leaves
    assert split.splits, split
    leaves = {p.id for p in sleeper.state_store.partitions(t.info.table_id) if p.is_leaf}
    assert count(t) == 600 and {p.id for p in meta(sleeper, t).partitions.values() if p.is_leaf} == leaves
    t.ingest(rows(5, 100, step=10))
    assert count(t) == 700

    gone = t.gc(now_ms=int(time.time() * 1000) + DAY_MS)  # GC: deleted inputs are never read again
    assert gone.deleted and set(gone.deleted) <= before
    assert count(t) == 700 and t.query(keys=[0]).num_rows == 1
    assert meta(sleeper, t).full_loads == 1, "every change after the first query was read incrementally"


def test_a_query_after_a_table_is_deleted_is_refused_and_its_runner_dropped(sleeper):
    t = sleeper.create_table("t", SCHEMA)
    t.ingest(rows(0, 10))
    assert count(t) == 10 and t.info.table_id in sleeper.queries
    sleeper.state_store.delete_table("t")  # behind the Sleeper's back, as another process would
    with pytest.raises(TableNotFoundError):
        count(t)
    assert t.info.table_id not in sleeper.queries


# ----- cost ------------------------------------------------------------------------------------
def test_queries_of_an_unchanged_table_never_load_its_whole_state(sleeper):
    t = sleeper.create_table("t", SCHEMA, split_points=[100, 200, 300])
    for _ in range(4):
        t.ingest(rows(0, 400))
    store: CountingStore = sleeper.state_store  # type: ignore[assignment]
    store.calls.clear()
    for k in range(20):
        assert t.query(keys=[k]).num_rows == 4
    assert count(t) == 1600
    assert store.calls.get("load_state", 0) == 0
    assert store.calls.get("get_table", 0) == 0, "the catalog entry comes with the metadata refresh"
    assert store.calls.get("changes_since") == 21
    m = meta(sleeper, t)
    assert m.full_loads == 1 and m.refreshes == 21


# ----- concurrency -----------------------------------------------------------------------------
def test_queries_racing_ingests_and_compactions_return_exactly_the_committed_records(sleeper):
    t = sleeper.create_table("t", SCHEMA, split_points=[5000], properties={
        "sleeper.table.compaction.strategy": "basic", "sleeper.table.compaction.files.batch.size": "3"})
    batches, per_batch = 8, 50
    committed = [0]  # records committed by ingests that have returned
    totals = {per_batch * i for i in range(batches + 1)}
    failures: list[str] = []
    done = threading.Event()

    def reader() -> None:
        last = 0
        while not done.is_set():
            floor = committed[0]
            n = count(t)
            if n not in totals or n < floor or n < last:
                failures.append(f"read {n} records after {floor} were committed (last read {last})")
            last = n

    def writer() -> None:
        try:
            for i in range(batches):
                t.ingest(rows(i, per_batch, step=batches))
                committed[0] = per_batch * (i + 1)
                if i % 3 == 2:
                    t.compact()
        finally:
            done.set()

    threads = [threading.Thread(target=reader) for _ in range(3)] + [threading.Thread(target=writer)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=300)
    assert not failures, failures[:5]
    assert count(t) == batches * per_batch
    assert sorted(t.query(ranges=EVERYTHING).column("key").to_pylist()) == list(range(batches * per_batch))


# ----- one runner per table --------------------------------------------------------------------
def test_every_query_of_a_table_shares_one_runner_and_property_changes_apply(sleeper):
    t = sleeper.create_table("t", SCHEMA)
    t.ingest(pa.table({"key": pa.array([1, 1, 2], pa.int64()), "v": pa.array([5, 7, 1], pa.int64())}))
    assert count(t) == 3
    shared = sleeper.queries.runner(t.info)
    again = sleeper.table("t")
    assert again.query(keys=[1]).num_rows == 2 and [b.num_rows for b in again.query_batches(keys=[2])] == [1]
    assert sleeper.queries.runner(again.info) is shared and len(sleeper.queries) == 1
    sleeper.set_properties("t", {"sleeper.table.iterator.aggregation": "sum(v)"})
    assert t.query(keys=[1]).column("v").to_pylist() == [12], "the new iterator applies to the next query"
    sleeper.rename_table("t", "t2")
    assert sleeper.table("t2").query(keys=[1]).num_rows == 1 and sleeper.queries.runner(t.info) is shared
    sleeper.delete_table("t2")
    assert len(sleeper.queries) == 0


def test_closing_the_sleeper_closes_its_runners(sleeper):
    t = sleeper.create_table("t", SCHEMA)
    t.ingest(rows(0, 5))
    assert count(t) == 5
    sleeper.queries.close()
    with pytest.raises(RuntimeError, match="closed"):
        count(t)


def count_statements(monkeypatch) -> list[str]:  # type: ignore[no-untyped-def]
    """The statements psycopg sends from now on (their first 80 characters), until
    ``monkeypatch.undo()``."""
    import psycopg

    statements: list[str] = []
    real = psycopg.Cursor.execute

    def counted(self, query, *args, **kwargs):  # type: ignore[no-untyped-def]
        statements.append(str(query)[:80])
        return real(self, query, *args, **kwargs)
    monkeypatch.setattr(psycopg.Cursor, "execute", counted)
    return statements


def test_refreshing_an_unchanged_table_on_postgresql_takes_one_statement(pg_dsn, tmp_path, monkeypatch):
    """Counted on the wire (every statement psycopg sends), not by StateStore calls: a
    query of an unchanged table refreshes its metadata with one statement (the snapshot
    check of ``statestore.postgres.changes``), not the five of a full incremental read."""
    from statestore.postgres import PostgresStateStore

    with Sleeper(state_store=PostgresStateStore(pg_dsn), objects=ObjectStore(str(tmp_path / "data"))) as s:
        t = s.create_table("t", SCHEMA, split_points=[100])
        t.ingest(rows(0, 200))
        assert t.query(keys=[1], buffer=False).num_rows == 1  # the runner now holds a snapshot
        statements = count_statements(monkeypatch)
        for k in range(10):
            assert t.query(keys=[k], buffer=False).num_rows == 1
        monkeypatch.undo()
        assert len(statements) == 10, statements
        assert all("pg_current_snapshot()" in q for q in statements), statements


def test_a_query_with_an_unchanged_buffer_on_postgresql_takes_one_statement_and_sees_each_write(
        pg_dsn, tmp_path, monkeypatch):
    """The snapshot check carries the write buffer's mark (flushes, entries, highest
    seq): while neither the table nor its buffer changed, a query that includes the
    buffer sends that one statement; a write, a flush or a delete is seen by the next
    query, each record once."""
    from statestore.postgres import PostgresStateStore

    with Sleeper(state_store=PostgresStateStore(pg_dsn), objects=ObjectStore(str(tmp_path / "data"))) as s:
        t = s.create_table("t", SCHEMA, split_points=[100])
        t.ingest(rows(0, 200, step=2))  # even keys in files
        t.write([{"key": 1, "v": 1}])  # an odd one in the buffer
        assert count(t) == 201
        statements = count_statements(monkeypatch)
        for k in (0, 1, 2, 3):
            assert t.query(keys=[k]).num_rows == (0 if k == 3 else 1)
        assert len(statements) == 4, statements
        monkeypatch.undo()

        t.write([{"key": 3, "v": 1}])
        assert t.query(keys=[3]).num_rows == 1, "a write after the last read is seen"
        t.flush()
        assert count(t) == 202 and t.query(keys=[1, 3]).num_rows == 2, "after a flush, each record once"
        t.write([{"key": 5, "v": 1}])
        t.delete(ranges=[(5, 6)])
        assert t.query(keys=[5]).num_rows == 0, "a delete hides a buffered record it covers"
        assert count(t) == 202
