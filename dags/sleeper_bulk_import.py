"""The Sleeper bulk import DAGs, one per table with a bulk import source (see sleeper_ops.orchestration.dag_factory)."""
# (The DAG processor's safe mode parses only files that name both "airflow" and "dag".)

from sleeper_ops.orchestration.dag_factory import build_dags

globals().update(build_dags("bulk_import"))
