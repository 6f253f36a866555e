"""Deprecated path, removed in the next release (:mod:`sleeper_ops.airflow.moved`): import
from :mod:`sleeper_ops.airflow.operators.bulk_import`,
:mod:`sleeper_ops.airflow.operators.spark_compaction`,
:mod:`sleeper_ops.airflow.operators.spark_deferral`."""

from __future__ import annotations

from sleeper_ops.airflow.moved import warn_moved
from sleeper_ops.airflow.operators.bulk_import import SleeperBulkImportOperator, task_import_key
from sleeper_ops.airflow.operators.spark_compaction import SleeperSparkCompactionOperator
from sleeper_ops.airflow.operators.spark_deferral import JOBS_FROM_CREATE_JOBS

__all__ = ["JOBS_FROM_CREATE_JOBS", "SleeperBulkImportOperator", "SleeperSparkCompactionOperator", "task_import_key"]

warn_moved(__name__)
