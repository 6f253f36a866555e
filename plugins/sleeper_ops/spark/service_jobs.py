"""What the standing Spark service (:mod:`sleeper_ops.spark.service`) runs for each kind
of job: :func:`execute_job` opens the Sleeper of the configuration a job carries and
calls the same functions spark-submit's drivers call, on the service's session.

* ``bulk_import``: :func:`~sleeper_ops.spark.bulk_driver.import_on` (one commit per
  import key); its outcome is ``{"result": <BulkImportResult>, "error": None}``.
* ``compaction``: :func:`~sleeper_ops.spark.driver.run_compaction_batch` (one commit per
  job); its outcome is the results document of :mod:`sleeper_ops.spark.batch_files`.
* ``export``: :meth:`~sleeper_ops.table.Table.export` with the ``spark`` runner, one
  Spark task a leaf on the service's session (idempotent per export key, the manifest
  written last: :mod:`sleeper_ops.query.export`); its outcome is
  ``{"result": <ExportResult.to_dict()>, "error": None}``.

A request missing what its kind needs is refused (:class:`ServiceRequestError`) before
anything runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from statestore.errors import SleeperError

KINDS = ("bulk_import", "compaction", "export")


class ServiceRequestError(SleeperError):
    """A request the service refuses (malformed, unknown kind, missing field)."""


def execute_job(spark: Any, job: Any) -> dict[str, Any]:
    """Run ``job`` (a :class:`~sleeper_ops.spark.service.ServiceJob`: its ``kind``,
    ``table`` and ``request``) on ``spark`` with the stores of the configuration it
    carries, through the drivers' own functions (see the module docstring)."""
    from sleeper_ops.api import Sleeper
    from sleeper_ops.compaction.jobs import CompactionJob
    from sleeper_ops.config import SleeperConfig
    from sleeper_ops.spark.batch_files import results_document
    from sleeper_ops.spark.bulk_driver import import_on
    from sleeper_ops.spark.driver import check_jobs_of, run_compaction_batch

    req = job.request
    raw = {k: v for k, v in req["config"].items() if k != "home"}
    config = SleeperConfig.from_dict(Path(req["config"]["home"]), raw)
    with Sleeper(config=config) as sleeper:
        if job.kind == "bulk_import":
            sources = req.get("sources")
            if not isinstance(sources, list) or not sources:
                raise ServiceRequestError("a bulk import needs its sources")
            return import_on(spark, sleeper, job.table, [str(s) for s in sources], import_key=req.get("import_key"),
                             run_id=req.get("run_id"), ingest_job_id=req.get("ingest_job_id"),
                             shuffle=req.get("shuffle") or "runs")
        if job.kind == "export":
            return export_on(sleeper, job.table, req)
        jobs = [CompactionJob.from_dict(d) for d in req.get("jobs") or []]
        table = sleeper.state_store.get_table(job.table)
        check_jobs_of(table, jobs)
        batch = run_compaction_batch(spark.sparkContext, sleeper.state_store, sleeper.objects, table, jobs,
                                     run_id=req.get("run_id"), python_modules=sleeper.python_iterator_modules)
        return results_document(batch.results, batch.error)


def export_on(sleeper: Any, table_name: str, req: dict[str, Any]) -> dict[str, Any]:
    """The export ``req`` describes (``destination``, ``export_key``, ``where``, ``run_id``)
    of ``table_name``, its leaves written by the ``spark`` runner (which takes the
    service's active session); the outcome of the module docstring."""
    destination, key = req.get("destination"), req.get("export_key")
    if not isinstance(destination, str) or not destination or not isinstance(key, str) or not key:
        raise ServiceRequestError("an export needs its destination and its export key")
    result = sleeper.table(table_name).export(destination, where=req.get("where"), export_key=key, runner="spark",
                                              run_id=req.get("run_id"))
    return {"result": result.to_dict(), "error": None}
