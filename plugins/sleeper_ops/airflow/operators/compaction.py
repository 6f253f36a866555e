"""The Sleeper operators: build your own DAGs from them; the generated DAGs use them too.

    from sleeper_ops.airflow.operators.compaction import SleeperCompactionOperator, SleeperIngestOperator
    ingest = SleeperIngestOperator(task_id="ingest", table="events", files=["s3://raw/{{ ds }}/events.parquet"])
    compact = SleeperCompactionOperator(task_id="compact", table="events")
    ingest >> compact

Every operator opens Sleeper through :class:`~sleeper_ops.airflow.hooks.sleeper.SleeperHook`
(``sleeper_conn_id``, default ``sleeper_default``; ``SLEEPER_HOME`` when that connection
does not exist) and calls :mod:`sleeper_ops.airflow.task_runner`, which holds the behaviour:
maintenance takes the table's lease for its operation (one run per table and
operation at a time, across DAGs, backfills and the CLI; a task finding it held is
skipped and names the holder), offline tables are skipped by split, compaction, GC and flush,
and a run with failed jobs fails its task. ``table`` is templated everywhere.
"""

from __future__ import annotations

import logging
from typing import Any, Optional, Sequence, Union

from airflow.providers.standard.operators.branch import BaseBranchOperator

from sleeper_ops.airflow import task_runner
from sleeper_ops.airflow.assets.commits import (  # noqa: F401 - table_asset and commits_alias are public here
    TaskStats,
    commit_extra,
    commits_alias,
    emit_commit_event,
    key_range_of,
    key_range_of_partitions,
    table_asset,
    with_commit_outlets,
)
from sleeper_ops.airflow.hooks.sleeper import SleeperHook
from sleeper_ops.airflow.operators.base import SleeperOperator, _SleeperMixin, task_request_id
from sleeper_ops.airflow.operators.bulk_import import (  # noqa: F401 - the Spark operators are public here too
    JOBS_FROM_CREATE_JOBS,
    SleeperBulkImportOperator,
)
from sleeper_ops.airflow.utils.openlineage import compaction_lineage, jobs_lineage, note
from sleeper_ops.errors import ConfigError

log = logging.getLogger(__name__)


