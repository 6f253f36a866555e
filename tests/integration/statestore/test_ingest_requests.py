"""Ingest requests (the batcher's queue), on every backend."""

from __future__ import annotations

import threading

import pytest

from statestore import Schema, StateStore, TableNotFoundError, partitions_from_split_points
from statestore.ingest_requests import IngestRequest, IngestRequestError

SCHEMA = Schema.from_dict({"rowKeyFields": [{"name": "key", "type": "LongType"}],
                           "valueFields": [{"name": "v", "type": "StringType"}]})


def _table(store: StateStore, name: str = "t") -> str:
    return store.create_table(name, SCHEMA, partitions_from_split_points(SCHEMA, [])).table_id


def _requests(tid: str, n: int, start_ms: int = 1000) -> list[IngestRequest]:
    return [IngestRequest.new(tid, f"/data/f{i}.parquet", 100 * (i + 1), received_ms=start_ms + i) for i in range(n)]


def test_requests_are_queued_pending_oldest_first(store: StateStore) -> None:
    tid = _table(store)
    reqs = _requests(tid, 3)
    store.add_ingest_requests(tid, list(reversed(reqs)))
    assert store.pending_ingest_requests(tid) == reqs
    assert store.pending_ingest_requests(tid, limit=2) == reqs[:2]
    assert store.list_ingest_requests(tid, status="assigned") == []


def test_adding_requests_is_all_or_nothing(store: StateStore) -> None:
    tid = _table(store)
    first = _requests(tid, 1)
    store.add_ingest_requests(tid, first)
    again = [*_requests(tid, 2, start_ms=5000), first[0]]
    with pytest.raises(IngestRequestError):
        store.add_ingest_requests(tid, again)
    assert store.list_ingest_requests(tid) == first, "a refused batch queues nothing"
    twice = _requests(tid, 1, start_ms=9000) * 2
    with pytest.raises(IngestRequestError, match="twice"):
        store.add_ingest_requests(tid, twice)
    with pytest.raises(IngestRequestError, match="not"):
        store.add_ingest_requests(tid, [IngestRequest.new("other-table", "/x.parquet", 1)])
    assert store.list_ingest_requests(tid) == first


def test_requests_for_an_unknown_table_are_refused(store: StateStore) -> None:
    with pytest.raises(TableNotFoundError):
        store.add_ingest_requests("nope", [IngestRequest.new("nope", "/x.parquet", 1)])
    with pytest.raises(TableNotFoundError):
        store.pending_ingest_requests("nope")


def test_assignment_takes_only_pending_requests(store: StateStore) -> None:
    tid = _table(store)
    a, b, c = _requests(tid, 3)
    store.add_ingest_requests(tid, [a, b, c])
    assert store.assign_ingest_requests(tid, "job-1", [a.request_id, b.request_id])
    assert not store.assign_ingest_requests(tid, "job-2", [b.request_id, c.request_id]), \
        "b is already assigned, so the whole assignment is refused"
    assert not store.assign_ingest_requests(tid, "job-2", [c.request_id, "missing"])
    assert [r.request_id for r in store.pending_ingest_requests(tid)] == [c.request_id], "c was left pending"
    assigned = store.list_ingest_requests(tid, status="assigned")
    assert [(r.request_id, r.job_id) for r in assigned] == [(a.request_id, "job-1"), (b.request_id, "job-1")]


def test_a_successful_job_marks_its_requests_ingested(store: StateStore) -> None:
    tid = _table(store)
    a, b, c = _requests(tid, 3)
    store.add_ingest_requests(tid, [a, b, c])
    store.assign_ingest_requests(tid, "job-1", [a.request_id, b.request_id])
    assert store.finish_ingest_job(tid, "job-1", ok=True) == 2
    assert store.finish_ingest_job(tid, "job-1", ok=True) == 0, "finishing twice changes nothing"
    ingested = store.list_ingest_requests(tid, status="ingested")
    assert [(r.request_id, r.job_id) for r in ingested] == [(a.request_id, "job-1"), (b.request_id, "job-1")]
    assert [r.request_id for r in store.pending_ingest_requests(tid)] == [c.request_id]


def test_a_failed_job_leaves_its_requests_pending_and_retryable(store: StateStore) -> None:
    tid = _table(store)
    a, b = _requests(tid, 2)
    store.add_ingest_requests(tid, [a, b])
    store.assign_ingest_requests(tid, "job-1", [a.request_id, b.request_id])
    assert store.finish_ingest_job(tid, "job-1", ok=False, error="disk on fire") == 2
    pending = store.pending_ingest_requests(tid)
    assert [(r.request_id, r.attempts, r.last_error, r.job_id) for r in pending] == \
        [(a.request_id, 1, "disk on fire", None), (b.request_id, 1, "disk on fire", None)]
    assert store.assign_ingest_requests(tid, "job-2", [a.request_id]), "a failed request can be taken again"
    store.finish_ingest_job(tid, "job-2", ok=True)
    got = store.list_ingest_requests(tid, status="ingested")
    assert [(r.request_id, r.attempts, r.job_id) for r in got] == [(a.request_id, 1, "job-2")]


