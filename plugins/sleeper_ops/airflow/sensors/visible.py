"""Wait until data is visible to queries: :class:`SleeperVisibleSensor` and its trigger.

A commit's asset event (:mod:`sleeper_ops.airflow.assets.commits`) names its ``transaction``,
and a bulk import's its ``import_key``; a downstream DAG scheduled on the asset waits on
one of them (or on a record count) before it reads:

    wait = SleeperVisibleSensor(task_id="wait", table="events",
                                import_key="{{ dag_run.conf['import_key'] }}", deferrable=True)

The condition (:func:`~sleeper_ops.airflow.triggers.visible.visible`) is checked with one small read of the state store:

* ``import_key``: a bulk import of that key has committed into the table;
* ``min_transaction``: the table's transaction number
  (:meth:`statestore.store.StateStore.transaction_number`) has reached it;
* ``min_records``: the table's files hold at least that many records (from its
  overview: partition counts, not files).

Queries plan against the state store's current state (read-your-writes), so what the
condition sees committed, every query started afterwards reads. With
``deferrable=True`` the sensor checks once and then hands the wait to
:class:`~sleeper_ops.airflow.triggers.visible.SleeperVisibleTrigger` in the triggerer (no worker slot while waiting);
otherwise it pokes like any sensor (``poke_interval``, ``timeout``, ``mode``).

A table that does not exist (deleted, renamed, misspelt) fails the task at once, without
retries, in one line naming the table and the connection
(:func:`~sleeper_ops.airflow.triggers.visible.unknown_table`), deferred or not.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from functools import cached_property
from typing import Any, Collection, Optional, Sequence, Union

from airflow.sdk import BaseOperatorLink
from airflow.sdk.bases.sensor import BaseSensorOperator
from airflow.sdk.exceptions import AirflowFailException

from sleeper_ops.airflow.hooks.sleeper import SleeperHook
from sleeper_ops.airflow.links.sleeper import SleeperTableLink
from sleeper_ops.airflow.triggers.visible import SleeperVisibleTrigger, unknown_table, visible
from sleeper_ops.errors import ConfigError
from statestore.errors import TableNotFoundError

log = logging.getLogger(__name__)


def _int(value: Union[int, str, None]) -> Optional[int]:
    return None if value is None or (isinstance(value, str) and not value.strip()) else int(value)


class SleeperVisibleSensor(BaseSensorOperator):
    """Succeeds once the data is visible to queries (see the module docstring).

    Args:
        table: the table's name (templated).
        import_key: wait for the bulk import of this key (templated).
        min_transaction: wait for the table's transaction number to reach this (templated).
        min_records: wait for the table to hold this many records (templated).
        deferrable: wait in the triggerer, not in a worker slot.
        sleeper_conn_id: the Airflow connection of type ``sleeper``.
    """

    template_fields: Sequence[str] = ("table", "import_key", "min_transaction", "min_records")
    ui_color = "#dbeafe"
    operator_extra_links: Collection[BaseOperatorLink] = (SleeperTableLink(),)

    def __init__(self, *, table: str, import_key: Optional[str] = None,
                 min_transaction: Union[int, str, None] = None, min_records: Union[int, str, None] = None,
                 deferrable: bool = False, sleeper_conn_id: str = SleeperHook.default_conn_name,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if import_key is None and min_transaction is None and min_records is None:
            raise ConfigError(f"SleeperVisibleSensor {kwargs.get('task_id')}: give import_key, min_transaction "
                              "or min_records")
        self.table, self.import_key, self.sleeper_conn_id = table, import_key, sleeper_conn_id
        self.min_transaction, self.min_records, self.deferrable = min_transaction, min_records, deferrable

    @cached_property
    def hook(self) -> SleeperHook:
        return SleeperHook(self.sleeper_conn_id)

    def _conditions(self) -> dict[str, Any]:
        return {"import_key": self.import_key or None, "min_transaction": _int(self.min_transaction),
                "min_records": _int(self.min_records)}

    def poke(self, context: Any) -> bool:
        with self.hook.get_conn() as sleeper:
            try:
                ok = visible(sleeper, self.table, **self._conditions())
            except TableNotFoundError:
                raise AirflowFailException(unknown_table(self.table, self.sleeper_conn_id)) from None
        log.info("table %s: %s %s", self.table, "visible:" if ok else "not yet visible:", self._conditions())
        return ok

    def execute(self, context: Any) -> Any:
        if not self.deferrable or self.poke(context):
            return super().execute(context) if not self.deferrable else None
        self.defer(trigger=SleeperVisibleTrigger(table=self.table, sleeper_conn_id=self.sleeper_conn_id,
                                                 poll_seconds=float(self.poke_interval), **self._conditions()),
                   method_name="execute_complete",
                   timeout=timedelta(seconds=float(self.timeout)) if self.timeout else None)

    def execute_complete(self, context: Any, event: Optional[dict[str, Any]] = None) -> None:
        if event is not None and event.get("status") == "error":
            raise AirflowFailException(str(event.get("message")))
        log.info("table %s: visible (%s)", self.table, event)
