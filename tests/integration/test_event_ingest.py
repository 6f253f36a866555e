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
from sleeper_ops.ingest.events import EventMessage, parse_message
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


def receive_all(sqs: Any, queue: str, *, visibility: int = 600) -> list[dict[str, Any]]:
    got: dict[str, dict[str, Any]] = {}
    empty = 0
    for _ in range(100):  # each message once: hidden for ``visibility`` seconds once received
        if empty >= 3:
            break
        answer = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10, VisibilityTimeout=visibility,
                                     WaitTimeSeconds=0)
        batch = answer.get("Messages", [])
        empty = 0 if batch else empty + 1
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


def test_sleeper_clusters_queue_is_fed_by_creations_under_incoming_only_and_made_twice_alike(moto_url: str) -> None:
    from sleeper_ops.cluster.event_queue import EVENTS_PREFIX, MAX_RECEIVES, create_event_queue

    s3, sqs = client("s3", moto_url), client("sqs", moto_url)
    s3.create_bucket(Bucket=BUCKET)
    make = {"access_key": "test", "secret_key": "test", "region": "us-east-1"}
    url = create_event_queue(moto_url, BUCKET, **make)
    assert create_event_queue(moto_url, BUCKET, **make) == url  # idempotent
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert json.loads(attrs["RedrivePolicy"])["maxReceiveCount"] in (MAX_RECEIVES, str(MAX_RECEIVES))
    assert url.endswith("/123456789012/sleeper-ingest-events")
    s3.put_object(Bucket=BUCKET, Key=f"{EVENTS_PREFIX}a.parquet", Body=b"x")
    s3.put_object(Bucket=BUCKET, Key="data/t/own.parquet", Body=b"x")
    files = [f for m in receive_all(sqs, url) for f in parse_message(EventMessage.of(m)).files]
    assert files == [f"s3://{BUCKET}/{EVENTS_PREFIX}a.parquet"]


def test_the_land_events_task_lands_settles_and_a_second_run_over_the_same_batch_adds_nothing(
        events: Any, monkeypatch: pytest.MonkeyPatch, moto_url: str) -> None:
    from types import SimpleNamespace

    from sleeper_ops.airflow.operators.events import SleeperLandEventsOperator
    from tests.unit.sleeper_ops.operator_runner import execute_task

    sleeper, queue, s3, sqs = events
    _aws_default_on(monkeypatch, moto_url)
    for i in range(3):
        s3.put_object(Bucket=BUCKET, Key=f"in/f{i}.parquet", Body=parquet(pa.table({
            "k": pa.array([i * 10 + j for j in range(10)], pa.int64()), "v": pa.array(["x"] * 10)})))
    raw = receive_all(sqs, queue, visibility=2)
    assert len(raw) == 4  # three files and the test event
    batch = [SimpleNamespace(extra={"from_trigger": True, "payload": {"status": "success", "message_batch": raw}})]
    op = SleeperLandEventsOperator(task_id="land_events", table="events", sqs_queue=queue)
    op.execute = _with_events(op.execute, {"sleeper://events/events": batch})  # type: ignore[method-assign]
    first = execute_task(op, sleeper)
    assert len(first["queued"]) == 3 and first["repeats"] == 0 and first["not_deleted"] == 0
    # settled: SQS deleted every one (hidden for 2 s only, a message not deleted would be back)
    time.sleep(2.5)
    assert {m["MessageId"] for m in receive_all(sqs, queue)} & {m["MessageId"] for m in raw} == set()
    again = execute_task(op, sleeper, run_id="asset_triggered__2")  # the same batch, its handles stale
    assert again["queued"] == [] and again["repeats"] == 3
    assert run_ingest_batcher(sleeper, "events").records == 30
    assert sleeper.table("events").query(ranges=[(0, None)]).num_rows == 30


