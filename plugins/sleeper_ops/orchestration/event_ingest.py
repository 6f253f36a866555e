"""Event-driven ingest in the table's ingest DAG (``sleeper_<table>_ingest_batcher``): for
a table whose ``sleeper.table.ingest.events.queue`` is set, the DAG also runs for every
batch of messages on that SQS queue (the watched asset ``sleeper://<table>/events``,
:mod:`sleeper_ops.airflow.triggers.events`), and its first task ``land_events`` queues the
files they announce before ``ingest_batcher`` ingests the queue. A table without the
property keeps its DAG as it was."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any, Optional

from statestore.properties import (
    INGEST_EVENTS_DEAD_LETTER_PREFIX,
    INGEST_EVENTS_QUEUE,
    INGEST_EVENTS_VISIBILITY_SECONDS,
)

if TYPE_CHECKING:
    from airflow.sdk import DAG

    from statestore.catalog import TableInfo

#: the task that lands the run's queue messages
LAND_TASK = "land_events"
#: tries after the first: a try lost with its worker is followed by one that lands the same
#: messages (the run's asset events, their receipt handles still valid: the watcher hid them
#: for 15 minutes), what the lost try landed being repeats; so a lost worker delays them by
#: the scheduler's heartbeat timeout and this delay, not by a visibility timeout
LAND_RETRIES = 2
LAND_RETRY_DELAY_SECONDS = 5


def events_queue(table: TableInfo) -> Optional[str]:
    """The table's events queue URL, None when it has none."""
    return table.get(INGEST_EVENTS_QUEUE) or None


def ingest_schedule(table: TableInfo, cron: Optional[str]) -> Any:
    """The ingest DAG's schedule: ``cron`` alone without an events queue; with one, the
    cron *or* the queue's asset (the asset alone when ``cron`` is None)."""
    queue = events_queue(table)
    if queue is None:
        return cron
    from airflow.timetables.assets import AssetOrTimeSchedule
    from airflow.timetables.trigger import CronTriggerTimetable

    from sleeper_ops.airflow.triggers.events import events_asset

    asset = events_asset(table.name, queue)
    if cron is None:
        return [asset]
    return AssetOrTimeSchedule(timetable=CronTriggerTimetable(cron, timezone="UTC"), assets=[asset])


def ingest_tasks(dag: DAG, table: TableInfo) -> None:
    """The ingest DAG's tasks: ``ingest_batcher``; with an events queue, ``land_events``
    before it, and the batcher, which runs however landing ended (files landed before a
    failure are ingested at once), sends every pending request at once instead of waiting
    for the table's batcher job min size or max age (its max size and max files still cut
    the jobs): a file is ingested in the run its message started."""
    from sleeper_ops.airflow.operators.ingest import SleeperIngestBatcherOperator

    queue = events_queue(table)
    batcher = SleeperIngestBatcherOperator(task_id="ingest_batcher", dag=dag, table=table.name,
                                           send_now=queue is not None,
                                           trigger_rule="all_success" if queue is None else "all_done")
    if queue is None:
        return
    from sleeper_ops.airflow.operators.events import SleeperLandEventsOperator
    from sleeper_ops.airflow.triggers.events import events_asset

    land = SleeperLandEventsOperator(task_id=LAND_TASK, dag=dag, table=table.name, sqs_queue=queue,
                                     retries=LAND_RETRIES, retry_delay=timedelta(seconds=LAND_RETRY_DELAY_SECONDS),
                                     inlets=[events_asset(table.name, queue)],  # read: later_events
                                     dead_letter_prefix=table.get(INGEST_EVENTS_DEAD_LETTER_PREFIX),
                                     visibility_seconds=table.get_int(INGEST_EVENTS_VISIBILITY_SECONDS))
    land >> batcher
