"""Deprecated path, removed in the next release (:mod:`sleeper_ops.airflow.moved`): import
from :mod:`sleeper_ops.airflow.hooks.connection`."""

from __future__ import annotations

from sleeper_ops.airflow.hooks.connection import (
    AWS_KEYS,
    DEFAULT_AWS_CONN_ID,
    DEFAULT_DATABASE,
    EXTRA_KEYS,
    STATE_STORES,
    aws_conn_id_of,
    config_from_connection,
    postgres_dsn,
)
from sleeper_ops.airflow.moved import warn_moved

__all__ = [
    "AWS_KEYS", "DEFAULT_AWS_CONN_ID", "DEFAULT_DATABASE", "EXTRA_KEYS", "STATE_STORES", "aws_conn_id_of",
    "config_from_connection", "postgres_dsn"
]

warn_moved(__name__)