def test_the_land_events_task_keeps_the_messages_it_has_not_landed_hidden_for_its_visibility(
        events: Any, monkeypatch: pytest.MonkeyPatch, moto_url: str) -> None:
    """A run slower than the watcher's visibility timeout: its messages would come back
    (and count towards the redrive limit); held by the task, they do not."""
    from types import SimpleNamespace

    import sleeper_ops.ingest.event_landing as landing
    from sleeper_ops.airflow.operators.events import SleeperLandEventsOperator
    from tests.unit.sleeper_ops.operator_runner import execute_task

    sleeper, queue, s3, sqs = events
    _aws_default_on(monkeypatch, moto_url)
    for i in range(12):
        s3.put_object(Bucket=BUCKET, Key=f"in/h{i}.parquet", Body=parquet(pa.table({
            "k": pa.array([i], pa.int64()), "v": pa.array(["x"])})))
    raw = receive_all(sqs, queue, visibility=2)
    assert sum("in%2Fh" in m["Body"] for m in raw) == 12  # and what earlier tests left
    # landing that settles nothing (a run that will go on past the 2 s the watcher hid them for)
    monkeypatch.setattr(landing, "land_messages", lambda *a, **k: landing.LandingReport())
    batch = [SimpleNamespace(extra={"from_trigger": True, "payload": {"status": "success", "message_batch": raw}})]
    op = SleeperLandEventsOperator(task_id="land_events", table="events", sqs_queue=queue, visibility_seconds=30)
    op.execute = _with_events(op.execute, {"sleeper://events/events": batch})  # type: ignore[method-assign]
    assert execute_task(op, sleeper)["queued"] == []
    time.sleep(2.5)  # past the watcher's visibility: only the task's hold keeps them hidden
    assert {m["MessageId"] for m in receive_all(sqs, queue)} & {m["MessageId"] for m in raw} == set()
    for start in range(0, len(raw), 10):  # the next test's queue as it would be
        sqs.delete_message_batch(QueueUrl=queue, Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                                                          for i, m in enumerate(raw[start:start + 10])])


def _with_events(execute: Any, events: dict[str, Any]) -> Any:
    """``execute`` given the run's triggering asset events (keyed by URI) in its context."""
    def run(context: dict[str, Any]) -> Any:
        return execute({**context, "triggering_asset_events": events})
    return run


def test_a_dead_letter_that_cannot_be_copied_leaves_only_its_message_on_the_queue(events: Any) -> None:
    sleeper, queue, s3, sqs = events
    good = parquet(pa.table({"k": pa.array(range(7), pa.int64()), "v": pa.array(["x"] * 7)}))
    s3.put_object(Bucket=BUCKET, Key="in/good.parquet", Body=good)
    s3.put_object(Bucket=BUCKET, Key="in/bad.parquet", Body=b"not parquet")
    messages = [EventMessage.of(m) for m in receive_all(sqs, queue)]
    own = [sleeper.objects.uri_of("")]
    # the dead-letter bucket does not exist: the copy fails, nothing is settled for that file
    report = land_messages(sleeper, "events", messages, dead_letter_prefix="s3://no-such-bucket/dl", own_prefixes=own)
    assert len(report.unsettled) == 1 and report.dead_letters == []
    assert report.queued == ["s3://raw/in/good.parquet"] and len(report.settled) == len(messages) - 1
    assert run_ingest_batcher(sleeper, "events").records == 7
    # redelivered with a dead-letter prefix that works: the bad file is copied, the good one not queued again
    retry = land_messages(sleeper, "events", messages, dead_letter_prefix="s3://raw/dl", own_prefixes=own)
    assert retry.unsettled == [] and [f for f, _ in retry.dead_letters] == ["s3://raw/in/bad.parquet"]
    assert retry.queued == [] and retry.repeats == [m.message_id for m in messages
                                                      if m.message_id not in {u for u, _ in report.unsettled}
                                                      and "good" in m.body]
    assert run_ingest_batcher(sleeper, "events").records == 0
    assert sleeper.table("events").query(ranges=[(0, None)]).num_rows == 7
    assert s3.get_object(Bucket=BUCKET, Key="dl/raw/in/bad.parquet")["Body"].read() == b"not parquet"


