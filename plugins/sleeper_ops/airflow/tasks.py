"""What the tasks of the Sleeper DAGs run: open Sleeper, take the lease, call the library.

Each task (see :mod:`sleeper_ops.airflow.dag_factory` for the DAGs):

1. opens Sleeper from ``SLEEPER_HOME`` as the worker sees it (:func:`configured_home`);
2. finds its table by name; a table deleted or renamed since the DAG was parsed is skipped;
3. splitting, compaction and GC skip offline tables (ingest batching still runs);
4. takes the exclusive lease ``"<table_id>/<operation>"`` (:mod:`sleeper_ops.maintenance.leases`),
   so only one run per table per operation works at a time, whether it was scheduled,
   triggered by hand or is part of a backfill;
5. calls the library and logs its report.

**A run that finds the lease held is skipped**: the task logs ``lease <name> held by
<holder>`` and raises ``AirflowSkipException``, so it ends at once, its DAG run counts as
successful (nothing failed: the work is being done by the holder) and the grid shows
the skip. Offline and vanished tables are skipped the same way.

Holders: the one-task DAGs hold the lease as ``{dag_id}/{run_id}/{try_number}`` for
the task's life. The compaction DAG's tasks share one lease held by the run,
``{dag_id}/{run_id}``: ``create_jobs`` takes it and keeps it (with a hand-over TTL of
:data:`HANDOVER_TTL_SECONDS`), the run task renews it while the jobs run, and the
``report`` teardown releases it whatever happened. Job status records name the Airflow
run as ``{dag_id}/{run_id}``.

Airflow is imported lazily here, only for ``AirflowSkipException``.
"""

from __future__ import annotations

import logging
import os
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, NoReturn, Optional

from sleeper_ops.errors import ConfigError
from sleeper_ops.maintenance.leases import OperationLease, lease_name
from statestore.errors import LeaseHeldError, SleeperError, TableNotFoundError

if TYPE_CHECKING:
    from sleeper_ops.api import Sleeper, Table

log = logging.getLogger(__name__)

#: Operations that offline tables skip.
SKIPPED_WHEN_OFFLINE = ("split", "compaction", "gc")
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


def _run_label(context: dict[str, Any]) -> str:
    ti = context["ti"]
    return f"{ti.dag_id}/{ti.run_id}"


def _task_holder(context: dict[str, Any]) -> str:
    return f"{_run_label(context)}/{context['ti'].try_number}"


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


def run_exclusive(operation: str, table_name: str, context: dict[str, Any],
                  work: Callable[[Table, str], Any], *, failures: Optional[Callable[[Any], int]] = None) -> str:
    """Run ``work(table, run_label)`` under the table's ``operation`` lease; log and return
    its report's summary. Skips (AirflowSkipException) as the module docstring says; fails
    (SleeperError with the summary) when ``failures(report)`` counts any failed job."""
    holder = _task_holder(context)
    with open_sleeper() as sleeper, ExitStack() as held:
        table = _open_table(sleeper, table_name, operation)
        _take(held, OperationLease(sleeper.state_store, lease_name(table.info.table_id, operation), holder,
                                   ttl_seconds=LEASE_TTL_SECONDS))
        report = work(table, _run_label(context))
    summary = _summary(report)
    log.info("%s", summary)
    if failures is not None and failures(report):
        raise SleeperError(f"{operation} of {table_name}: {summary}")
    reason = getattr(report, "skipped_reason", None)
    if reason:
        _skip(f"{operation} of {table_name} skipped: {reason}")
    return summary


# ----- one-task operations ----------------------------------------------------------------
def split_task(table_name: str, **context: Any) -> str:
    """Split the table's leaf partitions that are over the threshold."""
    return run_exclusive("split", table_name, context, lambda t, run: t.split(run_id=run))


def gc_task(table_name: str, **context: Any) -> str:
    """Garbage-collect the table; the ``dry_run`` param only lists what would go."""
    dry_run = bool((context.get("params") or {}).get("dry_run", False))
    return run_exclusive("gc", table_name, context, lambda t, run: t.gc(dry_run=dry_run))


