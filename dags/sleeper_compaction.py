"""Sleeper compaction DAGs: one per table (see sleeper_ops.orchestration.dag_factory)."""
# (The DAG processor's safe mode parses only files that name both "airflow" and "dag".)

# The DAG processor imports the Airflow modules a DAG file names once, in itself, before it
# forks each parse (parsing_pre_import_modules): the Spark compaction operator's base, with
# OpenLineage's client, is then not imported afresh every parse.
import airflow.providers.apache.spark.operators.spark_submit  # noqa: F401

from sleeper_ops.orchestration.dag_factory import build_dags

globals().update(build_dags("compaction"))
