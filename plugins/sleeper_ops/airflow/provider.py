"""Deprecated path, removed in the next release (:mod:`sleeper_ops.airflow.moved`): import
from :mod:`sleeper_ops.airflow.get_provider_info`."""

from __future__ import annotations

from sleeper_ops.airflow.get_provider_info import PACKAGE, get_provider_info
from sleeper_ops.airflow.moved import warn_moved

__all__ = ["PACKAGE", "get_provider_info"]

warn_moved(__name__)
