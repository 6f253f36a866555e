"""The export operator: a table (or a range of it) as one sorted Parquet file per leaf,
with the manifest written last (:mod:`sleeper_ops.query.export`)."""

from __future__ import annotations

import logging
from typing import Any, Optional, Sequence

from sleeper_ops.airflow import task_runner
from sleeper_ops.airflow.operators.base import SleeperOperator, task_request_id

log = logging.getLogger(__name__)


class SleeperExportOperator(SleeperOperator):
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
        runner: ``local`` (in the worker) or ``spark`` (one Spark task a leaf).
    """

    template_fields: Sequence[str] = ("table", "destination", "export_key", "where")
    ui_color = "#d9f99d"

    def __init__(self, *, destination: str, export_key: Optional[str] = None, where: Optional[str] = None,
                 runner: str = "local", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.destination, self.export_key, self.where, self.runner = destination, export_key, where, runner

    def execute(self, context: Any) -> dict[str, Any]:
        result = task_runner.run_on_table(
            "export", self.table,
            lambda t: t.export(self.destination, where=self.where or None,
                               export_key=self.export_key or task_request_id(context), runner=self.runner,
                               run_id=task_runner.run_label(context)),
            opener=self.hook.get_conn)
        log.info("%s", result.summary())
        return {"written": result.written, "destination": result.destination,
                "export_key": result.manifest.export_key, "transaction": result.manifest.transaction,
                "records": result.manifest.rows, "files": len(result.manifest.files)}
