"""The trigger of :class:`~sleeper_ops.airflow.sensors.visible.SleeperVisibleSensor`:
polls :func:`visible` in the triggerer while the deferred sensor waits.

The condition (:func:`visible`) is checked with one small read of the state store:

* ``import_key``: a bulk import of that key has committed into the table;
* ``min_transaction``: the table's transaction number
  (:meth:`statestore.store.StateStore.transaction_number`) has reached it;
* ``min_records``: the table's files hold at least that many records (from its
  overview: partition counts, not files).

A table that does not exist is not waited for: :func:`visible` raises
``TableNotFoundError``, the trigger then fires ``{"status": "error", "message": ...}``
(:func:`unknown_table`) and ends, and the sensor fails the task in that one line.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, AsyncIterator, Optional

from airflow.triggers.base import BaseTrigger, TriggerEvent

from sleeper_ops.airflow.hooks.sleeper import SleeperHook
from statestore.errors import TableNotFoundError

if TYPE_CHECKING:
    from sleeper_ops.api import Sleeper

log = logging.getLogger(__name__)


def visible(sleeper: Sleeper, table: str, *, import_key: Optional[str] = None, min_transaction: Optional[int] = None,
            min_records: Optional[int] = None) -> bool:
    """Whether every condition given holds now (see the module docstring)."""
    t = sleeper.table(table)
    store, tid = t.sleeper.state_store, t.info.table_id
    if import_key and t.already_imported(import_key) is None:
        return False
    if min_transaction is not None and store.transaction_number(tid) < min_transaction:
        return False
    return min_records is None or store.overview(tid, file_limit=0).records >= min_records


def unknown_table(table: str, sleeper_conn_id: str) -> str:
    """The one line a wait on a table that does not exist fails with."""
    return (f"table {table} does not exist in the Sleeper of connection {sleeper_conn_id!r} "
            "(deleted, renamed or misspelt): nothing to wait for")


class SleeperVisibleTrigger(BaseTrigger):
    """Polls :func:`visible` every ``poll_seconds`` and fires ``{"status": "visible"}``
    once it holds (a failed read is logged and polled again); fires ``{"status":
    "error", "message": ...}`` and ends if the table does not exist."""

    def __init__(self, *, table: str, import_key: Optional[str] = None, min_transaction: Optional[int] = None,
                 min_records: Optional[int] = None, sleeper_conn_id: str = SleeperHook.default_conn_name,
                 poll_seconds: float = 5.0) -> None:
        super().__init__()
        self.table, self.import_key, self.sleeper_conn_id = table, import_key, sleeper_conn_id
        self.min_transaction, self.min_records, self.poll_seconds = min_transaction, min_records, float(poll_seconds)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"table": self.table, "import_key": self.import_key, "min_transaction": self.min_transaction,
                 "min_records": self.min_records, "sleeper_conn_id": self.sleeper_conn_id,
                 "poll_seconds": self.poll_seconds})

    def _check(self) -> bool:
        with SleeperHook(self.sleeper_conn_id).get_conn() as sleeper:
            return visible(sleeper, self.table, import_key=self.import_key, min_transaction=self.min_transaction,
                           min_records=self.min_records)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            try:
                if await asyncio.to_thread(self._check):
                    yield TriggerEvent({"status": "visible", "table": self.table})
                    return
            except TableNotFoundError:
                yield TriggerEvent({"status": "error", "table": self.table,
                                    "message": unknown_table(self.table, self.sleeper_conn_id)})
                return
            except Exception as e:  # a lost store: keep polling, say why
                log.warning("table %s: cannot check what is visible: %s", self.table, e)
            await asyncio.sleep(self.poll_seconds)
