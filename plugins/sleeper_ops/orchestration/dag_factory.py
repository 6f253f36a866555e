"""The Sleeper DAGs: one per table per maintenance operation, built from the table catalog.

The files in ``dags/`` are one line each: ``globals().update(build_dags("compaction"))``.
For every table in the catalog that gives a DAG ``sleeper_<table>_<operation>``:

=====================  =============================================================
``split``              ``split`` (one task)
``compaction``         ``create_jobs`` -> ``run_local`` | ``run_spark`` -> ``report``
``gc``                 ``gc`` (one task); param ``dry_run``
``ingest_batcher``     ``ingest_batcher`` (one task)
``flush``              ``flush`` (one task): the write buffer into files
``bulk_import``        ``bulk_import`` (one task), only for tables whose property
                       ``sleeper.table.bulk.import.source`` is set: the provider's
                       Spark operator, or the amazon provider's deferrable
                       ``EmrServerlessStartJobOperator`` when the table's
                       ``sleeper.table.bulk.import.platform`` is ``emr_serverless``
                       (:mod:`sleeper_ops.orchestration.emr`)
``export``             ``export`` (one task), only for tables whose property
                       ``sleeper.table.export.destination`` is set
=====================  =============================================================

The ``bulk_import`` DAG is dated: its timetable is a data-interval cron
(``CronDataIntervalTimetable``, from ``sleeper.table.schedule.bulk_import``, default
``@daily``), its source is the property rendered on the run's data interval (e.g.
``s3://raw/events/{{ data_interval_start | ds }}/``) and its import key is the table id
plus the interval's start, so a retried, repeated or reprocessed date imports once.
Its scheduled runs start with the first interval at or after ``sleeper.table.bulk.import.start``
(:mod:`sleeper_ops.orchestration.dated_timetable`, with catchup); a manual run of any date
imports that date. Runs queue behind each other (one active run and task instance at a time) and never
skip; Airflow's own backfill (``airflow backfill create``, ``POST /api/v2/backfills``)
fills past dates. The ``export`` DAG is dated the same way (``sleeper.table.schedule.export``,
default ``@daily``): its destination is ``sleeper.table.export.destination`` rendered on
the interval and its export key the table id plus the interval's start, so a retried
or backfilled date answers "already exported" and writes nothing
(:mod:`sleeper_ops.query.export`). The maintenance DAGs refuse backfill runs (``allowed_run_types``),
saying why in one line (:func:`~sleeper_ops.orchestration.dag_problems.backfill_refusal`; the DAG's doc, the API).

Schedules come from the table property ``sleeper.table.schedule.<operation>`` (a cron
expression or preset; ``none``: manual runs only); the compaction DAG also runs when
files are committed to the table (the asset ``sleeper://<table>``, which ingest, the
batcher, bulk import and flush update with ``files`` and ``rows`` as extras). The flush DAG
also runs when the table's write buffer passes ``sleeper.table.write.buffer.flush.records``
or ``.flush.age.seconds``: an asset watcher in the triggerer (see
:mod:`sleeper_ops.airflow.triggers.buffer` for why not a sensor). The ingest batcher DAG
also runs on each batch of S3 event messages of ``sleeper.table.ingest.events.queue``,
landing them first (:mod:`sleeper_ops.orchestration.event_ingest`). The compaction DAG's ``create_jobs``
branches to ``run_local`` (in the worker) or ``run_spark`` (spark-submit of
``spark_apps/compaction.py`` in the ``spark`` pool) by the ``runner`` param, which
defaults to the table's ``sleeper.table.compaction.runner``; it takes the run's lease
as a setup task and ``report`` is its teardown, so the lease is released however the
run ends. The tasks are the provider's own operators (:mod:`sleeper_ops.airflow.operators`), the
same a user puts in a DAG of their own. What each task does, exclusivity (one run per
table per operation, through a lease in the state store) and skipping are described in
:mod:`sleeper_ops.airflow.task_runner`.

One table never breaks another: each table's DAG is built on its own, and a table whose
DAG cannot be built (a name outside the table name rule, a property the build raises on)
is logged and named in the file's import error while every other table's DAGs load
(:mod:`sleeper_ops.orchestration.dag_problems`); :func:`table_dags_problem` tells the status page.

Parsing costs one catalog query (``list_tables``), shared by the DAG files parsed in
one process within :data:`CATALOG_MAX_AGE_SECONDS`, and no other I/O. When a task runs,
Airflow's parsing context names its DAG, and only that DAG is built.

The catalog is that of ``SLEEPER_HOME`` (or ``./.sleeper``); without one, that of the
Airflow connection ``sleeper_default`` (how a DAG processor or Celery worker with no
Sleeper files of its own finds it, see ``sleeper cluster``). With neither the files
define no DAGs and log why. A catalog that cannot be read raises from the DAG file, so
Airflow shows it as that file's import error; other DAG files are unaffected.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from sleeper_ops.airflow import task_runner
from sleeper_ops.config import SleeperConfig
from sleeper_ops.errors import ConfigError
from sleeper_ops.orchestration.dag_problems import backfill_refusal, build_each, build_problem
from sleeper_ops.orchestration.dag_settings import (
    asset_schedule,
    dated_retry_delay,
    import_key_template,
    spark_deferrable,
    spark_durable,
)
from sleeper_ops.orchestration.event_ingest import ingest_tasks
from statestore.properties import (
    BULK_IMPORT_PLATFORM,
    BULK_IMPORT_SOURCE,
    COMPACTION_RUNNER,
    EXPORT_DESTINATION,
    SCHEDULES,
)

if TYPE_CHECKING:
    from airflow.sdk import DAG

    from statestore.catalog import TableInfo

log = logging.getLogger(__name__)

#: Operations with a DAG only for some tables (see :func:`has_dag`).
OPTIONAL_OPERATIONS = ("bulk_import", "export")
#: Operations with a DAG for every table.
OPERATIONS = tuple(op for op in SCHEDULES if op not in OPTIONAL_OPERATIONS)
DAG_ID_PREFIX = "sleeper_"
#: Tags every Sleeper DAG carries (plus the operation and ``table:<name>``).
TAG = "sleeper"
#: The Airflow pool capping concurrent spark-submits.
SPARK_POOL = "spark"
#: The Airflow connection naming the Spark master for spark-submit.
SPARK_CONN_ID = "sleeper_spark"
#: How long one process reuses a catalog read (DAG files parsed together share it).
CATALOG_MAX_AGE_SECONDS = 10.0
START_DATE = datetime(2024, 1, 1, tzinfo=UTC)
#: The start date of a dated bulk import DAG with a start: its tasks exist for a manual run
#: or backfill of any date; its timetable (:mod:`sleeper_ops.orchestration.dated_timetable`)
#: starts the scheduled runs at ``sleeper.table.bulk.import.start``
DATED_START_DATE = datetime(1970, 1, 1, tzinfo=UTC)


def dag_id_for(table_name: str, operation: str) -> str:
    """``sleeper_<table>_<operation>``."""
    return f"{DAG_ID_PREFIX}{table_name}_{operation}"


def table_name_of(dag_id: str, operation: str) -> Optional[str]:
    """The table of a DAG id of ``operation``, or None if it is not one."""
    suffix = f"_{operation}"
    if dag_id.startswith(DAG_ID_PREFIX) and dag_id.endswith(suffix) and len(dag_id) > len(DAG_ID_PREFIX + suffix):
        return dag_id[len(DAG_ID_PREFIX):-len(suffix)]
    return None


def has_dag(table: TableInfo, operation: str) -> bool:
    """Whether ``table`` has a DAG of ``operation`` (bulk import: when its source is
    set; export: when its destination is)."""
    if operation == "bulk_import":
        return bool(table.get(BULK_IMPORT_SOURCE))
    return operation != "export" or bool(table.get(EXPORT_DESTINATION))


def schedule_of(table: TableInfo, operation: str) -> Optional[str]:
    """The table's schedule for ``operation``; None (manual only) for ``none``."""
    value = table.get(SCHEDULES[operation])
    return None if value in (None, "", "none") else value


