"""Event-driven ingest on moto (S3, SQS and DynamoDB on one moto server): a bucket whose
notification feeds an SQS queue as AWS's does (moto sends the ObjectCreated bodies and the
s3:TestEvent itself); the messages landed, landed again as a redelivery, then ingested by
the batcher. Exact counts: every record of every good file once, the bad files in the dead
letters with their reasons, nothing of them in the table."""

from __future__ import annotations

import io
import json
import time
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tomli_w

from sleeper_ops import Sleeper
from sleeper_ops.ingest.batcher import run_ingest_batcher
from sleeper_ops.ingest.event_landing import land_messages
from sleeper_ops.ingest.events import EventMessage
from statestore.properties import INGEST_BATCHER_JOB_MAX_FILES, INGEST_BATCHER_JOB_MIN_SIZE, INGEST_EVENTS_QUEUE
from tests.integration.statestore.conftest import serial_moto_server

boto3 = pytest.importorskip("boto3")

BUCKET = "raw"
SCHEMA = {"rowKeyFields": [{"name": "k", "type": "LongType"}], "valueFields": [{"name": "v", "type": "StringType"}]}
GOOD_FILES, RECORDS_PER_FILE = 12, 25


def client(kind: str, url: str) -> Any:
    return boto3.client(kind, endpoint_url=url, aws_access_key_id="test", aws_secret_access_key="test",
                        region_name="us-east-1")


@pytest.fixture
def moto_url() -> Iterator[str]:
    with serial_moto_server() as url:
        yield url


@pytest.fixture
def events(moto_url: str, tmp_path: Any) -> Iterator[tuple[Sleeper, str, Any, Any]]:
    """(a Sleeper on DynamoDB + S3, the queue URL, an S3 client, an SQS client): the bucket
    notifies the queue of every object created."""
    s3, sqs = client("s3", moto_url), client("sqs", moto_url)
    s3.create_bucket(Bucket=BUCKET)
    queue = sqs.create_queue(QueueName="raw-events")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    s3.put_bucket_notification_configuration(Bucket=BUCKET, NotificationConfiguration={"QueueConfigurations": [
        {"QueueArn": arn, "Events": ["s3:ObjectCreated:*"]}]})
    host = moto_url[len("http://"):]
    s3_options = {"endpoint_override": host, "scheme": "http", "region": "us-east-1", "access_key": "test",
                  "secret_key": "test"}
    raw = {"object_store": {"uri": f"s3://{BUCKET}/sleeper/data", **s3_options},
           "state_store": {"backend": "dynamodb", "endpoint_url": moto_url, "region": "us-east-1",
                           "table_prefix": f"t{time.time_ns()}-", "access_key": "test", "secret_key": "test"},
           "s3": s3_options}
    home = tmp_path / "home"
    home.mkdir()
    (home / "sleeper.toml").write_text(tomli_w.dumps(raw))
    with Sleeper(home=home) as sleeper:
        sleeper.create_table("events", SCHEMA, properties={INGEST_EVENTS_QUEUE: queue,
                                                           INGEST_BATCHER_JOB_MIN_SIZE: "1",
                                                           INGEST_BATCHER_JOB_MAX_FILES: "100"})
        yield sleeper, queue, s3, sqs


def parquet(table: pa.Table) -> bytes:
    out = io.BytesIO()
    pq.write_table(table, out)
    return out.getvalue()


def receive_all(sqs: Any, queue: str) -> list[dict[str, Any]]:
    got: dict[str, dict[str, Any]] = {}
    for _ in range(50):
        answer = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10, VisibilityTimeout=600, WaitTimeSeconds=0)
        batch = answer.get("Messages", [])
        if not batch and got:
            break
        got.update({m["MessageId"]: m for m in batch})
    return list(got.values())


def test_each_file_lands_once_under_redelivery_and_bad_files_go_to_the_dead_letters(events: Any) -> None:
    sleeper, queue, s3, sqs = events
    for i in range(GOOD_FILES):
        keys = pa.array(range(i * RECORDS_PER_FILE, (i + 1) * RECORDS_PER_FILE), pa.int64())
        s3.put_object(Bucket=BUCKET, Key=f"in/good-{i:02d}.parquet",
                      Body=parquet(pa.table({"k": keys, "v": pa.array([f"r{k}" for k in keys.to_pylist()])})))
    s3.put_object(Bucket=BUCKET, Key="in/not-parquet.parquet", Body=b"this is not parquet")
    s3.put_object(Bucket=BUCKET, Key="in/wrong-schema.parquet", Body=parquet(pa.table({"x": [1, 2]})))
    messages = [EventMessage.of(m) for m in receive_all(sqs, queue)]
    assert len(messages) == GOOD_FILES + 3  # one per object, and the test event of the configuration

    own = [sleeper.objects.uri_of("")]
    first = land_messages(sleeper, "events", messages, own_prefixes=own)
    assert len(first.settled) == len(messages) and first.unsettled == []
    assert len(first.queued) == GOOD_FILES and first.repeats == []
    assert sorted(f for f, _ in first.dead_letters) == ["s3://raw/in/not-parquet.parquet",
                                                        "s3://raw/in/wrong-schema.parquet"]
    assert any("s3:TestEvent" in line for line in first.ignored)

    again = land_messages(sleeper, "events", messages, own_prefixes=own)  # every message delivered a second time
    assert again.queued == [] and len(again.repeats) == GOOD_FILES

    report = run_ingest_batcher(sleeper, "events")
    assert report.records == GOOD_FILES * RECORDS_PER_FILE
    rows = sleeper.table("events").query(ranges=[(0, None)])
    assert rows.num_rows == GOOD_FILES * RECORDS_PER_FILE
    assert sorted(rows.column("k").to_pylist()) == list(range(GOOD_FILES * RECORDS_PER_FILE))
    assert run_ingest_batcher(sleeper, "events").records == 0

    reason = json.loads(s3.get_object(Bucket=BUCKET, Key="dead-letter/raw/in/wrong-schema.parquet.reason.json")
                        ["Body"].read())
    assert reason["source"] == "s3://raw/in/wrong-schema.parquet" and "column 'k'" in reason["reason"]
    assert s3.get_object(Bucket=BUCKET, Key="dead-letter/raw/in/not-parquet.parquet")["Body"].read() == \
        b"this is not parquet"
    # the events of the dead letters and of Sleeper's own data files (the table's data is in the
    # watched bucket here) announce nothing: landing them queues and copies nothing
    seen = {x.message_id for x in messages}
    late = [EventMessage.of(m) for m in receive_all(sqs, queue) if m["MessageId"] not in seen]
    landed = land_messages(sleeper, "events", late, own_prefixes=own)
    assert len(late) >= 5 and len(landed.settled) == len(late)
    assert landed.queued == [] and landed.dead_letters == [] and landed.unsettled == []
    assert {line.split(": ", 1)[1] for line in landed.ignored} == {"under the dead-letter prefix",
                                                                    "one of Sleeper's own objects"}
    assert sleeper.table("events").query(ranges=[(0, None)]).num_rows == GOOD_FILES * RECORDS_PER_FILE
