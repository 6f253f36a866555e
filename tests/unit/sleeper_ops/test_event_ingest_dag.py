"""Event-driven ingest in the table's ingest DAG: with ``sleeper.table.ingest.events.queue``
the DAG is scheduled on its cron or the asset ``sleeper://<table>/events`` watched by the
common.messaging ``MessageQueueTrigger`` (SQS, messages left on the queue), and
``land_events`` runs before the batcher; without it the DAG is as before. The messages a
run reads from its triggering asset events, each id once."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from sleeper_ops.airflow.triggers.events import events_asset, events_of, later_events, messages_of
from sleeper_ops.orchestration.dag_factory import build_dag
from statestore.catalog import TableInfo
from statestore.properties import (
    INGEST_EVENTS_DEAD_LETTER_PREFIX,
    INGEST_EVENTS_QUEUE,
    INGEST_EVENTS_VISIBILITY_SECONDS,
    SCHEDULE_INGEST_BATCHER,
)
from statestore.schema import Schema

SCHEMA = Schema.from_dict({"rowKeyFields": [{"name": "k", "type": "LongType"}]})
QUEUE = "http://127.0.0.1:5000/123456789012/raw-events"


def watched(dag: Any) -> list[tuple[str, str, dict[str, Any]]]:
    """(asset URI, trigger class path, trigger kwargs) of each watcher the DAG is scheduled on."""
    schedule = dag.schedule
    assets = schedule if isinstance(schedule, list) else [a for _, a in schedule.asset_condition.iter_assets()]
    out = []
    for asset in assets:
        for w in asset.watchers:
            path, kwargs = ((w.trigger["classpath"], w.trigger["kwargs"]) if isinstance(w.trigger, dict)
                            else w.trigger.serialize())
            out.append((asset.uri, path, kwargs))
    return out


def test_a_table_with_an_events_queue_gets_an_ingest_dag_on_its_cron_or_the_watched_queue() -> None:
    dag = build_dag(TableInfo("tid", "events", SCHEMA, {INGEST_EVENTS_QUEUE: QUEUE,
                                                       INGEST_EVENTS_DEAD_LETTER_PREFIX: "s3://raw/rejects"}),
                    "ingest_batcher")
    ((uri, path, kwargs),) = watched(dag)
    assert uri == "sleeper://events/events"
    assert path == "airflow.providers.amazon.aws.triggers.sqs.SqsSensorTrigger"
    assert kwargs["sqs_queue"] == QUEUE and kwargs["delete_message_on_reception"] is False
    # up to 100 messages an event, short receives, a second's pause when idle, hidden 15 minutes while
    # waiting for their run (the task then holds them for the table's visibility)
    assert (kwargs["max_messages"], kwargs["num_batches"], kwargs["wait_time_seconds"], kwargs["waiter_delay"],
            kwargs["visibility_timeout"]) == (10, 10, 0, 1, 900)
    assert dag.timetable.summary.startswith("Asset or")  # the cron still runs the batcher
    land, batcher = dag.get_task("land_events"), dag.get_task("ingest_batcher")
    assert land.downstream_task_ids == {"ingest_batcher"} and batcher.trigger_rule == "all_done"
    assert batcher.send_now is True  # what a run's messages announced is ingested in that run
    # a try lost with its worker is retried at once on the run's same messages
    assert (land.retries, land.retry_delay.total_seconds(), batcher.retries) == (2, 5.0, 0)
    assert [a.uri for a in land.inlets] == ["sleeper://events/events"]  # to read the events after its own
    assert land.sqs_queue == QUEUE and land.dead_letter_prefix == "s3://raw/rejects"


def test_the_event_ingest_dag_serializes_and_its_tasks_go_to_the_default_celery_queue() -> None:
    from airflow.serialization.serialized_objects import DagSerialization

    dag = build_dag(TableInfo("tid", "events", SCHEMA, {INGEST_EVENTS_QUEUE: QUEUE}), "ingest_batcher")
    tasks = DagSerialization.to_dict(dag)["dag"]["tasks"]  # what the DAG processor stores
    assert len(tasks) == 2
    # the SQS queue is the operator's sqs_queue, never BaseOperator.queue (the Celery queue)
    assert [t.queue for t in dag.tasks] == ["default", "default"]
    assert dag.get_task("land_events").sqs_queue == QUEUE


def test_with_the_cron_none_the_queue_alone_runs_it() -> None:
    dag = build_dag(TableInfo("tid", "events", SCHEMA, {INGEST_EVENTS_QUEUE: QUEUE, SCHEDULE_INGEST_BATCHER: "none"}),
                    "ingest_batcher")
    assert [(uri, kwargs["sqs_queue"]) for uri, _, kwargs in watched(dag)] == [("sleeper://events/events", QUEUE)]
    assert not hasattr(dag.timetable, "summary") or "Asset or" not in dag.timetable.summary


def test_a_table_without_a_queue_keeps_its_one_task_cron_dag() -> None:
    dag = build_dag(TableInfo("tid", "events", SCHEMA, {}), "ingest_batcher")
    assert [t.task_id for t in dag.tasks] == ["ingest_batcher"]
    assert dag.get_task("ingest_batcher").trigger_rule == "all_success"
    assert dag.get_task("ingest_batcher").send_now is False  # the table's batching limits as before
    assert dag.schedule == "* * * * *"


def test_the_tables_visibility_timeout_is_the_land_tasks_hold_not_the_watchers() -> None:
    dag = build_dag(TableInfo("tid", "events", SCHEMA, {INGEST_EVENTS_QUEUE: QUEUE,
                                                       INGEST_EVENTS_VISIBILITY_SECONDS: "15"}), "ingest_batcher")
    assert dag.get_task("land_events").visibility_seconds == 15  # a dead run's messages back 15 s after its hold
    assert [kwargs["visibility_timeout"] for _, _, kwargs in watched(dag)] == [900]  # waiting for a run


def test_the_watcher_asset_is_named_by_the_table() -> None:
    asset = events_asset("t1", QUEUE)
    assert asset.uri == asset.name == "sleeper://t1/events"
    assert asset.watchers[0].name == "sleeper_t1_events"


@dataclass(frozen=True)
class Key:
    uri: str


def event(*messages: dict) -> SimpleNamespace:
    return SimpleNamespace(extra={"from_trigger": True, "payload": {"status": "success",
                                                                   "message_batch": list(messages)}})


def test_a_run_reads_each_message_once_with_its_latest_receipt_handle_and_no_other_asset() -> None:
    a1, b1 = {"MessageId": "a", "ReceiptHandle": "a1", "Body": "{}"}, {"MessageId": "b", "ReceiptHandle": "b1",
                                                                         "Body": "{}"}
    a2 = {**a1, "ReceiptHandle": "a2"}
    mine, other = Key("sleeper://t/events"), Key("sleeper://u/events")
    got = messages_of(events_of({mine: [event(a1, b1), event(a2)], other: [event({"MessageId": "c"})]}, "t"))
    assert [(m["MessageId"], m["ReceiptHandle"]) for m in got] == [("b", "b1"), ("a", "a2")]
    assert messages_of(events_of({}, "t")) == []


class FakeInletEvents:
    """``context["inlet_events"]`` of a task with the events asset as inlet: its events, and
    what the task asked of them."""

    def __init__(self, events: list[Any]) -> None:
        self.events = events
        self.asked: list[Any] = []

    def __getitem__(self, asset: Any) -> FakeInletEvents:
        self.asked.append(("asset", asset.uri))
        return self

    def after(self, when: str) -> FakeInletEvents:
        self.asked.append(("after", when))
        return self

    def limit(self, n: int) -> list[Any]:
        self.asked.append(("limit", n))
        return self.events


def test_a_run_also_lands_the_events_recorded_after_its_own() -> None:
    from datetime import UTC, datetime

    t = [datetime(2026, 1, 1, 0, 0, s, tzinfo=UTC) for s in range(4)]
    own = [SimpleNamespace(timestamp=t[0], extra={}), SimpleNamespace(timestamp=t[1], extra={})]
    newer, same = SimpleNamespace(timestamp=t[3], extra={}), SimpleNamespace(timestamp=t[1], extra={})
    inlet = FakeInletEvents([same, newer])
    assert later_events({"inlet_events": inlet}, "t", own) == [newer]  # an event at the same instant is its own
    assert inlet.asked == [("asset", "sleeper://t/events"), ("after", t[1].isoformat()), ("limit", 100)]
    assert later_events({"inlet_events": inlet}, "t", []) == []  # a scheduled or manual run: none
    assert later_events({}, "t", own) == []  # no task runner
