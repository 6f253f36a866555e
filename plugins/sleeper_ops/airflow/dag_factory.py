"""Deprecated path, removed in the next release (:mod:`sleeper_ops.airflow.moved`): import
from :mod:`sleeper_ops.orchestration.dag_factory`."""

from __future__ import annotations

from sleeper_ops.airflow.moved import warn_moved
from sleeper_ops.orchestration.dag_factory import (
    DAG_ID_PREFIX,
    OPERATIONS,
    OPTIONAL_OPERATIONS,
    build_dag,
    build_dags,
    clear_catalog_cache,
    dag_id_for,
    table_dags_problem,
    table_name_of,
)

__all__ = [
    "DAG_ID_PREFIX", "OPERATIONS", "OPTIONAL_OPERATIONS", "build_dag", "build_dags", "clear_catalog_cache",
    "dag_id_for", "table_dags_problem", "table_name_of"
]

warn_moved(__name__)
