"""A dated bulk import waits for its date's input: :class:`SleeperImportInputSensor` and
its trigger.

The first task of a run of ``sleeper_<table>_bulk_import`` checks once
(:func:`sleeper_ops.bulk_import.dated.missing_input`): it succeeds at once when every
source names input files or the run's import key is already imported. Otherwise it
defers to :class:`~sleeper_ops.airflow.triggers.import_input.ImportInputTrigger` in the
triggerer (no worker slot while waiting), which polls the same check every
``poke_interval`` seconds until it passes or the deadline,
``sleeper.table.bulk.import.wait.hours`` after the sensor first ran, is reached. Past
the deadline the task fails, without retries, with one line naming the table, the date
and each source that has nothing yet (:func:`sleeper_ops.bulk_import.dated.no_input_message`).
The deadline is an absolute time carried in the trigger's arguments, so a restarted
triggerer keeps it.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Optional, Sequence, Union

from airflow.sdk.exceptions import AirflowFailException

from sleeper_ops.airflow.operators.base import SleeperOperator
from sleeper_ops.airflow.triggers.import_input import ImportInputTrigger
from sleeper_ops.bulk_import.dated import missing_input, no_input_message

log = logging.getLogger(__name__)


def _sources(source: Union[str, Sequence[str]]) -> list[str]:
    parts = source.split(",") if isinstance(source, str) else list(source)
    return [s.strip() for s in parts if s.strip()]


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
