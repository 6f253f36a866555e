"""What the Sleeper operators run: open Sleeper, take the lease, call the library.

The operators (:mod:`sleeper_ops.airflow.operators`) are thin; each calls one function
here with a way to open Sleeper (the hook's ``get_conn``). Each task:

1. opens Sleeper: from the operator's Airflow connection, or (the default connection only) from ``SLEEPER_HOME`` as
   the worker sees it (:func:`configured_home`) when there is no such connection;
2. finds its table by name; a table deleted or renamed since the DAG was parsed is skipped;
3. splitting, compaction, GC and flush skip offline tables (ingest batching still runs);
4. takes the exclusive lease ``"<table_id>/<operation>"`` (:mod:`sleeper_ops.maintenance.leases`),
   so only one run per table per operation works at a time, whether it was scheduled,
   triggered by hand or is part of a backfill;
5. calls the library and logs its report.

Ingest, bulk import and export take no lease (each task commits its own work under its own
idempotency or import key, and tasks of one table may run side by side): they go through
steps 1, 2 and 5 (:func:`run_on_table`), so a vanished table skips them the same way.

**A run that finds the lease held is skipped**: the task logs ``lease <name> held by
<holder>`` and raises ``AirflowSkipException``, so it ends at once, its DAG run counts as
successful (nothing failed: the work is being done by the holder) and the grid shows
the skip. Offline and vanished tables are skipped the same way.

Holders: the one-task DAGs hold the lease as ``{dag_id}/{run_id}/{try_number}`` for
the task's life. The compaction DAG's tasks share one lease held by the run,
``{dag_id}/{run_id}``: ``create_jobs`` takes it and keeps it (with a hand-over TTL of
:data:`HANDOVER_TTL_SECONDS`), the run task renews it while the jobs run, and the
``report`` teardown releases it whatever happened. The jobs pass from ``create_jobs`` to
the tasks after it as a JSON array (XCom key :data:`JOBS_XCOM_KEY`), given to those
operators as a templated argument. Job status records name the Airflow run as
``{dag_id}/{run_id}``.

Airflow is imported lazily here, only for ``AirflowSkipException``.
"""

from __future__ import annotations

import json
import logging
import os
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, NoReturn, Optional, Sequence, TypeVar, Union

from sleeper_ops.errors import ConfigError
from sleeper_ops.maintenance.leases import OperationLease, lease_name
from sleeper_ops.maintenance.priority import yield_cpu_for_maintenance
from statestore.errors import LeaseHeldError, SleeperError, TableNotFoundError
from statestore.properties import COMPACTION_RUNNER

if TYPE_CHECKING:
    from sleeper_ops.api import Sleeper, Table
    from sleeper_ops.compaction.jobs import CompactionJob

#: Opens a Sleeper for one task (the hook's ``get_conn``).
Opener = Callable[[], "Sleeper"]
T = TypeVar("T")

log = logging.getLogger(__name__)

#: Operations that offline tables skip (``sleeper.table.online=false``; by hand, ``sleeper flush`` still flushes).
SKIPPED_WHEN_OFFLINE = ("split", "compaction", "gc", "flush")
#: Operations whose task lowers its process to the table's ``sleeper.table.maintenance.nice`` first
#: (:mod:`sleeper_ops.maintenance.priority`; the compaction DAG's ``run_local`` task too).
YIELDING = ("split", "compaction", "gc")
#: How long a one-task operation's lease outlives its last renewal (renewed every third of it).
LEASE_TTL_SECONDS = 120.0
#: How long the compaction run's lease waits between its tasks for the next one to take it over.
HANDOVER_TTL_SECONDS = 900.0


def configured_home() -> Path:
    """The Sleeper home of this process: ``SLEEPER_HOME``, else ``./.sleeper`` if it holds a
    ``sleeper.toml``. Raises :class:`ConfigError` when there is none (never creates one)."""
    env = os.environ.get("SLEEPER_HOME")
    home = Path(env) if env else Path(".sleeper")
    if not (home / "sleeper.toml").is_file():
        where = f"SLEEPER_HOME={env}" if env else "SLEEPER_HOME is not set and ./.sleeper"
        raise ConfigError(f"no Sleeper configuration: {where} has no sleeper.toml")
    return home.absolute()


def open_sleeper() -> Sleeper:
    """Sleeper from ``SLEEPER_HOME`` (:func:`configured_home`)."""
    from sleeper_ops.api import Sleeper

    return Sleeper(configured_home())


