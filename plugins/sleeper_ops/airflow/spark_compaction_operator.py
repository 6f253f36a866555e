"""Deprecated path, removed in the next release (:mod:`sleeper_ops.airflow.moved`): import
from :mod:`sleeper_ops.airflow.operators.spark_compaction`."""

from __future__ import annotations

from sleeper_ops.airflow.moved import warn_moved
from sleeper_ops.airflow.operators.spark_compaction import SleeperSparkCompactionOperator

__all__ = ["SleeperSparkCompactionOperator"]

warn_moved(__name__)
