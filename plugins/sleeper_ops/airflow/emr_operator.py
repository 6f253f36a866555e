"""Deprecated path, removed in the next release (:mod:`sleeper_ops.airflow.moved`): import
from :mod:`sleeper_ops.airflow.operators.emr`."""

from __future__ import annotations

from sleeper_ops.airflow.moved import warn_moved
from sleeper_ops.airflow.operators.emr import SleeperEmrServerlessStartJobOperator

__all__ = ["SleeperEmrServerlessStartJobOperator"]

warn_moved(__name__)
