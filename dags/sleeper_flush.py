"""Sleeper flush DAGs: one per table, the write buffer into files (see sleeper_ops.orchestration.dag_factory)."""
# (The DAG processor's safe mode parses only files that name both "airflow" and "dag".)

from sleeper_ops.orchestration.dag_factory import build_dags

globals().update(build_dags("flush"))
