"""Attempt-unique keys (issue 18, finding 3): every Spark task attempt writes keys of its
own, the orphan sweep keeps them while the job that named the key is in flight, a
failing attempt deletes only its own, and a driver waits for every attempt. No Spark
here: the task attempt id is stubbed and Spark's status tracker faked."""

from __future__ import annotations

import os
import time
from types import SimpleNamespace

import pyarrow as pa
import pytest

from sleeper_ops.io.attempts import attempt_key, attempt_objects, named_key
from sleeper_ops.io.datafile import new_data_key, sketch_key, write_data_file
from sleeper_ops.maintenance.gc import sweep_orphans
from sleeper_ops.spark import attempts as spark_attempts
from statestore.jobs import JobRecord
from statestore.partitions import ROOT_ID

SCHEMA = {"rowKeyFields": [{"name": "key", "type": "LongType"}], "valueFields": [{"name": "v", "type": "StringType"}]}
MINUTE = 60_000


def test_attempt_keys_are_distinct_per_attempt_and_map_back_to_the_named_key():
    named = "t1/data/partition_root/5f0c.parquet"
    keys = {attempt_key(named, str(tag)) for tag in range(3)}
    assert len(keys) == 3 and named not in keys
    assert {named_key(k) for k in keys} == {named}
    assert named_key(sketch_key(attempt_key(named, "7"))) == sketch_key(named)
    bulk = "t1/data/partition_root/bulk-x-a1-12ab.parquet"
    assert named_key(named) == named and named_key(bulk) == bulk, "a key without a tag is its own named key"
    with pytest.raises(ValueError):
        attempt_key(named, "1/2")


def _old(sleeper, key: str) -> None:
    then = time.time() - 3 * 3600
    os.utime(sleeper.objects.path(key), (then, then))


def test_attempt_outputs_are_kept_while_their_job_is_in_flight_and_swept_once_it_is_final(sleeper):
    t = sleeper.create_table("t", SCHEMA)
    store, tid = sleeper.state_store, t.info.table_id
    named = new_data_key(tid, ROOT_ID)
    rec = JobRecord.created(tid, "job", "compaction").started("run", outputs=[named])
    store.put_job(rec)
    data = pa.table({"key": [1, 2], "v": ["a", "b"]})
    written = [attempt_key(named, tag) for tag in ("3", "4")]
    for k in written:
        write_data_file(sleeper.objects, k, t.schema, data)
        _old(sleeper, k)
        _old(sleeper, sketch_key(k))
    other = new_data_key(tid, ROOT_ID)
    sleeper.objects.put(other, b"junk")
    _old(sleeper, other)

    assert sweep_orphans(store, sleeper.objects, t.info) == [other], "a named key covers its attempts' keys"
    assert sorted(attempt_objects(sleeper.objects, [named])) == sorted([*written, *map(sketch_key, written)])
    store.put_job(rec.failed("lost"))
    assert sorted(sweep_orphans(store, sleeper.objects, t.info)) == sorted([*written, *map(sketch_key, written)])


def test_two_attempts_of_a_task_write_apart_and_the_failing_one_deletes_only_its_own(sleeper, monkeypatch):
    """The executor side of a compaction job run twice: attempt 5 wins, attempt 6 fails
    after writing its output (a record count that does not match) and aborts; 5's
    output is intact."""
    from sleeper_ops.compaction.jobs import CompactionJob
    from sleeper_ops.spark.executor import run_tasks, task_context

    t = sleeper.create_table("t", SCHEMA)
    for i in range(2):
        t.ingest(pa.table({"key": [i, i + 10], "v": ["a", "b"]}))
    inputs = tuple(sorted(t.state().files))
    job = CompactionJob(t.info.table_id, "job", ROOT_ID, inputs, whole_files=True, input_records=4)
    named = new_data_key(t.info.table_id, ROOT_ID)
    item = {"job": job.to_dict(), "region": None, "output_key": named}
    context = task_context(sleeper.objects, t.info)

    monkeypatch.setattr(spark_attempts, "task_attempt_tag", lambda: "5")
    (won,) = run_tasks(context, [item])
    assert won["error"] is None and won["output"] == attempt_key(named, "5") and won["record_count"] == 4
    miscounted = CompactionJob(t.info.table_id, "job", ROOT_ID, inputs, input_records=5, exact_count=True)
    monkeypatch.setattr(spark_attempts, "task_attempt_tag", lambda: "6")
    (lost,) = run_tasks(context, [{**item, "job": miscounted.to_dict()}])
    assert lost["error"] is not None and "read 4 records" in lost["error"], lost
    assert sleeper.objects.head(won["output"]) is not None and sleeper.objects.head(named) is None
    assert attempt_objects(sleeper.objects, [named]) == sorted([won["output"], sketch_key(won["output"])])


