"""The export operator: a table (or a range of it) as one sorted Parquet file per leaf,
with the manifest written last (:mod:`sleeper_ops.query.export`).

**Durable** (``durable=True``, the default; Airflow's ``ResumableJobMixin``): with
``runner="spark"`` and a standing Spark service (the ``sleeper`` connection's extra
``spark_service``, or ``[spark] service``), the export runs there as a job
(:mod:`sleeper_ops.spark.service_jobs`); the task stores the job's reference in the task
state store before it waits, so a retry after its worker died waits for that job (or
takes the result of the job that succeeded) instead of exporting again
(:mod:`sleeper_ops.airflow.operators.resumable`); a job that failed or was lost is
submitted again under the same export key, which writes the export once.
``durable=False`` is the behaviour before it: Spark's driver runs in the worker (on
``[spark] master``), every try its own. ``runner="local"``, and ``spark`` without a
service, run in the worker as before: nothing outlives it to reconnect to.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any, Optional, Sequence

from airflow.sdk import ResumableJobMixin

from sleeper_ops.airflow import task_runner
from sleeper_ops.airflow.operators.base import SleeperOperator, task_request_id
from sleeper_ops.airflow.operators.resumable import (
    ServiceJobAnswers,
    ServiceJobs,
    job_ref,
    note_nothing_to_resume,
)
from sleeper_ops.airflow.utils.openlineage import note

if TYPE_CHECKING:
    from sleeper_ops.api import Table

log = logging.getLogger(__name__)


class SleeperExportOperator(ServiceJobAnswers, ResumableJobMixin, SleeperOperator):
    """Export the table to ``destination`` (:meth:`sleeper_ops.table.Table.export`): one
    sorted Parquet file per leaf partition, iterators applied, deletes hidden, and a
    ``_manifest.json``. Exports of the same ``export_key`` write once: a retried task or
    a reprocessed date answers "already exported" and succeeds with nothing written; a
    destination holding the export of another key, or a key used for another export
    (another destination or ``where``), fails the task in one line.

    Args:
        destination: a directory or ``s3://`` prefix (templated).
        export_key: the export's key (templated); default the task instance's
            (:func:`~sleeper_ops.airflow.operators.base.task_request_id`: DAG id, task id,
            run id), the same for every try, so a retry after a crash finds its own export.
        where: only records this SQL predicate is true for (templated).
        runner: ``local`` (in the worker) or ``spark`` (one Spark task a leaf; on the
            Spark service when the connection names one).
        durable: a retry after a dead worker follows the Spark service job of the
            earlier try instead of exporting again (module docstring; default True).
    """

    template_fields: Sequence[str] = ("table", "destination", "export_key", "where")
    ui_color = "#d9f99d"

    def __init__(self, *, destination: str, export_key: Optional[str] = None, where: Optional[str] = None,
                 runner: str = "local", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.destination, self.export_key, self.where, self.runner = destination, export_key, where, runner

    def execute(self, context: Any) -> dict[str, Any]:
        key, run_id = self.export_key or task_request_id(context), task_runner.run_label(context)

        def export(t: Table) -> Any:
            config = t.sleeper.config
            if self.runner == "spark" and config is not None and config.spark_service is not None and self.durable:
                durable = self._run_durably(t, key, run_id, context)
                self._note_lineage(t, durable)
                return durable
            if self.runner == "spark" and (config is None or config.spark_service is None):
                note_nothing_to_resume(self, "in this worker's own Spark driver")
            result = t.export(self.destination, where=self.where or None, export_key=key, runner=self.runner,
                              run_id=run_id)
            self._note_lineage(t, result)
            return result

        result = task_runner.run_on_table("export", self.table, export, opener=self.hook.get_conn)
        log.info("%s", result.summary())
        return {"written": result.written, "destination": result.destination,
                "export_key": result.manifest.export_key, "transaction": result.manifest.transaction,
                "records": result.manifest.rows, "files": len(result.manifest.files)}

    def _note_lineage(self, table: Table, result: Any) -> None:
        """This task's lineage: the table read, the user's destination written, each column
        from the table's same-named one (:mod:`sleeper_ops.airflow.utils.openlineage`)."""
        manifest = getattr(result, "manifest", None)
        self.lineage = note(table.sleeper, table.name, outputs=[getattr(result, "destination", self.destination)],
                            reads_table=True, writes_table=False, column_lineage=True,
                            rows=getattr(manifest, "rows", None),
                            files=len(manifest.files) if manifest is not None else None)

    def _run_durably(self, table: Table, key: str, run_id: str, context: Any) -> Any:
        """The export on the Spark service through ``ResumableJobMixin`` (module docstring)."""
        from sleeper_ops.query.export import check_export
        from sleeper_ops.spark.service_client import export_outcome

        check_export(table.info.schema, None, None, self.where or None, key)  # refused here, before a job is sent
        dest = self.destination if "://" in self.destination else os.path.abspath(self.destination)
        self._service_jobs = ServiceJobs(lambda ended: export_outcome(table.info, key, ended))
        self._submission = (table, dest, key, run_id)
        return self.execute_resumable(context)

    def submit_job(self, context: Any) -> dict[str, Any]:
        """Send the export to the Spark service; the job's reference."""
        from sleeper_ops.spark.service_client import export_request, submit_job

        table, dest, key, run_id = self._submission
        config = table.sleeper.config
        assert config is not None and config.spark_service is not None
        job_id, instance = submit_job(config.spark_service, export_request(
            config, table.info, dest, export_key=key, where=self.where or None, run_id=run_id))
        log.info("%s: export %r to %s sent to the Spark service %s as job %s", self.table, key, dest,
                 config.spark_service, job_id)
        return job_ref(config.spark_service, job_id, instance)