def test_a_state_store_that_fails_mid_landing_leaves_only_those_messages_for_redelivery(
        events: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The state store unreachable for one message's queueing (nothing committed) and
    answering with an unknown outcome for another's (the requests committed, the answer
    lost): both messages stay on the queue, the others are settled; their redelivery queues
    the first and finds the second's key held, and the batcher ingests every record once."""
    from statestore.errors import CommitOutcomeUnknownError, StateStoreUnavailableError

    sleeper, queue, s3, sqs = events
    for i in range(4):
        s3.put_object(Bucket=BUCKET, Key=f"in/s{i}.parquet", Body=parquet(pa.table({
            "k": pa.array(range(i * 10, i * 10 + 10), pa.int64()), "v": pa.array(["x"] * 10)})))
    messages = [m for m in (EventMessage.of(r) for r in receive_all(sqs, queue)) if "in%2Fs" in m.body
                or "in/s" in m.body]
    assert len(messages) == 4
    store = sleeper.state_store
    real_add = store.add_ingest_requests
    calls = []

    def add(table_id: str, requests: Any, **kw: Any) -> Any:
        calls.append(len(calls))
        if len(calls) == 1:
            raise StateStoreUnavailableError("the state store timed out (test)")
        if len(calls) == 3:
            real_add(table_id, requests, **kw)
            raise CommitOutcomeUnknownError("the commit's answer was lost (test)")
        return real_add(table_id, requests, **kw)

    monkeypatch.setattr(store, "add_ingest_requests", add)
    own = [sleeper.objects.uri_of("")]
    first = land_messages(sleeper, "events", messages, own_prefixes=own)
    assert [mid for mid, _ in first.unsettled] == [messages[0].message_id, messages[2].message_id]
    assert [m.message_id for m in first.settled] == [messages[1].message_id, messages[3].message_id]
    assert "timed out" in first.unsettled[0][1] and "answer was lost" in first.unsettled[1][1]
    redelivered = land_messages(sleeper, "events", [messages[0], messages[2]], own_prefixes=own)
    assert redelivered.unsettled == [] and redelivered.repeats == [messages[2].message_id]
    assert len(redelivered.queued) == 1
    assert run_ingest_batcher(sleeper, "events").records == 40
    keys = sleeper.table("events").query(ranges=[(0, None)]).column("k").to_pylist()
    assert sorted(keys) == list(range(40))


def test_the_task_fails_naming_a_message_that_is_no_notification_after_settling_the_others(
        events: Any, monkeypatch: pytest.MonkeyPatch, moto_url: str) -> None:
    from types import SimpleNamespace

    from sleeper_ops.airflow.operators.events import SleeperLandEventsOperator
    from sleeper_ops.errors import IngestError
    from tests.unit.sleeper_ops.operator_runner import execute_task

    sleeper, queue, s3, sqs = events
    _aws_default_on(monkeypatch, moto_url)
    s3.put_object(Bucket=BUCKET, Key="in/one.parquet", Body=parquet(pa.table({
        "k": pa.array(range(4), pa.int64()), "v": pa.array(["x"] * 4)})))
    junk = sqs.send_message(QueueUrl=queue, MessageBody="hello")["MessageId"]
    raw = receive_all(sqs, queue, visibility=2)
    assert junk in {m["MessageId"] for m in raw}  # with the file's, the test event's and Sleeper's own
    batch = [SimpleNamespace(extra={"payload": {"message_batch": raw}})]
    op = SleeperLandEventsOperator(task_id="land_events", table="events", sqs_queue=queue)
    op.execute = _with_events(op.execute, {"sleeper://events/events": batch})  # type: ignore[method-assign]
    with pytest.raises(IngestError, match=rf"^table events: 1 queue messages left for redelivery: {junk}: "):
        execute_task(op, sleeper)
    time.sleep(2.5)
    assert [m["MessageId"] for m in receive_all(sqs, queue)
            if m["MessageId"] in {r["MessageId"] for r in raw}] == [junk]  # only the junk comes back
    assert run_ingest_batcher(sleeper, "events").records == 4


def _aws_default_on(monkeypatch: pytest.MonkeyPatch, moto_url: str) -> None:
    """Airflow's ``aws_default`` connection pointed at the moto server."""
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", json.dumps({
        "conn_type": "aws", "login": "test", "password": "test",
        "extra": {"region_name": "us-east-1", "endpoint_url": moto_url}}))
