"""Event-driven ingest, the pure part: S3 event notifications as SQS delivers them, read
into the files they announce; the idempotency key of a message; where a file that fails
validation is copied (its dead letter). No I/O here: :mod:`sleeper_ops.ingest.event_landing`
acts on what these functions decide.

**Messages.** A message is what SQS's ``ReceiveMessage`` returns (``MessageId``,
``ReceiptHandle``, ``Body``). Its body is an S3 event notification as AWS sends it:
``{"Records": [{"eventName": "ObjectCreated:Put", "s3": {"bucket": {"name": ...},
"object": {"key": ...}}}, ...]}``, the key URL-encoded (``+`` for a space). Records of
other events (``ObjectRemoved:*``, ...) and the ``s3:TestEvent`` message S3 sends when a
notification is configured announce no file. Keys under the dead-letter prefix are never
announced (a dead letter copied into a watched bucket must not be read again), nor keys
under the instance's own object store (``own_prefixes``): its data files, written into a
watched bucket, would otherwise be ingested again, and again. A body that
is not an S3 event notification at all is refused with :class:`EventMessageError`: such a
message is left on the queue for the queue's own redrive policy, never dropped.

**Exactly once.** Each message is its own ingest request, keyed ``sqs:<message id>``
(:func:`request_id_of`): SQS gives a redelivered message the id it had, so a redelivery,
a second DAG run over the same batch, or a batch regrouped differently queues nothing
twice. A batch-wide key would not do: the same message in two different batches would
get two keys.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence
from urllib.parse import unquote_plus

from sleeper_ops.errors import IngestError

#: the event S3 sends to a queue when a bucket notification to it is configured
S3_TEST_EVENT = "s3:TestEvent"
#: the folder dead letters go under, in the file's own bucket, when the table sets no prefix
DEFAULT_DEAD_LETTER_FOLDER = "dead-letter"
#: the suffix of the reason object written beside each dead letter
REASON_SUFFIX = ".reason.json"


class EventMessageError(IngestError):
    """A queue message that is not an S3 event notification (one line saying why)."""


@dataclass(frozen=True)
class EventMessage:
    """One SQS message: its id (stable across redeliveries), its receipt handle (this
    delivery's, to settle it with) and its body."""

    message_id: str
    receipt_handle: str
    body: str

    @classmethod
    def of(cls, message: Mapping[str, Any]) -> EventMessage:
        """The message of an SQS ``ReceiveMessage`` answer's ``Messages`` entry; a
        message without an id or body is refused with :class:`EventMessageError`."""
        try:
            return cls(str(message["MessageId"]), str(message.get("ReceiptHandle", "")), str(message["Body"]))
        except (KeyError, TypeError) as e:
            raise EventMessageError(f"not an SQS message (no {e}): {str(message)[:120]}") from None


@dataclass(frozen=True)
class AnnouncedFiles:
    """What one message announces: the ``s3://`` URIs of the objects created, in the
    order of its records, and one line for each record that announces nothing."""

    message: EventMessage
    files: tuple[str, ...]
    ignored: tuple[str, ...]


def request_id_of(message_id: str) -> str:
    """The idempotency key of the ingest request of one message: ``sqs:<message id>``."""
    return f"sqs:{message_id}"


def dead_letter_base(bucket: str, prefix: Optional[str]) -> str:
    """The ``s3://`` prefix (ending ``/``) dead letters of files of ``bucket`` go under:
    the table's ``prefix``, else ``s3://<bucket>/dead-letter/``."""
    base = prefix if prefix else f"s3://{bucket}/{DEFAULT_DEAD_LETTER_FOLDER}"
    return base.rstrip("/") + "/"


def dead_letter_uris(uri: str, prefix: Optional[str]) -> tuple[str, str]:
    """Where the file ``uri`` (``s3://bucket/key``) is copied when it fails validation,
    and where the reason object beside it goes: ``<base>/<bucket>/<key>`` and that plus
    ``.reason.json`` (:func:`dead_letter_base`). The same file always gets the same
    names, so a second try overwrites its own first."""
    bucket, key = split_s3_uri(uri)
    copy = f"{dead_letter_base(bucket, prefix)}{bucket}/{key}"
    return copy, copy + REASON_SUFFIX


def split_s3_uri(uri: str) -> tuple[str, str]:
    """``(bucket, key)`` of ``s3://bucket/key``; anything else refused (IngestError)."""
    bucket, _, key = uri[len("s3://"):].partition("/") if uri.startswith("s3://") else ("", "", "")
    if not bucket or not key:
        raise IngestError(f"{uri}: not an s3://bucket/key URI")
    return bucket, key


def parse_message(message: EventMessage, *, dead_letter_prefix: Optional[str] = None,
                  own_prefixes: Sequence[str] = ()) -> AnnouncedFiles:
    """The files ``message`` announces (see the module docstring); ``own_prefixes``: the
    ``s3://`` roots of the instance's own objects.

    Raises:
        EventMessageError: the body is not JSON, or neither an S3 test event nor a
            notification with a list of ``Records``, or a record lacks its bucket or key.
    """
    try:
        body = json.loads(message.body)
    except ValueError:
        raise EventMessageError(f"message {message.message_id}: the body is not JSON: "
                                f"{message.body[:80]!r}") from None
    if not isinstance(body, dict):
        raise EventMessageError(f"message {message.message_id}: the body is not an S3 event notification")
    if body.get("Event") == S3_TEST_EVENT:
        return AnnouncedFiles(message, (), (f"message {message.message_id}: an {S3_TEST_EVENT}",))
    records = body.get("Records")
    if not isinstance(records, list):
        raise EventMessageError(f"message {message.message_id}: the body is not an S3 event notification "
                                "(no Records list)")
    files: list[str] = []
    ignored: list[str] = []
    for i, record in enumerate(records):
        name = str(record.get("eventName", "")) if isinstance(record, dict) else ""
        try:
            bucket = str(record["s3"]["bucket"]["name"])
            key = unquote_plus(str(record["s3"]["object"]["key"]))
        except (KeyError, TypeError):
            raise EventMessageError(f"message {message.message_id}: record {i} names no s3 bucket and "
                                    "object key") from None
        uri = f"s3://{bucket}/{key}"
        if not name.startswith("ObjectCreated:"):
            ignored.append(f"{uri}: event {name or '(none)'}, not ObjectCreated")
        elif uri.startswith(dead_letter_base(bucket, dead_letter_prefix)):
            ignored.append(f"{uri}: under the dead-letter prefix")
        elif any(uri.startswith(p.rstrip("/") + "/") for p in own_prefixes):
            ignored.append(f"{uri}: one of Sleeper's own objects")
        elif uri in files:
            ignored.append(f"{uri}: announced twice in one message")
        else:
            files.append(uri)
    return AnnouncedFiles(message, tuple(files), tuple(ignored))


def s3_event_body(bucket: str, *keys: str, event: str = "ObjectCreated:Put") -> str:
    """The body S3 sends for objects ``keys`` created in ``bucket`` (one record each;
    keys URL-encoded as S3 encodes them): for tests and the cluster's checks."""
    from urllib.parse import quote_plus

    return json.dumps({"Records": [
        {"eventVersion": "2.1", "eventSource": "aws:s3", "eventName": event,
         "s3": {"s3SchemaVersion": "1.0", "bucket": {"name": bucket, "arn": f"arn:aws:s3:::{bucket}"},
                "object": {"key": quote_plus(k, safe="/")}}} for k in keys]})
