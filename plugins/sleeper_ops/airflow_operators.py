"""Airflow operators of the Sleeper DAGs (this module imports Airflow and its Spark provider).

:class:`CompactionSparkSubmitOperator` runs a compaction run's jobs with one
``spark-submit`` of ``spark_apps/compaction.py``, holding the run's compaction lease
while Spark works (see :mod:`sleeper_ops.airflow_tasks`).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from sleeper_ops import airflow_tasks as tasks
from statestore.errors import LeaseHeldError, SleeperError

log = logging.getLogger(__name__)

#: The spark-submit entry point for compaction batches.
COMPACTION_APP = Path(__file__).resolve().parents[2] / "spark_apps" / "compaction.py"

#: Spark settings for a batch submitted from a worker: no UI, driver on loopback, the
#: workers' Python the same as this one (it has pyarrow, DataFusion and sleeper_ops).
BASE_SPARK_CONF = {
    "spark.ui.enabled": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.pyspark.python": sys.executable,
    "spark.pyspark.driver.python": sys.executable,
}


class CompactionSparkSubmitOperator(SparkSubmitOperator):
    """spark-submit ``spark_apps/compaction.py --home HOME --table NAME --jobs-file FILE``
    for the jobs the ``create_jobs`` task pushed to XCom; fails if any job failed."""

    def __init__(self, *, table_name: str, **kwargs: Any) -> None:
        kwargs.setdefault("conf", dict(BASE_SPARK_CONF))
        kwargs.setdefault("name", f"sleeper-compaction-{table_name}")
        super().__init__(application=str(COMPACTION_APP), **kwargs)
        self.table_name = table_name

    def execute(self, context: Any) -> None:
        jobs = tasks._pulled_jobs(context)  # noqa: SLF001 - same package
        home = tasks.configured_home()
        fd, jobs_file = tempfile.mkstemp(prefix="sleeper-compaction-jobs-", suffix=".json")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump([j.to_dict() for j in jobs], f)
            self.application_args = ["--home", str(home), "--table", self.table_name, "--jobs-file", jobs_file,
                                     "--run-id", tasks._run_label(context)]  # noqa: SLF001
            with tasks.open_sleeper() as sleeper:
                table = sleeper.table(self.table_name)
                try:
                    with tasks._compaction_lease(sleeper, table, context, release=False):  # noqa: SLF001
                        super().execute(context)
                except LeaseHeldError as e:
                    raise SleeperError(f"this run lost its compaction lease between tasks: {e}") from e
                records = [sleeper.state_store.get_job(table.info.table_id, j.job_id) for j in jobs]
        finally:
            os.unlink(jobs_file)
        failed = [(j.job_id, r.reason if r else "no status record") for j, r in zip(jobs, records)
                  if r is None or r.status == "failed"]
        if failed:
            raise SleeperError(f"{self.table_name}: {len(failed)} of {len(jobs)} compaction jobs failed on Spark: "
                               + "; ".join(f"job {i}: {why}" for i, why in failed))
