"""A user iterator for the Spark attempts test (test-only; on the executors' PYTHONPATH).

With ``SLEEPER_TEST_ATTEMPT_DIR`` set, the first attempt (``attemptNumber() == 0``) of
the first two Spark tasks to reach their first batch each take a role, by creating a
file in that directory (first come, first served) holding its pid and the batch's first
row key:

* ``slow``: ignores SIGHUP (so it outlives its executor's shutdown, as a Python worker
  outlives its killed task for ``spark.python.task.killTimeout``), waits (up to two
  minutes) for a file ``release``, then touches ``raised`` and raises: a first attempt
  that loses to its speculative copy and then fails, aborting its output;
* ``doomed``: waits (up to two minutes) for the test to SIGKILL its executor.

Every other batch, attempt and process (outside a Spark task) passes through.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pyarrow as pa

_seen: set[int] = set()  # task attempt ids whose first batch this Python worker has seen
WAIT_SECONDS = 120


def _claim(where: Path, key: object) -> str:
    for role in ("slow", "doomed"):
        try:
            fd = os.open(where / role, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        except FileExistsError:
            continue
        with os.fdopen(fd, "w") as f:
            f.write(f"{os.getpid()} {key}")
        return role
    return ""


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def hook(batch: pa.RecordBatch) -> pa.RecordBatch:
    where = os.environ.get("SLEEPER_TEST_ATTEMPT_DIR")
    if not where or batch.num_rows == 0:
        return batch
    from pyspark import TaskContext

    task = TaskContext.get()
    if task is None or task.taskAttemptId() in _seen:
        return batch
    _seen.add(task.taskAttemptId())
    key, here = batch.column(0)[0].as_py(), Path(where)
    if task.attemptNumber() > 0:
        return batch
    role = _claim(here, key)
    if role == "slow":
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # PySpark runs a task in the worker's main thread
        _wait_for(here / "release")
        (here / "raised").touch()
        raise RuntimeError("test hook: the slow first attempt fails after its speculative copy won")
    if role == "doomed":
        _wait_for(here / "never")
    return batch
