"""Bulk import on Spark: :class:`SleeperBulkImportOperator`, blocking or deferrable. (The
compaction batch's Spark operator is :mod:`sleeper_ops.airflow.operators.spark_compaction`,
a module of its own: its ``SparkSubmitOperator`` base, with OpenLineage's client, costs
about half a second of CPU to import, which a DAG file or task that does not use it,
every DAG but compaction, does not pay.)

**Deferrable** (``deferrable=True``, or the table property
``sleeper.table.spark.deferrable=true`` in the generated DAGs): when the ``sleeper``
connection names a standing Spark service (extra ``spark_service``), the task submits
its job there without waiting, defers to
:class:`~sleeper_ops.airflow.triggers.spark_service.SparkServiceJobTrigger` (the triggerer
polls the job; the worker slot is free meanwhile) and resumes to report the outcome
exactly as the blocking path does: the same asset event, lineage and ``Stats``, the same
failure when a job failed. A job lost by a service restart, or a trigger re-created
after a triggerer died, is decided by the state store (see that module), so nothing is
committed twice. Without a service (spark-submit), the task runs blocking and says so.

**Durable** (``durable=True``, the default; Airflow's ``ResumableJobMixin``): a
blocking task on the Spark service stores its job's reference in the task state store
before it waits, so a retry after its worker died waits for that job (or takes the
result of the job that succeeded) instead of submitting the import again
(:mod:`sleeper_ops.airflow.operators.resumable`); a job that failed or was lost is
submitted again. Its import key defaults to the task instance's
(:func:`task_import_key`), as a deferrable task's. ``durable=False`` is the behaviour
before it: every try submits its own job. spark-submit (no service) runs the job in
the worker itself, which nothing can reconnect to: ``durable`` changes nothing there.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Optional, Sequence, Union

from airflow.sdk import ResumableJobMixin

from sleeper_ops.airflow import task_runner
from sleeper_ops.airflow.assets.commits import (
    commit_extra,
    emit_commit_event,
    key_range_of_partitions,
    with_commit_outlets,
)
from sleeper_ops.airflow.operators.base import SleeperOperator
from sleeper_ops.airflow.operators.resumable import (
    ServiceJobAnswers,
    ServiceJobs,
    job_ref,
    note_nothing_to_resume,
)
from sleeper_ops.airflow.operators.spark_deferral import service_for_deferral
from sleeper_ops.airflow.triggers.spark_service import POLL_SECONDS, SparkServiceJobTrigger, ended_or_lost
from sleeper_ops.airflow.utils.openlineage import note, spark_lineage_conf
from sleeper_ops.errors import ConfigError

if TYPE_CHECKING:
    from sleeper_ops.api import Table

log = logging.getLogger(__name__)


def task_import_key(context: Any) -> str:
    """The default import key of a deferrable bulk import: the task instance's
    (``dag_id/run_id/task_id[/map_index]``), the same in every try, so a retry after a
    lost job adds its records once."""
    ti = context["ti"]
    index = getattr(ti, "map_index", -1)
    return f"{ti.dag_id}/{ti.run_id}/{ti.task_id}" + (f"/{index}" if index is not None and index >= 0 else "")


class SleeperBulkImportOperator(ServiceJobAnswers, ResumableJobMixin, SleeperOperator):
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
            task (deferrable, or durable on the Spark service: the task instance's,
            :func:`task_import_key`).
        deferrable: wait for the Spark service's job in the triggerer (module docstring).
        durable: a retry after a dead worker follows the Spark service job of the
            earlier try instead of submitting again (module docstring; default True).
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
        run_id = task_runner.run_label(context)

        def bulk_import(table: Table) -> dict[str, Any]:
            sleeper = table.sleeper
            assert sleeper.config is not None
            service = service_for_deferral(self, sleeper.config)
            if service is not None:
                done = self._submit_and_defer(table, service, sources, run_id, context)
                return self._report(sleeper, done, sources, context)
            if sleeper.config.spark_service is not None and self.durable:
                return self._run_durably(table, sources, run_id, context)
            if sleeper.config.spark_service is None:
                note_nothing_to_resume(self, f"with spark-submit on {sleeper.config.spark_master}")
            lineage_conf = spark_lineage_conf(context)  # the Spark job's OpenLineage parent, when switched on
            options: dict[str, Any] = {"conf": lineage_conf} if lineage_conf else {}
            result = table.bulk_import(sources, import_key=self.import_key or None, run_id=run_id, **options)
            return self._report(sleeper, result, sources, context)

        return task_runner.run_on_table("bulk_import", self.table, bulk_import, opener=self.hook.get_conn)

    def _run_durably(self, table: Table, sources: list[str], run_id: str, context: Any) -> dict[str, Any]:
        """The import on the Spark service through ``ResumableJobMixin`` (module docstring)."""
        from sleeper_ops.bulk_import.sources import absolute_sources
        from sleeper_ops.spark.service_client import bulk_import_outcome

        sleeper, key, sources = table.sleeper, self.import_key or task_import_key(context), absolute_sources(sources)
        assert sleeper.config is not None
        config = sleeper.config

        def outcome(ended: Any) -> dict[str, Any]:
            return self._report(sleeper, bulk_import_outcome(config, table.info, key, ended), sources, context)

        self._service_jobs = ServiceJobs(outcome, poll_seconds=self.poll_interval)
        self._submission = (table, sources, key, run_id)
        result: dict[str, Any] = self.execute_resumable(context)
        return result

    def submit_job(self, context: Any) -> Optional[dict[str, Any]]:
        """Send the import to the Spark service; the job's reference, or None when its
        key was already imported (then nothing is sent)."""
        from sleeper_ops.bulk_import.sources import expand_sources
        from sleeper_ops.spark.service_client import bulk_import_request, submit_job

        assert self._service_jobs is not None
        table, sources, key, run_id = self._submission
        sleeper = table.sleeper
        assert sleeper.config is not None and sleeper.config.spark_service is not None
        done = table.already_imported(key, sources)
        if done is not None:
            self._service_jobs.answered(self._report(sleeper, done, sources, context))
            return None
        expand_sources(sources, sleeper.s3)  # a bad source fails here, before the job is sent
        service = sleeper.config.spark_service
        job_id, instance = submit_job(service, bulk_import_request(sleeper.config, table.info, sources,
                                                                   import_key=key, run_id=run_id))
        log.info("%s: bulk import %r sent to the Spark service %s as job %s", self.table, key, service, job_id)
        return job_ref(service, job_id, instance)

    def _submit_and_defer(self, table: Table, service: str, sources: list[str], run_id: str, context: Any) -> Any:
        """Submit the import to ``service`` and defer; returns (the ``already imported``
        result) only when the key was imported before: nothing to wait for."""
        from sleeper_ops.bulk_import.sources import expand_sources
        from sleeper_ops.spark.service_client import bulk_import_request, submit_job

        key = self.import_key or task_import_key(context)
        sleeper = table.sleeper
        assert sleeper.config is not None  # as execute checked
        done = table.already_imported(key, sources)
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
        self.lineage = note(sleeper, self.table, inputs=sources, column_lineage=True, rows=result.records,
                            files=len(result.files_written))
        log.info("%s", result.summary())
        emit_commit_event(self, context, self.table, files=len(result.files_written), rows=result.records,
                          extra=extra)
        return {"status": result.status, "import_key": result.import_key, "records": result.records,
                "files": result.files_written, "seconds": result.seconds}
