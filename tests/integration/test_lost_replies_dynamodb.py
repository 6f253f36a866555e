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
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa
import pytest

from statestore import AddFiles, FileReference, Schema, partitions_from_split_points
from statestore.dynamodb import open_dynamodb
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
    assert expired[0] == 2  # the log up to the snapshot is gone: the snapshot is all there is
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
        assert table.buffer_stats().records == 0

    fresh = open_dynamodb(**options)
    with Sleeper(state_store=fresh, objects=objects) as sleeper:
        got = sleeper.table("buffered").query(ranges=[("", None)])
        assert got.num_rows == rows
        assert len(set(got.column("key").to_pylist())) == rows
