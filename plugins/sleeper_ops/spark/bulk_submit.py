"""Bulk import runner ``spark``, the submitter: one spark-submit of
``spark_apps/bulk_import.py`` per import (the driver: :mod:`sleeper_ops.spark.bulk_driver`),
or, when the configuration names a standing Spark service (``[spark] service``), a job
sent to it (:mod:`sleeper_ops.spark.service_client`).

:func:`submit_bulk_import` writes the configuration to a private file, runs
spark-submit on ``config.spark_master``, streams Spark's log to this module's logger
and reads the result back. It is what :meth:`sleeper_ops.table.Table.bulk_import` loads
by name (:data:`sleeper_ops.bulk_import.runners.BULK_IMPORT_RUNNERS`).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from typing import TYPE_CHECKING, Mapping, Optional, Sequence

from sleeper_ops.bulk_import.job import BulkImportResult, import_job_id
from sleeper_ops.errors import ConfigError
from sleeper_ops.spark.batch_files import BulkImportError, write_config_file
from sleeper_ops.spark.submit import find_spark_submit, run_spark_submit, spark_app_path, spark_conf, spark_environment

if TYPE_CHECKING:
    from sleeper_ops.config import SleeperConfig
    from statestore.catalog import TableInfo

logger = logging.getLogger(__name__)
APP_NAME = "bulk_import.py"
__all__ = ["BulkImportError", "submit_bulk_import"]


def submit_bulk_import(config: SleeperConfig, table: TableInfo, sources: Sequence[str], *,
                       import_key: Optional[str] = None, run_id: Optional[str] = None,
                       conf: Optional[Mapping[str, str]] = None, timeout: Optional[float] = None,
                       spark_submit: Optional[str] = None, shuffle: str = "runs",
                       ingest_job_id: Optional[str] = None) -> BulkImportResult:
    """Run one bulk import of ``sources`` into ``table`` on Spark and return its result
    (``seconds`` is the time inside the job; ``submit_seconds`` in the log line
    includes spark-submit's start).

    Raises:
        BulkImportError: spark-submit failed or the import failed (the reason quotes the
            driver's error or the tail of Spark's log); what was written is handled as
            :mod:`sleeper_ops.bulk_import.job` says.
    """
    import uuid

    key = import_key or uuid.uuid4().hex
    if config.spark_service is not None:  # a standing driver: no spark-submit
        from sleeper_ops.spark.service_client import submit_bulk_import as on_service

        return on_service(config, table, sources, import_key=key, run_id=run_id, shuffle=shuffle,
                          ingest_job_id=ingest_job_id, timeout=timeout)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="sleeper-bulk-import-") as tmp:
        config_file, results_file = os.path.join(tmp, "sleeper.toml"), os.path.join(tmp, "result.json")
        write_config_file(config_file, config)
        app_args = ["--config-file", config_file, "--table", table.name, "--import-key", key,
                    "--results-file", results_file, "--shuffle", shuffle]
        for source in sources:
            app_args += ["--source", source]
        if run_id is not None:
            app_args += ["--run-id", run_id]
        if ingest_job_id is not None:
            app_args += ["--ingest-job-id", ingest_job_id]
        try:
            cmd = [spark_submit or find_spark_submit(), "--master", config.spark_master,
                   "--name", f"sleeper-bulk-import-{table.name}"]
            for k, v in spark_conf(config.spark_master, conf).items():
                cmd += ["--conf", f"{k}={v}"]
            cmd += [str(spark_app_path(APP_NAME)), *app_args]
        except ConfigError as e:
            raise BulkImportError(f"bulk import into {table.name}: {e}") from e
        code, tail = run_spark_submit(cmd, spark_environment(config.spark_master), timeout)
        outcome = None
        if os.path.exists(results_file):
            with open(results_file) as f:
                outcome = json.load(f)
    if outcome is None or outcome.get("result") is None:
        why = (outcome or {}).get("error") or f"spark-submit exited with code {code}: {tail}"
        raise BulkImportError(f"bulk import into {table.name} (import key {key!r}, job "
                              f"{import_job_id(table, key)}) failed: {why}")
    result = BulkImportResult(**outcome["result"])
    logger.info("%s (%.1f s including spark-submit)", result.summary(), time.perf_counter() - started)
    return result
