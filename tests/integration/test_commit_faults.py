"""Commits whose connection breaks at COMMIT (DESIGN.md section 10), through a
fault-injecting TCP proxy between the state store and PostgreSQL.

Before commits carried ids, a connection dropped right after COMMIT was forwarded
made ingest raise and delete its files although the server had committed them: the
table then referenced deleted files. Each test ends with an exact record count.
"""

from __future__ import annotations

from typing import Iterator

import pyarrow as pa
import pytest

from sleeper_ops.api import Sleeper
from sleeper_ops.io.storage import ObjectStore
from statestore.errors import CommitOutcomeUnknownError
from statestore.postgres import PostgresStateStore
from tests.faults.commit_proxy import CommitDroppingProxy

pytestmark = pytest.mark.integration

SCHEMA = {"rowKeyFields": [{"name": "key", "type": "LongType"}], "valueFields": [{"name": "v", "type": "StringType"}]}


@pytest.fixture
def proxied(pg_dsn: str, tmp_path) -> Iterator[tuple[Sleeper, CommitDroppingProxy]]:
    proxy, dsn = CommitDroppingProxy.for_dsn(pg_dsn)
    sleeper = Sleeper(state_store=PostgresStateStore(dsn), objects=ObjectStore(str(tmp_path / "data")))
    yield sleeper, proxy
    sleeper.close()
    proxy.close()


def _rows(n: int, first: int = 0) -> pa.Table:
    return pa.table({"key": pa.array(range(first, first + n), pa.int64()), "v": [f"v{i}" for i in range(n)]})


def _count(sleeper: Sleeper) -> int:
    """Records by the references' counts (the state store's view)."""
    return sum(r.record_count for r in sleeper.table("t").state().references.values())


def _read_all(sleeper: Sleeper) -> int:
    return sleeper.table("t").query(ranges=[(-(2**63), None)]).num_rows


@pytest.mark.parametrize("after", [True, False], ids=["reply-lost-after-commit", "dropped-before-commit"])
def test_ingest_through_a_dropped_commit_applies_exactly_once(proxied, after: bool) -> None:
    sleeper, proxy = proxied
    t = sleeper.create_table("t", SCHEMA, split_points=[5000])
    proxy.arm(after=after)
    result = t.ingest(_rows(10_000))
    assert proxy.drops == 1, "the fault was injected"
    assert result.records == 10_000
    # every referenced file exists (nothing deleted under a commit that applied) ...
    state = t.state()
    assert all(sleeper.objects.head(f) is not None for f in state.files)
    # ... and the records are there exactly once
    assert _read_all(sleeper) == 10_000
    assert _count(sleeper) == 10_000
    (job,) = [j for j in t.jobs() if j.kind == "ingest"]
    assert job.status == "committed" and set(job.outputs) == set(state.files)


@pytest.mark.parametrize("after", [True, False], ids=["reply-lost-after-commit", "dropped-before-commit"])
def test_compaction_through_a_dropped_commit_applies_exactly_once(proxied, after: bool) -> None:
    sleeper, proxy = proxied
    t = sleeper.create_table("t", SCHEMA, properties={"sleeper.table.compaction.strategy": "basic"})
    for i in range(3):
        t.ingest(_rows(2000, first=i * 2000))
    # armed once the job is created and assigned: the drop hits the job's own commit
    report = t.compact(on_jobs=lambda *_a, **_k: proxy.arm(after=after))
    assert proxy.drops == 1
    assert report.count("committed") == 1, report.summary()
    state = t.state()
    assert len(state.references) == 1
    assert all(sleeper.objects.head(f) is not None for f in state.files)
    assert _read_all(sleeper) == 6000


def test_a_store_that_stays_lost_leaves_the_outcome_unknown_and_the_files_in_place(pg_dsn, tmp_path) -> None:
    proxy, dsn = CommitDroppingProxy.for_dsn(pg_dsn)
    store = PostgresStateStore(dsn, connect_timeout=1.0)
    store.outcome_timeout_seconds = 1.0
    sleeper = Sleeper(state_store=store, objects=ObjectStore(str(tmp_path / "data")))
    try:
        t = sleeper.create_table("t", SCHEMA)
        proxy.arm(after=True, dark=True)  # the commit applies; then the server stays out of reach
        with pytest.raises(CommitOutcomeUnknownError, match="whether it applied is unknown"):
            t.ingest(_rows(1000))
    finally:
        sleeper.close()
    # the outputs were kept: seen directly, the commit applied and its files are all there
    direct = PostgresStateStore(_direct_dsn(dsn, proxy))
    try:
        state = direct.load_state(t.info.table_id)
        assert sum(r.record_count for r in state.references.values()) == 1000
        assert state.files and all(sleeper.objects.head(f) is not None for f in state.files)
    finally:
        direct.close()