def _skip(message: str) -> NoReturn:
    from airflow.sdk.exceptions import AirflowSkipException

    log.info("%s; skipping", message)
    raise AirflowSkipException(message)


def _take(held: ExitStack, lease: OperationLease) -> OperationLease:
    """Enter ``lease`` on ``held``; skip the task, saying who holds it, if it is held."""
    try:
        return held.enter_context(lease)
    except LeaseHeldError as e:
        _skip(str(e))


def run_label(context: dict[str, Any]) -> str:
    ti = context["ti"]
    return f"{ti.dag_id}/{ti.run_id}"


def _task_holder(context: dict[str, Any]) -> str:
    return f"{run_label(context)}/{context['ti'].try_number}"


def _open_table(sleeper: Sleeper, table_name: str, operation: str) -> Table:
    try:
        table = sleeper.table(table_name)
    except TableNotFoundError:
        _skip(f"table {table_name} no longer exists (deleted or renamed)")
    if operation in SKIPPED_WHEN_OFFLINE and not table.info.online:
        _skip(f"table {table_name} is offline")
    return table


def _summary(report: Any) -> str:
    return report.summary() if hasattr(report, "summary") else str(report)


def run_on_table(operation: str, table_name: str, work: Callable[[Table], T], *,
                 opener: Opener = open_sleeper) -> T:
    """``work(table)`` on the table as every task opens it, without a lease (steps 1, 2 and 5
    of the module docstring), and its result. Skips (AirflowSkipException) when the table no
    longer exists, or is offline and ``operation`` skips offline tables."""
    with opener() as sleeper:
        return work(_open_table(sleeper, table_name, operation))


def run_exclusive(operation: str, table_name: str, context: dict[str, Any],
                  work: Callable[[Table, str], Any], *, failures: Optional[Callable[[Any], int]] = None,
                  opener: Opener = open_sleeper) -> str:
    """Run ``work(table, run_label)`` under the table's ``operation`` lease; log and return
    its report's summary. Skips (AirflowSkipException) as the module docstring says; fails
    (SleeperError with the summary) when ``failures(report)`` counts any failed job."""
    holder = _task_holder(context)
    with opener() as sleeper, ExitStack() as held:
        table = _open_table(sleeper, table_name, operation)
        if operation in YIELDING:
            yield_cpu_for_maintenance(table.info)
        _take(held, OperationLease(sleeper.state_store, lease_name(table.info.table_id, operation), holder,
                                   ttl_seconds=LEASE_TTL_SECONDS))
        report = work(table, run_label(context))
    summary = _summary(report)
    log.info("%s", summary)
    if failures is not None and failures(report):
        raise SleeperError(f"{operation} of {table_name}: {summary}")
    reason = getattr(report, "skipped_reason", None)
    if reason:
        _skip(f"{operation} of {table_name} skipped: {reason}")
    return summary


# ----- compaction: create_jobs -> run_local | run_spark -> report ---------------------------
RUN_LOCAL_TASK = "run_local"
RUN_SPARK_TASK = "run_spark"
JOBS_XCOM_KEY = "jobs"


def compaction_lease(sleeper: Sleeper, table: Table, context: dict[str, Any], *, release: bool) -> OperationLease:
    return OperationLease(sleeper.state_store, lease_name(table.info.table_id, "compaction"), run_label(context),
                          ttl_seconds=HANDOVER_TTL_SECONDS, renew_every=LEASE_TTL_SECONDS / 3, release=release)


def chosen_runner(table_runner: Optional[str], params: Optional[dict[str, Any]]) -> str:
    """The ``runner`` param if given, else the table's runner property, else local."""
    runner = (params or {}).get("runner") or table_runner or "local"
    if runner not in ("local", "spark"):
        raise ConfigError(f"unknown compaction runner {runner!r}: expected local or spark")
    return runner


def jobs_to_json(jobs: Sequence[CompactionJob]) -> str:
    """The jobs as the JSON array the compaction operators pass on (XCom ``jobs``)."""
    return json.dumps([j.to_dict() for j in jobs], separators=(",", ":"))


