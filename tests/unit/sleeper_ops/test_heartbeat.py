"""Job heartbeats (sleeper_ops.heartbeat): a job that runs longer than the abandon time
keeps its outputs through the orphan sweep while it beats, and loses them once silent
for the abandon time; every job kind beats while it runs. The clock is injected: no
test waits for real time to pass."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Optional

import pyarrow as pa
import pytest

from sleeper_ops.heartbeat import Heartbeat, interval_for
from sleeper_ops.io.datafile import new_data_key
from sleeper_ops.maintenance.gc import sweep_orphans
from statestore.errors import StateStoreUnavailableError
from statestore.jobs import JobRecord
from statestore.partitions import ROOT_ID
from tests.unit.sleeper_ops.test_gc import MINUTE, SCHEMA, _put_orphan

ABANDON = 60  # minutes


@pytest.fixture
def t(sleeper):  # type: ignore[no-untyped-def]
    return sleeper.create_table("t", SCHEMA, properties={"sleeper.table.gc.job.abandon.minutes": str(ABANDON),
                                                         "sleeper.table.gc.orphan.grace.minutes": "40"})


class Clock:
    def __init__(self, ms: int) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


def _running_job(sleeper, t, job_id: str) -> tuple[JobRecord, str]:  # type: ignore[no-untyped-def]
    key = new_data_key(t.info.table_id, ROOT_ID)
    rec = JobRecord.created(t.info.table_id, job_id, "compaction").started("run", outputs=[key])
    sleeper.state_store.put_job(rec)
    _put_orphan(sleeper, key, rec.last_update_ms - 50 * MINUTE)  # written, older than the grace
    return rec, key


def _sweep(sleeper, t, now_ms: int) -> list[str]:  # type: ignore[no-untyped-def]
    return sweep_orphans(sleeper.state_store, sleeper.objects, sleeper.table("t").info, now_ms=now_ms)


def test_a_job_beating_past_the_abandon_time_keeps_its_outputs_and_a_silent_one_loses_them(sleeper, t) -> None:  # type: ignore[no-untyped-def]
    alive, alive_key = _running_job(sleeper, t, "alive")
    silent, silent_key = _running_job(sleeper, t, "silent")
    clock = Clock(alive.last_update_ms)
    beat = Heartbeat(sleeper.state_store, t.info, ["alive"], clock=clock)
    for _ in range(3 * ABANDON):  # three abandon times, one beat a minute
        clock.ms += MINUTE
        assert beat.beat() == 1
    assert _sweep(sleeper, t, clock.ms) == [silent_key]  # the silent job is taken as dead
    assert sleeper.objects.head(alive_key) is not None
    # the job dies: once silent for the abandon time its output goes, not before
    assert _sweep(sleeper, t, clock.ms + (ABANDON - 1) * MINUTE) == []
    assert _sweep(sleeper, t, clock.ms + (ABANDON + 1) * MINUTE) == [alive_key]


def test_the_thread_beats_every_interval_and_stops(sleeper, t) -> None:  # type: ignore[no-untyped-def]
    rec, _ = _running_job(sleeper, t, "j")
    clock = Clock(rec.last_update_ms + 10 * MINUTE)
    with Heartbeat(sleeper.state_store, t.info, ["j"], interval_s=0.001, clock=clock) as hb:
        deadline = time.monotonic() + 10
        while sleeper.state_store.get_job(t.info.table_id, "j").heartbeat_ms != clock.ms:
            assert time.monotonic() < deadline, "no beat within 10 s"
            time.sleep(0.001)
    assert hb.beats >= 1 and hb._thread is None


def test_the_interval_is_a_tenth_of_the_abandon_time_at_most_a_minute(sleeper, t) -> None:  # type: ignore[no-untyped-def]
    assert interval_for(t.info) == 60.0  # a tenth of 60 minutes is 6 minutes: capped at one


def test_a_failed_beat_is_logged_and_the_job_carries_on(sleeper, t, monkeypatch, caplog) -> None:  # type: ignore[no-untyped-def]
    _running_job(sleeper, t, "j")

    def down(*args):  # type: ignore[no-untyped-def]
        raise StateStoreUnavailableError("state store down")

    monkeypatch.setattr(sleeper.state_store, "heartbeat_jobs", down)
    assert Heartbeat(sleeper.state_store, t.info, ["j"]).beat() == 0
    assert "heartbeat of 1 jobs" in caplog.text


def test_every_job_kind_beats_while_it_runs(sleeper, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    kinds: set[str] = set()
    real = Heartbeat.stop

    def recording(self: Heartbeat) -> None:
        real(self)
        with self._lock:
            ids = list(self._jobs)
        kinds.update(r.kind for r in (sleeper.state_store.get_job(self.table_id, j) for j in ids) if r is not None)

    monkeypatch.setattr(Heartbeat, "stop", recording)
    t = sleeper.create_table("k", SCHEMA, properties={"sleeper.table.compaction.strategy": "basic",
                                                      "sleeper.table.compaction.files.batch.size": "2",
                                                      "sleeper.table.partition.splitting.threshold": "10"})
    for i in range(2):
        t.ingest(pa.table({"key": [i * 10 + j for j in range(10)], "v": ["x"] * 10}))
    t.write([{"key": 100, "v": "y"}])
    t.flush()
    t.compact()
    t.split()
    assert kinds == {"ingest", "flush", "compaction", "split"}


class _Rdd:
    def __init__(self, items: list, gate) -> None:  # type: ignore[no-untyped-def]
        self.items, self.gate = items, gate

    def mapPartitions(self, fn):  # type: ignore[no-untyped-def]
        self.fn = fn
        return self

    def collect(self) -> list:
        self.gate(self.items[0]["job"]["job_id"])
        return list(self.fn(iter(self.items)))


class _SparkContext:
    """Runs each Spark job in the driver thread; ``gate(job_id)`` is called before each."""

    defaultParallelism = 1

    def __init__(self, gate) -> None:  # type: ignore[no-untyped-def]
        self.gate = gate
        self.groups: dict[str, int] = {}  # job group -> Spark jobs run in it (each ended at once)
        self._group: Optional[str] = None

    def setJobDescription(self, text: str) -> None:
        pass

    def setJobGroup(self, group: str, description: str) -> None:
        self._group = group

    def parallelize(self, items: list, numSlices: int = 1) -> _Rdd:
        if self._group is not None:
            self.groups[self._group] = self.groups.get(self._group, 0) + 1
        return _Rdd(items, self.gate)

    def statusTracker(self):  # type: ignore[no-untyped-def]
        """Every Spark job run has ended, with no task attempt still running."""
        groups = self.groups
        return SimpleNamespace(
            getJobIdsForGroup=lambda g: list(range(groups.get(g, 0))),
            getJobInfo=lambda job_id: SimpleNamespace(status="SUCCEEDED", stageIds=[]),
            getStageInfo=lambda stage_id: None)


def test_the_spark_driver_beats_queued_jobs_while_the_batch_runs(sleeper, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """One slot, two jobs: while the first runs, the second (queued) beats too."""
    import sleeper_ops.heartbeat
    from sleeper_ops.compaction.jobs import create_compaction_jobs
    from sleeper_ops.spark.driver import run_compaction_batch

    monkeypatch.setattr(sleeper_ops.heartbeat, "interval_for", lambda table: 0.001)
    t = sleeper.create_table("sp", SCHEMA, split_points=[50], properties={
        "sleeper.table.compaction.strategy": "basic", "sleeper.table.compaction.files.batch.size": "2"})
    for i in range(2):
        t.ingest(pa.table({"key": list(range(i, 100, 2)), "v": ["x"] * 50}))
    store, tid = sleeper.state_store, t.info.table_id
    jobs = create_compaction_jobs(store, t.info).jobs
    assert len(jobs) == 2
    seen: dict[str, int] = {}

    def gate(job_id: str) -> None:
        if seen:
            return
        queued = next(j.job_id for j in jobs if j.job_id != job_id)
        deadline = time.monotonic() + 10
        while (store.get_job(tid, queued).heartbeat_ms or 0) == 0:
            assert time.monotonic() < deadline, "the queued job never beat"
            time.sleep(0.001)
        seen[queued] = store.get_job(tid, queued).heartbeat_ms

    outcome = run_compaction_batch(_SparkContext(gate), store, sleeper.objects, t.info, jobs)
    assert [r.status for r in outcome.results] == ["committed", "committed"] and len(seen) == 1
    assert t.query(ranges=[(0, None)]).num_rows == 100
