"""The base of the Sleeper operators: the table, the connection, the "Sleeper table"
link, the task's ``Stats`` and its OpenLineage facets (:mod:`sleeper_ops.airflow.utils.openlineage`).
The operators themselves are the other modules of :mod:`sleeper_ops.airflow.operators`."""

from __future__ import annotations

from functools import cached_property
from typing import Any, Collection, Optional, Sequence

from airflow.sdk import BaseOperator, BaseOperatorLink

from sleeper_ops.airflow.hooks.sleeper import SleeperHook
from sleeper_ops.airflow.links.sleeper import SleeperTableLink
from sleeper_ops.airflow.utils.openlineage import TaskLineage, operator_lineage
from sleeper_ops.airflow.utils.stats import TaskStats


class SleeperOperatorMixin:
    """The table and the connection every Sleeper operator takes."""

    table: str
    sleeper_conn_id: str
    operator_extra_links: Collection[BaseOperatorLink] = (SleeperTableLink(),)

    #: what the task read and wrote, noted while it ran (:mod:`sleeper_ops.airflow.utils.openlineage`)
    lineage: Optional[TaskLineage] = None

    @cached_property
    def hook(self) -> SleeperHook:
        return SleeperHook(self.sleeper_conn_id)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """The table, the files read and the records written (:mod:`sleeper_ops.airflow.utils.openlineage`)."""
        return operator_lineage(self.lineage)

    def traced(self, work: Any, lineage: Any) -> Any:
        """``work(table, run)`` that also notes ``lineage(table, report)`` as this task's lineage."""

        def run(t: Any, run_id: str) -> Any:
            report = work(t, run_id)
            self.lineage = lineage(t, report)
            return report

        return run


class SleeperOperator(SleeperOperatorMixin, BaseOperator):
    """Base of the one-task Sleeper operators.

    Args:
        table: the table's name (templated).
        sleeper_conn_id: the Airflow connection of type ``sleeper``.
    """

    template_fields: Sequence[str] = ("table",)
    ui_color = "#dbeafe"

    def __init__(self, *, table: str, sleeper_conn_id: str = SleeperHook.default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.table = table
        self.sleeper_conn_id = sleeper_conn_id

    def pre_execute(self, context: Any) -> None:
        self._task_stats = TaskStats()
        super().pre_execute(context)

    def post_execute(self, context: Any, result: Any = None) -> None:
        super().post_execute(context, result)
        stats = getattr(self, "_task_stats", None)
        if stats is not None:
            stats.emit(self, self.table)


def task_request_id(context: Any) -> str:
    """The idempotency key of a task's write: its DAG id, task id, run id (and map index
    when mapped), the same for every try of the task instance; hashed when longer than
    a key may be (:data:`~statestore.client_writes.MAX_KEY_LENGTH`)."""
    import hashlib

    from statestore.client_writes import MAX_KEY_LENGTH

    ti = context["ti"]
    mapped = getattr(ti, "map_index", -1)
    key = f"airflow:{ti.dag_id}/{ti.task_id}/{context['run_id']}" + (f"/{mapped}" if mapped not in (None, -1) else "")
    if len(key) > MAX_KEY_LENGTH or not key.isascii() or not key.isprintable():
        key = "airflow:" + hashlib.sha256(key.encode()).hexdigest()
    return key
