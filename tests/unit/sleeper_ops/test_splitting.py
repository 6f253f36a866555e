"""Partition splitting: leaves over the threshold split at the median of their sketches."""

from __future__ import annotations

import random
import threading

import pyarrow as pa
import pytest

from sleeper_ops.io.datafile import read_sketches
from sleeper_ops.maintenance.splitting import SplitPoint, choose_split_point, split_partition, split_partitions
from statestore.errors import PartitionError
from statestore.files import FileReference
from statestore.partitions import ROOT_ID
from statestore.region import Range
from statestore.transactions import SplitFileReference, SplitFileReferences

THRESHOLD = "sleeper.table.partition.splitting.threshold"


def _schema(*row_keys: tuple[str, str]) -> dict:
    return {"rowKeyFields": [{"name": n, "type": t} for n, t in row_keys],
            "valueFields": [{"name": "v", "type": "LongType"}]}


def _rows(cols: dict[str, list]) -> pa.Table:
    n = len(next(iter(cols.values())))
    return pa.table({**cols, "v": list(range(n))})


def _split(sleeper, t, **kw):
    return split_partitions(sleeper.state_store, sleeper.objects, sleeper.table(t.name).info, **kw)


def _count(t, region) -> int:
    return t.query(regions=[region]).num_rows


KEYS = {
    "StringType": lambda i: f"k{i:05d}",
    "LongType": lambda i: (i - 500) * 10**12,
    "IntType": lambda i: i * 7 - 3000,
    "ByteArrayType": lambda i: i.to_bytes(2, "big") + b"\xff",
}


@pytest.mark.parametrize("key_type", sorted(KEYS))
def test_leaf_over_threshold_splits_at_median_into_halves(sleeper, key_type):
    keys = [KEYS[key_type](i) for i in range(1000)]
    random.Random(1).shuffle(keys)
    t = sleeper.create_table("t", _schema(("key", key_type)), properties={THRESHOLD: "500"})
    t.ingest(_rows({"key": keys}))
    t.ingest(_rows({"key": keys[:200]}))  # a second file: sketches merge

    report = _split(sleeper, t)

    assert report.refused == [] and report.unsplittable == []
    [s] = report.splits
    assert (s.parent_id, s.field, s.records) == (ROOT_ID, "key", 1200)
    state = t.state()
    parent = state.partitions[ROOT_ID]
    left, right = (state.partitions[c] for c in s.child_ids)
    assert not parent.is_leaf and parent.child_ids == s.child_ids and parent.dimension == 0
    assert left.is_leaf and right.is_leaf
    assert left.region.ranges[0].max == s.value == right.region.ranges[0].min
    assert type(s.value) is type(keys[0])
    n_left, n_right = _count(t, left.region), _count(t, right.region)
    assert n_left + n_right == 1200
    assert 0.4 * 1200 <= n_left <= 0.6 * 1200, (n_left, n_right)
    # no data rewritten: the references stay on the parent
    assert {r.partition_id for r in state.references.values()} == {ROOT_ID}
    assert t.query(ranges=[(min(keys), None)]).num_rows == 1200


def test_two_row_key_fields_with_constant_first_field_split_on_the_second(sleeper):
    t = sleeper.create_table("t", _schema(("a", "StringType"), ("b", "LongType")), properties={THRESHOLD: "100"})
    t.ingest(_rows({"a": ["same"] * 1000, "b": list(range(1000))}))

    [s] = _split(sleeper, t).splits

    assert s.field == "b" and 400 <= s.value <= 600
    state = t.state()
    assert state.partitions[ROOT_ID].dimension == 1
    left, right = (state.partitions[c] for c in s.child_ids)
    assert left.region.ranges[0] == right.region.ranges[0] == state.partitions[ROOT_ID].region.ranges[0]
    assert _count(t, left.region) == s.value and _count(t, right.region) == 1000 - s.value


def test_first_field_wins_when_it_varies(sleeper):
    t = sleeper.create_table("t", _schema(("a", "LongType"), ("b", "LongType")), properties={THRESHOLD: "100"})
    t.ingest(_rows({"a": [i % 10 for i in range(1000)], "b": list(range(1000))}))

    [s] = _split(sleeper, t).splits

    assert s.field == "a" and 0 < s.value < 9


