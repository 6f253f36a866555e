"""DAGs of the deferrable Spark tests: ``deferred_import`` bulk imports ``conf.source``
under ``conf.key`` into ``events`` with ``deferrable=True``."""

from __future__ import annotations

from airflow.sdk import DAG

from sleeper_ops.airflow.operators.bulk_import import SleeperBulkImportOperator

with DAG("deferred_import", schedule=None):
    SleeperBulkImportOperator(task_id="bulk", table="events", source="{{ dag_run.conf['source'] }}",
                              import_key="{{ dag_run.conf['key'] }}", deferrable=True, poll_interval=1)
