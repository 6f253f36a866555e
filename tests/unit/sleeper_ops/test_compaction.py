"""Compaction: strategies, job creation, merge execution, commits, retries, races.

Records carry a unique ``id``, so "every record exactly once" is checked by
comparing the multiset of ids before and after.
"""

from __future__ import annotations

import random
import threading
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sleeper_ops.compaction.execute import execute_job, record_commit, run_job
from sleeper_ops.compaction.jobs import CompactionJob, create_compaction_jobs
from sleeper_ops.compaction.strategy import basic, size_ratio, why_no_job
from sleeper_ops.errors import ConfigError
from sleeper_ops.io.datafile import sketch_key
from statestore.catalog import TableInfo
from statestore.files import FileReference
from statestore.jobs import JobRecord
from statestore.partitions import split_children
from statestore.schema import Schema
from statestore.transactions import SplitPartition

SCHEMA = {
    "rowKeyFields": [{"name": "key", "type": "LongType"}],
    "sortKeyFields": [{"name": "ts", "type": "LongType"}],
    "valueFields": [{"name": "id", "type": "LongType"}, {"name": "name", "type": "StringType"}],
}
ARROW = pa.schema([("key", pa.int64()), ("ts", pa.int64()), ("id", pa.int64()), ("name", pa.string())])


def rows(n: int, seed: int, first_id: int, key_range: int = 10_000) -> pa.Table:
    rnd = random.Random(seed)
    return pa.Table.from_pylist([{"key": rnd.randrange(key_range), "ts": rnd.randrange(100), "id": first_id + i,
                                  "name": f"n{first_id + i}"} for i in range(n)], schema=ARROW)


def all_ids(t) -> Counter:
    return Counter(t.query(ranges=[(-(2**63), None)]).column("id").to_pylist())


def ref(name: str, n: int, t: int = 0) -> FileReference:
    return FileReference(name, "p", n, update_time=t)


# ----- strategies ---------------------------------------------------------------------
def test_size_ratio_merges_similar_files_and_leaves_a_dominant_one():
    refs = [ref("big", 1000), ref("a", 10), ref("b", 11), ref("c", 12), ref("d", 13)]
    groups = size_ratio(refs, 12, 3)
    assert [[r.filename for r in g] for g in groups] == [["a", "b", "c", "d"]]
    assert size_ratio(refs[:4], 12, 3) == [], "3 * 12 > 10 + 11 + 12: not yet"


def test_size_ratio_needs_ratio_similar_files():
    assert size_ratio([ref("a", 10), ref("b", 10)], 12, 3) == []
    assert len(size_ratio([ref(f"f{i}", 10) for i in range(3)], 12, 3)) == 1


def test_size_ratio_respects_the_batch_size():
    groups = size_ratio([ref(f"f{i:02}", 10) for i in range(30)], 12, 3)
    assert [len(g) for g in groups] == [12, 12, 6]
    assert len({r.filename for g in groups for r in g}) == 30, "no file in two jobs"


def test_size_ratio_includes_big_file_once_small_ones_add_up():
    small = [ref(f"s{i}", 10) for i in range(6)]
    assert [len(g) for g in size_ratio([*small[:2], ref("big", 30)], 12, 3)] == []
    groups = size_ratio([*small, ref("big", 20)], 12, 3)
    assert [len(g) for g in groups] == [7], "3 * 20 <= 6 * 10 + 20"


def test_basic_batches_oldest_first_and_skips_a_lone_file():
    refs = [ref(f"f{i}", 10, t=100 - i) for i in range(5)]
    groups = basic(refs, 2, 3)
    assert [[r.filename for r in g] for g in groups] == [["f4", "f3"], ["f2", "f1"]]


def test_a_leaf_with_no_job_is_told_why_by_its_strategy():
    table = TableInfo("id", "t", Schema.from_dict(SCHEMA), {})
    files = [ref("a", 10), ref("b", 40), ref("c", 200), ref("d", 900)]
    assert size_ratio(files, 12, 3) == []
    assert why_no_job(table, files) == (
        "4 files (10, 40, 200, 900 records): sizeratio merges 2 to 12 files, smallest first, once 3 x the "
        "largest is at most their total; none do yet (smaller files must add up to the larger)")
    assert why_no_job(table, files[:1], assigned=3) == "1 file, nothing to merge it with; 3 more in running jobs"
    assert why_no_job(table, [], assigned=2) == "every file (2) is in a running job"