# ----- the catalog, read once per parse ------------------------------------------------------
_cache_lock = threading.Lock()
_cache: dict[str, tuple[float, list[TableInfo]]] = {}


def read_catalog(source: Path | SleeperConfig, *,
                 max_age_seconds: float = CATALOG_MAX_AGE_SECONDS) -> list[TableInfo]:
    """The tables of the Sleeper at home ``source`` (or of configuration ``source``): one
    ``list_tables`` query, reused by this process for ``max_age_seconds``. Raises what the
    state store raises."""
    key = str(source)
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None and time.monotonic() - hit[0] < max_age_seconds:
            return hit[1]
        from sleeper_ops.api import Sleeper

        with (Sleeper(config=source) if isinstance(source, SleeperConfig) else Sleeper(source)) as sleeper:
            tables = sleeper.tables()
        _cache[key] = (time.monotonic(), tables)
        return tables


def clear_catalog_cache() -> None:
    with _cache_lock:
        _cache.clear()


# ----- building --------------------------------------------------------------------------------
def build_dags(operation: str, *, home: Optional[Path] = None) -> dict[str, DAG]:
    """The DAGs of ``operation`` for every table, keyed by DAG id (for ``globals()``).

    When Airflow's parsing context names a DAG (a task is running), builds only that one
    (or none if it is not one of this operation's)."""
    if operation not in OPERATIONS + OPTIONAL_OPERATIONS:
        raise ValueError(f"unknown operation {operation!r}: expected one of "
                         f"{', '.join(OPERATIONS + OPTIONAL_OPERATIONS)}")
    from airflow.sdk import get_parsing_context

    wanted = get_parsing_context().dag_id
    only_table = None
    if wanted is not None:
        only_table = table_name_of(wanted, operation)
        if only_table is None:
            return {}
    source: Optional[Path | SleeperConfig] = home if home is not None else catalog_source(operation)
    if source is None:
        return {}
    tables = [t for t in read_catalog(source)
              if (only_table is None or t.name == only_table) and has_dag(t, operation)]
    return build_each(tables, operation, build_dag, dag_id_for)


