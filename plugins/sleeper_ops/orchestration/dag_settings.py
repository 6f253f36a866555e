"""What a table's properties say about the DAGs the factory builds for it
(:mod:`sleeper_ops.orchestration.dag_factory`): the schedules that also watch an asset,
the dated runs' import key and retry delay, and how its Spark tasks wait. Each reads
properties of the registry (:mod:`statestore.properties`), their defaults when the table
does not set them."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any, Optional

from sleeper_ops.orchestration.event_ingest import ingest_schedule
from statestore.properties import DATED_RETRY_DELAY_SECONDS, SPARK_DEFERRABLE, SPARK_DURABLE

if TYPE_CHECKING:
    from statestore.catalog import TableInfo


def asset_schedule(table: TableInfo, operation: str, cron: Optional[str]) -> Any:
    """The schedule of ``table``'s ``operation`` DAG given its cron (None: ``none``):

    * compaction: the cron *or* files committed to the table (the asset ``sleeper://<table>``);
      manual only when the cron is ``none``;
    * flush: the cron *or* the write buffer past its thresholds (the watched asset
      ``sleeper://<table>/buffer``); the asset alone when the cron is ``none``;
    * ingest batcher: the cron, *or* the table's events queue when it has one
      (:func:`sleeper_ops.orchestration.event_ingest.ingest_schedule`);
    * any other: the cron.
    """
    if operation == "ingest_batcher":
        return ingest_schedule(table, cron)
    if operation == "compaction" and cron is not None:
        from sleeper_ops.airflow.assets.sleeper import table_asset

        return _cron_or(cron, table_asset(table.name))
    if operation == "flush":
        from sleeper_ops.airflow.triggers.buffer import buffer_asset
        from sleeper_ops.ingest.buffer import buffer_limits

        _, flush_records, flush_age = buffer_limits(table)
        asset = buffer_asset(table.name, flush_records=flush_records, flush_age_seconds=flush_age)
        return [asset] if cron is None else _cron_or(cron, asset)
    return cron


def _cron_or(cron: str, asset: Any) -> Any:
    from airflow.timetables.assets import AssetOrTimeSchedule
    from airflow.timetables.trigger import CronTriggerTimetable

    return AssetOrTimeSchedule(timetable=CronTriggerTimetable(cron, timezone="UTC"), assets=[asset])


def import_key_template(table: TableInfo) -> str:
    """The import key of a dated bulk import run, an Airflow template: the table id and
    the run's data interval start. The same on every platform, so a date imports once
    even across a change of ``sleeper.table.bulk.import.platform``."""
    return f"{table.table_id}/{{{{ data_interval_start.isoformat() }}}}"


def dated_retry_delay(table: TableInfo) -> timedelta:
    """How long a failed try of a dated run's task waits before it runs again
    (``sleeper.table.dated.retry.delay.seconds``, default 2 minutes)."""
    return timedelta(seconds=table.get_int(DATED_RETRY_DELAY_SECONDS))


def spark_deferrable(table: TableInfo) -> bool:
    """Whether the table's Spark tasks defer (``sleeper.table.spark.deferrable``):
    submit to the Spark service and wait in the triggerer, not in a worker slot."""
    return str(table.get(SPARK_DEFERRABLE) or "false").lower() == "true"


def spark_durable(table: TableInfo) -> bool:
    """Whether the table's blocking Spark tasks on the Spark service follow an earlier
    try's job after a dead worker (``sleeper.table.spark.durable``, default true)."""
    return str(table.get(SPARK_DURABLE) or "true").lower() == "true"
