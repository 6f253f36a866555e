"""Bounded job reads on DynamoDB (statestore.dynamodb.job_index): the orphan sweep's
``in_flight_outputs`` reads only jobs not yet final, and ``list_jobs`` only the newest
``limit``, not every job record ever written; a table whose jobs predate the index is
indexed once, keeping every open job in flight."""

from __future__ import annotations

from typing import Any

import pytest

from statestore import StateStore
from statestore.jobs import JobRecord
from tests.integration.statestore.test_behaviour import new_table

pytestmark = pytest.mark.parametrize("store", [pytest.param("dynamodb", marks=pytest.mark.integration)],
                                     indirect=True)


def _counting(store: StateStore) -> list[int]:
    """Wraps the store's record reads; the list gets the number of records each read asks for."""
    asked: list[int] = []
    real = store.job_tracker._job_records  # type: ignore[attr-defined]

    def counted(table_id: str, job_ids: list[str]) -> Any:
        asked.append(len(job_ids))
        return real(table_id, job_ids)

    store.job_tracker._job_records = counted  # type: ignore[attr-defined]
    return asked


def _history(store: StateStore, tid: str, done: int, first: int = 0) -> list[JobRecord]:
    """``done`` finished jobs (committed or failed) and two open ones; returns the open ones."""
    for i in range(first, first + done):
        rec = JobRecord(tid, f"old-{i:03d}", "compaction", created_ms=1000 + i).started(outputs=[f"o{i}"])
        store.put_job(rec)
        store.put_job(rec.committed() if i % 2 else rec.failed("boom"))
    open_jobs = [JobRecord.created(tid, f"live-{i}", "ingest").started(outputs=[f"live{i}"]) for i in range(2)]
    for rec in open_jobs:
        store.put_job(rec)
    return open_jobs


def test_the_sweep_reads_only_open_jobs_and_a_listing_only_its_page(store: StateStore) -> None:
    tid = new_table(store)
    _history(store, tid, 30)
    store.in_flight_outputs(tid, 0)  # an earlier sweep
    _history(store, tid, 30, first=30)
    asked = _counting(store)
    assert store.in_flight_outputs(tid, 0) == {"live0", "live1"}
    assert sum(asked) == 30 + 2, asked  # the jobs that ended since the last sweep (their entries go), and the open
    asked.clear()
    assert store.in_flight_outputs(tid, 0) == {"live0", "live1"}
    assert sum(asked) == 2, "a later sweep reads only the open jobs"
    asked.clear()
    newest = store.list_jobs(tid, limit=5)
    assert [j.job_id for j in newest][:2] == sorted(["live-0", "live-1"], reverse=True)
    assert len(newest) == 5 and sum(asked) <= 10, asked
    assert [j.job_id for j in store.list_jobs(tid, kind="compaction", limit=3)] == ["old-059", "old-058", "old-057"]


def test_a_failed_job_started_again_is_open_again(store: StateStore) -> None:
    tid = new_table(store)
    rec = JobRecord.created(tid, "j", "compaction").started(outputs=["a"])
    store.put_job(rec.failed("boom"))
    assert store.in_flight_outputs(tid, 0) == set()
    store.put_job(rec.failed("boom").started(outputs=["b"]))
    assert store.in_flight_outputs(tid, 0) == {"b"}


def test_jobs_saved_before_the_index_are_indexed_once(store: StateStore) -> None:
    tid = new_table(store)
    open_jobs = _history(store, tid, 4)
    d = store._dynamo  # type: ignore[attr-defined]
    index = [{"table_id": it["table_id"], "sk": it["sk"]} for it in d.query(
        "index", "items", "table_id = :t", {":t": {"S": tid}})
        if it["sk"]["S"].startswith(("o#", "t#", "j!"))]
    assert index, "the index exists"
    d.batch_delete("forget the index", "items", index)  # as a table of an earlier version
    assert store.in_flight_outputs(tid, 0) == {o for r in open_jobs for o in r.outputs}
    assert len(store.list_jobs(tid)) == 6
