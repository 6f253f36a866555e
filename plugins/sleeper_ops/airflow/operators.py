"""The Sleeper operators: build your own DAGs from them; the generated DAGs use them too.

    from sleeper_ops.airflow.operators import SleeperCompactionOperator, SleeperIngestOperator
    ingest = SleeperIngestOperator(task_id="ingest", table="events", files=["s3://raw/{{ ds }}/events.parquet"])
    compact = SleeperCompactionOperator(task_id="compact", table="events")
    ingest >> compact

Every operator opens Sleeper through :class:`~sleeper_ops.airflow.hook.SleeperHook`
(``sleeper_conn_id``, default ``sleeper_default``; ``SLEEPER_HOME`` when that connection
does not exist) and calls :mod:`sleeper_ops.airflow.tasks`, which holds the behaviour:
maintenance takes the table's lease for its operation (one run per table and
operation at a time, across DAGs, backfills and the CLI; a task finding it held is
skipped and names the holder), offline tables are skipped by split, compaction and GC,
and a run with failed jobs fails its task. ``table`` is templated everywhere.
"""

from __future__ import annotations

import logging
import os
import tempfile
from typing import Any, Optional, Sequence, Union

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.providers.standard.operators.branch import BaseBranchOperator

from sleeper_ops.airflow import tasks
from sleeper_ops.airflow.assets import (  # noqa: F401 - table_asset and commits_alias are public here
    TaskStats,
    commit_extra,
    commits_alias,
    emit_commit_event,
    key_range_of,
    key_range_of_partitions,
    table_asset,
    with_commit_outlets,
)
from sleeper_ops.airflow.hook import SleeperHook
from sleeper_ops.airflow.lineage import compaction_lineage, jobs_lineage, note, spark_lineage_conf
from sleeper_ops.airflow.operator_base import SleeperOperator, _SleeperMixin
from sleeper_ops.errors import ConfigError
from statestore.errors import LeaseHeldError, SleeperError

log = logging.getLogger(__name__)

#: ``jobs`` argument of the compaction operators after ``create_jobs`` in the same DAG.
JOBS_FROM_CREATE_JOBS = "{{ ti.xcom_pull(task_ids='create_jobs', key='jobs') }}"


