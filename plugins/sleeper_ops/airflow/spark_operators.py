"""The Sleeper operators that run on Spark: bulk import and a compaction batch, blocking
or deferrable (re-exported by :mod:`sleeper_ops.airflow.operators`).

**Deferrable** (``deferrable=True``, or the table property
``sleeper.table.spark.deferrable=true`` in the generated DAGs): when the ``sleeper``
connection names a standing Spark service (extra ``spark_service``), the task submits
its job there without waiting, defers to
:class:`~sleeper_ops.airflow.spark_triggers.SparkServiceJobTrigger` (the triggerer
polls the job; the worker slot is free meanwhile) and resumes to report the outcome
exactly as the blocking path does: the same asset event, lineage and ``Stats``, the same
failure when a job failed. A job lost by a service restart, or a trigger re-created
after a triggerer died, is decided by the state store (see that module), so nothing is
committed twice. Without a service (spark-submit), the task runs blocking and says so.
"""

from __future__ import annotations

import logging
import os
import tempfile
from typing import Any, Optional, Sequence, Union

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from sleeper_ops.airflow import tasks
from sleeper_ops.airflow.assets import commit_extra, emit_commit_event, key_range_of_partitions, with_commit_outlets
from sleeper_ops.airflow.hook import SleeperHook
from sleeper_ops.airflow.lineage import jobs_lineage, note, spark_lineage_conf
from sleeper_ops.airflow.operator_base import SleeperOperator, _SleeperMixin
from sleeper_ops.airflow.spark_triggers import POLL_SECONDS, SparkServiceJobTrigger, ended_or_lost
from sleeper_ops.errors import ConfigError
from statestore.errors import LeaseHeldError, SleeperError

log = logging.getLogger(__name__)

#: ``jobs`` argument of the compaction operators after ``create_jobs`` in the same DAG.
JOBS_FROM_CREATE_JOBS = "{{ ti.xcom_pull(task_ids='create_jobs', key='jobs') }}"


def _service_for_deferral(operator: Any, config: Any) -> Optional[str]:
    """The Spark service to defer on, or None (blocking) with a line saying why."""
    if not operator.deferrable:
        return None
    if config.spark_service is None:
        log.warning("%s: deferrable, but the connection names no Spark service (extra spark_service); running "
                    "spark-submit in this worker", operator.task_id)
    return config.spark_service


def task_import_key(context: Any) -> str:
    """The default import key of a deferrable bulk import: the task instance's
    (``dag_id/run_id/task_id[/map_index]``), the same in every try, so a retry after a
    lost job adds its records once."""
    ti = context["ti"]
    index = getattr(ti, "map_index", -1)
    return f"{ti.dag_id}/{ti.run_id}/{ti.task_id}" + (f"/{index}" if index is not None and index >= 0 else "")