def jobs_from_json(jobs: Union[str, Sequence[Any], None]) -> list[CompactionJob]:
    """Jobs from a JSON array (as rendered from XCom ``jobs``) or a list of job dicts;
    an empty string or None (no XCom: ``create_jobs`` found nothing) is no jobs."""
    from sleeper_ops.compaction.jobs import CompactionJob

    if jobs is None or (isinstance(jobs, str) and not jobs.strip()) or jobs == "None":
        return []
    raw = json.loads(jobs) if isinstance(jobs, str) else jobs
    if not isinstance(raw, list):
        raise ConfigError(f"compaction jobs must be a JSON array, got {type(raw).__name__}")
    return [j if isinstance(j, CompactionJob) else CompactionJob.from_dict(j) for j in raw]


def create_compaction_jobs(table_name: str, runner: Optional[str], context: dict[str, Any],
                           opener: Opener = open_sleeper) -> Optional[str]:
    """Take the run's compaction lease, create and assign jobs; the runner's task to
    follow (None when there are no jobs). Pushes the jobs to XCom ``jobs`` (JSON)."""
    from sleeper_ops.compaction.jobs import create_compaction_jobs as create

    ti = context["ti"]
    with opener() as sleeper:
        table = _open_table(sleeper, table_name, "compaction")
        chosen = chosen_runner(table.info.get(COMPACTION_RUNNER), {"runner": runner})
        with ExitStack() as held:
            lease = _take(held, compaction_lease(sleeper, table, context, release=False))
            creation = create(sleeper.state_store, table.info, run_id=run_label(context), objects=sleeper.objects)
            # No jobs: nothing follows (the branch skips the runners and the teardown).
            lease.release = not creation.jobs
    log.info("%s", creation.summary())
    if creation.skipped_reason:
        _skip(f"compaction of {table_name} skipped: {creation.skipped_reason}")
    ti.xcom_push(key=JOBS_XCOM_KEY, value=jobs_to_json(creation.jobs))
    if not creation.jobs:
        log.info("no compaction jobs to run")
        return None
    log.info("running %d jobs on runner %s", len(creation.jobs), chosen)
    return RUN_LOCAL_TASK if chosen == "local" else RUN_SPARK_TASK


def run_compaction_jobs(table_name: str, jobs: list[CompactionJob], context: dict[str, Any],
                        opener: Opener = open_sleeper) -> str:
    """Run ``jobs`` in this process, renewing the run's lease; fail if any job failed
    (its inputs stay assigned and a later run retries it)."""
    from sleeper_ops.compaction.runners import run_local

    with opener() as sleeper:
        table = sleeper.table(table_name)
        yield_cpu_for_maintenance(table.info)
        try:
            with compaction_lease(sleeper, table, context, release=False):
                results = run_local(sleeper.state_store, sleeper.objects, table.info, jobs,
                                    run_id=run_label(context), python_modules=sleeper.python_iterator_modules)
        except LeaseHeldError as e:
            raise SleeperError(f"this run lost its compaction lease between tasks: {e}") from e
    committed = sum(1 for r in results if r.status == "committed")
    failed = [r for r in results if r.status == "failed"]
    summary = (f"{table_name}: {len(results)} compaction jobs: {committed} committed, "
               f"{sum(1 for r in results if r.status == 'refused')} refused, {len(failed)} failed; "
               f"{sum(r.rows_read for r in results):,} rows read, {sum(r.rows_written for r in results):,} written")
    log.info("%s", summary)
    if failed:
        raise SleeperError(summary + "; " + "; ".join(f"job {r.job.job_id}: {r.reason}" for r in failed))
    return summary


def report_compaction(table_name: str, jobs: list[CompactionJob], context: dict[str, Any],
                      opener: Opener = open_sleeper) -> str:
    """Teardown: release the run's compaction lease and log what its jobs did."""
    with opener() as sleeper:
        try:
            table = sleeper.table(table_name)
        except TableNotFoundError:
            return f"table {table_name} no longer exists"
        name = lease_name(table.info.table_id, "compaction")
        if sleeper.state_store.release_lease(name, run_label(context)):
            log.info("released lease %s", name)
        records = [sleeper.state_store.get_job(table.info.table_id, j.job_id) for j in jobs]
    counts: dict[str, int] = {}
    for r in records:
        status = r.status if r is not None else "missing"
        counts[status] = counts.get(status, 0) + 1
    summary = f"{table_name}: {len(jobs)} compaction jobs this run" + "".join(
        f", {n} {s}" for s, n in sorted(counts.items()))
    rows = sum(r.rows_read for r in records if r is not None)
    summary += f"; {rows:,} rows read"
    for r in records:
        if r is not None and r.status == "failed":
            summary += f"\n  job {r.job_id} failed: {r.reason}"
    log.info("%s", summary)
    return summary
