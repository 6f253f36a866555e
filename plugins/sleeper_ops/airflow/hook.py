"""Deprecated path, removed in the next release (:mod:`sleeper_ops.airflow.moved`): import
from :mod:`sleeper_ops.airflow.hooks.connection`,
:mod:`sleeper_ops.airflow.hooks.sleeper`."""

from __future__ import annotations

from sleeper_ops.airflow.hooks.connection import EXTRA_KEYS
from sleeper_ops.airflow.hooks.sleeper import SleeperHook, aws_settings, connection_exists
from sleeper_ops.airflow.moved import warn_moved

__all__ = ["EXTRA_KEYS", "SleeperHook", "aws_settings", "connection_exists"]

warn_moved(__name__)
