"""Event-driven ingest's asset watcher: the table's SQS queue of S3 event notifications,
watched in the triggerer by the common.messaging provider's ``MessageQueueTrigger`` (the
amazon provider's SQS queue behind it, ``scheme="sqs"``).

Each batch of messages the trigger receives becomes an asset event of
``sleeper://<table>/events`` whose extra holds the messages (``payload.message_batch``,
as SQS returned them); the table's ingest DAG is scheduled on that asset and its
``land_events`` task (:class:`sleeper_ops.airflow.operators.events.SleeperLandEventsOperator`)
reads them from the run's triggering asset events.

The trigger does **not** delete what it receives (``delete_message_on_reception=False``):
a message is settled by the task once its files are queued or dead-lettered, never
before. What it receives stays hidden for :data:`WAITING_VISIBILITY_SECONDS`, long enough
to wait behind a long run (one run at a time) without being delivered again; once its
run's task starts, the task keeps it hidden for the table's
``sleeper.table.ingest.events.visibility.seconds`` at a time, so a run that died has its
messages delivered again that long after (another run then finds the keys of those it had
landed and queues nothing twice: :mod:`sleeper_ops.ingest.events`). Every delivery counts
towards the queue's redrive limit: a short visibility here would send a backlog's messages
to the dead-letter queue before their run came.

Latency: the trigger makes up to :data:`RECEIVES_PER_EVENT` short receives of
:data:`MAX_MESSAGES` (up to 100 messages per event, so a burst of uploads is taken in few
events; an empty receive returns at once instead of holding the event back), and pauses
:data:`EMPTY_PAUSE_SECONDS` after finding nothing: a message waits about a second before
its event, and an idle table costs :data:`RECEIVES_PER_EVENT` receives a second. The
triggerer starts the trigger again after each event (Airflow keeps a watcher's trigger
while an asset names it).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

#: the most asset events recorded after a run's own that the run lands too (:func:`later_events`)
LATER_EVENTS = 100
#: the Airflow AWS connection the watcher and the task reach SQS with
EVENTS_AWS_CONN_ID = "aws_default"
#: SQS's most messages per receive
MAX_MESSAGES = 10
#: how long a message the watcher received stays hidden while its run waits to start
WAITING_VISIBILITY_SECONDS = 900
#: receives per event (SQS's ``num_batches`` of the trigger): up to 100 messages an event
RECEIVES_PER_EVENT = 10
#: short polling: a receive on an empty queue answers at once (a long poll would hold
#: every event back by its wait once the queue is drained)
WAIT_TIME_SECONDS = 0
#: the pause after receives that found nothing, before the next
EMPTY_PAUSE_SECONDS = 1


def events_asset_uri(table: str) -> str:
    """``sleeper://<table>/events``: the asset the table's queue messages arrive as."""
    return f"sleeper://{table}/events"


def events_asset(table: str, queue: str, *, aws_conn_id: str = EVENTS_AWS_CONN_ID) -> Any:
    """The asset ``sleeper://<table>/events`` watched by a ``MessageQueueTrigger`` on the
    SQS queue ``queue`` (a URL): one asset event per batch of at most
    :data:`RECEIVES_PER_EVENT` x :data:`MAX_MESSAGES` messages, the messages left on the
    queue for the ingest task to settle and hidden from other receives for
    :data:`WAITING_VISIBILITY_SECONDS`."""
    from airflow.providers.common.messaging.triggers.msg_queue import MessageQueueTrigger
    from airflow.sdk import Asset, AssetWatcher

    trigger = MessageQueueTrigger(scheme="sqs", sqs_queue=queue, aws_conn_id=aws_conn_id,
                                  max_messages=MAX_MESSAGES, num_batches=RECEIVES_PER_EVENT,
                                  wait_time_seconds=WAIT_TIME_SECONDS, visibility_timeout=WAITING_VISIBILITY_SECONDS,
                                  delete_message_on_reception=False, waiter_delay=EMPTY_PAUSE_SECONDS)
    uri = events_asset_uri(table)
    return Asset(uri=uri, name=uri, watchers=[AssetWatcher(name=f"sleeper_{table}_events", trigger=trigger)])


def events_of(triggering_asset_events: Mapping[Any, Iterable[Any]], table: str) -> list[Any]:
    """The run's asset events of ``sleeper://<table>/events`` (events of other assets are not read)."""
    uri = events_asset_uri(table)
    return [event for asset, events in triggering_asset_events.items()
            if (asset if isinstance(asset, str) else getattr(asset, "uri", None)) == uri for event in events]


def later_events(context: Mapping[str, Any], table: str, events: Iterable[Any]) -> list[Any]:
    """The events of ``sleeper://<table>/events`` recorded after the latest of ``events`` (at
    most :data:`LATER_EVENTS`), read through the task's inlet of that asset.

    Airflow queues a DAG's asset events while its one run goes on, and the next run takes
    the events up to the first of them: the ones recorded after, while that run waited to
    be created, are left to a run that only a later event starts (apache/airflow#56050,
    open for Airflow 3.3; #70972 reworks the queue for 3.4). A run that lands them too
    leaves nothing behind (the run that later takes them finds repeats). [] when the
    run has no such events or the context has no inlet events (a task run outside
    Airflow's task runner)."""
    stamps = [t for t in (getattr(e, "timestamp", None) for e in events) if t is not None]
    inlet_events = context.get("inlet_events")
    if not stamps or inlet_events is None:
        return []
    from airflow.sdk import Asset

    uri = events_asset_uri(table)
    latest = max(stamps)
    accessor = inlet_events[Asset(uri=uri, name=uri)]
    after = accessor.after(latest.isoformat() if hasattr(latest, "isoformat") else str(latest)).limit(LATER_EVENTS)
    return [e for e in after if getattr(e, "timestamp", None) is None or e.timestamp > latest]


def messages_of(events: Iterable[Any]) -> list[dict[str, Any]]:
    """The SQS messages asset events of ``sleeper://<table>/events`` carry
    (:func:`events_of`, :func:`later_events`), each message id once (a message received
    twice keeps its latest receipt handle), in the order received."""
    by_id: dict[str, dict[str, Any]] = {}
    for event in events:
        extra = getattr(event, "extra", None) or {}
        payload = extra.get("payload") or {}
        for message in payload.get("message_batch") or ():
            mid = str(message.get("MessageId", ""))
            by_id.pop(mid, None)
            by_id[mid] = message
    return list(by_id.values())
