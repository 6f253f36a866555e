"""Issue 18's two reproductions on DynamoDB (moto behind :mod:`tests.faults.aws_proxy`):
a write whose reply is lost is retried by botocore, the retry fails its condition (the
first try applied), and the writer must find its own write rather than clean it up.

* a snapshot pointer: the table still loads in a fresh store, also after ``expire``
  removed the log the snapshot replaced;
* a write-buffer entry with its bytes in the blob store: the write succeeds, buffered
  queries and a flush still work, and the records are there exactly once.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa
import pytest

from statestore import AddFiles, FileReference, Schema, partitions_from_split_points
from statestore.dynamodb import open_dynamodb
from statestore.dynamodb.log import EncodedTransaction
from statestore.dynamodb.table_commits import _Retry
from statestore.errors import CommitConflictError, CommitOutcomeUnknownError, PropertyError
from statestore.ingest_requests import IngestRequest
from statestore.jobs import JobRecord
from tests.faults.aws_proxy import FaultProxy
from tests.integration.statestore.conftest import MOTO_CREDENTIALS, dynamodb_options, serial_moto_server

pytestmark = pytest.mark.integration

SCHEMA = Schema.from_dict({"rowKeyFields": [{"name": "key", "type": "StringType"}],
                           "valueFields": [{"name": "value", "type": "StringType"}]})
BUCKET = "sleeper-lost-replies"


@pytest.fixture(scope="module")
def moto() -> Iterator[str]:
    boto3 = pytest.importorskip("boto3")
    with pytest.MonkeyPatch.context() as mp, serial_moto_server() as url:
        mp.setenv("AWS_EC2_METADATA_DISABLED", "true")
        boto3.client("s3", endpoint_url=url, aws_access_key_id="test", aws_secret_access_key="test",
                     region_name="us-east-1").create_bucket(Bucket=BUCKET)
        yield url


@pytest.fixture
def proxy(moto: str) -> Iterator[FaultProxy]:
    with FaultProxy(moto, seed=18) as p:
        yield p


@pytest.fixture
def options(moto: str, tmp_path: Path) -> dict[str, Any]:
    """Tables of this test's own, reached directly (a "fresh store" with no faults)."""
    return dynamodb_options(moto, tmp_path / "blobs")


def test_a_snapshot_pointer_whose_reply_was_lost_still_loads_after_expire(proxy, options):
    faulty = open_dynamodb(**{**options, "endpoint_url": proxy.url}, retention_margin=0)
    parts = partitions_from_split_points(SCHEMA, ["m"])
    tid = faulty.create_table("t", SCHEMA, parts).table_id
    leaf = sorted(p.id for p in parts if p.is_leaf)[0]
    faulty.commit(tid, AddFiles(tuple(FileReference(f"f{i}.parquet", leaf, 10) for i in range(3))))
    rule = proxy.inject("lost", operation="PutItem", body=b'-snapshots"')
    assert faulty.snapshot(tid) == 2
    assert rule.fired == 1

    assert sorted(open_dynamodb(**options).load_state(tid).files) == ["f0.parquet", "f1.parquet", "f2.parquet"]
    expired = faulty.expire(tid, now_ms=int(time.time() * 1000) + 2 * 3600 * 1000)
    # the log before the snapshot is gone: the snapshot and its own transaction's log item
    # (its entry in the table's history, statestore.dynamodb.history) are all there is
    assert expired[0] == 1
    assert sorted(open_dynamodb(**options).load_state(tid).files) == ["f0.parquet", "f1.parquet", "f2.parquet"]


def test_a_buffered_write_whose_reply_was_lost_is_stored_once_and_flushes(proxy, options, moto, tmp_path):
    from sleeper_ops.api import Sleeper
    from sleeper_ops.io.storage import ObjectStore, S3Options

    s3 = S3Options(endpoint_override=moto[len("http://"):], scheme="http", region="us-east-1",
                   access_key=MOTO_CREDENTIALS["access_key"], secret_key=MOTO_CREDENTIALS["secret_key"])
    objects = ObjectStore(f"s3://{BUCKET}/{tmp_path.name}", s3)
    faulty = open_dynamodb(**{**options, "endpoint_url": proxy.url})
    rows = 3000  # ~600 KB of Arrow: the entry's bytes go to the blob store
    records = pa.table({"key": [f"k{i:05d}" for i in range(rows)], "value": ["v" * 200] * rows})
    with Sleeper(state_store=faulty, objects=objects) as sleeper:
        table = sleeper.create_table("buffered", SCHEMA, ["k01000"])
        rule = proxy.inject("lost", operation="TransactWriteItems", body=b'"b#')
        written = table.write(records)
        assert rule.fired == 1
        assert written.records == rows
        assert table.query(ranges=[("", None)]).num_rows == rows
        table.flush()
        assert table.buffer_stats().rows == 0

    fresh = open_dynamodb(**options)
    with Sleeper(state_store=fresh, objects=objects) as sleeper:
        got = sleeper.table("buffered").query(ranges=[("", None)])
        assert got.num_rows == rows
        assert len(set(got.column("key").to_pylist())) == rows


