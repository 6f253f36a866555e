"""Job heartbeats on every backend (StateStore.heartbeat_jobs): a beat moves a job's
last update forward and never back, survives later saves of the record, and keeps the
job's outputs in flight for the orphan sweep; a job with no record is skipped."""

from __future__ import annotations

from statestore import StateStore
from statestore.jobs import JobRecord
from tests.integration.statestore.test_behaviour import new_table

DAY = 24 * 3600 * 1000


def test_a_beat_keeps_a_running_jobs_outputs_in_flight_and_never_goes_back(store: StateStore) -> None:
    tid = new_table(store)
    rec = JobRecord.created(tid, "slow", "compaction").started("run", outputs=["out-1"])
    store.put_job(rec)
    later = rec.last_update_ms + 2 * DAY
    assert store.in_flight_outputs(tid, later - DAY) == set()  # silent for two days: abandoned
    assert store.heartbeat_jobs(tid, ["slow", "no-such-job"], later) == 1
    assert store.in_flight_outputs(tid, later - DAY) == {"out-1"}
    assert store.heartbeat_jobs(tid, ["slow"], later - 5000) == 1  # an older beat changes nothing
    got = store.get_job(tid, "slow")
    assert got is not None and got.heartbeat_ms == later and got.last_update_ms == later
    # a later save of the record by the job itself (naming one more output) keeps the beat
    store.put_job(rec)
    got = store.get_job(tid, "slow")
    assert got is not None and got.last_update_ms == later and got.status == "started"


def test_a_final_job_beaten_is_still_not_in_flight(store: StateStore) -> None:
    tid = new_table(store)
    rec = JobRecord.created(tid, "done", "ingest").started(outputs=["o"])
    store.put_job(rec.failed("boom"))
    store.heartbeat_jobs(tid, ["done"], rec.last_update_ms + DAY)
    assert store.in_flight_outputs(tid, 0) == set()
    got = store.get_job(tid, "done")
    assert got is not None and got.status == "failed"
