"""The timetable of a table's dated bulk import DAG: data intervals of a cron, scheduled
from the table's ``sleeper.table.bulk.import.start``.

Why a timetable of its own: Airflow creates no task instance for a run whose logical
date is before its tasks' start date, so a DAG whose ``start_date`` were the import's
start would run a manual run of an earlier date as a success with no task (issue 34).
The DAG's ``start_date`` is therefore the factory's early fixed date, so every run has
its tasks, and the start moves here:

* scheduled runs (``catchup=True``) begin with the first interval starting at or after
  ``start`` and never skip one after it: a start in the past runs each past interval in
  turn, one at a time. The scheduler asks with an open-ended restriction (the DAG has no
  end date); only such a restriction is moved to ``start``;
* a backfill asks for the intervals between its dates (a bounded restriction): it gets
  them all, before the start or after it;
* a manual run (``airflow dags test``, the UI's trigger) of any date imports that date's
  interval (once, by its import key), before the start or after it.

Registered with Airflow by :class:`sleeper_ops.orchestration.plugin.SleeperPlugin` (Airflow
serializes only the timetables a plugin names); ``start`` is part of its serialized form.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Optional

import pendulum
from airflow.timetables.base import DagRunInfo, DataInterval, TimeRestriction
from airflow.timetables.interval import CronDataIntervalTimetable


class DatedImportTimetable(CronDataIntervalTimetable):
    """``CronDataIntervalTimetable(cron, timezone)`` whose scheduled runs start with the
    first interval starting at or after ``start`` (an aware datetime; see the module
    docstring)."""

    def __init__(self, cron: str, timezone: Any, start: datetime) -> None:
        super().__init__(cron, timezone)
        self.start = pendulum.instance(start)

    def next_dagrun_info(self, *, last_automated_data_interval: Optional[DataInterval],
                         restriction: TimeRestriction) -> Optional[DagRunInfo]:
        if restriction.latest is not None:  # a backfill's range: every interval in it
            return super().next_dagrun_info(last_automated_data_interval=last_automated_data_interval,
                                            restriction=restriction)
        earliest = self.start if restriction.earliest is None else max(restriction.earliest, self.start)
        return super().next_dagrun_info(
            last_automated_data_interval=last_automated_data_interval,
            restriction=TimeRestriction(earliest, restriction.latest, restriction.catchup))

    @property
    def summary(self) -> str:
        return f"{super().summary} from {self.start.isoformat()}"

    def serialize(self) -> dict[str, Any]:
        return {**super().serialize(), "start": self.start.isoformat()}

    @classmethod
    def deserialize(cls, data: dict[str, Any]) -> DatedImportTimetable:
        base = CronDataIntervalTimetable.deserialize(data)
        return cls(data["expression"], base._timezone, datetime.fromisoformat(data["start"]))  # type: ignore[attr-defined]

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, DatedImportTimetable) and super().__eq__(other) and self.start == other.start

    def __hash__(self) -> int:
        return hash((self._expression, self.start))
