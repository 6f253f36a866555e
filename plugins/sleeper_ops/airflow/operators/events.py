"""Event-driven ingest's first task: the S3 event messages that started the run, landed in
the table's ingest queue and settled on SQS (:mod:`sleeper_ops.ingest.event_landing` says
what landing guarantees; :mod:`sleeper_ops.airflow.triggers.events` how they arrive).

    from sleeper_ops.airflow.operators.events import SleeperLandEventsOperator
    land = SleeperLandEventsOperator(task_id="land_events", table="events",
                                     sqs_queue="https://sqs.eu-west-2.amazonaws.com/123456789012/raw-events")
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Optional, Sequence

from sleeper_ops.airflow import task_runner
from sleeper_ops.airflow.operators.base import SleeperOperator
from sleeper_ops.airflow.triggers.events import EVENTS_AWS_CONN_ID, events_of, later_events, messages_of
from sleeper_ops.errors import IngestError

if TYPE_CHECKING:
    from sleeper_ops.api import Table
    from sleeper_ops.ingest.events import EventMessage

log = logging.getLogger(__name__)

#: SQS's most entries in one DeleteMessageBatch
_DELETE_BATCH = 10


class SleeperLandEventsOperator(SleeperOperator):
    """Queue the files the run's SQS messages announce for the table's ingest batcher, each
    message once (its key ``sqs:<message id>``), copy files that fail validation to the
    dead letters, and delete from the queue exactly the messages so handled, ten at a time
    as they are handled. With ``visibility_seconds``, the messages not handled yet are kept
    hidden for that long again at the start and every half of it (SQS's
    ChangeMessageVisibility): a live run's messages do not come back while it works through
    a long batch; a dead run's come back that long after its last hold.

    A run with no messages (a scheduled or manual run) does nothing. The task fails, after
    settling the others, when some message could not be handled (it stays on the queue and
    comes back); the batcher task after it runs either way. A delete that SQS refuses (a
    receipt handle gone stale because the message was delivered again) is logged: the
    redelivery finds the message's key held and is settled then.

    Args:
        sqs_queue: the SQS queue URL the messages came from (templated; not ``queue``, which
            is every operator's Celery queue).
        dead_letter_prefix: where failed files are copied (default: the table's
            ``sleeper.table.ingest.events.dead.letter.prefix``, else ``s3://<bucket>/dead-letter/``).
        aws_conn_id: the Airflow AWS connection to SQS.
        visibility_seconds: how long to keep the run's messages hidden (the table's
            ``sleeper.table.ingest.events.visibility.seconds``); None: as the watcher left them.
    """

    template_fields: Sequence[str] = ("table", "sqs_queue", "dead_letter_prefix")

    def __init__(self, *, sqs_queue: str, dead_letter_prefix: Optional[str] = None,
                 aws_conn_id: str = EVENTS_AWS_CONN_ID, visibility_seconds: Optional[int] = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sqs_queue, self.dead_letter_prefix, self.aws_conn_id = sqs_queue, dead_letter_prefix, aws_conn_id
        self.visibility_seconds = visibility_seconds
        self._client: Any = None

    def execute(self, context: Any) -> dict[str, Any]:
        from sleeper_ops.ingest.event_landing import LandingReport, land_messages
        from sleeper_ops.ingest.events import EventMessage
        from statestore.properties import INGEST_EVENTS_DEAD_LETTER_PREFIX

        own = events_of(context.get("triggering_asset_events") or {}, self.table)
        later = later_events(context, self.table, own)
        if later:
            log.info("%s: %d asset events recorded after this run's own are landed too (Airflow leaves them to a "
                     "run that only a later event would start)", self.table, len(later))
        raw = messages_of([*own, *later])
        if not raw:
            log.info("%s: no queue messages started this run; nothing to land", self.table)
            return {"messages": 0}
        messages: list[EventMessage] = []
        unreadable: list[str] = []
        for m in raw:
            try:
                messages.append(EventMessage.of(m))
            except IngestError as e:
                unreadable.append(str(e))

        not_deleted = 0

        def land(t: Table) -> LandingReport:
            """Land and settle ``_DELETE_BATCH`` messages at a time: a message is deleted as
            soon as its own batch is landed, not after the whole run's (fewer come back when a
            run is slower than the visibility timeout)."""
            nonlocal not_deleted
            prefix = self.dead_letter_prefix or t.info.get(INGEST_EVENTS_DEAD_LETTER_PREFIX)
            own = [t.sleeper.objects.uri_of("")] if not t.sleeper.objects.is_local else []
            report = LandingReport()
            held_at: Optional[float] = None
            for start in range(0, len(messages), _DELETE_BATCH):
                if self.visibility_seconds and (held_at is None
                                                or time.monotonic() - held_at >= self.visibility_seconds / 2):
                    held_at = time.monotonic()
                    self._hold(messages[start:], self.visibility_seconds)
                part = land_messages(t.sleeper, t.name, messages[start:start + _DELETE_BATCH],
                                     dead_letter_prefix=prefix, own_prefixes=own)
                not_deleted += self._settle(part.settled)
                for name in ("settled", "unsettled", "queued", "repeats", "dead_letters", "ignored"):
                    getattr(report, name).extend(getattr(part, name))
            return report

        report = task_runner.run_on_table("ingest_events", self.table, land, opener=self.hook.get_conn)
        log.info("%s: %d messages: %d files queued, %d repeats, %d dead letters, %d ignored, %d left on the queue",
                 self.table, len(raw), len(report.queued), len(report.repeats), len(report.dead_letters),
                 len(report.ignored), len(report.unsettled) + len(unreadable))
        problems = [f"{mid}: {why}" for mid, why in report.unsettled] + unreadable
        if problems:
            raise IngestError(f"table {self.table}: {len(problems)} queue messages left for redelivery: "
                              + "; ".join(problems)[:2000])
        return {"messages": len(raw), "queued": report.queued, "repeats": len(report.repeats),
                "dead_letters": [f for f, _ in report.dead_letters], "not_deleted": not_deleted}

    def _sqs(self) -> Any:
        if self._client is None:
            from airflow.providers.amazon.aws.hooks.sqs import SqsHook

            self._client = SqsHook(aws_conn_id=self.aws_conn_id).get_conn()
        return self._client

    def _hold(self, messages: Sequence[EventMessage], seconds: int) -> None:
        """Hide ``messages`` for ``seconds`` from now; a refusal (a handle gone stale: the
        message was delivered again, to a later run) is logged."""
        client = self._sqs()
        for start in range(0, len(messages), _DELETE_BATCH):
            chunk = messages[start:start + _DELETE_BATCH]
            answer = client.change_message_visibility_batch(QueueUrl=self.sqs_queue, Entries=[
                {"Id": str(i), "ReceiptHandle": m.receipt_handle, "VisibilityTimeout": seconds}
                for i, m in enumerate(chunk)])
            for failed in answer.get("Failed", []):
                log.info("%s: message %s not held (%s): delivered again, a later run settles it", self.table,
                         chunk[int(failed["Id"])].message_id, failed.get("Message") or failed.get("Code"))

    def _settle(self, settled: Sequence[EventMessage]) -> int:
        """Delete ``settled`` from the queue; the number SQS refused to delete (logged)."""
        if not settled:
            return 0
        client = self._sqs()
        refused = 0
        for start in range(0, len(settled), _DELETE_BATCH):
            chunk = settled[start:start + _DELETE_BATCH]
            answer = client.delete_message_batch(QueueUrl=self.sqs_queue, Entries=[
                {"Id": str(i), "ReceiptHandle": m.receipt_handle} for i, m in enumerate(chunk)])
            for failed in answer.get("Failed", []):
                refused += 1
                log.warning("%s: message %s not deleted (%s): its redelivery will be a repeat", self.table,
                            chunk[int(failed["Id"])].message_id, failed.get("Message") or failed.get("Code"))
        return refused
