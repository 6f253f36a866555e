"""Sleeper flush DAGs: one per table, the write buffer into files (see sleeper_ops.airflow.dag_factory)."""

from sleeper_ops.airflow.dag_factory import build_dags

globals().update(build_dags("flush"))
