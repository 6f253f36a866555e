"""Deprecated path, removed in the next release (:mod:`sleeper_ops.airflow.moved`): import
from :mod:`sleeper_ops.airflow.triggers.spark_service`."""

from __future__ import annotations

from sleeper_ops.airflow.moved import warn_moved
from sleeper_ops.airflow.triggers.spark_service import POLL_SECONDS, SparkServiceJobTrigger, ended_or_lost

__all__ = ["POLL_SECONDS", "SparkServiceJobTrigger", "ended_or_lost"]

warn_moved(__name__)
