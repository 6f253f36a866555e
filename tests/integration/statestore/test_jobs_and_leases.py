"""Job status records and exclusive leases, on every backend."""

from __future__ import annotations

import threading
import time

import pytest

from statestore import Schema, StateStore, TableNotFoundError, partitions_from_split_points
from statestore.jobs import JobRecord

SCHEMA = Schema.from_dict({"rowKeyFields": [{"name": "key", "type": "LongType"}],
                           "valueFields": [{"name": "v", "type": "StringType"}]})


def _table(store: StateStore, name: str = "t") -> str:
    return store.create_table(name, SCHEMA, partitions_from_split_points(SCHEMA, [])).table_id


def test_job_record_moves_through_its_states(store: StateStore) -> None:
    tid = _table(store)
    rec = JobRecord.created(tid, "job-1", "compaction", partition_id="root", input_files=3)
    store.put_job(rec)
    assert store.get_job(tid, "job-1") == rec
    rec = rec.started("run-a")
    store.put_job(rec)
    rec = rec.finished(rows_read=100, rows_written=90, output="f.parquet")
    store.put_job(rec)
    rec = rec.committed()
    store.put_job(rec)
    got = store.get_job(tid, "job-1")
    assert got is not None
    assert (got.status, got.rows_read, got.rows_written, got.run_id, got.attempts, got.output) == \
        ("committed", 100, 90, "run-a", 1, "f.parquet")
    assert got.started_ms is not None and got.committed_ms is not None and got.committed_ms >= got.started_ms


def test_failed_job_keeps_its_reason(store: StateStore) -> None:
    tid = _table(store)
    store.put_job(JobRecord.created(tid, "j", "split").started().failed("parent is no longer a leaf"))
    got = store.get_job(tid, "j")
    assert got is not None and got.status == "failed" and got.reason == "parent is no longer a leaf"


def test_list_jobs_newest_first_filtered_by_kind_and_table(store: StateStore) -> None:
    a, b = _table(store, "a"), _table(store, "b")
    for i in range(5):
        store.put_job(JobRecord(a, f"c{i}", "compaction", created_ms=1000 + i))
    store.put_job(JobRecord(a, "s0", "split", created_ms=2000))
    store.put_job(JobRecord(b, "other", "compaction", created_ms=3000))
    assert [j.job_id for j in store.list_jobs(a)] == ["s0", "c4", "c3", "c2", "c1", "c0"]
    assert [j.job_id for j in store.list_jobs(a, kind="compaction", limit=2)] == ["c4", "c3"]
    assert store.get_job(a, "other") is None


def test_jobs_of_a_deleted_table_go_with_it(store: StateStore) -> None:
    tid = _table(store)
    store.put_job(JobRecord.created(tid, "j", "compaction"))
    store.delete_table("t")
    assert store.list_jobs(tid) == []
    with pytest.raises(TableNotFoundError):
        store.put_job(JobRecord.created(tid, "j2", "compaction"))


def test_job_record_refuses_unknown_kind_or_status() -> None:
    with pytest.raises(ValueError):
        JobRecord("t", "j", "nonsense")
    with pytest.raises(ValueError):
        JobRecord("t", "j", "compaction", status="nonsense")


def test_lease_is_exclusive_until_released(store: StateStore) -> None:
    lease = store.acquire_lease("t/compaction", "run-1", 60)
    assert lease is not None and lease.holder == "run-1" and lease.expires_ms > time.time() * 1000 + 50_000
    assert store.acquire_lease("t/compaction", "run-2", 60) is None
    assert store.acquire_lease("t/gc", "run-2", 60) is not None, "leases of other names are independent"
    assert store.acquire_lease("t/compaction", "run-1", 60) is not None, "the holder may renew"
    held = store.get_lease("t/compaction")
    assert held is not None and held.holder == "run-1"
    assert not store.release_lease("t/compaction", "run-2")
    assert store.release_lease("t/compaction", "run-1")
    assert store.get_lease("t/compaction") is None
    assert store.acquire_lease("t/compaction", "run-2", 60) is not None


def test_expired_lease_can_be_taken_over(store: StateStore) -> None:
    assert store.acquire_lease("x", "dead-run", 0.2) is not None
    time.sleep(0.4)
    assert store.get_lease("x") is None
    lease = store.acquire_lease("x", "next-run", 60)
    assert lease is not None and lease.holder == "next-run"
    assert not store.release_lease("x", "dead-run"), "the old holder no longer holds it"


def test_racing_holders_one_wins(store: StateStore) -> None:
    winners: list[str] = []
    barrier = threading.Barrier(8)

    def race(i: int) -> None:
        barrier.wait()
        if store.acquire_lease("race", f"h{i}", 60) is not None:
            winners.append(f"h{i}")

    threads = [threading.Thread(target=race, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(winners) == 1, winners


def test_a_committed_job_record_is_final(store: StateStore) -> None:
    tid = _table(store)
    rec = JobRecord.created(tid, "j", "compaction").started("winner")
    store.put_job(rec.finished(10, 10).committed())
    store.put_job(rec.finished(10, 10).failed("commit refused: inputs no longer assigned"))
    store.put_job(JobRecord.created(tid, "j", "compaction").started("late"))
    got = store.get_job(tid, "j")
    assert got is not None and got.status == "committed" and got.run_id == "winner"


def test_open_jobs_are_every_job_not_final_of_the_table(store: StateStore) -> None:
    a, b = _table(store, "a"), _table(store, "b")
    store.put_job(JobRecord(a, "created", "compaction", created_ms=1000))
    store.put_job(JobRecord(a, "started", "ingest", created_ms=1001).started("run", outputs=["x"]))
    store.put_job(JobRecord(a, "finished", "bulk_import", created_ms=1002).started().finished(1, 1))
    store.put_job(JobRecord(a, "committed", "flush", created_ms=1003).started().committed())
    store.put_job(JobRecord(a, "failed", "split", created_ms=1004).started().failed("no"))
    store.put_job(JobRecord(b, "other", "compaction", created_ms=1005))
    assert sorted(j.job_id for j in store.open_jobs(a)) == ["created", "finished", "started"]
    store.put_job(store.get_job(a, "started").finished(1, 1).committed())  # type: ignore[union-attr]
    reopened = store.get_job(a, "failed").started("retry")  # type: ignore[union-attr]
    store.put_job(reopened)
    assert sorted(j.job_id for j in store.open_jobs(a)) == ["created", "failed", "finished"]
    assert [j.status for j in store.open_jobs(b)] == ["created"]
    with pytest.raises(TableNotFoundError):
        store.open_jobs("no-such-table")


def test_list_jobs_without_a_limit_returns_every_job_newest_first(store: StateStore, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    tid = _table(store)
    count, page = 1003, 1000
    if type(store).__name__ == "DynamoDBStateStore":  # a page of 5, not 1,000 (moto answers one request at a time)
        import statestore.dynamodb.job_index as job_index

        count, page = 13, 5
        monkeypatch.setattr(job_index, "PAGE", page)
    for i in range(count):
        store.put_job(JobRecord(tid, f"job-{i:04d}", "export" if i % 2 else "flush", "failed", created_ms=1_000 + i))
    if page == 1000:
        assert len(store.list_jobs(tid)) == 1000  # the default limit
    every = store.list_jobs(tid, limit=None)
    assert [j.job_id for j in every] == [f"job-{i:04d}" for i in reversed(range(count))]
    assert len(store.list_jobs(tid, kind="export", limit=None)) == count // 2