def test_compaction_that_makes_no_job_names_each_leafs_reason(sleeper):
    t = sleeper.create_table("t", SCHEMA, split_points=[5000])
    for i, n in enumerate([10, 100, 1000]):  # each file dominates the ones before it
        t.ingest(rows(n, seed=i, first_id=i * 10_000, key_range=5000))
    report = t.compact()
    assert report.results == []
    lines = report.summary().splitlines()
    assert lines[0].startswith("t: 0 compaction jobs")
    (leaf,) = {r.partition_id for r in t.state().references.values()}  # keys below 5000: one leaf
    assert lines[1:] == [f"  leaf {leaf}: 3 files (10, 100, 1,000 records): sizeratio merges 2 to 12 files, "
                         "smallest first, once 3 x the largest is at most their total; none do yet "
                         "(smaller files must add up to the larger)"]
    creation = create_compaction_jobs(sleeper.state_store, t.info)  # what the Airflow task logs
    assert creation.summary().splitlines()[1:] == lines[1:]


# ----- job creation -------------------------------------------------------------------
def test_jobs_are_assigned_in_one_commit_before_running(sleeper):
    t = sleeper.create_table("t", SCHEMA, split_points=[5000],
                             properties={"sleeper.table.compaction.strategy": "basic"})
    for i in range(3):
        t.ingest(rows(300, seed=i, first_id=i * 1000))
    creation = create_compaction_jobs(sleeper.state_store, t.info)
    assert creation.new == 2 and len(creation.jobs) == 2
    state = t.state()
    for job in creation.jobs:
        assigned = {r.filename for r in state.references.values() if r.job_id == job.job_id}
        assert assigned == set(job.inputs) and len(assigned) == 3
        assert sleeper.state_store.get_job(t.info.table_id, job.job_id).status == "created"
    again = create_compaction_jobs(sleeper.state_store, t.info)
    assert again.new == 0 and again.jobs == [], "assigned references are not planned twice"


def test_compaction_merges_each_leaf_into_one_sorted_file(sleeper):
    t = sleeper.create_table("t", SCHEMA, split_points=[5000])
    for i in range(4):
        t.ingest(rows(2000, seed=i, first_id=i * 10_000))
    before = all_ids(t)
    report = t.compact()
    assert report.count("committed") == 2 and report.rows_read == 8000 == report.rows_written
    state = t.state()
    assert len(state.references) == 2
    assert all_ids(t) == before
    for r in state.references.values():
        data = pq.read_table(sleeper.objects.path(r.filename))
        keys = list(zip(data.column("key").to_pylist(), data.column("ts").to_pylist()))
        assert keys == sorted(keys), "output is sorted by row key then sort key"
        assert data.num_rows == r.record_count and not r.count_approximate
        assert sleeper.objects.head(sketch_key(r.filename)) is not None
    jobs = t.jobs(kind="compaction")
    assert {j.status for j in jobs} == {"committed"} and sum(j.rows_written for j in jobs) == 8000


def test_references_are_pushed_down_one_level_per_run_and_filtered(sleeper):
    t = sleeper.create_table("t", SCHEMA)
    for i in range(3):
        t.ingest(rows(1000, seed=i, first_id=i * 10_000))
    before = all_ids(t)
    root = t.state().partitions["root"]
    parent, left, right = split_children(root, 0, 5000, "L", "R")
    sleeper.state_store.commit(t.info.table_id, SplitPartition(parent, left, right))
    parent2, ll, lr = split_children(left, 0, 2500, "LL", "LR")
    sleeper.state_store.commit(t.info.table_id, SplitPartition(parent2, ll, lr))

    first = t.compact()
    assert first.creation.pushed_down == 3
    state = t.state()
    assert {r.partition_id for r in state.references.values()} == {"L", "R"}
    assert all(not r.whole_file and r.count_approximate for r in state.references.values() if r.partition_id == "L")
    assert all_ids(t) == before

    second = t.compact()
    assert second.creation.pushed_down == 3 and second.count("committed") >= 2
    state = t.state()
    assert {r.partition_id for r in state.references.values()} == {"LL", "LR", "R"}
    for r in state.references.values():
        keys = pq.read_table(sleeper.objects.path(r.filename)).column("key").to_pylist()
        region = state.partitions[r.partition_id].region.ranges[0]
        assert all(region.min <= k and (region.max is None or k < region.max) for k in keys), \
            f"output of partition {r.partition_id} holds only its own keys"
    assert all_ids(t) == before


def test_offline_table_is_skipped(sleeper):
    t = sleeper.create_table("t", SCHEMA, properties={"sleeper.table.online": "false"})
    for i in range(3):
        t.ingest(rows(100, seed=i, first_id=i * 1000))
    report = t.compact()
    assert report.skipped_reason == "table is offline" and report.results == []
    assert len(t.state().references) == 3