def _as_bool(value: Union[bool, str, None]) -> bool:
    """A templated flag: ``True``/``"true"``/``"True"``/``"1"`` are true."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return bool(value)


class SleeperIngestOperator(SleeperOperator):
    """Ingest ``files`` (Parquet, CSV, JSON Lines; local paths or ``s3://`` URIs) into the
    table in one commit: all of them or none. Returns the records and files written.

    Every try of a task instance ingests under one idempotency key (``request_id``,
    default :func:`task_request_id`: DAG id, task id, run id), kept with the files'
    names and sizes: a retry after ``CommitOutcomeUnknownError`` or a worker killed
    after the commit adds nothing and answers the first ingest; the same key with other
    files (the DAG changed them between tries) fails the task in one line.

    Args:
        files: the files (templated: a list of templates, or one template rendering a path).
        request_id: the idempotency key (templated); default: the task instance's.
    """

    template_fields: Sequence[str] = ("table", "files", "request_id")

    def __init__(self, *, files: Union[str, Sequence[str]], request_id: Optional[str] = None, **kwargs: Any) -> None:
        super().__init__(**with_commit_outlets(kwargs))
        self.files = files
        self.request_id = request_id

    def execute(self, context: Any) -> dict[str, Any]:
        files = [self.files] if isinstance(self.files, str) else list(self.files)
        if not files:
            raise ConfigError(f"nothing to ingest into {self.table}: no files given")
        key = self.request_id or task_request_id(context)
        with self.hook.get_conn() as sleeper:
            result = sleeper.table(self.table).ingest(files, request_id=key)
            if result.repeat:
                log.info("%s: a repeat of request id %s: job %s ingested these files already (%d records); "
                         "nothing more stored", self.table, key, result.job_id, result.records)
                return {"records": result.records, "files": [], "seconds": 0.0, "repeat": True, "job_id": result.job_id}
            extra = commit_extra(sleeper, self.table, files=len(result.files), rows=result.records,
                                 key_range=key_range_of(sleeper, self.table, result.files))
            self.lineage = note(sleeper, self.table, inputs=files, rows=result.records, files=len(result.files))
        log.info("%s: ingested %d records from %d files into %d files in %.1f s", self.table, result.records,
                 len(files), len(result.files), result.seconds)
        emit_commit_event(self, context, self.table, files=len(result.files), rows=result.records, extra=extra)
        return {"records": result.records, "files": [f.filename for f in result.files], "seconds": result.seconds}


class SleeperSplitOperator(SleeperOperator):
    """Split the table's leaf partitions that are over the splitting threshold."""

    def execute(self, context: Any) -> str:
        return task_runner.run_exclusive("split", self.table, context,
                                   self.traced(lambda t, run: t.split(run_id=run),
                                               lambda t, report: note(t.sleeper, t.name, reads_table=True)),
                                   opener=self.hook.get_conn)


class SleeperGcOperator(SleeperOperator):
    """Garbage-collect the table; logs what it deleted and, as ``sleeper gc`` prints, what
    waits and when the first is due (or why there was nothing to delete).

    Args:
        dry_run: only list what would be deleted (templated; ``"true"``/``"false"`` accepted).
    """

    # stored as gc_dry_run: BaseOperator has a dry_run() method of its own
    template_fields: Sequence[str] = ("table", "gc_dry_run")

    def __init__(self, *, dry_run: Union[bool, str] = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.gc_dry_run = dry_run

    def execute(self, context: Any) -> str:
        dry_run = _as_bool(self.gc_dry_run)
        return task_runner.run_exclusive("gc", self.table, context,
                                   self.traced(lambda t, run: t.gc(dry_run=dry_run, explain=True),
                                               lambda t, report: note(t.sleeper, t.name, reads_table=True)),
                                   opener=self.hook.get_conn)


class SleeperIngestBatcherOperator(SleeperOperator):
    """Group the table's pending ingest requests into jobs and run them; fails if a job
    failed (its requests go back to pending for a later run)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**with_commit_outlets(kwargs))

    def execute(self, context: Any) -> str:
        from sleeper_ops.ingest.batcher import run_ingest_batcher

        reports: list[Any] = []

        extras: list[dict[str, Any]] = []

        def run(t: Any, run_id: str) -> Any:
            reports.append(run_ingest_batcher(t.sleeper, t.name, run_id=run_id))
            r = reports[-1]
            files = sum(j.written for j in r.committed)
            extras.append(commit_extra(t.sleeper, t.name, files=files, rows=r.records))
            done = r.committed
            self.lineage = note(t.sleeper, t.name, inputs=[f for j in done for f in j.files], rows=r.records,
                                files=files, size=sum(j.size_bytes for j in done))
            return r

        try:
            return task_runner.run_exclusive("ingest_batcher", self.table, context, run,
                                       failures=lambda report: len(report.failed), opener=self.hook.get_conn)
        finally:  # committed jobs' files are announced even when another job failed
            if reports:
                emit_commit_event(self, context, self.table, files=sum(j.written for j in reports[0].committed),
                                  rows=reports[0].records, extra=extras[0] if extras else None)


class SleeperFlushOperator(SleeperOperator):
    """Flush the table's write buffer into sorted files, exactly once
    (:mod:`sleeper_ops.ingest.flush`), under the table's flush lease; announces the
    files it committed on the table's asset. Skipped (saying so) while the table is offline."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**with_commit_outlets(kwargs))

    def execute(self, context: Any) -> str:
        results: list[Any] = []

        extras: list[dict[str, Any]] = []

        def run(t: Any, run_id: str) -> Any:
            results.append(t.flush(run_id=run_id))
            extras.append(commit_extra(t.sleeper, t.name, files=results[-1].files, rows=results[-1].records,
                                       key_range=key_range_of_partitions(t.sleeper, t.name, results[-1].partitions)))
            self.lineage = note(t.sleeper, t.name, reads_table=True, rows=results[-1].records,
                                files=results[-1].files)
            return results[-1]

        summary = task_runner.run_exclusive("flush", self.table, context, run, opener=self.hook.get_conn)
        if results:
            emit_commit_event(self, context, self.table, files=results[0].files, rows=results[0].records,
                              extra=extras[0])
        return summary


class SleeperCompactionOperator(SleeperOperator):
    """Compaction in one task: under the table's compaction lease, create and assign
    jobs, run them with ``runner`` (``local`` in this worker, ``spark`` with one
    spark-submit for the batch), commit each, release the lease. Fails if any job failed
    (its inputs stay assigned; a later run retries it).

    Args:
        runner: ``local`` or ``spark`` (templated); default the table's
            ``sleeper.table.compaction.runner``.
    """

    template_fields: Sequence[str] = ("table", "runner")

    def __init__(self, *, runner: Optional[str] = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.runner = runner

    def execute(self, context: Any) -> str:
        runner = self.runner or None
        return task_runner.run_exclusive("compaction", self.table, context,
                                   self.traced(lambda t, run: t.compact(runner=runner, run_id=run), compaction_lineage),
                                   failures=lambda report: report.count("failed"), opener=self.hook.get_conn)


# ----- compaction across tasks: create_jobs -> run_local | run_spark -> report ----------------
class SleeperCreateCompactionJobsOperator(_SleeperMixin, BaseBranchOperator):
    """Take the run's compaction lease (held until the report task releases it), create
    and assign jobs, push them to XCom ``jobs`` as a JSON array, and branch to
    ``run_local`` or ``run_spark`` by ``runner`` (templated; default the table's), or to
    nothing when there are no jobs."""

    template_fields: Sequence[str] = ("table", "runner")
    ui_color = "#dbeafe"

    def __init__(self, *, table: str, runner: Optional[str] = None,
                 sleeper_conn_id: str = SleeperHook.default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.table = table
        self.runner = runner
        self.sleeper_conn_id = sleeper_conn_id

    def choose_branch(self, context: Any) -> Any:
        return task_runner.create_compaction_jobs(self.table, self.runner or None, context, opener=self.hook.get_conn)


class SleeperRunCompactionJobsOperator(SleeperOperator):
    """Run given compaction jobs in this worker under the run's compaction lease.

    Args:
        jobs: a JSON array of jobs (templated; :data:`JOBS_FROM_CREATE_JOBS` after a
            :class:`SleeperCreateCompactionJobsOperator` called ``create_jobs``).
    """

    template_fields: Sequence[str] = ("table", "jobs")

    def __init__(self, *, jobs: Union[str, Sequence[Any]] = JOBS_FROM_CREATE_JOBS, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.jobs = jobs

    def execute(self, context: Any) -> str:
        jobs = task_runner.jobs_from_json(self.jobs)
        try:
            return task_runner.run_compaction_jobs(self.table, jobs, context, opener=self.hook.get_conn)
        finally:
            if jobs:
                with self.hook.get_conn() as sleeper:
                    self.lineage = jobs_lineage(sleeper, self.table, jobs)


class SleeperCompactionReportOperator(SleeperRunCompactionJobsOperator):
    """Release the run's compaction lease and log what its jobs did (a teardown task)."""

    def execute(self, context: Any) -> str:
        return task_runner.report_compaction(self.table, task_runner.jobs_from_json(self.jobs), context,
                                       opener=self.hook.get_conn)


def __getattr__(name: str) -> Any:
    """``SleeperSparkCompactionOperator``, public here too, imported on first use as
    :mod:`sleeper_ops.airflow.operators.bulk_import` imports it (its ``SparkSubmitOperator``
    base costs about half a second to import)."""
    if name == "SleeperSparkCompactionOperator":
        from sleeper_ops.airflow.operators import bulk_import as spark_operators

        return spark_operators.SleeperSparkCompactionOperator
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