def test_no_split_at_or_under_the_threshold(sleeper):
    t = sleeper.create_table("t", _schema(("key", "LongType")), properties={THRESHOLD: "1000"})
    t.ingest(_rows({"key": list(range(1000))}))

    report = _split(sleeper, t)

    assert report.splits == [] and report.unsplittable == [] and report.refused == []
    assert len(t.state().partitions) == 1
    assert sleeper.state_store.list_jobs(t.info.table_id, kind="split") == []
    assert report.summary() == ("t: nothing to split: 1 leaf, the largest holding 1,000 records; a leaf splits once "
                                "it holds more than 1,000 (sleeper.table.partition.splitting.threshold)")


def test_partition_of_one_key_is_not_split_and_the_report_says_why(sleeper):
    t = sleeper.create_table("t", _schema(("a", "StringType"), ("b", "LongType")), properties={THRESHOLD: "10"})
    t.ingest(_rows({"a": ["x"] * 100, "b": [7] * 100}))

    report = _split(sleeper, t)

    assert report.splits == []
    [(pid, reason)] = report.unsplittable
    assert pid == ROOT_ID and "min < median < max" in reason and "'x'" in reason and "b: min 7" in reason
    assert len(t.state().partitions) == 1
    assert "1 over the threshold could not be split" in report.summary()


def test_only_leaves_split_and_children_wait_for_compaction(sleeper):
    t = sleeper.create_table("t", _schema(("key", "LongType")), split_points=[500], properties={THRESHOLD: "300"})
    t.ingest(_rows({"key": list(range(1000))}))  # 500 records in each leaf

    first = _split(sleeper, t)
    second = _split(sleeper, t)

    assert len(first.splits) == 2
    assert {s.parent_id for s in first.splits} == {p.id for p in t.state().partitions.values()
                                                    if p.parent_id == ROOT_ID}
    assert second.splits == []  # the new leaves have no references until compaction pushes them down
    assert len(t.state().tree().leaves()) == 4


def test_file_shared_by_partitions_splits_each_at_the_median_of_its_own_part(sleeper):
    """After the references are pushed down, each child holds part of one whole-file
    sketch; its median must come from its own region, not the whole file."""
    store = sleeper.state_store
    t = sleeper.create_table("t", _schema(("key", "LongType")), properties={THRESHOLD: "600"})
    t.ingest(_rows({"key": list(range(1000))}))
    [s] = _split(sleeper, t).splits
    assert 400 <= s.value <= 600
    [ref] = t.state().references.values()
    left_n = s.value
    store.commit(t.info.table_id, SplitFileReferences((SplitFileReference(ref.filename, ROOT_ID, (
        FileReference(ref.filename, s.child_ids[0], left_n, True, False),
        FileReference(ref.filename, s.child_ids[1], 1000 - left_n, True, False))),)))
    t.sleeper.set_properties("t", {THRESHOLD: "300"})

    report = _split(sleeper, t)

    by_parent = {x.parent_id: x for x in report.splits}
    assert set(by_parent) == set(s.child_ids)
    lo, hi = by_parent[s.child_ids[0]].value, by_parent[s.child_ids[1]].value
    assert abs(lo - left_n / 2) <= 60, lo
    assert abs(hi - (left_n + 1000) / 2) <= 60, hi


