"""Sleeper ingest batcher DAGs: one per table (see sleeper_ops.airflow_dags)."""

from sleeper_ops.airflow_dags import build_dags

globals().update(build_dags("ingest_batcher"))
