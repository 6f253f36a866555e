"""The Sleeper bulk import DAGs, one per table with a bulk import source (see sleeper_ops.airflow.dag_factory)."""

from sleeper_ops.airflow.dag_factory import build_dags

globals().update(build_dags("bulk_import"))
