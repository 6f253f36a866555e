"""The previous release's path of the dated bulk import timetable, kept for one release
(:mod:`sleeper_ops.airflow.moved`).

A DAG that release serialized names its timetable by this path, and Airflow finds a
custom timetable by that name among the ones plugins register. :class:`DatedImportTimetable`
here, the same timetable under the old name, is registered too
(:class:`~sleeper_ops.orchestration.plugin.SleeperPlugin`), so the scheduler still reads
such a DAG until the DAG processor writes it again under the new name. Import the
timetable from :mod:`sleeper_ops.orchestration.dated_timetable`.
"""

from __future__ import annotations

from sleeper_ops.orchestration import dated_timetable


class DatedImportTimetable(dated_timetable.DatedImportTimetable):
    """:class:`sleeper_ops.orchestration.dated_timetable.DatedImportTimetable` under the
    previous release's name: the same schedule, the same serialized form."""
