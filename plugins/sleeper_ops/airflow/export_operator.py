"""Deprecated path, removed in the next release (:mod:`sleeper_ops.airflow.moved`): import
from :mod:`sleeper_ops.airflow.operators.export`."""

from __future__ import annotations

from sleeper_ops.airflow.moved import warn_moved
from sleeper_ops.airflow.operators.export import SleeperExportOperator

__all__ = ["SleeperExportOperator"]

warn_moved(__name__)
