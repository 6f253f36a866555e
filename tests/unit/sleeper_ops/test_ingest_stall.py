"""An ingest waits while compaction is behind (``sleeper.table.ingest.max.files.per.leaf``),
goes on once compaction has caught up, and gives up after
``sleeper.table.ingest.max.files.wait.seconds`` having read and written nothing."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

from sleeper_ops import Sleeper
from sleeper_ops.compaction.strategy import plan_groups, size_ratio
from sleeper_ops.errors import IngestStalledError
from sleeper_ops.ingest import stall
from sleeper_ops.io.storage import ObjectStore
from statestore.catalog import TableInfo
from statestore.files import FileReference
from statestore.memory import InMemoryStateStore
from statestore.overview import overview_of
from statestore.partitions import Partition
from statestore.region import Range, Region
from statestore.schema import Schema
from statestore.state import TableState

SCHEMA = {"rowKeyFields": [{"name": "key", "type": "LongType"}], "valueFields": [{"name": "v", "type": "StringType"}]}
MAX_FILES = "sleeper.table.ingest.max.files.per.leaf"
WAIT = "sleeper.table.ingest.max.files.wait.seconds"


@pytest.fixture(autouse=True)
def quick_polls(monkeypatch):
    monkeypatch.setattr(stall, "POLL_SECONDS", 0.02)


@pytest.fixture
def sleeper(tmp_path):
    s = Sleeper(state_store=InMemoryStateStore(), objects=ObjectStore(str(tmp_path / "data")))
    yield s
    s.close()


@pytest.fixture
def started_waiting():
    """An Event set once an ingest logs that it waits for compaction: it has read the
    table's overview and found a leaf over the limit."""
    seen = threading.Event()

    class Seen(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "waits for compaction" in record.getMessage():
                seen.set()
    handler, logger = Seen(), logging.getLogger(stall.__name__)
    logger.addHandler(handler)
    yield seen
    logger.removeHandler(handler)


def rows(start: int, n: int) -> pa.Table:
    keys = range(start, start + n)
    return pa.table({"key": pa.array(keys, pa.int64()), "v": [f"v{i}" for i in keys]})


def data_objects(tmp_path: Path) -> set[str]:
    return {str(p.relative_to(tmp_path)) for p in (tmp_path / "data").rglob("*") if p.is_file()}


def test_by_default_an_ingest_never_waits(sleeper):
    t = sleeper.create_table("t", SCHEMA)
    results = [t.ingest(rows(i * 10, 10)) for i in range(6)]
    assert [r.stalled_seconds for r in results] == [0.0] * 6
    assert len(t.state().references) == 6
    assert t.query(ranges=[(0, None)]).num_rows == 60


def test_an_ingest_waits_for_compaction_then_goes_on(sleeper, started_waiting):
    t = sleeper.create_table("t", SCHEMA, properties={MAX_FILES: "2", WAIT: "60"})
    t.ingest(rows(0, 100))
    second = t.ingest(rows(100, 100))  # 1 file before it: under the limit
    assert second.stalled_seconds == 0.0
    third = t.ingest(rows(200, 100))  # 2 files before it: at the limit, not over it
    assert third.stalled_seconds == 0.0 and len(t.state().references) == 3

    done: list = []
    waiting = threading.Thread(target=lambda: done.append(t.ingest(rows(300, 100))))
    waiting.start()
    assert started_waiting.wait(30), "the fourth ingest never waited"
    waiting_since = time.monotonic()
    assert waiting.is_alive() and not done  # 3 files in the only leaf: over 2, it waits
    assert len(t.state().references) == 3 and t.query(ranges=[(0, None)]).num_rows == 300
    compaction_started = time.monotonic()
    t.compact(runner="local")
    waiting.join(30)
    assert not waiting.is_alive()
    # it waited from before it said so until after the compaction began
    assert done[0].stalled_seconds >= compaction_started - waiting_since and done[0].records == 100
    got = t.query(ranges=[(0, None)])
    assert got.num_rows == 400 and got.column("key").to_pylist() == list(range(400))
    assert len(t.state().references) == 2  # the compacted file and the waiting ingest's


def test_an_ingest_gives_up_having_read_and_written_nothing(sleeper, tmp_path):
    t = sleeper.create_table("t", SCHEMA, properties={MAX_FILES: "1", WAIT: "1"})
    t.ingest(rows(0, 50))
    t.ingest(rows(50, 50))
    before = data_objects(tmp_path)
    started = time.monotonic()
    with pytest.raises(IngestStalledError) as e:
        t.ingest(rows(100, 50))
    assert 1.0 <= time.monotonic() - started < 5
    message = str(e.value)
    assert "table t:" in message and MAX_FILES in message and WAIT in message and "2 files" in message
    assert data_objects(tmp_path) == before
    assert t.query(ranges=[(0, None)]).num_rows == 100
    failed = [j for j in t.jobs("ingest") if j.status == "failed"]
    assert len(failed) == 1 and "IngestStalledError" in (failed[0].reason or "")


def test_a_lost_state_store_while_waiting_fails_the_ingest_with_nothing_written(sleeper, tmp_path, monkeypatch):
    t = sleeper.create_table("t", SCHEMA, properties={MAX_FILES: "1", WAIT: "60"})
    t.ingest(rows(0, 50))
    t.ingest(rows(50, 50))
    before = data_objects(tmp_path)
    reads = {"n": 0}
    overview = sleeper.state_store.overview

    def lost_on_the_third(table_id, **kwargs):
        reads["n"] += 1
        if reads["n"] == 3:
            raise ConnectionError("the state store went away")
        return overview(table_id, **kwargs)
    monkeypatch.setattr(sleeper.state_store, "overview", lost_on_the_third)
    with pytest.raises(ConnectionError):
        t.ingest(rows(100, 50))
    monkeypatch.undo()
    assert data_objects(tmp_path) == before
    assert t.query(ranges=[(0, None)]).num_rows == 100
    assert [j.status for j in t.jobs("ingest")].count("failed") == 1
    assert reads["n"] == 3  # it read the overview twice, waiting, before the store went away


def test_a_bad_limit_is_refused_naming_the_setting(sleeper):
    with pytest.raises(Exception, match=MAX_FILES.replace(".", r"\.")):
        sleeper.create_table("t", SCHEMA, properties={MAX_FILES: "-1"})
    with pytest.raises(Exception, match=WAIT.replace(".", r"\.")):
        sleeper.create_table("t", SCHEMA, properties={WAIT: "0"})


def _partition(pid: str, parent: str | None, children: tuple[str, ...], lo: int, hi: int | None) -> Partition:
    return Partition(id=pid, region=Region((Range("key", lo, hi),)), parent_id=parent, child_ids=children,
                     is_leaf=not children, dimension=0 if children else -1)


def test_the_fullest_leaf_counts_its_ancestors_references():
    # root -> (left, right); right -> (rl, rr); references not yet pushed down stay on root and right
    parts = [_partition("root", None, ("left", "right"), 0, None), _partition("left", "root", (), 0, 10),
             _partition("right", "root", ("rl", "rr"), 10, None), _partition("rl", "right", (), 10, 20),
             _partition("rr", "right", (), 20, None)]
    placed = {"root": 2, "left": 2, "right": 1, "rl": 0, "rr": 2}
    refs = [FileReference(f"{pid}-{i}", pid, 10) for pid, n in placed.items() for i in range(n)]
    state = TableState.of(parts, refs)
    # by hand: left 2 + root 2 = 4; rl 0 + right 1 + root 2 = 3; rr 2 + 1 + 2 = 5
    fullest = stall.fullest_leaf(overview_of(state))
    assert fullest is not None and (fullest.leaf_id, fullest.files) == ("rr", 5)
    assert stall.fullest_leaf(overview_of(TableState())) is None


def _table(props: dict[str, str]) -> TableInfo:
    return TableInfo("id", "t", Schema.from_dict(SCHEMA), props)


def _refs(*counts: int) -> list[FileReference]:
    return [FileReference(f"f{i}", "p", n) for i, n in enumerate(counts)]


def test_a_leaf_over_the_limit_that_sizeratio_leaves_alone_gets_a_job_of_its_smallest_files():
    doubling = _refs(1, 2, 4, 8, 16, 32)  # sizeratio 3 never merges these: each is more than all before it
    assert plan_groups(_table({}), doubling) == []
    assert plan_groups(_table({MAX_FILES: "6"}), doubling) == []  # at the limit: no ingest waits
    (group,) = plan_groups(_table({MAX_FILES: "4"}), doubling)
    assert [r.record_count for r in group] == [1, 2, 4, 8]  # 6 - 4 + 1 = 3 files after: one under the limit
    (group,) = plan_groups(_table({MAX_FILES: "5"}), doubling)
    assert [r.record_count for r in group] == [1, 2, 4]  # 4 files after
    assert plan_groups(_table({MAX_FILES: "4"}), doubling, assigned=1) == []  # a running job brings it down
    capped = plan_groups(_table({MAX_FILES: "1", "sleeper.table.compaction.files.batch.size": "3"}), doubling)
    assert [len(g) for g in capped] == [3]  # no more than a job merges
    similar = _refs(10, 10, 10, 10, 10)  # the strategy's own job when it makes one
    assert plan_groups(_table({MAX_FILES: "2"}), similar) == size_ratio(similar, 12, 3)


def test_ingest_held_up_by_such_a_leaf_goes_on_after_one_compaction(sleeper, started_waiting):
    t = sleeper.create_table("t", SCHEMA, properties={MAX_FILES: "3", WAIT: "60"})
    start = 0
    for n in (1, 2, 4, 8):  # 4 files of doubling sizes: over 3, and sizeratio makes no job of them
        t.ingest(rows(start, n))
        start += n
    done: list = []
    waiting = threading.Thread(target=lambda: done.append(t.ingest(rows(start, 16))))
    waiting.start()
    assert started_waiting.wait(30), "the ingest never waited"
    assert waiting.is_alive() and not done
    report = t.compact(runner="local")
    assert report.count("committed") == 1
    waiting.join(30)
    assert done and done[0].records == 16
    got = t.query(ranges=[(0, None)])
    assert got.num_rows == 31 and got.column("key").to_pylist() == list(range(31))
    assert len(t.state().references) == 3  # 1 + 2 + 4 merged (4 - 3 + 2 files), 8 and the 16 ingested


def test_a_stalled_ingest_beats_while_it_waits(sleeper, monkeypatch):
    from sleeper_ops import heartbeat

    monkeypatch.setattr(heartbeat, "interval_for", lambda table: 0.05)
    t = sleeper.create_table("t", SCHEMA, properties={MAX_FILES: "1", WAIT: "1"})
    t.ingest(rows(0, 50))
    t.ingest(rows(50, 50))
    with pytest.raises(IngestStalledError):
        t.ingest(rows(100, 50))
    (failed,) = [j for j in t.jobs("ingest") if j.status == "failed"]
    # the job's clock ran while it waited (a wait may outlast sleeper.table.gc.job.abandon.minutes)
    assert failed.heartbeat_ms is not None and failed.heartbeat_ms > failed.created_ms
    assert t.query(ranges=[(0, None)]).num_rows == 100


def _queued(sleeper, tmp_path: Path, n: int) -> list[str]:
    import pyarrow.parquet as pq

    from sleeper_ops.ingest.batcher import submit_ingest_requests

    files = []
    for i in range(n):
        path = tmp_path / "in" / f"f{i}.parquet"
        path.parent.mkdir(exist_ok=True)
        pq.write_table(rows(1000 + 10 * i, 10), path)
        files.append(str(path))
    return [r.request_id for r in submit_ingest_requests(sleeper, "t", files)]


def test_a_batcher_job_that_stalls_leaves_its_requests_pending_uncounted_and_starts_no_other(sleeper, tmp_path):
    from sleeper_ops.ingest.batcher import run_ingest_batcher

    t = sleeper.create_table("t", SCHEMA, properties={
        MAX_FILES: "1", WAIT: "1", "sleeper.table.ingest.batcher.job.min.size": "1",
        "sleeper.table.ingest.batcher.job.max.files": "2"})
    t.ingest(rows(0, 50))
    t.ingest(rows(50, 50))  # 2 files in the only leaf: over the limit of 1
    ids = _queued(sleeper, tmp_path, 4)  # two jobs of 2 files
    before = data_objects(tmp_path)
    store, tid = sleeper.state_store, t.info.table_id
    for _ in range(2):  # max_attempts=1: a counted failure would fail the requests for good at once
        report = run_ingest_batcher(sleeper, "t", max_attempts=1)
        assert [j.status for j in report.jobs] == ["stalled"], "the second job is not started after a stall"
        assert report.waiting == 2 and not report.failed
        assert "1 stalled waiting for compaction" in report.summary() and MAX_FILES in report.summary()
        pending = store.list_ingest_requests(tid, status="pending")
        assert sorted(r.request_id for r in pending) == sorted(ids)
        assert all(r.attempts == 0 for r in pending)
        stalled = [r for r in pending if r.request_id in report.jobs[0].request_ids]
        assert len(stalled) == 2 and all((r.last_error or "").startswith("stalled: table t:") for r in stalled)
    records = {j.job_id: j for j in t.jobs("ingest")}
    assert (records[report.jobs[0].job_id].reason or "").startswith("stalled: table t:")
    assert data_objects(tmp_path) == before, "a stalled job writes nothing"
    assert t.query(ranges=[(0, None)]).num_rows == 100

    t.compact(runner="local")  # one file left: the first job goes; its file makes the leaf full again
    report = run_ingest_batcher(sleeper, "t", max_attempts=1)
    assert [j.status for j in report.jobs] == ["committed", "stalled"] and report.records == 20
    assert [r.attempts for r in store.list_ingest_requests(tid, status="pending")] == [0, 0]
    t.compact(runner="local")
    report = run_ingest_batcher(sleeper, "t", max_attempts=1)
    assert [j.status for j in report.jobs] == ["committed"] and report.records == 20
    assert store.list_ingest_requests(tid, status="pending") == []
    assert len(store.list_ingest_requests(tid, status="ingested")) == 4
    got = t.query(ranges=[(0, None)]).column("key").to_pylist()
    assert got == list(range(100)) + list(range(1000, 1040))


def test_a_stalled_job_whose_batcher_died_is_requeued_uncounted(sleeper, tmp_path):
    from sleeper_ops.ingest.batcher import requeue_abandoned
    from statestore.jobs import JobRecord

    t = sleeper.create_table("t", SCHEMA)
    store, tid = sleeper.state_store, t.info.table_id
    queued = _queued(sleeper, tmp_path, 2)
    stalled_ids, failed_ids = queued[:1], queued[1:]
    for job_id, mine, reason in (("j-stalled", stalled_ids, "stalled: table t: leaf root still holds 3 files"),
                                 ("j-failed", failed_ids, "IngestError: bad file")):
        assert store.assign_ingest_requests(tid, job_id, mine)
        # the batcher recorded the job failed, then died before putting its requests back
        store.put_job(JobRecord.created(tid, job_id, "ingest").failed(reason))
    assert requeue_abandoned(store, tid, stale_after_seconds=3600) == 2
    attempts = {r.request_id: r.attempts for r in store.pending_ingest_requests(tid)}
    assert attempts == {stalled_ids[0]: 0, failed_ids[0]: 1}


def test_the_batcher_task_fails_naming_the_stall_and_a_later_run_ingests_the_files_once(sleeper, tmp_path):
    from sleeper_ops.airflow.operators.ingest import SleeperIngestBatcherOperator
    from statestore.errors import SleeperError
    from tests.unit.sleeper_ops.operator_runner import execute_task

    t = sleeper.create_table("t", SCHEMA, properties={MAX_FILES: "1", WAIT: "1",
                                                     "sleeper.table.ingest.batcher.job.min.size": "1"})
    t.ingest(rows(0, 50))
    t.ingest(rows(50, 50))
    _queued(sleeper, tmp_path, 3)
    op = SleeperIngestBatcherOperator(task_id="ingest_batcher", table="t")
    with pytest.raises(SleeperError, match=r"1 stalled waiting for compaction \(stalled: table t: leaf"):
        execute_task(op, sleeper, run_id="scheduled__1")
    assert [r.attempts for r in sleeper.state_store.list_ingest_requests(t.info.table_id, status="pending")] == \
        [0, 0, 0]
    t.compact(runner="local")
    assert "1 ingest jobs committed (30 records)" in execute_task(op, sleeper, run_id="scheduled__2")
    assert t.query(ranges=[(0, None)]).column("key").to_pylist() == list(range(100)) + list(range(1000, 1030))