def _as_bool(value: Union[bool, str, None]) -> bool:
    """A templated flag: ``True``/``"true"``/``"True"``/``"1"`` are true."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return bool(value)


class SleeperIngestOperator(SleeperOperator):
    """Ingest ``files`` (Parquet, CSV, JSON Lines; local paths or ``s3://`` URIs) into the
    table in one commit: all of them or none. Returns the records and files written.

    Args:
        files: the files (templated: a list of templates, or one template rendering a path).
    """

    template_fields: Sequence[str] = ("table", "files")

    def __init__(self, *, files: Union[str, Sequence[str]], **kwargs: Any) -> None:
        super().__init__(**with_commit_outlets(kwargs))
        self.files = files

    def execute(self, context: Any) -> dict[str, Any]:
        files = [self.files] if isinstance(self.files, str) else list(self.files)
        if not files:
            raise ConfigError(f"nothing to ingest into {self.table}: no files given")
        with self.hook.get_conn() as sleeper:
            result = sleeper.table(self.table).ingest(files)
            extra = commit_extra(sleeper, self.table, files=len(result.files), rows=result.records,
                                 key_range=key_range_of(sleeper, self.table, result.files))
            self.lineage = note(sleeper, self.table, inputs=files, rows=result.records, files=len(result.files))
        log.info("%s: ingested %d records from %d files into %d files in %.1f s", self.table, result.records,
                 len(files), len(result.files), result.seconds)
        emit_commit_event(self, context, self.table, files=len(result.files), rows=result.records, extra=extra)
        return {"records": result.records, "files": [f.filename for f in result.files], "seconds": result.seconds}


class SleeperBulkImportOperator(SleeperOperator):
    """Bulk import ``source`` into the table on Spark, in one commit
    (:meth:`sleeper_ops.api.Table.bulk_import`): files, directories or globs, local or
    ``s3://``. Imports of the same ``import_key`` add their records once, so a retried
    task or a reprocessed date adds nothing twice; an import key already committed
    succeeds with nothing added. Spark runs on the configuration's ``[spark] master``
    (the ``sleeper`` connection's extra ``spark_master`` when set), or on the standing
    Spark service its extra ``spark_service`` names.

    Args:
        source: a source or a list of them (templated; one string may hold several
            separated by commas).
        import_key: the import's key (templated); default a fresh one per run of the task.
    """

    template_fields: Sequence[str] = ("table", "source", "import_key")
    ui_color = "#fde68a"

    def __init__(self, *, source: Union[str, Sequence[str]], import_key: Optional[str] = None,
                 **kwargs: Any) -> None:
        super().__init__(**with_commit_outlets(kwargs))
        self.source = source
        self.import_key = import_key

    def execute(self, context: Any) -> dict[str, Any]:
        sources = [s.strip() for s in self.source.split(",")] if isinstance(self.source, str) else list(self.source)
        sources = [s for s in sources if s]
        if not sources:
            raise ConfigError(f"nothing to bulk import into {self.table}: no source given")
        run_id = tasks.run_label(context)
        with self.hook.get_conn() as sleeper:
            lineage_conf = spark_lineage_conf(context)  # the Spark job's OpenLineage parent, when switched on
            options: dict[str, Any] = {"conf": lineage_conf} if lineage_conf else {}
            result = sleeper.table(self.table).bulk_import(sources, import_key=self.import_key or None, run_id=run_id,
                                                           **options)
            extra = commit_extra(sleeper, self.table, files=len(result.files_written), rows=result.records,
                                 import_key=result.import_key,
                                 key_range=key_range_of_partitions(sleeper, self.table, result.partitions))
            self.lineage = note(sleeper, self.table, inputs=sources, rows=result.records,
                                files=len(result.files_written))
        log.info("%s", result.summary())
        emit_commit_event(self, context, self.table, files=len(result.files_written), rows=result.records,
                          extra=extra)
        return {"status": result.status, "import_key": result.import_key, "records": result.records,
                "files": result.files_written, "seconds": result.seconds}


class SleeperSplitOperator(SleeperOperator):
    """Split the table's leaf partitions that are over the splitting threshold."""

    def execute(self, context: Any) -> str:
        return tasks.run_exclusive("split", self.table, context,
                                   self.traced(lambda t, run: t.split(run_id=run),
                                               lambda t, report: note(t.sleeper, t.name, reads_table=True)),
                                   opener=self.hook.get_conn)


class SleeperGcOperator(SleeperOperator):
    """Garbage-collect the table.

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
        return tasks.run_exclusive("gc", self.table, context,
                                   self.traced(lambda t, run: t.gc(dry_run=dry_run),
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
            return tasks.run_exclusive("ingest_batcher", self.table, context, run,
                                       failures=lambda report: len(report.failed), opener=self.hook.get_conn)
        finally:  # committed jobs' files are announced even when another job failed
            if reports:
                emit_commit_event(self, context, self.table, files=sum(j.written for j in reports[0].committed),
                                  rows=reports[0].records, extra=extras[0] if extras else None)


class SleeperFlushOperator(SleeperOperator):
    """Flush the table's write buffer into sorted files, exactly once
    (:mod:`sleeper_ops.ingest.flush`), under the table's flush lease; announces the
    files it committed on the table's asset."""

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

        summary = tasks.run_exclusive("flush", self.table, context, run, opener=self.hook.get_conn)
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
        return tasks.run_exclusive("compaction", self.table, context,
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
        return tasks.create_compaction_jobs(self.table, self.runner or None, context, opener=self.hook.get_conn)


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
        jobs = tasks.jobs_from_json(self.jobs)
        try:
            return tasks.run_compaction_jobs(self.table, jobs, context, opener=self.hook.get_conn)
        finally:
            if jobs:
                with self.hook.get_conn() as sleeper:
                    self.lineage = jobs_lineage(sleeper, self.table, jobs)


class SleeperCompactionReportOperator(SleeperRunCompactionJobsOperator):
    """Release the run's compaction lease and log what its jobs did (a teardown task)."""

    def execute(self, context: Any) -> str:
        return tasks.report_compaction(self.table, tasks.jobs_from_json(self.jobs), context,
                                       opener=self.hook.get_conn)


class SleeperSparkCompactionOperator(_SleeperMixin, SparkSubmitOperator):
    """spark-submit ``spark_apps/compaction.py`` for given jobs, one job a Spark task,
    holding the run's compaction lease while Spark works (see :mod:`sleeper_ops.spark`).
    The Spark master comes from the Airflow connection ``conn_id`` (spark type); when the
    ``sleeper`` connection names a standing Spark service (extra ``spark_service``), the
    jobs go to that service instead, with no spark-submit. Fails
    if any job failed (its inputs stay assigned; a later run retries it).

    Args:
        table: the table's name (templated).
        jobs: a JSON array of jobs (templated; default: XCom ``jobs`` of ``create_jobs``).
    """

    template_fields: Sequence[str] = (*SparkSubmitOperator.template_fields, "table", "jobs")

    def __init__(self, *, table: str, jobs: Union[str, Sequence[Any]] = JOBS_FROM_CREATE_JOBS,
                 sleeper_conn_id: str = SleeperHook.default_conn_name, **kwargs: Any) -> None:
        kwargs.setdefault("name", f"sleeper-compaction-{table}")
        super().__init__(application="", **kwargs)
        self.table = table
        self.jobs = jobs
        self.sleeper_conn_id = sleeper_conn_id

    def execute(self, context: Any) -> None:
        from sleeper_ops.spark.batch_files import read_results_file, write_config_file, write_jobs_file
        from sleeper_ops.spark.submit import app_arguments, spark_app_path, spark_conf, spark_environment

        jobs = tasks.jobs_from_json(self.jobs)
        run = tasks.run_label(context)
        with self.hook.get_conn() as sleeper, tempfile.TemporaryDirectory(prefix="sleeper-spark-compaction-") as tmp:
            config = sleeper.config
            assert config is not None
            table = sleeper.table(self.table)
            if config.spark_service is not None:  # the standing Spark service: no spark-submit
                results = self._run_on_service(sleeper, table, jobs, run, context)
                records = {j.job_id: sleeper.state_store.get_job(table.info.table_id, j.job_id) for j in jobs}
                self.lineage = jobs_lineage(sleeper, self.table, jobs)
                self._report(jobs, results, records)
                return
            jobs_file, results_file = os.path.join(tmp, "jobs.json"), os.path.join(tmp, "results.json")
            config_file = os.path.join(tmp, "sleeper.toml")
            write_jobs_file(jobs_file, table.name, jobs, table_id=table.info.table_id, run_id=run)
            write_config_file(config_file, config)
            master = self._spark_master(config.spark_master)
            self.application = str(spark_app_path())
            self.application_args = app_arguments(config, table.name, jobs_file=jobs_file, results_file=results_file,
                                                  run_id=run, config_file=config_file)
            self.conf = {**spark_conf(master), **(self.conf or {})}
            self.env_vars = {**spark_environment(master, base={}), **(self.env_vars or {})}
            try:
                with tasks.compaction_lease(sleeper, table, context, release=False):
                    super().execute(context)
            except LeaseHeldError as e:
                raise SleeperError(f"this run lost its compaction lease between tasks: {e}") from e
            results = read_results_file(results_file, jobs) if os.path.exists(results_file) else {}
            records = {j.job_id: sleeper.state_store.get_job(table.info.table_id, j.job_id) for j in jobs}
            self.lineage = jobs_lineage(sleeper, self.table, jobs)
        self._report(jobs, results, records)

    def _run_on_service(self, sleeper: Any, table: Any, jobs: list[Any], run: str, context: Any) -> dict[str, Any]:
        """Run ``jobs`` on the configuration's Spark service, holding the compaction lease."""
        from sleeper_ops.spark.submit import submit_compaction_batch

        try:
            with tasks.compaction_lease(sleeper, table, context, release=False):
                out = submit_compaction_batch(sleeper.config, sleeper.state_store, table.info, jobs, run_id=run)
        except LeaseHeldError as e:
            raise SleeperError(f"this run lost its compaction lease between tasks: {e}") from e
        return {r.job.job_id: r for r in out}

    def _report(self, jobs: list[Any], results: dict[str, Any], records: dict[str, Any]) -> None:
        """Log the batch; raise SleeperError naming every job that failed or was not reported."""
        failed = []
        for j in jobs:
            r, rec = results.get(j.job_id), records[j.job_id]
            if r is not None and r.status == "failed":
                failed.append((j.job_id, r.reason))
            elif r is None and (rec is None or rec.status != "committed"):
                failed.append((j.job_id, "no result from Spark"))
        log.info("%s: %d compaction jobs on Spark, %d failed", self.table, len(jobs), len(failed))
        if failed:
            raise SleeperError(f"{self.table}: {len(failed)} of {len(jobs)} compaction jobs failed on Spark: "
                               + "; ".join(f"job {i}: {why}" for i, why in failed))

    def _spark_master(self, default: str) -> str:
        """The master of the Airflow connection ``conn_id`` (spark-submit's hook would
        silently fall back to yarn without one, so a missing connection is an error)."""
        from airflow.sdk import BaseHook

        try:
            host = BaseHook.get_connection(self._conn_id).host
        except Exception as e:  # AirflowNotFoundException and friends
            raise ConfigError(
                f"the Airflow connection {self._conn_id!r} naming the Spark master is missing ({e}); e.g. "
                f"AIRFLOW_CONN_{self._conn_id.upper()}='{{\"conn_type\": \"spark\", \"host\": \"{default}\"}}'"
            ) from e
        return host or default