def ingest_batcher_task(table_name: str, **context: Any) -> str:
    """Group the table's pending ingest requests into jobs and run them; fails if a job
    failed (its requests go back to pending for a later run)."""
    from sleeper_ops.ingest.batcher import run_ingest_batcher

    return run_exclusive("ingest_batcher", table_name, context,
                         lambda t, run: run_ingest_batcher(t.sleeper, t.name, run_id=run),
                         failures=lambda report: len(report.failed))


# ----- compaction: create_jobs -> run_local | run_spark -> report ---------------------------
RUN_LOCAL_TASK = "run_local"
RUN_SPARK_TASK = "run_spark"
JOBS_XCOM_KEY = "jobs"


def _compaction_lease(sleeper: Sleeper, table: Table, context: dict[str, Any], *, release: bool) -> OperationLease:
    return OperationLease(sleeper.state_store, lease_name(table.info.table_id, "compaction"), _run_label(context),
                          ttl_seconds=HANDOVER_TTL_SECONDS, renew_every=LEASE_TTL_SECONDS / 3, release=release)


def chosen_runner(table_runner: Optional[str], params: Optional[dict[str, Any]]) -> str:
    """The ``runner`` param if given, else the table's runner property, else local."""
    runner = (params or {}).get("runner") or table_runner or "local"
    if runner not in ("local", "spark"):
        raise ConfigError(f"unknown compaction runner {runner!r}: expected local or spark")
    return runner


def create_compaction_jobs_task(table_name: str, **context: Any) -> Optional[str]:
    """Take the run's compaction lease, create and assign jobs; branch to the runner's task
    (none when there are no jobs). The jobs go to XCom ``jobs`` as dicts."""
    from sleeper_ops.compaction.jobs import create_compaction_jobs

    ti = context["ti"]
    with open_sleeper() as sleeper:
        table = _open_table(sleeper, table_name, "compaction")
        runner = chosen_runner(table.info.get("sleeper.table.compaction.runner"), context.get("params"))
        with ExitStack() as held:
            lease = _take(held, _compaction_lease(sleeper, table, context, release=False))
            creation = create_compaction_jobs(sleeper.state_store, table.info, run_id=_run_label(context))
            # No jobs: nothing follows (the branch skips the runners and the teardown).
            lease.release = not creation.jobs
    log.info("%s", creation.summary())
    if creation.skipped_reason:
        _skip(f"compaction of {table_name} skipped: {creation.skipped_reason}")
    ti.xcom_push(key=JOBS_XCOM_KEY, value=[j.to_dict() for j in creation.jobs])
    if not creation.jobs:
        log.info("no compaction jobs to run")
        return None
    log.info("running %d jobs on runner %s", len(creation.jobs), runner)
    return RUN_LOCAL_TASK if runner == "local" else RUN_SPARK_TASK


def _pulled_jobs(context: dict[str, Any]) -> list[Any]:
    from sleeper_ops.compaction.jobs import CompactionJob

    raw = context["ti"].xcom_pull(task_ids="create_jobs", key=JOBS_XCOM_KEY) or []
    return [CompactionJob.from_dict(d) for d in raw]


def run_compaction_jobs_task(table_name: str, **context: Any) -> str:
    """Run the jobs ``create_jobs`` made, in this process, renewing the run's lease; fail
    if any job failed (its inputs stay assigned and a later run retries it)."""
    from sleeper_ops.compaction.runners import run_local

    jobs = _pulled_jobs(context)
    with open_sleeper() as sleeper:
        table = sleeper.table(table_name)
        try:
            with _compaction_lease(sleeper, table, context, release=False):
                results = run_local(sleeper.state_store, sleeper.objects, table.info, jobs,
                                    run_id=_run_label(context))
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


def report_compaction_task(table_name: str, **context: Any) -> str:
    """Teardown: release the run's compaction lease and log what its jobs did."""
    jobs = _pulled_jobs(context)
    with open_sleeper() as sleeper:
        try:
            table = sleeper.table(table_name)
        except TableNotFoundError:
            return f"table {table_name} no longer exists"
        name = lease_name(table.info.table_id, "compaction")
        if sleeper.state_store.release_lease(name, _run_label(context)):
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