def test_split_of_a_partition_split_concurrently_is_refused(sleeper, monkeypatch):
    """Two runs plan against the same state; one split commits, the other is refused
    and recorded as a failed job."""
    t = sleeper.create_table("t", _schema(("key", "LongType")), properties={THRESHOLD: "10"})
    t.ingest(_rows({"key": list(range(100))}))
    store = sleeper.state_store
    barrier = threading.Barrier(2, timeout=10)
    real_load = store.load_state

    def load_then_wait(table_id):
        state = real_load(table_id)
        barrier.wait()
        return state

    monkeypatch.setattr(store, "load_state", load_then_wait)
    reports = []
    threads = [threading.Thread(target=lambda: reports.append(_split(sleeper, t))) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()

    assert sorted(len(r.splits) for r in reports) == [0, 1]
    [refused] = [r for r in reports if not r.splits]
    [(pid, reason)] = refused.refused
    assert pid == ROOT_ID and "already split" in reason
    assert "1 refused" in refused.summary()
    monkeypatch.undo()
    assert len(t.state().partitions) == 3
    jobs = {j.status: j for j in store.list_jobs(t.info.table_id, kind="split")}
    assert set(jobs) == {"committed", "failed"}
    assert "already split" in (jobs["failed"].reason or "")


def test_split_with_a_stale_partition_is_refused_and_changes_nothing(sleeper):
    t = sleeper.create_table("t", _schema(("key", "LongType")), properties={THRESHOLD: "10"})
    t.ingest(_rows({"key": list(range(100))}))
    store = sleeper.state_store
    stale_root = t.state().partitions[ROOT_ID]
    split_partition(store, t.info, stale_root, SplitPoint(0, "key", 30))
    before = t.state().canonical()

    with pytest.raises(PartitionError, match="already split"):
        split_partition(store, t.info, stale_root, SplitPoint(0, "key", 60), run_id="run-2")

    assert t.state().canonical() == before
    failed = [j for j in store.list_jobs(t.info.table_id, kind="split") if j.status == "failed"]
    assert len(failed) == 1 and failed[0].run_id == "run-2" and failed[0].partition_id == ROOT_ID


def test_split_is_recorded_as_a_committed_job(sleeper):
    t = sleeper.create_table("t", _schema(("key", "LongType")), properties={THRESHOLD: "10"})
    t.ingest(_rows({"key": list(range(100))}))
    t.ingest(_rows({"key": list(range(100, 150))}))

    [s] = _split(sleeper, t, run_id="dag/run-1").splits

    [job] = sleeper.state_store.list_jobs(t.info.table_id, kind="split")
    assert (job.job_id, job.status, job.partition_id, job.input_files, job.run_id, job.attempts) == \
        (s.job_id, "committed", ROOT_ID, 2, "dag/run-1", 1)
    assert job.created_ms <= job.started_ms <= job.finished_ms <= job.committed_ms


def test_offline_table_is_skipped(sleeper):
    t = sleeper.create_table("t", _schema(("key", "LongType")),
                             properties={THRESHOLD: "10", "sleeper.table.online": "false"})
    t.ingest(_rows({"key": list(range(100))}))
    before = t.state().canonical()

    report = _split(sleeper, t)

    assert report.splits == [] and report.skipped_reason == "table t is offline"
    assert report.summary() == "t: skipped (table t is offline)"
    assert t.state().canonical() == before
    assert sleeper.state_store.list_jobs(t.info.table_id, kind="split") == []


def test_missing_sketch_makes_the_partition_unsplittable_not_the_run(sleeper):
    t = sleeper.create_table("t", _schema(("key", "LongType")), split_points=[50], properties={THRESHOLD: "10"})
    t.ingest(_rows({"key": list(range(50))}))  # one file a leaf: the sketch lost is one leaf's only
    t.ingest(_rows({"key": list(range(50, 100))}))
    state = t.state()
    victim = sorted(state.references.values(), key=lambda r: r.filename)[0]
    sleeper.objects.delete(victim.filename.rsplit(".parquet", 1)[0] + ".sketches")
    seen = []

    report = _split(sleeper, t, progress=lambda pid, outcome: seen.append((pid, outcome)))

    assert len(report.splits) == 1
    [(pid, reason)] = report.unsplittable
    assert pid == victim.partition_id and "cannot read sketches" in reason
    assert sorted(o for _, o in seen) == ["split", "unsplittable"]


def test_choose_split_point_uses_only_values_inside_the_region(sleeper):
    t = sleeper.create_table("t", _schema(("key", "LongType")))
    t.ingest(_rows({"key": list(range(1000))}))
    [ref] = t.state().references.values()
    sk = read_sketches(sleeper.objects, t.schema, ref.filename)
    root = t.state().partitions[ROOT_ID]
    inner = root.__class__("p", root.region.with_range(0, Range("key", 800, 900)))
    outside = root.__class__("q", root.region.with_range(0, Range("key", 2000, None)))

    point = choose_split_point(inner, [sk])
    assert isinstance(point, SplitPoint) and 840 <= point.value <= 860
    assert "no values inside the partition" in str(choose_split_point(outside, [sk]))
