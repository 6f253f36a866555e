"""Spark task attempts: the key an attempt writes, and waiting until every attempt ended.

Spark may run a task more than once at the same time: a speculative copy of a slow
task, or a retry of a task whose executor was lost while the first attempt's Python
worker still runs. The rules (DESIGN.md section 10), kept by every Spark writer here:

* **Each attempt writes keys of its own**: :func:`own_key` is the named key with this
  task attempt's id (``TaskContext.taskAttemptId()``, unique in the application) as its
  attempt tag (:func:`sleeper_ops.io.attempts.attempt_key`); outside a Spark task it is
  the named key itself. A failing attempt deletes only what it wrote.
* **The driver commits the winner's output**: the keys reported in the result that
  reached the driver (the first attempt to finish); a loser's keys are never referenced.
* **Cleanup waits for every attempt**: :func:`wait_for_attempts` returns once every
  task attempt of a job group's Spark jobs has ended (losers are killed by Spark, and a
  killed Python worker may take ``spark.python.task.killTimeout`` to go), so a driver
  deletes scratch files, or the losers' outputs, only when no attempt still reads or
  writes them. A process that outlives its executor (a zombie Spark no longer tracks)
  can still write afterwards: its key is its own, untracked, and the orphan sweep
  removes it once the job is final.

:func:`own_key` runs on the executors and imports pyspark there; :func:`wait_for_attempts`
runs on the driver with its SparkContext.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Optional

from sleeper_ops.io.attempts import attempt_key

logger = logging.getLogger(__name__)

#: How long a driver waits for a job group's remaining attempts before it cleans up
#: anyway (a loser still running then can only fail: it deletes only its own keys).
ATTEMPTS_WAIT_SECONDS = 180.0
_POLL_SECONDS = 0.05
_ENDED = ("SUCCEEDED", "FAILED")


def task_attempt_tag() -> Optional[str]:
    """This Spark task attempt's id, as an attempt tag; None outside a Spark task."""
    from pyspark import TaskContext

    task = TaskContext.get()
    return None if task is None else str(task.taskAttemptId())


def own_key(named: str) -> str:
    """The key this task attempt writes for the ``named`` key (see the module docstring)."""
    tag = task_attempt_tag()
    return named if tag is None else attempt_key(named, tag)


def attempts_ended(spark_context: Any, group: str, jobs: int = 0) -> bool:
    """Whether the Spark jobs of ``group`` (at least ``jobs`` of them, once Spark's
    status store has seen them start) have ended with no task attempt still running."""
    tracker = spark_context.statusTracker()
    ids = tracker.getJobIdsForGroup(group)
    if len(ids) < jobs:
        return False
    for job_id in ids:
        job = tracker.getJobInfo(job_id)
        if job is None:  # no longer retained: ended long ago
            continue
        if job.status not in _ENDED:
            return False
        for stage_id in job.stageIds:
            stage = tracker.getStageInfo(stage_id)
            if stage is not None and stage.numActiveTasks > 0:
                return False
    return True


def wait_for_attempts(spark_context: Any, group: str, *, jobs: int = 0,
                      timeout: float = ATTEMPTS_WAIT_SECONDS) -> bool:
    """Wait until :func:`attempts_ended`; False (logged) if ``timeout`` seconds passed first."""
    deadline = time.monotonic() + timeout
    while not attempts_ended(spark_context, group, jobs):
        if time.monotonic() >= deadline:
            logger.warning("Spark job group %s: attempts still running after %.0f s; cleaning up anyway",
                           group, timeout)
            return False
        time.sleep(_POLL_SECONDS)
    return True
