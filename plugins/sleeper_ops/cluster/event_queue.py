"""The event-driven ingest queue of ``sleeper cluster`` on its moto server: an SQS queue
fed by the bucket's S3 event notifications, as on AWS.

:func:`create_event_queue` makes the queue (visibility timeout as the watcher's, a
redrive policy sending a message received :data:`MAX_RECEIVES` times to ``<name>-dead``,
so a message that is not an S3 notification leaves in the end) and the bucket
notification of every ``ObjectCreated`` under :data:`EVENTS_PREFIX` only: the cluster's
table data (``data/``), task logs and dead letters are in the same bucket and must never
be announced. Both calls are idempotent: a second call finds the queue and rewrites the
same notification. A table uses it by setting ``sleeper.table.ingest.events.queue`` to the
URL returned (``sleeper cluster`` prints it).
"""

from __future__ import annotations

import json
from typing import Any

#: the queue ``sleeper cluster`` makes
EVENTS_QUEUE = "sleeper-ingest-events"
#: the keys whose creation is announced: files to ingest are uploaded under it
EVENTS_PREFIX = "incoming/"
#: deliveries before a message goes to the queue's dead-letter queue: a redelivery is
#: harmless (a repeat), so the limit is high; it only has to end a message that is no S3
#: notification (and a file's message under a long backlog must not reach it)
MAX_RECEIVES = 10
#: the queue's visibility timeout, for receives that name none (a table's watcher names
#: its own, sleeper_ops.airflow.triggers.events.WAITING_VISIBILITY_SECONDS, the same)
VISIBILITY_TIMEOUT_SECONDS = 900


def create_event_queue(endpoint: str, bucket: str, *, access_key: str, secret_key: str, region: str,
                       queue: str = EVENTS_QUEUE, prefix: str = EVENTS_PREFIX) -> str:
    """Make the queue, its dead-letter queue and ``bucket``'s notification to it (see the
    module docstring) on the AWS endpoint ``endpoint``; return the queue's URL."""
    import boto3

    options: dict[str, Any] = {"endpoint_url": endpoint, "aws_access_key_id": access_key,
                               "aws_secret_access_key": secret_key, "region_name": region}
    sqs, s3 = boto3.client("sqs", **options), boto3.client("s3", **options)
    dead = sqs.create_queue(QueueName=f"{queue}-dead")["QueueUrl"]
    dead_arn = _arn(sqs, dead)
    url: str = sqs.create_queue(QueueName=queue, Attributes={
        "VisibilityTimeout": str(VISIBILITY_TIMEOUT_SECONDS),
        "RedrivePolicy": json.dumps({"deadLetterTargetArn": dead_arn, "maxReceiveCount": str(MAX_RECEIVES)})})[
        "QueueUrl"]
    s3.put_bucket_notification_configuration(Bucket=bucket, NotificationConfiguration={"QueueConfigurations": [
        {"Id": "sleeper-ingest-events", "QueueArn": _arn(sqs, url), "Events": ["s3:ObjectCreated:*"],
         "Filter": {"Key": {"FilterRules": [{"Name": "prefix", "Value": prefix}]}}}]})
    return url


def _arn(sqs: Any, url: str) -> str:
    arn: str = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return arn
