"""Operators of a table's upkeep, each one task under the table's lease for its operation
(:mod:`sleeper_ops.airflow.task_runner`): split partitions, garbage-collect, flush the
write buffer. Each is skipped, saying why, while the table is offline, when it has
vanished or when another run holds the lease.

    from sleeper_ops.airflow.operators.maintenance import SleeperGcOperator
    gc = SleeperGcOperator(task_id="gc", table="events", dry_run=True)
"""

from __future__ import annotations

import logging
from typing import Any, Sequence, Union

from sleeper_ops.airflow import task_runner
from sleeper_ops.airflow.assets.commits import (
    commit_extra,
    emit_commit_event,
    key_range_of_partitions,
    with_commit_outlets,
)
from sleeper_ops.airflow.operators.base import SleeperOperator
from sleeper_ops.airflow.utils.openlineage import note

log = logging.getLogger(__name__)


def _as_bool(value: Union[bool, str, None]) -> bool:
    """A templated flag: ``True``/``"true"``/``"True"``/``"1"`` are true."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return bool(value)


class SleeperSplitOperator(SleeperOperator):
    """Split the table's leaf partitions that are over the splitting threshold."""

    def execute(self, context: Any) -> str:
        work = self.traced(lambda t, run: t.split(run_id=run),
                           lambda t, report: note(t.sleeper, t.name, reads_table=True))
        return task_runner.run_exclusive("split", self.table, context, work, opener=self.hook.get_conn)


class SleeperGcOperator(SleeperOperator):
    """Garbage-collect the table; logs what it deleted and, as ``sleeper gc`` prints, what
    waits and when the first is due (or why there was nothing to delete).

    Args:
        dry_run: only list what would be deleted (templated; ``"true"``/``"false"`` accepted).
    """

    # stored as gc_dry_run: BaseOperator has a dry_run() method of its own
    template_fields: Sequence[str] = ("table", "gc_dry_run")

    def __init__(self, *, dry_run: Union[bool, str] = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.gc_dry_run = dry_run

    def execute(self, context: Any) -> str:
        dry_run = _as_bool(self.gc_dry_run)
        work = self.traced(lambda t, run: t.gc(dry_run=dry_run, explain=True),
                           lambda t, report: note(t.sleeper, t.name, reads_table=True))
        return task_runner.run_exclusive("gc", self.table, context, work, opener=self.hook.get_conn)


class SleeperFlushOperator(SleeperOperator):
    """Flush the table's write buffer into sorted files, exactly once
    (:mod:`sleeper_ops.ingest.flush`), under the table's flush lease; announces the
    files it committed on the table's asset. Skipped (saying so) while the table is offline."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**with_commit_outlets(kwargs))

    def execute(self, context: Any) -> str:
        results: list[Any] = []

        extras: list[dict[str, Any]] = []

        def run(t: Any, run_id: str) -> Any:
            results.append(t.flush(run_id=run_id))
            extras.append(commit_extra(t.sleeper, t.name, files=results[-1].files, rows=results[-1].records,
                                       key_range=key_range_of_partitions(t.sleeper, t.name, results[-1].partitions)))
            self.lineage = note(t.sleeper, t.name, reads_table=True, rows=results[-1].records,
                                files=results[-1].files)
            return results[-1]

        summary = task_runner.run_exclusive("flush", self.table, context, run, opener=self.hook.get_conn)
        if results:
            emit_commit_event(self, context, self.table, files=results[0].files, rows=results[0].records,
                              extra=extras[0])
        return summary