def test_a_create_table_whose_reply_was_lost_succeeds_once(proxy, options):
    faulty = open_dynamodb(**{**options, "endpoint_url": proxy.url})
    rule = proxy.inject("lost", operation="TransactWriteItems", body=b'"name#created"')
    info = faulty.create_table("created", SCHEMA, partitions_from_split_points(SCHEMA, ["m"]))
    assert rule.fired == 1
    fresh = open_dynamodb(**options)
    assert [t.table_id for t in fresh.list_tables()] == [info.table_id]
    assert len(fresh.load_state(info.table_id).partitions) == 3


def test_a_large_commit_answered_with_server_errors_keeps_its_body_and_applies_once(proxy, options):
    faulty = open_dynamodb(**{**options, "endpoint_url": proxy.url})
    parts = partitions_from_split_points(SCHEMA, ["m"])
    tid = faulty.create_table("large", SCHEMA, parts).table_id
    leaf = sorted(p.id for p in parts if p.is_leaf)[0]
    refs = tuple(FileReference(f"{uuid.uuid4().hex}/{uuid.uuid4().hex}.parquet", leaf, i) for i in range(12_000))
    # every try of the commit applies or is refused, and each answer is a 500: botocore gives up
    rule = proxy.inject("error", operation="TransactWriteItems", body=b'-log"', times=5)
    assert faulty.commit(tid, AddFiles(refs)) is False  # applied by the first try, found by the next
    assert rule.fired == 5
    assert len(open_dynamodb(**options).load_state(tid).files) == len(refs)


def test_a_commit_that_keeps_conflicting_after_a_lost_reply_is_unknown_not_refused(options, monkeypatch):
    store = open_dynamodb(**{**options, "group_commit": False})  # the single commit's tries, driven one by one
    parts = partitions_from_split_points(SCHEMA, ["m"])
    tid = store.create_table("conflicts", SCHEMA, parts).table_id
    leaf = sorted(p.id for p in parts if p.is_leaf)[0]
    monkeypatch.setattr(store._backoff, "pause", lambda attempt: None)
    monkeypatch.setattr(store.commits, "_commit_attempt",
                        lambda *a: _Retry(EncodedTransaction("AddFiles", b"", None), True))
    with pytest.raises(CommitOutcomeUnknownError):
        store.commit(tid, AddFiles((FileReference("f.parquet", leaf, 1),)))
    monkeypatch.setattr(store.commits, "_commit_attempt",
                        lambda *a: _Retry(EncodedTransaction("AddFiles", b"", None), False))
    with pytest.raises(CommitConflictError):
        store.commit(tid, AddFiles((FileReference("f.parquet", leaf, 1),)))


def test_a_bulk_import_sized_job_record_for_5000_leaves_round_trips(options):
    """DynamoDB items hold 400 KB; a job naming 5,000 outputs (about 500 KB of JSON)
    spills to the blob store at every save, the commit included, and reads back whole."""
    store = open_dynamodb(**options)
    leaves_wanted = 5000
    parts = partitions_from_split_points(SCHEMA, [f"k{i:05d}" for i in range(1, leaves_wanted)])
    tid = store.create_table("wide", SCHEMA, parts).table_id
    leaves = sorted(p.id for p in parts if p.is_leaf)
    assert len(leaves) == leaves_wanted
    outputs = [f"{tid}/data/partition_{leaf}/bulk-{uuid.uuid4().hex}-a1-{uuid.uuid4().hex[:8]}.parquet"
               for leaf in leaves]
    job = JobRecord.created(tid, "bulk-5000", "bulk_import").started("run-1", outputs)
    store.put_job(job)
    assert store.get_job(tid, job.job_id) == job
    assert store.in_flight_outputs(tid, 0) == set(outputs)
    done = job.finished(leaves_wanted, leaves_wanted).committed()
    assert store.commit(tid, AddFiles(tuple(FileReference(o, leaf, 1) for o, leaf in zip(outputs, leaves))),
                        job=done) is True

    fresh = open_dynamodb(**options)
    assert fresh.get_job(tid, job.job_id) == done
    assert [j.job_id for j in fresh.list_jobs(tid)] == [job.job_id]
    assert len(fresh.load_state(tid).files) == leaves_wanted
    spilled = sorted(p.relative_to(Path(options["object_store"])).as_posix()
                     for p in Path(options["object_store"]).rglob("jobs/*/*/*.json.z"))
    assert len(spilled) == 1  # the committed record; the started one it replaced is deleted


