"""Event-driven ingest, the pure part (sleeper_ops.ingest.events): S3 event bodies as AWS
sends them, the test event, other events, dead-letter keys; the message's idempotency key;
and the two table properties."""

from __future__ import annotations

import json

import pytest

from sleeper_ops.ingest.events import (
    EventMessage,
    EventMessageError,
    dead_letter_uris,
    parse_message,
    request_id_of,
    s3_event_body,
)
from statestore.errors import PropertyError
from statestore.properties import (
    INGEST_EVENTS_DEAD_LETTER_PREFIX,
    INGEST_EVENTS_QUEUE,
    INGEST_EVENTS_VISIBILITY_SECONDS,
    validate_properties,
)


def msg(body: str, mid: str = "m-1") -> EventMessage:
    return EventMessage(mid, "rh-1", body)


# an ObjectCreated notification exactly as S3 sends it (trimmed of nothing but identities)
AWS_BODY = json.dumps({"Records": [{
    "eventVersion": "2.1", "eventSource": "aws:s3", "awsRegion": "eu-west-2",
    "eventTime": "2026-11-27T16:00:00.000Z", "eventName": "ObjectCreated:Put",
    "userIdentity": {"principalId": "AWS:X"}, "requestParameters": {"sourceIPAddress": "10.0.0.1"},
    "responseElements": {"x-amz-request-id": "R", "x-amz-id-2": "I"},
    "s3": {"s3SchemaVersion": "1.0", "configurationId": "sleeper-events",
           "bucket": {"name": "raw", "ownerIdentity": {"principalId": "X"}, "arn": "arn:aws:s3:::raw"},
           "object": {"key": "in/day+1/part%3D0.parquet", "size": 1024, "eTag": "e", "sequencer": "0A"}}}]})


def test_an_object_created_record_announces_its_file_with_the_key_url_decoded() -> None:
    got = parse_message(msg(AWS_BODY))
    assert got.files == ("s3://raw/in/day 1/part=0.parquet",)
    assert got.ignored == ()


def test_the_test_event_s3_sends_on_configuration_announces_nothing() -> None:
    body = json.dumps({"Service": "Amazon S3", "Event": "s3:TestEvent", "Time": "2026-11-27T16:00:00.000Z",
                       "Bucket": "raw", "RequestId": "R", "HostId": "H"})
    got = parse_message(msg(body))
    assert got.files == () and len(got.ignored) == 1 and "s3:TestEvent" in got.ignored[0]


def test_other_events_and_dead_letter_keys_announce_nothing_and_say_why() -> None:
    body = json.dumps({"Records": [
        *json.loads(s3_event_body("raw", "a.parquet", event="ObjectRemoved:Delete"))["Records"],
        *json.loads(s3_event_body("raw", "dead-letter/raw/b.parquet", "c.parquet", "c.parquet"))["Records"]]})
    got = parse_message(msg(body))
    assert got.files == ("s3://raw/c.parquet",)
    assert [line.split(": ", 1)[1] for line in got.ignored] == [
        "event ObjectRemoved:Delete, not ObjectCreated", "under the dead-letter prefix",
        "announced twice in one message"]


def test_a_configured_dead_letter_prefix_is_the_one_ignored() -> None:
    body = s3_event_body("raw", "dead-letter/x.parquet", "rejects/x.parquet")
    got = parse_message(msg(body), dead_letter_prefix="s3://raw/rejects")
    assert got.files == ("s3://raw/dead-letter/x.parquet",)


@pytest.mark.parametrize("body", ["not json", "[1]", json.dumps({"Records": "x"}), json.dumps({"a": 1}),
                                  json.dumps({"Records": [{"eventName": "ObjectCreated:Put", "s3": {}}]})])
def test_a_body_that_is_no_s3_notification_is_refused_in_one_line(body: str) -> None:
    with pytest.raises(EventMessageError, match=r"^message m-1: ") as e:
        parse_message(msg(body))
    assert "\n" not in str(e.value)