def test_the_executors_take_the_drivers_python_iterator_allow_list_from_the_task_context(sleeper, monkeypatch):
    """A Python iterator runs on the executors only if the driver's configuration allows its
    module (iterators.python_modules), which the task context carries; otherwise the job
    fails naming the setting and the module is not imported."""
    from pathlib import Path

    from sleeper_ops.compaction.jobs import CompactionJob
    from sleeper_ops.spark.executor import run_tasks, task_context

    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    t = sleeper.create_table("t", SCHEMA)
    for i in range(2):
        t.ingest(pa.table({"key": [i, i + 10], "v": ["a", "b"]}))
    sleeper.state_store.update_properties("t", {"sleeper.table.iterator.python": "iterator_samples:drop_all"})
    info = sleeper.state_store.get_table("t")
    job = CompactionJob(info.table_id, "job", ROOT_ID, tuple(sorted(t.state().files)), whole_files=True,
                        input_records=4)
    item = {"job": job.to_dict(), "region": None, "output_key": new_data_key(info.table_id, ROOT_ID)}
    monkeypatch.setattr(spark_attempts, "task_attempt_tag", lambda: "1")
    (refused,) = run_tasks(task_context(sleeper.objects, info), [item])
    assert "iterators.python_modules" in refused["error"], refused
    (ran,) = run_tasks(task_context(sleeper.objects, info, ["iterator_samples"]), [item])
    assert ran["error"] is None and ran["rows_written"] == 0, ran


def test_outside_a_spark_task_the_named_key_is_written():
    assert spark_attempts.own_key("t/data/partition_root/a.parquet") == "t/data/partition_root/a.parquet"


class FakeTracker:
    """Spark's status tracker for one job group whose job has one stage: ``active``
    attempts still running, the job ``status``."""

    def __init__(self, status: str, active: int):
        self.status, self.active = status, active

    def getJobIdsForGroup(self, group):
        return [7]

    def getJobInfo(self, job_id):
        return SimpleNamespace(status=self.status, stageIds=[3])

    def getStageInfo(self, stage_id):
        self.active = max(0, self.active - 1)  # one attempt ends at each look
        return SimpleNamespace(numActiveTasks=self.active + 1 if self.active else 0)


def test_a_driver_waits_until_every_attempt_of_a_job_has_ended():
    tracker = FakeTracker("SUCCEEDED", active=3)
    sc = SimpleNamespace(statusTracker=lambda: tracker)
    assert spark_attempts.wait_for_attempts(sc, "g", jobs=1, timeout=5)
    assert tracker.active == 0
    assert not spark_attempts.attempts_ended(SimpleNamespace(statusTracker=lambda: FakeTracker("RUNNING", 0)), "g")
    assert not spark_attempts.attempts_ended(sc, "g", jobs=2), "a job not yet seen by Spark's status store"
    assert not spark_attempts.wait_for_attempts(
        SimpleNamespace(statusTracker=lambda: FakeTracker("RUNNING", 0)), "g", timeout=0.1)


class FakeSparkContext:
    """Just enough of a SparkContext for the compaction driver: each one-task job runs
    its function twice, as a losing attempt (tag 1, finished but ignored) and the
    winning one (tag 2, whose result is returned); every attempt has ended when asked."""

    defaultParallelism = 1

    def __init__(self, monkeypatch):
        self.monkeypatch, self.groups = monkeypatch, []

    def setJobGroup(self, group, description):
        self.groups.append(group)

    def parallelize(self, items, numSlices):
        sc = self

        class Rdd:
            def mapPartitions(self, fn):
                self.fn = fn
                return self

            def collect(self):
                for tag in ("1", "2"):
                    sc.monkeypatch.setattr(spark_attempts, "task_attempt_tag", lambda tag=tag: tag)
                    got = list(self.fn(iter(items)))
                return got

        return Rdd()

    def statusTracker(self):
        return FakeTracker("SUCCEEDED", active=0)


def test_the_driver_commits_the_winners_output_and_deletes_the_losers_once_they_ended(sleeper, monkeypatch):
    from sleeper_ops.compaction.jobs import create_compaction_jobs
    from sleeper_ops.spark.driver import run_compaction_batch

    t = sleeper.create_table("t", SCHEMA, properties={"sleeper.table.compaction.strategy": "basic"})
    for i in range(3):
        t.ingest(pa.table({"key": [i, i + 10], "v": ["a", "b"]}))
    jobs = create_compaction_jobs(sleeper.state_store, t.info).jobs
    assert len(jobs) == 1

    outcome = run_compaction_batch(FakeSparkContext(monkeypatch), sleeper.state_store, sleeper.objects, t.info, jobs)

    (result,) = outcome.results
    (record,) = t.jobs(kind="compaction")
    assert result.status == "committed" and result.output == attempt_key(record.outputs[0], "2")
    assert {r.filename for r in t.state().references.values()} == {result.output}, \
        "the winner's output is the one referenced"
    assert attempt_objects(sleeper.objects, record.outputs) == sorted([result.output, sketch_key(result.output)]), \
        "the loser's output is deleted, the winner's kept"
    assert sorted(t.query(ranges=[(0, None)]).column("key").to_pylist()) == [0, 1, 2, 10, 11, 12]
