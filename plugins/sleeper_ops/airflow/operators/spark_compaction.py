"""The compaction batch on Spark: :class:`SleeperSparkCompactionOperator`, blocking or
deferrable (deferral as :mod:`sleeper_ops.airflow.operators.bulk_import` describes it).
A module of its own, so that only the compaction DAG imports the ``SparkSubmitOperator``
base (about half a second of CPU, OpenLineage's client with it).

**Durable** (``durable=True``, the default, the ``ResumableJobMixin`` of the
``SparkSubmitOperator`` base): a blocking batch on the Spark service stores its job's
reference in the task state store before it waits, so a retry after its worker died
waits for that batch (or takes its results when it succeeded) instead of sending the
same jobs again (:mod:`sleeper_ops.airflow.operators.resumable`); a batch that failed or
was lost is sent again, as every retry did before. ``durable=False`` sends the batch
again on every try. On spark-submit (no service) the batch is as the
``SparkSubmitOperator`` runs it (client mode: the driver is the worker's own process)."""

from __future__ import annotations

import logging
import os
import tempfile
from typing import Any, Optional, Sequence, Union

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from sleeper_ops.airflow import task_runner
from sleeper_ops.airflow.hooks.sleeper import SleeperHook
from sleeper_ops.airflow.operators.base import SleeperOperatorMixin
from sleeper_ops.airflow.operators.resumable import SERVICE_JOB_KEY, ServiceJobs, job_ref, note_nothing_to_resume
from sleeper_ops.airflow.operators.spark_deferral import JOBS_FROM_CREATE_JOBS, service_for_deferral
from sleeper_ops.airflow.triggers.spark_service import POLL_SECONDS, SparkServiceJobTrigger, ended_or_lost
from sleeper_ops.airflow.utils.openlineage import jobs_lineage
from sleeper_ops.errors import ConfigError
from statestore.errors import LeaseHeldError, SleeperError

log = logging.getLogger(__name__)


class SleeperSparkCompactionOperator(SleeperOperatorMixin, SparkSubmitOperator):
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
        durable: a retry after a dead worker follows the Spark service batch of the
            earlier try instead of sending it again (module docstring; default True).
        poll_interval: the longest one poll of the batch waits (seconds).
    """

    #: the running try's answers about its Spark service batch (set when it runs durably)
    _service_jobs: Optional[ServiceJobs] = None

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

        jobs = task_runner.jobs_from_json(self.jobs)
        run = task_runner.run_label(context)
        with self.hook.get_conn() as sleeper, tempfile.TemporaryDirectory(prefix="sleeper-spark-compaction-") as tmp:
            config = sleeper.config
            assert config is not None
            table = sleeper.table(self.table)
            service = service_for_deferral(self, config)
            if service is not None and jobs:
                self._submit_and_defer(sleeper, service, table, jobs, run, context)
            if config.spark_service is not None:  # the standing Spark service: no spark-submit
                if self.durable and jobs:
                    results = self._run_durably(sleeper, table, jobs, run, context)
                else:
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
            note_nothing_to_resume(self, f"with spark-submit on {master}")
            self.application = str(spark_app_path())
            self.application_args = app_arguments(config, table.name, jobs_file=jobs_file, results_file=results_file,
                                                  run_id=run, config_file=config_file)
            self.conf = {**spark_conf(master), **(self.conf or {})}
            self.env_vars = {**spark_environment(master, base={}), **(self.env_vars or {})}
            try:
                with task_runner.compaction_lease(sleeper, table, context, release=False):
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
            with task_runner.compaction_lease(sleeper, table, context, release=False) as lease:
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

        jobs = task_runner.jobs_from_json(self.jobs)
        with self.hook.get_conn() as sleeper:
            table = sleeper.table(self.table)
            assert sleeper.config is not None
            try:
                with task_runner.compaction_lease(sleeper, table, context, release=False):
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
            with task_runner.compaction_lease(sleeper, table, context, release=False):
                out = submit_compaction_batch(sleeper.config, sleeper.state_store, table.info, jobs, run_id=run)
        except LeaseHeldError as e:
            raise SleeperError(f"this run lost its compaction lease between tasks: {e}") from e
        return {r.job.job_id: r for r in out}

    def _run_durably(self, sleeper: Any, table: Any, jobs: list[Any], run: str, context: Any) -> dict[str, Any]:
        """The batch on the Spark service through ``ResumableJobMixin`` (module docstring),
        holding the compaction lease; each job's result (a job the service did not report
        is as its status record says)."""
        from sleeper_ops.spark.service_client import compaction_outcome
        from sleeper_ops.spark.submit import unreported_result

        def outcome(ended: Any) -> dict[str, Any]:
            reported, why = compaction_outcome(sleeper.config, jobs, ended)
            return {j.job_id: reported.get(j.job_id) or unreported_result(sleeper.state_store, table.info, j, why)
                    for j in jobs}

        self._service_jobs = ServiceJobs(outcome, poll_seconds=self.poll_interval)
        self._submission = (sleeper, table, jobs, run)
        self.external_id_key = SERVICE_JOB_KEY  # not the spark-submit driver's key of the base
        try:
            with task_runner.compaction_lease(sleeper, table, context, release=False):
                results: dict[str, Any] = self.execute_resumable(context)
        except LeaseHeldError as e:
            raise SleeperError(f"this run lost its compaction lease between tasks: {e}") from e
        return results

    # ResumableJobMixin: the Spark service batch when running durably on it, else the base's spark-submit
    def submit_job(self, context: Any) -> Any:
        if self._service_jobs is None:
            return super().submit_job(context)
        from sleeper_ops.spark.service_client import compaction_request, submit_job

        sleeper, table, jobs, run = self._submission
        service = sleeper.config.spark_service
        job_id, instance = submit_job(service, compaction_request(sleeper.config, table.info, jobs, run_id=run))
        log.info("%s: %d compaction jobs sent to the Spark service %s as job %s", self.table, len(jobs), service,
                 job_id)
        return job_ref(service, job_id, instance)

    def get_job_status(self, external_id: Any, context: Any) -> str:
        if self._service_jobs is None:
            return super().get_job_status(external_id, context)
        return self._service_jobs.status(external_id)

    def is_job_active(self, status: str) -> bool:
        return ServiceJobs.is_active(status) if self._service_jobs is not None else super().is_job_active(status)

    def is_job_succeeded(self, status: str) -> bool:
        if self._service_jobs is None:
            return super().is_job_succeeded(status)
        return ServiceJobs.is_succeeded(status)

    def poll_until_complete(self, external_id: Any, context: Any) -> Any:
        if self._service_jobs is None:
            return super().poll_until_complete(external_id, context)
        return self._service_jobs.wait(external_id)

    def get_job_result(self, external_id: Any, context: Any) -> Any:
        if self._service_jobs is None:
            return super().get_job_result(external_id, context)
        return self._service_jobs.result(external_id)

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