def table_dags_problem(table: TableInfo) -> Optional[str]:
    """Why some DAG of ``table`` cannot be built (what the DAG files report as their
    import error), or None: the same build, memoised on the table's name and properties.
    The status page marks the table with it."""
    key = (table.table_id, table.name, tuple(sorted(table.properties.items())))
    with _cache_lock:
        if key in _problems:
            return _problems[key]
    problem = next((p for op in OPERATIONS + OPTIONAL_OPERATIONS if has_dag(table, op)
                    for p in [build_problem(table, op, build_dag)] if p is not None), None)
    with _cache_lock:
        if len(_problems) >= 10_000:
            _problems.clear()
        _problems[key] = problem
    return problem


_problems: dict[tuple[Any, ...], Optional[str]] = {}


def catalog_source(operation: str) -> Optional[Path | SleeperConfig]:
    """Where this process reads the catalog: ``SLEEPER_HOME`` (or ``./.sleeper``), else the
    configuration of the connection ``sleeper_default``; None (logged) with neither."""
    try:
        return task_runner.configured_home()
    except ConfigError as no_home:
        from sleeper_ops.airflow.hooks.sleeper import SleeperHook, connection_exists

        if connection_exists(SleeperHook.default_conn_name):
            return SleeperHook().get_config()
        log.warning("Sleeper DAGs (%s): none defined: %s, and no Airflow connection %r", operation, no_home,
                    SleeperHook.default_conn_name)
        return None


def build_dag(table: TableInfo, operation: str) -> DAG:
    """The DAG of one operation of one table (see the module docstring)."""
    from airflow.sdk import DAG, Param

    if operation in OPTIONAL_OPERATIONS:
        return _dated_dag(table, operation)
    params: dict[str, Any] = {}
    if operation == "gc":
        params["dry_run"] = Param(False, type="boolean", description="Only list the files GC would delete.")
    elif operation == "compaction":
        params["runner"] = Param(table.get(COMPACTION_RUNNER) or "local", enum=["local", "spark"],
                                 description=f"Where the jobs run (default: the table's {COMPACTION_RUNNER}).")
    dag = DAG(
        dag_id_for(table.name, operation),
        schedule=asset_schedule(table, operation, schedule_of(table, operation)),
        start_date=START_DATE,
        catchup=False,
        max_active_runs=1,
        is_paused_upon_creation=False,
        allowed_run_types=MAINTENANCE_RUN_TYPES,  # type: ignore[arg-type]  # the converter takes the values
        params=params,
        tags=[TAG, operation, f"table:{table.name}"],
        doc_md=f"Sleeper **{operation}** of table `{table.name}` (id `{table.table_id}`). "
               f"Schedule: property `sleeper.table.schedule.{operation}`. One run at a time per table and "
               f"operation (lease `{table.table_id}/{operation}`); a run finding it held is skipped. "
               + backfill_refusal(dag_id_for(table.name, operation), table.name, operation) + ".",
        default_args={"owner": "sleeper", "retries": 0},
    )
    if operation == "compaction":
        _compaction_tasks(dag, table)
    else:
        _one_task(dag, table, operation)
    return dag


#: maintenance runs now, on state as it is: a backfill of past dates means nothing to them
MAINTENANCE_RUN_TYPES = ("scheduled", "manual", "asset_triggered", "operator_triggered")