class SleeperBulkImportOperator(SleeperOperator):
    """Bulk import ``source`` into the table on Spark, in one commit
    (:meth:`sleeper_ops.table.Table.bulk_import`): files, directories or globs, local or
    ``s3://``. Imports of the same ``import_key`` add their records once, so a retried
    task or a reprocessed date adds nothing twice; an import key already committed
    succeeds with nothing added. Spark runs on the configuration's ``[spark] master``
    (the ``sleeper`` connection's extra ``spark_master`` when set), or on the standing
    Spark service its extra ``spark_service`` names.

    Args:
        source: a source or a list of them (templated; one string may hold several
            separated by commas).
        import_key: the import's key (templated); default a fresh one per run of the
            task (deferrable: the task instance's, :func:`task_import_key`).
        deferrable: wait for the Spark service's job in the triggerer (module docstring).
        poll_interval: the longest one poll of the job waits (seconds).
    """

    template_fields: Sequence[str] = ("table", "source", "import_key")
    ui_color = "#fde68a"

    def __init__(self, *, source: Union[str, Sequence[str]], import_key: Optional[str] = None,
                 deferrable: bool = False, poll_interval: float = POLL_SECONDS, **kwargs: Any) -> None:
        super().__init__(**with_commit_outlets(kwargs))
        self.source = source
        self.import_key = import_key
        self.deferrable, self.poll_interval = deferrable, poll_interval

    def _sources(self) -> list[str]:
        sources = [s.strip() for s in self.source.split(",")] if isinstance(self.source, str) else list(self.source)
        sources = [s for s in sources if s]
        if not sources:
            raise ConfigError(f"nothing to bulk import into {self.table}: no source given")
        return sources

    def execute(self, context: Any) -> dict[str, Any]:
        sources = self._sources()
        run_id = tasks.run_label(context)
        with self.hook.get_conn() as sleeper:
            assert sleeper.config is not None
            service = _service_for_deferral(self, sleeper.config)
            if service is not None:
                done = self._submit_and_defer(sleeper, service, sources, run_id, context)
                return self._report(sleeper, done, sources, context)
            lineage_conf = spark_lineage_conf(context)  # the Spark job's OpenLineage parent, when switched on
            options: dict[str, Any] = {"conf": lineage_conf} if lineage_conf else {}
            result = sleeper.table(self.table).bulk_import(sources, import_key=self.import_key or None, run_id=run_id,
                                                           **options)
            return self._report(sleeper, result, sources, context)

    def _submit_and_defer(self, sleeper: Any, service: str, sources: list[str], run_id: str, context: Any) -> Any:
        """Submit the import to ``service`` and defer; returns (the ``already imported``
        result) only when the key was imported before: nothing to wait for."""
        from sleeper_ops.bulk_import.sources import expand_sources
        from sleeper_ops.spark.service_client import bulk_import_request, submit_job

        key = self.import_key or task_import_key(context)
        table = sleeper.table(self.table)
        done = table.already_imported(key)
        if done is not None:
            return done
        expand_sources(sources, sleeper.s3)  # a bad source fails here, before the job is sent
        job_id, instance = submit_job(service, bulk_import_request(sleeper.config, table.info, sources,
                                                                   import_key=key, run_id=run_id))
        log.info("%s: bulk import %r sent to the Spark service %s as job %s; waiting in the triggerer", self.table,
                 key, service, job_id)
        self.defer(trigger=SparkServiceJobTrigger(service=service, job_id=job_id, instance=instance,
                                                  poll_seconds=self.poll_interval,
                                                  sleeper_conn_id=self.sleeper_conn_id),
                   method_name="execute_complete")

    def execute_complete(self, context: Any, event: Optional[dict[str, Any]] = None) -> dict[str, Any]:
        """Resumed after the trigger fired: the import's outcome (the state store decides
        a lost job), reported as :meth:`execute` reports it. The key and the sources are
        rendered again (the same: the key is the task instance's unless given)."""
        from sleeper_ops.spark.service_client import bulk_import_outcome

        import_key, sources = self.import_key or task_import_key(context), self._sources()
        with self.hook.get_conn() as sleeper:
            table = sleeper.table(self.table)
            assert sleeper.config is not None
            result = bulk_import_outcome(sleeper.config, table.info, import_key, ended_or_lost(event))
            return self._report(sleeper, result, sources, context)

    def _report(self, sleeper: Any, result: Any, sources: list[str], context: Any) -> dict[str, Any]:
        """Log the result, note the lineage, announce the commit; the task's return value."""
        extra = commit_extra(sleeper, self.table, files=len(result.files_written), rows=result.records,
                             import_key=result.import_key,
                             key_range=key_range_of_partitions(sleeper, self.table, result.partitions))
        self.lineage = note(sleeper, self.table, inputs=sources, rows=result.records, files=len(result.files_written))
        log.info("%s", result.summary())
        emit_commit_event(self, context, self.table, files=len(result.files_written), rows=result.records,
                          extra=extra)
        return {"status": result.status, "import_key": result.import_key, "records": result.records,
                "files": result.files_written, "seconds": result.seconds}


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
        deferrable: send the batch to the Spark service and wait in the triggerer,
            which renews the compaction lease meanwhile (module docstring).
        poll_interval: the longest one poll of the batch waits (seconds).
    """

    template_fields: Sequence[str] = (*SparkSubmitOperator.template_fields, "table", "jobs")

    def __init__(self, *, table: str, jobs: Union[str, Sequence[Any]] = JOBS_FROM_CREATE_JOBS,
                 sleeper_conn_id: str = SleeperHook.default_conn_name, deferrable: bool = False,
                 poll_interval: float = POLL_SECONDS, **kwargs: Any) -> None:
        kwargs.setdefault("name", f"sleeper-compaction-{table}")
        super().__init__(application="", **kwargs)
        self.table = table
        self.jobs = jobs
        self.sleeper_conn_id = sleeper_conn_id
        self.deferrable, self.poll_interval = deferrable, poll_interval

    def execute(self, context: Any) -> None:
        from sleeper_ops.spark.batch_files import read_results_file, write_config_file, write_jobs_file
        from sleeper_ops.spark.submit import app_arguments, spark_app_path, spark_conf, spark_environment

        jobs = tasks.jobs_from_json(self.jobs)
        run = tasks.run_label(context)
        with self.hook.get_conn() as sleeper, tempfile.TemporaryDirectory(prefix="sleeper-spark-compaction-") as tmp:
            config = sleeper.config
            assert config is not None
            table = sleeper.table(self.table)
            service = _service_for_deferral(self, config)
            if service is not None and jobs:
                self._submit_and_defer(sleeper, service, table, jobs, run, context)
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

    def _submit_and_defer(self, sleeper: Any, service: str, table: Any, jobs: list[Any], run: str,
                          context: Any) -> None:
        """Under the run's compaction lease (renewed to its hand-over TTL, kept), send the
        batch to ``service`` and defer; the trigger renews the lease while it waits."""
        from sleeper_ops.spark.service_client import compaction_request, submit_job

        try:
            with tasks.compaction_lease(sleeper, table, context, release=False) as lease:
                job_id, instance = submit_job(service, compaction_request(sleeper.config, table.info, jobs,
                                                                          run_id=run))
        except LeaseHeldError as e:
            raise SleeperError(f"this run lost its compaction lease between tasks: {e}") from e
        log.info("%s: %d compaction jobs sent to the Spark service %s as job %s; waiting in the triggerer",
                 self.table, len(jobs), service, job_id)
        self.defer(trigger=SparkServiceJobTrigger(
            service=service, job_id=job_id, instance=instance, poll_seconds=self.poll_interval,
            lease={"name": lease.name, "holder": lease.holder, "ttl_seconds": lease.ttl_seconds},
            sleeper_conn_id=self.sleeper_conn_id), method_name="execute_complete")

    def execute_complete(self, context: Any, event: Optional[dict[str, Any]] = None) -> None:
        """Resumed after the trigger fired: each job's result (a job the service did not
        report is as its status record says), reported as :meth:`execute` reports it."""
        from sleeper_ops.spark.service_client import compaction_outcome
        from sleeper_ops.spark.submit import unreported_result

        jobs = tasks.jobs_from_json(self.jobs)
        with self.hook.get_conn() as sleeper:
            table = sleeper.table(self.table)
            assert sleeper.config is not None
            try:
                with tasks.compaction_lease(sleeper, table, context, release=False):
                    reported, why = compaction_outcome(sleeper.config, jobs, ended_or_lost(event))
                    results = {j.job_id: reported.get(j.job_id)
                               or unreported_result(sleeper.state_store, table.info, j, why) for j in jobs}
            except LeaseHeldError as e:
                raise SleeperError(f"this run lost its compaction lease while Spark worked: {e}") from e
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