def _direct_dsn(proxied_dsn: str, proxy: CommitDroppingProxy) -> str:
    from psycopg.conninfo import make_conninfo

    host, port = proxy.target
    return make_conninfo(proxied_dsn, host=host, port=str(port))


@pytest.mark.parametrize("after", [True, False], ids=["reply-lost-after-commit", "dropped-before-commit"])
def test_a_split_through_a_dropped_commit_applies_exactly_once(proxied, after: bool) -> None:
    """A commit with no job record (a partition split): its id, in ``commit_ids``, makes
    the retry a no-op when the lost attempt applied."""
    sleeper, proxy = proxied
    t = sleeper.create_table("t", SCHEMA, properties={"sleeper.table.partition.splitting.threshold": "1000"})
    t.ingest(_rows(5000))
    proxy.arm(after=after, marker=b"INSERT INTO partitions")
    report = t.split()
    assert proxy.drops == 1
    assert len(report.splits) == 1
    state = t.state()
    assert len(state.partitions) == 3 and sum(p.is_leaf for p in state.partitions.values()) == 2
    assert _read_all(sleeper) == 5000


@pytest.mark.parametrize("command", ["write", "ingest-request"])
def test_a_cli_write_without_a_request_id_through_a_lost_reply_finds_its_own_first_try(
        proxied, tmp_path, monkeypatch, capsys, command: str) -> None:
    """Issue 33 finding 8: the command takes a request id of its own, so the state
    store's retry after the lost reply finds the write applied and answers success."""
    from tests.unit.sleeper_ops.cli_runner import run_cli

    sleeper, proxy = proxied
    t = sleeper.create_table("t", SCHEMA)
    path = tmp_path / "in.parquet"
    import pyarrow.parquet as pq
    pq.write_table(_rows(2500), path)
    marker = b"INSERT INTO write_buffer" if command == "write" else b"INSERT INTO ingest_requests"
    # the buffer's INSERT runs alone on an autocommit connection: it commits itself
    proxy.arm(after=True, marker=marker, commit=marker if command == "write" else b"COMMIT")
    code, out, err = run_cli(sleeper, monkeypatch, capsys, command, "t", str(path))
    assert proxy.drops == 1, "the fault was injected"
    assert code == 0, err
    if command == "write":
        assert "wrote 2,500 records" in out
        assert t.buffer_stats().rows == 2500 and t.buffer_stats().entries == 1  # applied once
        t.flush()
        assert _read_all(sleeper) == 2500
    else:
        assert "queued 1 ingest requests" in out
        assert len(sleeper.state_store.list_ingest_requests(t.info.table_id)) == 1


@pytest.mark.parametrize("after", [True, False], ids=["lost-after-commit", "cut-before-commit"])
def test_an_ingest_whose_outcome_stayed_unknown_retried_with_its_request_id_adds_every_record_once(
        pg_dsn, tmp_path, after: bool) -> None:
    """Issue 33 finding 7 on PostgreSQL: the store stays out of reach past the commit
    (CommitOutcomeUnknownError); the task's retry, in a new process with the same
    request id, adds nothing if the commit applied and everything if it did not."""
    import pyarrow.parquet as pq

    path = tmp_path / "in.parquet"
    pq.write_table(_rows(1000), path)
    proxy, dsn = CommitDroppingProxy.for_dsn(pg_dsn)
    store = PostgresStateStore(dsn, connect_timeout=1.0)
    store.outcome_timeout_seconds = 1.0
    objects = ObjectStore(str(tmp_path / "data"))
    sleeper = Sleeper(state_store=store, objects=objects)
    try:
        t = sleeper.create_table("t", SCHEMA, split_points=[500])
        proxy.arm(after=after, dark=True)
        with pytest.raises(CommitOutcomeUnknownError):
            t.ingest([str(path)], request_id="airflow:load/ingest/run-1")
        assert proxy.drops == 1
    finally:
        sleeper.close()
        proxy.close()
    with Sleeper(state_store=PostgresStateStore(pg_dsn), objects=objects) as again:
        retried = again.table("t").ingest([str(path)], request_id="airflow:load/ingest/run-1")
        assert retried.repeat is after
        assert _read_all(again) == 1000 and _count(again) == 1000  # every record exactly once
        assert [j.status for j in again.table("t").jobs("ingest")].count("committed") == 1
