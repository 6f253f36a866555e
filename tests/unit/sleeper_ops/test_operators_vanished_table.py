"""Every operator goes through the task runner (:mod:`sleeper_ops.airflow.task_runner`):
a task whose table was deleted after its DAG was built skips, saying why, whatever the
operator, so a deleted table's DAG runs end skipped, not failed."""

from __future__ import annotations

from typing import Any, Callable

import pytest

pytest.importorskip("airflow")

from airflow.sdk.exceptions import AirflowSkipException

from sleeper_ops.airflow.operators.bulk_import import SleeperBulkImportOperator
from sleeper_ops.airflow.operators.export import SleeperExportOperator
from sleeper_ops.airflow.operators.ingest import SleeperIngestOperator
from sleeper_ops.airflow.operators.maintenance import SleeperSplitOperator
from tests.unit.sleeper_ops.operator_runner import execute_task

SCHEMA = {"rowKeyFields": [{"name": "key", "type": "StringType"}], "valueFields": [{"name": "n", "type": "LongType"}]}


OPERATORS: dict[str, Callable[[], Any]] = {
    "ingest": lambda: SleeperIngestOperator(task_id="ingest", table="gone", files=["in/part-0.parquet"]),
    "split": lambda: SleeperSplitOperator(task_id="split", table="gone"),
    "bulk_import": lambda: SleeperBulkImportOperator(task_id="bulk_import", table="gone", source="in/"),
    "export": lambda: SleeperExportOperator(task_id="export", table="gone", destination="out/"),
}


@pytest.mark.parametrize("operation", sorted(OPERATORS))
def test_a_task_on_a_table_deleted_after_its_dag_was_built_skips_saying_why(sleeper: Any, operation: str) -> None:
    # Given a table's task, built while the table existed
    sleeper.create_table("gone", SCHEMA)
    operator = OPERATORS[operation]()
    # When the table is deleted before the task runs
    sleeper.delete_table("gone")
    # Then the task skips, naming the table and why
    with pytest.raises(AirflowSkipException, match=r"table gone no longer exists \(deleted or renamed\)"):
        execute_task(operator, sleeper)
