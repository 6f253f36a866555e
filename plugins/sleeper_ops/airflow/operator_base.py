"""Deprecated path, removed in the next release (:mod:`sleeper_ops.airflow.moved`): import
from :mod:`sleeper_ops.airflow.operators.base`."""

from __future__ import annotations

from sleeper_ops.airflow.moved import warn_moved
from sleeper_ops.airflow.operators.base import SleeperOperator, task_request_id

__all__ = ["SleeperOperator", "task_request_id"]

warn_moved(__name__)
