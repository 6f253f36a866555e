"""The Sleeper export DAGs, one per table with an export destination (see sleeper_ops.orchestration.dag_factory)."""
# (The DAG processor's safe mode parses only files that name both "airflow" and "dag".)

from sleeper_ops.orchestration.dag_factory import build_dags

globals().update(build_dags("export"))
