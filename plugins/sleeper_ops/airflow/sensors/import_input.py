"""A dated bulk import waits for its date's input: :class:`SleeperImportInputSensor` and
its trigger.

The first task of a run of ``sleeper_<table>_bulk_import`` checks once
(:func:`sleeper_ops.bulk_import.dated.missing_input`): it succeeds at once when every
source names input files or the run's import key is already imported. Otherwise it
defers to :class:`ImportInputTrigger` in the triggerer (no worker slot while waiting),
which polls the same check every ``poke_interval`` seconds until it passes or the
deadline, ``sleeper.table.bulk.import.wait.hours`` after the sensor first ran, is
reached. Past the deadline the task fails, without retries, with one line naming the
table, the date and each source that has nothing yet
(:func:`sleeper_ops.bulk_import.dated.no_input_message`). The deadline is an absolute
time carried in the trigger's arguments, so a restarted triggerer keeps it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, AsyncIterator, Optional, Sequence, Union

from airflow.sdk.exceptions import AirflowFailException
from airflow.triggers.base import BaseTrigger, TriggerEvent

from sleeper_ops.airflow.hooks.sleeper import SleeperHook
from sleeper_ops.airflow.operators.base import SleeperOperator
from sleeper_ops.bulk_import.dated import missing_input, no_input_message

log = logging.getLogger(__name__)


def _sources(source: Union[str, Sequence[str]]) -> list[str]:
    parts = source.split(",") if isinstance(source, str) else list(source)
    return [s.strip() for s in parts if s.strip()]


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


class SleeperImportInputSensor(SleeperOperator):
    """Succeeds once the import can start (see the module docstring); fails, without
    retries, after ``wait_hours`` with nothing there.

    Args:
        source: the import's sources (templated; one string may hold several separated by
            commas).
        import_key: the run's import key (templated): an imported date needs no input.
        wait_hours: how long to wait (the table's ``sleeper.table.bulk.import.wait.hours``).
        interval: what the failure calls the run's date (templated).
        poke_interval: seconds between two checks while waiting.
    """

    template_fields: Sequence[str] = ("table", "source", "import_key", "interval")
    ui_color = "#fef3c7"

    def __init__(self, *, source: Union[str, Sequence[str]], wait_hours: float,
                 import_key: Optional[str] = None, interval: str = "{{ data_interval_start | ds }}",
                 poke_interval: float = 60.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.source, self.import_key, self.interval = source, import_key, interval
        self.wait_hours, self.poke_interval = float(wait_hours), float(poke_interval)

    def execute(self, context: Any) -> None:
        sources = _sources(self.source)
        with self.hook.get_conn() as sleeper:
            missing = missing_input(sleeper, self.table, sources, self.import_key or None)
        if not missing:
            log.info("table %s: the bulk import of %s can start", self.table, self.interval)
            return
        log.info("table %s: waiting up to %g h for the input of %s: %s", self.table, self.wait_hours,
                 self.interval, "; ".join(missing))
        self.defer(trigger=ImportInputTrigger(table=self.table, sources=sources, import_key=self.import_key or None,
                                              deadline=time.time() + self.wait_hours * 3600,
                                              sleeper_conn_id=self.sleeper_conn_id, poll_seconds=self.poke_interval),
                   method_name="execute_complete")

    def execute_complete(self, context: Any, event: Optional[dict[str, Any]] = None) -> None:
        if event and event.get("status") == "ready":
            log.info("table %s: the input of %s is there", self.table, self.interval)
            return
        missing = list((event or {}).get("missing") or ["no answer from the trigger"])
        raise AirflowFailException(no_input_message(self.table, self.interval, self.wait_hours, missing))
