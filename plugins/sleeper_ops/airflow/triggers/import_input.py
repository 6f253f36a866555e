"""The trigger of :class:`~sleeper_ops.airflow.sensors.import_input.SleeperImportInputSensor`:
polls a dated bulk import's input in the triggerer until it is there or the deadline
passes. The deadline is an absolute time carried in the trigger's arguments, so a
restarted triggerer keeps it."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, AsyncIterator, Optional

from airflow.triggers.base import BaseTrigger, TriggerEvent

from sleeper_ops.airflow.hooks.sleeper import SleeperHook
from sleeper_ops.bulk_import.dated import missing_input

log = logging.getLogger(__name__)


class ImportInputTrigger(BaseTrigger):
    """Polls :func:`~sleeper_ops.bulk_import.dated.missing_input` every ``poll_seconds``;
    fires ``{"status": "ready"}`` once nothing is missing, or ``{"status": "timeout",
    "missing": [...]}`` at ``deadline`` (epoch seconds). A failed check is logged and
    polled again."""

    def __init__(self, *, table: str, sources: list[str], import_key: Optional[str], deadline: float,
                 sleeper_conn_id: str = SleeperHook.default_conn_name, poll_seconds: float = 60.0) -> None:
        super().__init__()
        self.table, self.sources, self.import_key = table, list(sources), import_key
        self.deadline, self.sleeper_conn_id, self.poll_seconds = float(deadline), sleeper_conn_id, float(poll_seconds)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"table": self.table, "sources": self.sources, "import_key": self.import_key,
                 "deadline": self.deadline, "sleeper_conn_id": self.sleeper_conn_id,
                 "poll_seconds": self.poll_seconds})

    def _missing(self) -> list[str]:
        with SleeperHook(self.sleeper_conn_id).get_conn() as sleeper:
            return missing_input(sleeper, self.table, self.sources, self.import_key)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        missing = ["not checked yet"]
        while True:
            try:
                missing = await asyncio.to_thread(self._missing)
            except Exception as e:  # a lost store or object store: keep polling, say why
                log.warning("table %s: cannot check the bulk import's input: %s", self.table, e)
            else:
                if not missing:
                    yield TriggerEvent({"status": "ready", "table": self.table})
                    return
            left = self.deadline - time.time()
            if left <= 0:
                yield TriggerEvent({"status": "timeout", "table": self.table, "missing": missing})
                return
            await asyncio.sleep(min(self.poll_seconds, left))
