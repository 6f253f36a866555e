"""Garbage collection and partition splitting end to end on the PostgreSQL state store."""

from __future__ import annotations

import os
import time

import pyarrow as pa
import pytest

from sleeper_ops import Sleeper
from sleeper_ops.io.datafile import sketch_key
from sleeper_ops.io.storage import ObjectStore
from sleeper_ops.maintenance.gc import collect_garbage
from sleeper_ops.maintenance.splitting import split_partitions
from statestore.partitions import ROOT_ID
from statestore.transactions import AssignJobIds, JobAssignment, ReplaceFileReferences

pytestmark = pytest.mark.integration

SCHEMA = {"rowKeyFields": [{"name": "key", "type": "LongType"}], "valueFields": [{"name": "v", "type": "StringType"}]}
MINUTE = 60_000


@pytest.fixture
def sleeper(pg_dsn, tmp_path):
    from statestore.postgres import PostgresStateStore

    s = Sleeper(state_store=PostgresStateStore(pg_dsn), objects=ObjectStore(str(tmp_path / "data")))
    yield s
    s.close()


def test_gc_deletes_compacted_files_and_orphans_in_batches(sleeper):
    t = sleeper.create_table("t", SCHEMA, properties={"sleeper.table.gc.batch.size": "2"})
    tid = t.info.table_id
    names = sorted(f.filename for i in range(5)
                   for f in t.ingest(pa.table({"key": [i], "v": ["x"]})).files)
    [live] = [f.filename for f in t.ingest(pa.table({"key": [99], "v": ["y"]})).files]
    now = int(time.time() * 1000)
    store = sleeper.state_store
    store.commit(tid, AssignJobIds((JobAssignment("job", ROOT_ID, tuple(names)),), update_time=now - 60 * MINUTE))
    store.commit(tid, ReplaceFileReferences("job", ROOT_ID, tuple(names), None, update_time=now - 60 * MINUTE))
    orphan = f"{tid}/data/partition_{ROOT_ID}/orphan.parquet"
    sleeper.objects.put(orphan, b"junk")
    os.utime(sleeper.objects.path(orphan), ((now - 120 * MINUTE) / 1000,) * 2)

    dry = collect_garbage(store, sleeper.objects, t.info, dry_run=True, now_ms=now)
    assert sorted(dry.deleted) == names and dry.orphans_deleted == [orphan]
    assert set(store.load_state(tid).files) == {*names, live}

    report = collect_garbage(store, sleeper.objects, t.info, now_ms=now)

    assert sorted(report.deleted) == names and report.commits == 3 and report.orphans_deleted == [orphan]
    assert set(store.load_state(tid).files) == {live}
    assert sorted(o.key for o in sleeper.objects.list(tid)) == sorted([live, sketch_key(live)])
    assert store.unreferenced_files(tid, now + MINUTE) == []
    assert t.query(keys=[99]).num_rows == 1


def test_split_commits_and_records_its_job(sleeper):
    t = sleeper.create_table("t", SCHEMA, properties={"sleeper.table.partition.splitting.threshold": "100"})
    t.ingest(pa.table({"key": list(range(1000)), "v": ["x"] * 1000}))

    report = split_partitions(sleeper.state_store, sleeper.objects, t.info, run_id="it")

    [s] = report.splits
    assert 400 <= s.value <= 600
    state = sleeper.state_store.load_state(t.info.table_id)
    assert not state.partitions[ROOT_ID].is_leaf and all(state.partitions[c].is_leaf for c in s.child_ids)
    [job] = sleeper.state_store.list_jobs(t.info.table_id, kind="split")
    assert (job.status, job.run_id, job.partition_id) == ("committed", "it", ROOT_ID)
    assert t.query(ranges=[(0, None)]).num_rows == 1000