def test_a_request_fails_for_good_at_the_attempt_limit(store: StateStore) -> None:
    tid = _table(store)
    (a,) = _requests(tid, 1)
    store.add_ingest_requests(tid, [a])
    for attempt in (1, 2):
        assert store.assign_ingest_requests(tid, f"job-{attempt}", [a.request_id])
        store.finish_ingest_job(tid, f"job-{attempt}", ok=False, error=f"bad {attempt}", max_attempts=2)
    assert store.pending_ingest_requests(tid) == []
    (failed,) = store.list_ingest_requests(tid, status="failed")
    assert (failed.attempts, failed.last_error, failed.job_id) == (2, "bad 2", "job-2")
    assert not store.assign_ingest_requests(tid, "job-3", [a.request_id])


def test_a_job_that_ended_through_no_fault_of_its_requests_does_not_count_an_attempt(store: StateStore) -> None:
    tid = _table(store)
    (a,) = _requests(tid, 1)
    store.add_ingest_requests(tid, [a])
    assert store.assign_ingest_requests(tid, "job-1", [a.request_id])
    store.finish_ingest_job(tid, "job-1", ok=False, error="bad 1", max_attempts=2)
    for n in (2, 3, 4):  # stalls, each at the limit were it counted: the request stays pending at 1
        assert store.assign_ingest_requests(tid, f"job-{n}", [a.request_id])
        assert store.finish_ingest_job(tid, f"job-{n}", ok=False, error=f"stalled {n}", max_attempts=2,
                                       counted=False) == 1
        (pending,) = store.pending_ingest_requests(tid)
        assert (pending.status, pending.attempts, pending.last_error, pending.job_id) == \
            ("pending", 1, f"stalled {n}", None)
    assert store.finish_ingest_job(tid, "job-4", ok=False, error="again", counted=False) == 0, \
        "a request no longer assigned to the job does not change"
    assert store.assign_ingest_requests(tid, "job-5", [a.request_id])
    store.finish_ingest_job(tid, "job-5", ok=False, error="bad 5", max_attempts=2)
    (failed,) = store.list_ingest_requests(tid, status="failed")
    assert (failed.attempts, failed.last_error) == (2, "bad 5"), "a counted failure still reaches the limit"


def test_list_filters_by_status_and_refuses_unknown_status(store: StateStore) -> None:
    tid = _table(store)
    reqs = _requests(tid, 4)
    store.add_ingest_requests(tid, reqs)
    store.assign_ingest_requests(tid, "j", [reqs[1].request_id])
    assert store.list_ingest_requests(tid, limit=3) == [reqs[0], reqs[1].assigned("j"), reqs[2]]
    assert store.list_ingest_requests(tid, status="pending") == [reqs[0], reqs[2], reqs[3]]
    with pytest.raises(IngestRequestError):
        store.list_ingest_requests(tid, status="nonsense")


def test_requests_of_a_deleted_table_go_with_it(store: StateStore) -> None:
    tid = _table(store)
    store.add_ingest_requests(tid, _requests(tid, 2))
    store.delete_table("t")
    tid2 = _table(store)
    assert store.list_ingest_requests(tid2) == []
    with pytest.raises(TableNotFoundError):
        store.list_ingest_requests(tid)
    with pytest.raises(TableNotFoundError):
        store.add_ingest_requests(tid, _requests(tid, 1))


def test_requests_of_tables_are_separate(store: StateStore) -> None:
    a, b = _table(store, "a"), _table(store, "b")
    ra, rb = _requests(a, 1), _requests(b, 1)
    store.add_ingest_requests(a, ra)
    store.add_ingest_requests(b, rb)
    assert not store.assign_ingest_requests(a, "j", [rb[0].request_id]), "a request of another table is not found"
    assert store.pending_ingest_requests(a) == ra and store.pending_ingest_requests(b) == rb


@pytest.mark.parametrize("rounds", [20])
def test_two_batchers_racing_for_the_same_requests_exactly_one_wins(store: StateStore, rounds: int) -> None:
    tid = _table(store)
    for n in range(rounds):
        reqs = _requests(tid, 3, start_ms=10_000 * (n + 1))
        store.add_ingest_requests(tid, reqs)
        ids = [r.request_id for r in reqs]
        # the two overlap in one request, in opposite orders: a deadlock-prone pattern
        claims = {"A": ids, "B": [*list(reversed(ids[1:])), ids[0]]}
        results: dict[str, bool] = {}
        barrier = threading.Barrier(2)

        def claim(who: str) -> None:
            barrier.wait()
            results[who] = store.assign_ingest_requests(tid, f"job-{n}-{who}", claims[who])

        threads = [threading.Thread(target=claim, args=(w,)) for w in claims]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(results.values()) == [False, True], f"round {n}: {results}"
        winner = next(w for w, ok in results.items() if ok)
        jobs = {r.job_id for r in store.list_ingest_requests(tid, status="assigned", limit=None)
                if r.request_id in ids}
        assert jobs == {f"job-{n}-{winner}"}, "every request went to the winner only"