def test_a_batcher_job_larger_than_a_dynamodb_transaction_is_refused_when_set(options):
    store = open_dynamodb(**options)
    with pytest.raises(PropertyError, match="at most 100.*one DynamoDB transaction"):
        store.create_table("batched", SCHEMA, partitions_from_split_points(SCHEMA, []),
                           {"sleeper.table.ingest.batcher.job.max.files": "101"})
    store.create_table("batched", SCHEMA, partitions_from_split_points(SCHEMA, []),
                       {"sleeper.table.ingest.batcher.job.max.files": "100"})
    with pytest.raises(PropertyError, match="more than the DynamoDB state store can honour"):
        store.update_properties("batched", {"sleeper.table.ingest.batcher.job.max.files": "500"})
    assert store.get_table("batched").properties["sleeper.table.ingest.batcher.job.max.files"] == "100"


def test_queueing_and_assigning_ingest_requests_whose_replies_were_lost_apply_once(proxy, options):
    faulty = open_dynamodb(**{**options, "endpoint_url": proxy.url})
    tid = faulty.create_table("queued", SCHEMA, partitions_from_split_points(SCHEMA, [])).table_id
    requests = [IngestRequest.new(tid, f"s3://in/{i}.parquet", 10) for i in range(150)]  # two transactions
    rule = proxy.inject("lost", operation="TransactWriteItems", body=b'"r#', times=2)
    faulty.add_ingest_requests(tid, requests)
    assert rule.fired == 2
    fresh = open_dynamodb(**options)
    assert sorted(r.request_id for r in fresh.pending_ingest_requests(tid)) == sorted(r.request_id for r in requests)

    rule = proxy.inject("lost", operation="TransactWriteItems", body=b'"r#')
    assert faulty.assign_ingest_requests(tid, "job-1", [r.request_id for r in requests[:100]]) is True
    assert rule.fired == 1
    assert len(fresh.pending_ingest_requests(tid)) == 50


def test_a_rename_and_a_delete_whose_replies_were_lost_succeed(proxy, options):
    faulty = open_dynamodb(**{**options, "endpoint_url": proxy.url})
    tid = faulty.create_table("before", SCHEMA, partitions_from_split_points(SCHEMA, [])).table_id
    rule = proxy.inject("lost", operation="TransactWriteItems", body=b'"name#after"')
    assert faulty.rename_table("before", "after").name == "after"
    assert rule.fired == 1
    rule = proxy.inject("lost", operation="TransactWriteItems", body=b'"name#after"')
    assert faulty.delete_table("after").table_id == tid
    assert rule.fired == 1
    assert open_dynamodb(**options).list_tables() == []


def test_a_keyed_delete_and_ingest_whose_replies_were_lost_find_their_own_first_try(proxy, options, tmp_path):
    """Issue 33 (Deliver 5): a CLI write takes a request id per invocation; botocore's
    retry of its commit, whose first try applied, finds that try: one tombstone, every
    ingested record once, and each answered as applied by this call."""
    from sleeper_ops.api import Sleeper
    from sleeper_ops.io.storage import ObjectStore

    faulty = open_dynamodb(**{**options, "endpoint_url": proxy.url})
    with Sleeper(state_store=faulty, objects=ObjectStore(str(tmp_path / "data"))) as sleeper:
        table = sleeper.create_table("keyed", SCHEMA, ["m"])
        path = tmp_path / "in.parquet"
        import pyarrow.parquet as pq
        pq.write_table(pa.table({"key": ["a", "b", "x"], "value": ["1", "2", "3"]}), path)
        rule = proxy.inject("lost", operation="TransactWriteItems", body=b'"w#cli-ingest-1"')
        ingested = table.ingest([str(path)], request_id="cli-ingest-1")
        assert rule.fired == 1 and not ingested.repeat and ingested.records == 3
        rule = proxy.inject("lost", operation="TransactWriteItems", body=b'"w#cli-delete-1"')
        deleted = table.delete(keys=["b"], request_id="cli-delete-1")
        assert rule.fired == 1
        assert deleted.applied and deleted.tombstone == 1 and table.state().delete_count == 1
        assert sorted(table.query(ranges=[("", None)]).column("key").to_pylist()) == ["a", "x"]
        assert len(table.state().files) == 1 and len(table.state().references) == 2  # one file, both leaves
