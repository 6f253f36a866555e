"""The Sleeper export DAGs, one per table with an export destination (see sleeper_ops.airflow.dag_factory)."""

from sleeper_ops.airflow.dag_factory import build_dags

globals().update(build_dags("export"))
