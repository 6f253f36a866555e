"""Idempotent commits and a commit's bookkeeping, on every backend (DESIGN.md section 10):
a commit id applies once; a job record and ingest requests change in the same atomic
step as the data, or not at all; in-flight outputs are what non-final jobs name."""

from __future__ import annotations

import pytest

from statestore import AddFiles, FileReference, StateStore
from statestore.clock import now_ms
from statestore.errors import BookkeepingError, FileReferenceError, TransactionError
from statestore.ingest_requests import IngestRequest
from statestore.jobs import JobRecord
from tests.integration.statestore.test_behaviour import new_table


def _refs(*names: str) -> AddFiles:
    return AddFiles(tuple(FileReference(n, "L", 10) for n in names))


def test_a_commit_id_applies_once(store: StateStore) -> None:
    tid = new_table(store)
    assert store.commit(tid, _refs("a"), commit_id="c1") is True
    # the same id again, even with another transaction, applies nothing
    assert store.commit(tid, _refs("b"), commit_id="c1") is False
    assert sorted(store.load_state(tid).files) == ["a"]
    assert store.commit(tid, _refs("b"), commit_id="c2") is True
    assert sorted(store.load_state(tid).files) == ["a", "b"]


def test_a_refused_commit_does_not_record_its_id(store: StateStore) -> None:
    tid = new_table(store)
    store.commit(tid, _refs("a"))
    with pytest.raises(FileReferenceError):
        store.commit(tid, _refs("a"), commit_id="dup")
    # refused, so the id is free: a valid commit under it applies
    assert store.commit(tid, _refs("b"), commit_id="dup") is True


def test_commit_ids_are_per_table_and_pruned(store: StateStore) -> None:
    t1, t2 = new_table(store, "t1"), new_table(store, "t2")
    store.commit(t1, _refs("a"), commit_id="same")
    assert store.commit(t2, _refs("a"), commit_id="same") is True
    assert store.prune_commit_ids(t1, now_ms() - 60_000) == 0
    assert store.prune_commit_ids(t1, now_ms() + 1) == 1
    assert store.commit(t1, _refs("b"), commit_id="same") is True  # forgotten, so applied again


def test_the_job_record_is_saved_with_the_commit(store: StateStore) -> None:
    tid = new_table(store)
    rec = JobRecord.created(tid, "j", "ingest").started("run", outputs=["a"])
    store.put_job(rec)
    store.commit(tid, _refs("a"), job=rec.finished(10, 10, "a").committed())
    saved = store.get_job(tid, "j")
    assert saved is not None and saved.status == "committed" and saved.outputs == ("a",)


def test_a_superseded_attempt_is_refused_and_changes_nothing(store: StateStore) -> None:
    tid = new_table(store)
    first = JobRecord.created(tid, "j", "compaction").started("run", outputs=["out-1"])
    store.put_job(first)
    second = first.started("run", outputs=["out-2"])
    store.put_job(second)  # a retry took the job over, naming a fresh output
    with pytest.raises(BookkeepingError, match="superseded"):
        store.commit(tid, _refs("out-1"), job=first.committed())
    assert store.load_state(tid).files == {}
    assert store.get_job(tid, "j") == second
    store.commit(tid, _refs("out-2"), job=second.committed())
    with pytest.raises(TransactionError):  # a committed job cannot commit again
        store.commit(tid, _refs("out-3"), job=second.naming(["out-3"]).committed())
    assert sorted(store.load_state(tid).files) == ["out-2"]


def test_ingest_requests_are_marked_in_the_data_commit(store: StateStore) -> None:
    tid = new_table(store)
    store.add_ingest_requests(tid, [IngestRequest("r1", tid, "/in/1", 1, 1), IngestRequest("r2", tid, "/in/2", 1, 2)])
    assert store.assign_ingest_requests(tid, "job-1", ["r1", "r2"])
    store.commit(tid, _refs("a"), ingest_job_id="job-1")
    assert {r.request_id: r.status for r in store.list_ingest_requests(tid)} == {"r1": "ingested", "r2": "ingested"}


def test_an_ingest_commit_whose_requests_were_requeued_is_refused(store: StateStore) -> None:
    tid = new_table(store)
    store.add_ingest_requests(tid, [IngestRequest("r1", tid, "/in/1", 1, 1)])
    assert store.assign_ingest_requests(tid, "slow-job", ["r1"])
    store.finish_ingest_job(tid, "slow-job", ok=False, error="abandoned")  # requeued
    assert store.assign_ingest_requests(tid, "new-job", ["r1"])
    with pytest.raises(BookkeepingError, match="slow-job"):
        store.commit(tid, _refs("slow-output"), ingest_job_id="slow-job")
    assert store.load_state(tid).files == {}
    store.commit(tid, _refs("new-output"), ingest_job_id="new-job")
    assert sorted(store.load_state(tid).files) == ["new-output"]
    assert [r.status for r in store.list_ingest_requests(tid)] == ["ingested"]


def test_a_data_refusal_leaves_the_requests_assigned(store: StateStore) -> None:
    tid = new_table(store)
    store.commit(tid, _refs("a"))
    store.add_ingest_requests(tid, [IngestRequest("r1", tid, "/in/1", 1, 1)])
    store.assign_ingest_requests(tid, "job", ["r1"])
    with pytest.raises(FileReferenceError):
        store.commit(tid, _refs("a"), ingest_job_id="job")
    assert [r.status for r in store.list_ingest_requests(tid)] == ["assigned"]


def test_in_flight_outputs_are_those_of_jobs_not_final_and_recent(store: StateStore) -> None:
    tid = new_table(store)
    running = JobRecord.created(tid, "run", "compaction").started(outputs=["k1", "k2"])
    done = JobRecord.created(tid, "done", "compaction").started(outputs=["k3"]).committed()
    failed = JobRecord.created(tid, "bad", "ingest").started(outputs=["k4"]).failed("boom")
    for r in (running, done, failed):
        store.put_job(r)
    assert store.in_flight_outputs(tid, 0) == {"k1", "k2"}
    assert store.in_flight_outputs(tid, running.last_update_ms + 1) == set()  # abandoned: too old


def test_bookkeeping_on_an_unknown_table(store: StateStore) -> None:
    from statestore.errors import TableNotFoundError

    with pytest.raises(TableNotFoundError):
        store.in_flight_outputs("no-such-table", 0)
    with pytest.raises(TableNotFoundError):
        store.commit("no-such-table", _refs("a"), commit_id="x")


def test_an_attempt_declared_abandoned_may_not_commit_and_a_new_attempt_may(store: StateStore) -> None:
    tid = new_table(store)
    first = JobRecord.created(tid, "j", "ingest").started("run", outputs=["a"])
    store.put_job(first)
    store.put_job(first.abandoned(60, now_ms()))
    with pytest.raises(BookkeepingError, match="declared abandoned"):
        store.commit(tid, _refs("a"), job=first.finished(10, 10, "a").committed())
    assert store.load_state(tid).files == {}
    second = store.get_job(tid, "j").started("run-2", outputs=["b"])  # type: ignore[union-attr]
    store.put_job(second)
    assert store.commit(tid, _refs("b"), job=second.finished(10, 10, "b").committed()) is True
    assert sorted(store.load_state(tid).files) == ["b"]
