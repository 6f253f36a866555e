"""Deprecated path, removed in the next release (:mod:`sleeper_ops.airflow.moved`): import
from :mod:`sleeper_ops.orchestration.warm_imports`."""

from __future__ import annotations

from sleeper_ops.airflow.moved import warn_moved
from sleeper_ops.orchestration.warm_imports import warm, write_local_settings

__all__ = ["warm", "write_local_settings"]

warn_moved(__name__)
