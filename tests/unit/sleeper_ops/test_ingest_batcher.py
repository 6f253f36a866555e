"""The ingest batcher: requests refused up front, grouped by the table's limits, run with
standard ingest; failed jobs leave their requests pending and retryable."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sleeper_ops import Sleeper
from sleeper_ops.errors import IngestError
from sleeper_ops.ingest.batcher import (
    BatcherLimits,
    JobRunners,
    plan_ingest_jobs,
    requeue_abandoned,
    run_batcher,
    run_ingest_batcher,
    submit_ingest_requests,
)
from statestore.errors import TableNotFoundError
from statestore.ingest_requests import IngestRequest
from statestore.jobs import JobRecord
from statestore.properties import (
    INGEST_BATCHER_BULK_IMPORT_MIN_SIZE,
    INGEST_BATCHER_JOB_MAX_FILES,
    INGEST_BATCHER_JOB_MIN_SIZE,
)
from tests.unit.sleeper_ops.cli_runner import run_cli

SCHEMA = {"rowKeyFields": [{"name": "key", "type": "LongType"}], "valueFields": [{"name": "v", "type": "StringType"}]}
SMALL_BATCHES = {"sleeper.table.ingest.batcher.job.min.size": "1", "sleeper.table.ingest.batcher.job.max.files": "2"}


def write_input(d: Path, name: str, keys: range) -> str:
    path = d / name
    pq.write_table(pa.table({"key": pa.array(list(keys), pa.int64()), "v": [f"v{k}" for k in keys]}), path)
    return str(path)


def all_keys(sleeper: Sleeper, table: str) -> list[int]:
    return sleeper.table(table).query(ranges=[(-(2**63), None)]).column("key").to_pylist()


# ----- requests ----------------------------------------------------------------------
def test_request_records_absolute_path_and_size(sleeper: Sleeper, input_dir: Path, monkeypatch) -> None:
    sleeper.create_table("t", SCHEMA)
    path = write_input(input_dir, "a.parquet", range(10))
    monkeypatch.chdir(input_dir)
    (req,) = submit_ingest_requests(sleeper, "t", ["a.parquet"])
    assert req.filename == path and os.path.isabs(req.filename)
    assert req.size_bytes == os.path.getsize(path) and req.status == "pending"
    assert sleeper.state_store.pending_ingest_requests(sleeper.table("t").info.table_id) == [req]


def test_request_for_a_missing_file_queues_nothing(sleeper: Sleeper, input_dir: Path) -> None:
    sleeper.create_table("t", SCHEMA)
    good = write_input(input_dir, "a.parquet", range(10))
    with pytest.raises(IngestError) as e:
        submit_ingest_requests(sleeper, "t", [good, str(input_dir / "missing.parquet"), str(input_dir / "x.txt")])
    assert "missing.parquet" in str(e.value) and "x.txt" in str(e.value), "every bad file is named"
    assert sleeper.state_store.list_ingest_requests(sleeper.table("t").info.table_id) == []


def test_request_for_an_unknown_table_or_no_files_is_refused(sleeper: Sleeper, input_dir: Path) -> None:
    good = write_input(input_dir, "a.parquet", range(10))
    with pytest.raises(TableNotFoundError):
        submit_ingest_requests(sleeper, "nope", [good])
    sleeper.create_table("t", SCHEMA)
    with pytest.raises(IngestError, match="no files"):
        submit_ingest_requests(sleeper, "t", [])
    with pytest.raises(IngestError, match="twice"):
        submit_ingest_requests(sleeper, "t", [good, good])


# ----- planning ------------------------------------------------------------------------
def req(i: int, size: int, received_ms: int = 0, attempts: int = 0) -> IngestRequest:
    return IngestRequest(f"r{i:03d}", "t", f"/f{i}.parquet", size, received_ms, attempts=attempts)


def ids(groups: list[list[IngestRequest]]) -> list[list[str]]:
    return [[r.request_id for r in g] for g in groups]


LIMITS = BatcherLimits(min_size=100, max_size=250, max_files=3, max_age_ms=60_000)


def test_groups_fill_up_to_max_files_and_max_size_oldest_first() -> None:
    pending = [req(i, 60, received_ms=i) for i in range(7)]
    assert ids(plan_ingest_jobs(pending, LIMITS, now_ms=10)) == \
        [["r000", "r001", "r002"], ["r003", "r004", "r005"]], "the last group of one (60 < min 100) waits"
    big = [req(0, 200), req(1, 100), req(2, 300), req(3, 50)]
    assert ids(plan_ingest_jobs(big, LIMITS, now_ms=10)) == [["r000"], ["r001"], ["r002"]], \
        "a group closes when the next request would pass max size; a file over max size goes alone"


def test_small_group_waits_until_its_oldest_request_is_max_age_old() -> None:
    pending = [req(0, 10, received_ms=1_000), req(1, 10, received_ms=30_000)]
    assert plan_ingest_jobs(pending, LIMITS, now_ms=60_999) == []
    assert ids(plan_ingest_jobs(pending, LIMITS, now_ms=61_000)) == [["r000", "r001"]]


def test_requests_that_failed_before_go_alone() -> None:
    pending = [req(0, 60, attempts=1), req(1, 60), req(2, 60), req(3, 60, attempts=2)]
    assert ids(plan_ingest_jobs(pending, LIMITS, now_ms=0)) == [["r000"], ["r003"], ["r001", "r002"]]


# ----- running -------------------------------------------------------------------------
def test_batcher_ingests_groups_and_records_jobs(sleeper: Sleeper, input_dir: Path) -> None:
    t = sleeper.create_table("t", SCHEMA, properties=SMALL_BATCHES)
    files = [write_input(input_dir, f"f{i}.parquet", range(i * 10, i * 10 + 10)) for i in range(3)]
    submit_ingest_requests(sleeper, "t", files)
    report = run_ingest_batcher(sleeper, "t", run_id="test-run")
    assert [len(j.files) for j in report.committed] == [2, 1] and report.failed == []
    assert report.records == 30 and report.waiting == 0
    assert all_keys(sleeper, "t") == list(range(30))
    store, tid = sleeper.state_store, t.info.table_id
    assert store.pending_ingest_requests(tid) == []
    assert len(store.list_ingest_requests(tid, status="ingested")) == 3
    jobs = store.list_jobs(tid, kind="ingest")
    assert sorted((j.status, j.input_files, j.rows_written, j.run_id) for j in jobs) == \
        [("committed", 1, 10, "test-run"), ("committed", 2, 20, "test-run")]
    assert run_ingest_batcher(sleeper, "t").jobs == [], "nothing left to do"


def test_batcher_leaves_a_young_small_group_waiting(sleeper: Sleeper, input_dir: Path) -> None:
    sleeper.create_table("t", SCHEMA)  # default min size 1G
    submit_ingest_requests(sleeper, "t", [write_input(input_dir, "a.parquet", range(5))], received_ms=1_000_000)
    report = run_ingest_batcher(sleeper, "t", now_ms=1_000_000 + 299_000)
    assert report.jobs == [] and report.waiting == 1
    report = run_ingest_batcher(sleeper, "t", now_ms=1_000_000 + 300_000)
    assert [j.status for j in report.jobs] == ["committed"] and all_keys(sleeper, "t") == list(range(5))


def test_sent_now_a_young_small_group_is_ingested_at_once_in_jobs_of_at_most_max_files(sleeper: Sleeper,
                                                                                         input_dir: Path) -> None:
    sleeper.create_table("t", SCHEMA, properties={INGEST_BATCHER_JOB_MAX_FILES: "2"})  # default min size 1G
    files = [write_input(input_dir, f"{n}.parquet", range(n * 10, n * 10 + 10)) for n in range(3)]
    submit_ingest_requests(sleeper, "t", files, received_ms=1_000_000)
    report = run_ingest_batcher(sleeper, "t", now_ms=1_000_001, send_now=True)
    assert [(j.status, len(j.files)) for j in report.jobs] == [("committed", 2), ("committed", 1)]
    assert report.waiting == 0 and sorted(all_keys(sleeper, "t")) == list(range(30))


def test_offline_table_still_takes_ingest(sleeper: Sleeper, input_dir: Path) -> None:
    sleeper.create_table("t", SCHEMA, properties={**SMALL_BATCHES, "sleeper.table.online": "false"})
    submit_ingest_requests(sleeper, "t", [write_input(input_dir, "a.parquet", range(5))])
    assert [j.status for j in run_ingest_batcher(sleeper, "t").jobs] == ["committed"]
    assert all_keys(sleeper, "t") == list(range(5))


def test_failed_job_leaves_requests_pending_then_bad_file_is_isolated(sleeper: Sleeper, input_dir: Path) -> None:
    t = sleeper.create_table("t", SCHEMA, properties=SMALL_BATCHES)
    good = write_input(input_dir, "good.parquet", range(10))
    bad = write_input(input_dir, "bad.parquet", range(10, 20))
    submit_ingest_requests(sleeper, "t", [good, bad])
    Path(bad).write_bytes(b"not parquet any more")
    store, tid = sleeper.state_store, t.info.table_id

    first = run_ingest_batcher(sleeper, "t", max_attempts=2)
    assert [j.status for j in first.jobs] == ["failed"] and "bad.parquet" in (first.jobs[0].error or "")
    assert all_keys(sleeper, "t") == [], "a failed job commits nothing"
    pending = store.pending_ingest_requests(tid)
    assert [(r.attempts, "bad.parquet" in (r.last_error or "")) for r in pending] == [(1, True), (1, True)]
    (job,) = store.list_jobs(tid, kind="ingest")
    assert job.status == "failed" and "bad.parquet" in (job.reason or "")

    second = run_ingest_batcher(sleeper, "t", max_attempts=2)
    assert sorted((len(j.files), j.status) for j in second.jobs) == [(1, "committed"), (1, "failed")], \
        "retried requests run alone, so the good file gets in"
    assert all_keys(sleeper, "t") == list(range(10))
    (failed,) = store.list_ingest_requests(tid, status="failed")
    assert failed.filename == bad and failed.attempts == 2, "the bad file gives up at the attempt limit"
    assert run_ingest_batcher(sleeper, "t", max_attempts=2).jobs == []


def test_requests_of_a_dead_batcher_are_requeued_once_stale(sleeper: Sleeper, input_dir: Path) -> None:
    t = sleeper.create_table("t", SCHEMA, properties=SMALL_BATCHES)
    (r,) = submit_ingest_requests(sleeper, "t", [write_input(input_dir, "a.parquet", range(5))])
    store, tid = sleeper.state_store, t.info.table_id
    record = JobRecord.created(tid, "dead-job", "ingest", input_files=1).started("dead-run")
    store.put_job(record)
    assert store.assign_ingest_requests(tid, "dead-job", [r.request_id])
    assert run_ingest_batcher(sleeper, "t", stale_after_seconds=3600).jobs == [], "a live-looking job is left alone"
    later = record.last_update_ms + 3600 * 1000
    assert requeue_abandoned(store, tid, stale_after_seconds=3600, now_ms=later) == 1
    dead = store.get_job(tid, "dead-job")
    assert dead is not None and dead.status == "failed" and "abandoned" in (dead.reason or "")
    assert [j.status for j in run_ingest_batcher(sleeper, "t").jobs] == ["committed"]
    assert all_keys(sleeper, "t") == list(range(5))


def test_requests_of_a_job_that_committed_before_dying_are_not_ingested_twice(sleeper: Sleeper,
                                                                               input_dir: Path) -> None:
    t = sleeper.create_table("t", SCHEMA, properties=SMALL_BATCHES)
    (r,) = submit_ingest_requests(sleeper, "t", [write_input(input_dir, "a.parquet", range(5))])
    store, tid = sleeper.state_store, t.info.table_id
    store.assign_ingest_requests(tid, "j", [r.request_id])
    t.ingest([r.filename])
    store.put_job(JobRecord.created(tid, "j", "ingest").started().finished(5, 5).committed())
    report = run_ingest_batcher(sleeper, "t", stale_after_seconds=0)
    assert report.jobs == [] and report.requeued == 0
    assert [x.status for x in store.list_ingest_requests(tid)] == ["ingested"]
    assert all_keys(sleeper, "t") == list(range(5))


def test_a_group_taken_by_another_batcher_is_skipped(sleeper: Sleeper, input_dir: Path, monkeypatch) -> None:
    t = sleeper.create_table("t", SCHEMA, properties=SMALL_BATCHES)
    (r,) = submit_ingest_requests(sleeper, "t", [write_input(input_dir, "a.parquet", range(5))])
    store, tid = sleeper.state_store, t.info.table_id
    real_assign = store.assign_ingest_requests

    def rival_first(table_id, job_id, request_ids):  # another batcher wins the race
        real_assign(table_id, "rival", request_ids)
        return real_assign(table_id, job_id, request_ids)

    monkeypatch.setattr(store, "assign_ingest_requests", rival_first)
    report = run_ingest_batcher(sleeper, "t")
    assert [j.status for j in report.jobs] == ["taken"]
    assert all_keys(sleeper, "t") == [], "the loser ingests nothing"
    assert [(x.status, x.job_id) for x in store.list_ingest_requests(tid)] == [("assigned", "rival")]


# ----- CLI -------------------------------------------------------------------------------
def test_cli_ingest_request_queues_files(sleeper: Sleeper, input_dir: Path, monkeypatch, capsys) -> None:
    t = sleeper.create_table("t", SCHEMA)
    a, b = (write_input(input_dir, f"{n}.parquet", range(3)) for n in "ab")
    code, out, err = run_cli(sleeper, monkeypatch, capsys, "ingest-request", "t", a, b)
    assert code == 0, err
    assert "queued 2 ingest requests" in out
    assert [r.filename for r in sleeper.state_store.pending_ingest_requests(t.info.table_id)] == [a, b]
    code, out, _ = run_cli(sleeper, monkeypatch, capsys, "ingest-request", "t", a, "--json")
    assert code == 0 and [r["filename"] for r in json.loads(out)] == [a]


def test_cli_ingest_request_for_a_missing_file_is_one_line_error(sleeper: Sleeper, input_dir: Path, monkeypatch,
                                                                 capsys) -> None:
    t = sleeper.create_table("t", SCHEMA)
    a = write_input(input_dir, "a.parquet", range(3))
    code, _, err = run_cli(sleeper, monkeypatch, capsys, "ingest-request", "t", a, str(input_dir / "gone.csv"))
    assert code == 1 and err.startswith("error: ") and "gone.csv" in err and len(err.strip().splitlines()) == 1
    assert sleeper.state_store.list_ingest_requests(t.info.table_id) == []
    code, _, err = run_cli(sleeper, monkeypatch, capsys, "ingest-request", "nope", a)
    assert code == 1 and "nope" in err


class _Killed(BaseException):
    """Stands for the batcher process dying (not an Exception: nothing catches it)."""


def test_a_batcher_killed_right_after_its_data_commit_ingests_each_file_once(sleeper: Sleeper, input_dir: Path,
                                                                             monkeypatch) -> None:
    """Issue 9 item 3: the commit and the requests' status used to be separate steps,
    so a crash between them left the job started, and once stale its files were
    ingested a second time. Now the commit marks the requests itself."""
    t = sleeper.create_table("t", SCHEMA, properties=SMALL_BATCHES)
    files = [write_input(input_dir, f"{i}.parquet", range(i * 100, i * 100 + 100)) for i in range(3)]
    submit_ingest_requests(sleeper, "t", files)
    store, tid = sleeper.state_store, t.info.table_id
    real_commit = store.commit

    def commit_then_die(*args, **kwargs):
        real_commit(*args, **kwargs)
        raise _Killed()

    monkeypatch.setattr(store, "commit", commit_then_die)
    with pytest.raises(_Killed):
        run_ingest_batcher(sleeper, "t")
    monkeypatch.setattr(store, "commit", real_commit)
    (killed,) = store.list_jobs(tid, kind="ingest")
    assert killed.status == "committed"  # saved by the data commit itself
    # long after: nothing of the killed job is requeued; the files it never reached are ingested
    far = killed.last_update_ms + 10 * 3600 * 1000
    report = run_ingest_batcher(sleeper, "t", now_ms=far, stale_after_seconds=60)
    assert report.requeued == 0 and report.failed == []
    assert {x.status for x in store.list_ingest_requests(tid)} == {"ingested"}
    assert all_keys(sleeper, "t") == list(range(300))  # 300 records, each once


def test_a_slow_job_whose_requests_were_requeued_cannot_commit_them_again(sleeper: Sleeper, input_dir: Path,
                                                                          monkeypatch) -> None:
    t = sleeper.create_table("t", SCHEMA, properties=SMALL_BATCHES)
    submit_ingest_requests(sleeper, "t", [write_input(input_dir, "a.parquet", range(50))])
    store, tid = sleeper.state_store, t.info.table_id
    real_commit = store.commit
    raced = []

    def requeue_and_rerun_first(table_id, txn, **kw):
        if not raced:  # while this job is slow, another run decides it is dead and ingests its files
            raced.append(kw.get("ingest_job_id"))
            store.finish_ingest_job(table_id, kw["ingest_job_id"], ok=False, error="abandoned")
            assert [j.status for j in run_ingest_batcher(sleeper, "t").jobs] == ["committed"]
        return real_commit(table_id, txn, **kw)

    monkeypatch.setattr(store, "commit", requeue_and_rerun_first)
    report = run_ingest_batcher(sleeper, "t")
    assert [j.status for j in report.jobs] == ["failed"] and "any more" in (report.jobs[0].error or "")
    assert all_keys(sleeper, "t") == list(range(50))  # 50 records, once
    # the refused job's files were deleted: only the winner's remain
    tracked = set(t.state().files)
    assert {o.key for o in sleeper.objects.list(tid) if o.key.endswith(".parquet")} == tracked


# ----- the runners it is given (it never calls the facade) ------------------------------
@pytest.mark.parametrize("bulk", [True, False])
def test_the_batcher_runs_each_job_with_the_runner_it_is_given(sleeper: Sleeper, bulk: bool) -> None:
    # Given a table whose jobs of 100 bytes or more are bulk imports, a small and a big request
    limits = {INGEST_BATCHER_JOB_MIN_SIZE: "1", INGEST_BATCHER_JOB_MAX_FILES: "1",
              INGEST_BATCHER_BULK_IMPORT_MIN_SIZE: "100"}
    info = sleeper.create_table("t", SCHEMA, properties=limits).info
    store = sleeper.state_store
    store.add_ingest_requests(info.table_id, [IngestRequest("small", info.table_id, "/in/small.parquet", 10, 0),
                                              IngestRequest("big", info.table_id, "/in/big.parquet", 500, 0)])
    calls: list[tuple[object, ...]] = []

    def ingest(files: list[str], job: JobRecord) -> tuple[int, int]:
        calls.append(("ingest", files))
        return 1, 1

    def bulk_import(files: list[str], job: JobRecord, run_id: str | None) -> tuple[int, int]:
        calls.append(("bulk", files, run_id))
        return 5, 2

    # When the batcher runs with runners (a bulk one, or none as without a configuration)
    report = run_batcher(store, JobRunners(info, ingest, bulk_import if bulk else None), run_id="r1")

    # Then the big job is a bulk import only when there is a bulk runner; every job commits
    big = ("bulk", ["/in/big.parquet"], "r1") if bulk else ("ingest", ["/in/big.parquet"])
    assert sorted(calls, key=str) == sorted([big, ("ingest", ["/in/small.parquet"])], key=str)
    assert [j.status for j in report.jobs] == ["committed", "committed"]
    assert report.records == (6 if bulk else 2)
