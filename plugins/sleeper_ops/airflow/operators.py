"""Airflow operators of the Sleeper DAGs (this module imports Airflow and its Spark provider).

:class:`CompactionSparkSubmitOperator` runs a compaction run's jobs with one
``spark-submit`` of ``spark_apps/compaction.py``, holding the run's compaction lease
while Spark works (see :mod:`sleeper_ops.airflow.tasks`).
"""

from __future__ import annotations

import logging
import os
import tempfile
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from sleeper_ops.airflow import tasks
from sleeper_ops.errors import ConfigError
from statestore.errors import LeaseHeldError, SleeperError

log = logging.getLogger(__name__)


class CompactionSparkSubmitOperator(SparkSubmitOperator):
    """spark-submit ``spark_apps/compaction.py --home HOME --table NAME --jobs-file FILE
    --results-file FILE --run-id RUN`` for the jobs the ``create_jobs`` task pushed to XCom
    (see :mod:`sleeper_ops.spark.compaction`), holding the run's compaction lease while
    Spark works. The Spark master comes from the Airflow connection ``conn_id``. Fails if
    any job failed (its inputs stay assigned; a later run retries it)."""

    def __init__(self, *, table_name: str, **kwargs: Any) -> None:
        kwargs.setdefault("name", f"sleeper-compaction-{table_name}")
        super().__init__(application="", **kwargs)
        self.table_name = table_name

    def execute(self, context: Any) -> None:
        from sleeper_ops.spark.compaction import (app_arguments, read_results_file, spark_app_path, spark_conf,
                                                  spark_environment, write_jobs_file)

        jobs = tasks._pulled_jobs(context)  # noqa: SLF001 - same package
        run = tasks._run_label(context)  # noqa: SLF001
        with tasks.open_sleeper() as sleeper, \
                tempfile.TemporaryDirectory(prefix="sleeper-spark-compaction-") as tmp:
            config = sleeper.config
            assert config is not None
            table = sleeper.table(self.table_name)
            jobs_file, results_file = os.path.join(tmp, "jobs.json"), os.path.join(tmp, "results.json")
            write_jobs_file(jobs_file, table.name, jobs, table_id=table.info.table_id, run_id=run)
            master = self._spark_master(config.spark_master)
            self.application = str(spark_app_path())
            self.application_args = app_arguments(config, table.name, jobs_file=jobs_file,
                                                  results_file=results_file, run_id=run)
            self.conf = {**spark_conf(master), **(self.conf or {})}
            env = spark_environment(master, base={})
            self.env_vars = {**env, **(self.env_vars or {})}
            try:
                with tasks._compaction_lease(sleeper, table, context, release=False):  # noqa: SLF001
                    super().execute(context)
            except LeaseHeldError as e:
                raise SleeperError(f"this run lost its compaction lease between tasks: {e}") from e
            results = read_results_file(results_file, jobs) if os.path.exists(results_file) else {}
            records = {j.job_id: sleeper.state_store.get_job(table.info.table_id, j.job_id) for j in jobs}
        failed = []
        for j in jobs:
            r, rec = results.get(j.job_id), records[j.job_id]
            if r is not None and r.status == "failed":
                failed.append((j.job_id, r.reason))
            elif r is None and (rec is None or rec.status != "committed"):
                failed.append((j.job_id, "no result from Spark"))
        log.info("%s: %d compaction jobs on Spark, %d failed", self.table_name, len(jobs), len(failed))
        if failed:
            raise SleeperError(f"{self.table_name}: {len(failed)} of {len(jobs)} compaction jobs failed on Spark: "
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
