"""What a table's properties say about the DAGs the factory builds for it
(:mod:`sleeper_ops.orchestration.dag_factory`): the dated runs' import key and retry
delay, and how its Spark tasks wait. Each reads one property of the registry
(:mod:`statestore.properties`), its default when the table does not set it."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from statestore.properties import DATED_RETRY_DELAY_SECONDS, SPARK_DEFERRABLE, SPARK_DURABLE

if TYPE_CHECKING:
    from statestore.catalog import TableInfo


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
