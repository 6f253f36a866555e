"""Deprecated path, removed in the next release (:mod:`sleeper_ops.airflow.moved`): import
from :mod:`sleeper_ops.orchestration.plugin`."""

from __future__ import annotations

from sleeper_ops.airflow.moved import warn_moved
from sleeper_ops.orchestration.plugin import SleeperPlugin

__all__ = ["SleeperPlugin"]

warn_moved(__name__)
