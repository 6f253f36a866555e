"""Sleeper split DAGs: one per table (see sleeper_ops.airflow.dag_factory)."""

from sleeper_ops.airflow.dag_factory import build_dags

globals().update(build_dags("split"))