def test_a_message_of_sqs_is_read_and_one_without_a_body_refused() -> None:
    assert EventMessage.of({"MessageId": "a", "ReceiptHandle": "h", "Body": "{}"}) == EventMessage("a", "h", "{}")
    with pytest.raises(EventMessageError, match="not an SQS message"):
        EventMessage.of({"MessageId": "a"})


def test_the_request_id_is_the_message_id_so_a_redelivery_has_the_same() -> None:
    first, redelivered = EventMessage("id-7", "rh-1", AWS_BODY), EventMessage("id-7", "rh-2", AWS_BODY)
    assert request_id_of(first.message_id) == request_id_of(redelivered.message_id) == "sqs:id-7"
    assert request_id_of("id-8") != request_id_of("id-7")


def test_dead_letter_names_are_stable_and_default_to_the_files_bucket() -> None:
    assert dead_letter_uris("s3://raw/in/a.csv", None) == ("s3://raw/dead-letter/raw/in/a.csv",
                                                           "s3://raw/dead-letter/raw/in/a.csv.reason.json")
    assert dead_letter_uris("s3://raw/in/a.csv", "s3://dl/rej/")[0] == "s3://dl/rej/raw/in/a.csv"


def test_the_queue_property_takes_an_sqs_queue_url_and_refuses_anything_else_in_one_line() -> None:
    for url in ("https://sqs.eu-west-2.amazonaws.com/123456789012/events",
                "http://127.0.0.1:5000/123456789012/events", "https://sqs.us-east-1.amazonaws.com/123456789012/e.fifo"):
        assert validate_properties({INGEST_EVENTS_QUEUE: url}) == {INGEST_EVENTS_QUEUE: url}
    for bad in ("events", "s3://raw/events", "https://sqs.eu-west-2.amazonaws.com/events"):
        with pytest.raises(PropertyError, match=rf"^property {INGEST_EVENTS_QUEUE}=.*expected an SQS queue URL"):
            validate_properties({INGEST_EVENTS_QUEUE: bad})


def test_a_dead_letter_prefix_without_a_queue_is_refused() -> None:
    with pytest.raises(PropertyError, match=f"{INGEST_EVENTS_DEAD_LETTER_PREFIX} is set but {INGEST_EVENTS_QUEUE}"):
        validate_properties({INGEST_EVENTS_DEAD_LETTER_PREFIX: "s3://raw/rejects"})
    with pytest.raises(PropertyError, match="expected an s3://bucket/prefix URI"):
        validate_properties({INGEST_EVENTS_QUEUE: "http://h:1/123456789012/q", INGEST_EVENTS_DEAD_LETTER_PREFIX: "x"})


def test_a_visibility_timeout_below_its_floor_or_without_a_queue_is_refused() -> None:
    queue = {INGEST_EVENTS_QUEUE: "http://h:1/123456789012/q"}
    accepted = validate_properties({**queue, INGEST_EVENTS_VISIBILITY_SECONDS: "10"})
    assert accepted[INGEST_EVENTS_VISIBILITY_SECONDS] == "10"
    with pytest.raises(PropertyError, match="must be at least 10: the task renews the hold every half of it"):
        validate_properties({**queue, INGEST_EVENTS_VISIBILITY_SECONDS: "9"})
    with pytest.raises(PropertyError, match=f"{INGEST_EVENTS_VISIBILITY_SECONDS} is set but {INGEST_EVENTS_QUEUE}"):
        validate_properties({INGEST_EVENTS_VISIBILITY_SECONDS: "30"})


def test_sleepers_own_objects_in_a_watched_bucket_are_never_announced() -> None:
    body = s3_event_body("raw", "sleeper/data/t1/f.parquet", "sleeper/database.parquet")
    got = parse_message(msg(body), own_prefixes=["s3://raw/sleeper/data/"])
    assert got.files == ("s3://raw/sleeper/database.parquet",)
    assert got.ignored == ("s3://raw/sleeper/data/t1/f.parquet: one of Sleeper's own objects",)
