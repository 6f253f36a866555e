"""The Airflow ``Stats`` metrics a Sleeper task emits.

``Stats`` (StatsD or OpenTelemetry, as Airflow is configured), tagged ``table`` and
``operator``: ``sleeper.rows`` and ``sleeper.files`` (counters, per commit),
``sleeper.task_seconds`` (timing, per task) and ``sleeper.commit_retries`` (counter:
commits this task's process tried again while the task ran).
"""

from __future__ import annotations

import time
from typing import Any

from statestore.retry import COMMIT_RETRIES


def _tags(operator: Any, table: str) -> dict[str, str]:
    return {"table": table, "operator": type(operator).__name__}


def stat(operator: Any, table: str, name: str, count: int) -> None:
    """Add ``count`` to the counter ``sleeper.<name>``."""
    from airflow.providers.common.compat.sdk import Stats

    if count:
        Stats.incr(f"sleeper.{name}", count, tags=_tags(operator, table))


class TaskStats:
    """Times a task and counts the commit retries of its process meanwhile."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.retries = COMMIT_RETRIES.total()

    def emit(self, operator: Any, table: str) -> None:
        from airflow.providers.common.compat.sdk import Stats

        Stats.timing("sleeper.task_seconds", time.monotonic() - self.started, tags=_tags(operator, table))
        stat(operator, table, "commit_retries", COMMIT_RETRIES.total() - self.retries)
