"""DAGs of the readiness test: ``upstream`` ingests one file into ``events``; ``downstream``,
scheduled on the table's asset, waits with :class:`SleeperVisibleSensor` for the
commit's transaction and reads the commit's key range."""

from __future__ import annotations

from typing import Any

from airflow.sdk import DAG, task

from sleeper_ops.airflow.assets.sleeper import table_asset
from sleeper_ops.airflow.operators.ingest import SleeperIngestOperator
from sleeper_ops.airflow.sensors.visible import SleeperVisibleSensor

with DAG("upstream", schedule=None):
    SleeperIngestOperator(task_id="ingest", table="events", files="{{ dag_run.conf['file'] }}")

with DAG("downstream", schedule=[table_asset("events")]):
    wait = SleeperVisibleSensor(task_id="wait", table="events", min_transaction="{{ dag_run.conf['transaction'] }}",
                                deferrable=True, poke_interval=1, timeout=120)

    @task
    def read(**context: Any) -> int:
        from sleeper_ops.airflow.task_runner import open_sleeper

        span = context["dag_run"].conf["key_range"]
        with open_sleeper() as sleeper:
            rows = sleeper.table("events").query(ranges=[(span["min"], span["max"])]).num_rows
        print(f"READ {rows} rows in [{span['min']}, {span['max']})")
        return rows

    wait >> read()

with DAG("wait_for_rows", schedule=None):
    SleeperVisibleSensor(task_id="wait", table="events", min_records="{{ dag_run.conf['records'] }}", deferrable=True,
                         poke_interval=1, timeout=120)