def _dated_dag(table: TableInfo, operation: str) -> DAG:
    """The dated DAG of ``bulk_import`` or ``export``: one run per data interval, keyed by
    the table id and the interval's start (see the module docstring)."""
    from airflow.sdk import DAG
    from airflow.timetables.interval import CronDataIntervalTimetable

    from sleeper_ops.airflow.operators.bulk_import import SleeperBulkImportOperator
    from sleeper_ops.airflow.sensors.import_input import SleeperImportInputSensor
    from sleeper_ops.bulk_import.dated import import_start, wait_hours
    from statestore.properties import BULK_IMPORT_START, BULK_IMPORT_WAIT_HOURS

    cron = schedule_of(table, operation) or "@daily"
    key = import_key_template(table)  # the table id and the interval start, for imports and exports alike
    start = import_start(table.get(BULK_IMPORT_START)) if operation == "bulk_import" else None
    if operation == "bulk_import":
        what = (f"**bulk import** of table `{table.name}` (id `{table.table_id}`), from "
                f"`{table.get(BULK_IMPORT_SOURCE)}` (property `{BULK_IMPORT_SOURCE}`)")
        once = (f"The first scheduled run is for the first interval starting at or after {start or START_DATE} "
                f"(property `{BULK_IMPORT_START}`), and every later interval runs in turn; a manual run or a backfill "
                "of any date imports that date. A run waits up to {wait_hours(table.properties):g} h for its input "
                f"(property `{BULK_IMPORT_WAIT_HOURS}`), then fails naming what is missing. The import key is the "
                "table id and the interval's start: a date imports once however often it runs.")
    else:
        what = (f"**export** of table `{table.name}` (id `{table.table_id}`), to "
                f"`{table.get(EXPORT_DESTINATION)}` (property `{EXPORT_DESTINATION}`)")
        once = ("The export key is the table id and the interval's start: a date exports once however often it "
                "runs (a repeat answers 'already exported').")
    timetable: Any = CronDataIntervalTimetable(cron, timezone="UTC")
    if start is not None:  # scheduled from the first interval at or after the start, none skipped
        from sleeper_ops.orchestration.dated_timetable import DatedImportTimetable

        timetable = DatedImportTimetable(cron, "UTC", start)
    dag = DAG(
        dag_id_for(table.name, operation),
        schedule=timetable,
        # with a start, tasks from the earliest date, so a manual run of a date before it imports that date
        start_date=START_DATE if start is None else DATED_START_DATE,
        catchup=start is not None,
        max_active_runs=1,
        is_paused_upon_creation=False,
        tags=[TAG, operation, f"table:{table.name}"],
        doc_md=f"Sleeper {what} rendered on the interval, one run per data interval of `{cron}` (property "
               f"`sleeper.table.schedule.{operation}`). {once} Backfill past dates with Airflow's backfill.",
        default_args={"owner": "sleeper", "retries": 2, "retry_delay": dated_retry_delay(table)},
    )
    if operation == "export":
        from sleeper_ops.airflow.operators.export import SleeperExportOperator

        SleeperExportOperator(task_id="export", dag=dag, table=table.name,
                              destination=str(table.get(EXPORT_DESTINATION)), export_key=key,
                              max_active_tis_per_dag=1)
        return dag
    source = str(table.get(BULK_IMPORT_SOURCE))
    wait = SleeperImportInputSensor(task_id="wait_for_input", dag=dag, table=table.name, source=source,
                                    import_key=key, wait_hours=wait_hours(table.properties))
    if table.get(BULK_IMPORT_PLATFORM) == "emr_serverless":
        from sleeper_ops.orchestration.emr import emr_bulk_import_task

        run = emr_bulk_import_task(dag, table, sources=source, import_key=key, max_active_tis_per_dag=1)
    else:
        run = SleeperBulkImportOperator(task_id="bulk_import", dag=dag, table=table.name, source=source,
                                        import_key=key, max_active_tis_per_dag=1, pool=SPARK_POOL,
                                        deferrable=spark_deferrable(table), durable=spark_durable(table))
    wait >> run
    return dag


def _one_task(dag: DAG, table: TableInfo, operation: str) -> None:
    from sleeper_ops.airflow.operators import maintenance

    if operation == "split":
        maintenance.SleeperSplitOperator(task_id=operation, dag=dag, table=table.name)
    elif operation == "gc":
        maintenance.SleeperGcOperator(task_id=operation, dag=dag, table=table.name, dry_run="{{ params.dry_run }}")
    elif operation == "flush":
        maintenance.SleeperFlushOperator(task_id=operation, dag=dag, table=table.name)
    else:
        ingest_tasks(dag, table)


def _compaction_tasks(dag: DAG, table: TableInfo) -> None:
    from sleeper_ops.airflow.operators import compaction as ops
    from sleeper_ops.airflow.operators.spark_compaction import SleeperSparkCompactionOperator

    create = ops.SleeperCreateCompactionJobsOperator(task_id="create_jobs", dag=dag, table=table.name,
                                                     runner="{{ params.runner }}")
    run_local = ops.SleeperRunCompactionJobsOperator(task_id=task_runner.RUN_LOCAL_TASK, dag=dag, table=table.name)
    run_spark = SleeperSparkCompactionOperator(task_id=task_runner.RUN_SPARK_TASK, dag=dag, table=table.name,
                                               conn_id=SPARK_CONN_ID, pool=SPARK_POOL,
                                               deferrable=spark_deferrable(table), durable=spark_durable(table))
    report = ops.SleeperCompactionReportOperator(task_id="report", dag=dag, table=table.name)
    create >> [run_local, run_spark] >> report
    report.as_teardown(setups=create)