def test_unknown_runner_is_refused(sleeper):
    t = sleeper.create_table("t", SCHEMA)
    with pytest.raises(ConfigError, match="unknown compaction runner"):
        t.compact("ray")


def test_job_writing_no_records_removes_the_inputs(sleeper):
    t = sleeper.create_table("t", SCHEMA, properties={"sleeper.table.iterator.ageoff": "ts:1"})
    for i in range(3):
        t.ingest(rows(100, seed=i, first_id=i * 1000))
    report = t.compact()
    assert report.count("committed") == 1 and report.rows_written == 0
    assert t.state().references == {}


# ----- commits, retries and races -----------------------------------------------------
def _one_job(sleeper, t) -> CompactionJob:
    creation = create_compaction_jobs(sleeper.state_store, t.info)
    assert len(creation.jobs) == 1
    return creation.jobs[0]


def test_a_duplicate_attempt_is_refused_and_its_output_deleted(sleeper):
    t = sleeper.create_table("t", SCHEMA)
    for i in range(3):
        t.ingest(rows(500, seed=i, first_id=i * 1000))
    before = all_ids(t)
    job = _one_job(sleeper, t)
    first = execute_job(job, t.info, sleeper.objects)
    second = execute_job(job, t.info, sleeper.objects)
    rec = sleeper.state_store.get_job(t.info.table_id, job.job_id)
    assert record_commit(sleeper.state_store, sleeper.objects, rec, first).status == "committed"
    late = record_commit(sleeper.state_store, sleeper.objects, rec, second)
    assert late.status == "refused" and (late.reason or "").startswith("commit refused")
    assert sleeper.objects.head(second.output.key) is None, "the refused attempt's output is deleted"
    assert sleeper.objects.head(sketch_key(second.output.key)) is None
    assert all_ids(t) == before
    assert sleeper.state_store.get_job(t.info.table_id, job.job_id).status == "committed"


def test_racing_attempts_of_one_job_exactly_one_wins(sleeper):
    t = sleeper.create_table("t", SCHEMA)
    for i in range(3):
        t.ingest(rows(2000, seed=i, first_id=i * 10_000))
    before = all_ids(t)
    job = _one_job(sleeper, t)
    barrier = threading.Barrier(4)
    results = []

    def attempt() -> None:
        barrier.wait()
        results.append(run_job(sleeper.state_store, sleeper.objects, t.info, job))

    threads = [threading.Thread(target=attempt) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert sorted(r.status for r in results) == ["committed", "refused", "refused", "refused"]
    assert all_ids(t) == before
    assert len(t.state().references) == 1


def test_stale_job_is_retried_and_fresh_one_is_not(sleeper):
    t = sleeper.create_table("t", SCHEMA)
    for i in range(3):
        t.ingest(rows(300, seed=i, first_id=i * 1000))
    before = all_ids(t)
    job = _one_job(sleeper, t)
    rec = sleeper.state_store.get_job(t.info.table_id, job.job_id)
    sleeper.state_store.put_job(rec.started("a-runner-that-died"))
    assert t.compact().results == [], "a job that just started is not retried"
    report = t.compact(retry_after_minutes=0)
    assert report.creation.retried == 1 and report.count("committed") == 1
    final = sleeper.state_store.get_job(t.info.table_id, job.job_id)
    assert final.status == "committed" and final.attempts == 2
    assert all_ids(t) == before


def test_failed_job_is_recorded_with_its_reason_and_retried_later(sleeper):
    t = sleeper.create_table("t", SCHEMA)
    for i in range(3):
        t.ingest(rows(300, seed=i, first_id=i * 1000))
    before = all_ids(t)
    victim = sorted(t.state().files)[0]
    saved = sleeper.objects.get(victim)
    sleeper.objects.delete(victim)
    report = t.compact()
    assert report.count("failed") == 1
    rec = t.jobs()[0]
    assert rec.status == "failed" and victim in (rec.reason or "")
    assert len(t.state().references) == 3, "a failed job changes no references"
    sleeper.objects.put(victim, saved)
    retry = t.compact()
    assert retry.creation.retried == 1 and retry.count("committed") == 1
    assert all_ids(t) == before


def test_job_round_trips_through_json():
    job = CompactionJob("t", "j", "p", ("a", "b"), False, 42)
    assert CompactionJob.from_dict(job.to_dict()) == job


def test_job_record_of_a_committed_job_has_rate(sleeper):
    t = sleeper.create_table("t", SCHEMA)
    for i in range(3):
        t.ingest(rows(300, seed=i, first_id=i * 1000))
    t.compact()
    rec: JobRecord = t.jobs()[0]
    assert rec.rows_read == 900 and rec.rate is not None and rec.rate > 0 and rec.input_files == 3
