"""A user iterator for the Spark attempts test (test-only; on the executors' PYTHONPATH).

With ``SLEEPER_TEST_ATTEMPT_DIR`` set, the first attempt (``attemptNumber() == 0``) of
the first two Spark tasks to reach their first batch each take a role, by creating a
file in that directory (first come, first served):

* ``slow``: writes its pid and the batch's first row key, waits (up to two minutes) for
  a file ``release``, then touches ``raised`` and raises: a first attempt that loses
  to its speculative copy and then fails, aborting its output;
* ``doomed``: writes its pid and waits (up to two minutes) for the test to SIGKILL its
  executor.

Other first attempts wait (up to two minutes) for ``raised``, so the application is
still running when the slow attempt fails (Spark ends a killed task's JVM side at once,
and its Python worker only ``spark.python.task.killTimeout`` later). Every other batch,
later attempts, and processes outside a Spark task pass through.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa

_roles: dict[int, str] = {}  # task attempt id -> role ("" for none), per Python worker
WAIT_SECONDS = 120


def _claim(where: Path, batch: pa.RecordBatch) -> str:
    for role in ("slow", "doomed"):
        try:
            fd = os.open(where / role, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        except FileExistsError:
            continue
        with os.fdopen(fd, "w") as f:
            f.write(f"{os.getpid()} {batch.column(0)[0].as_py()}")
        return role
    return ""


def hook(batch: pa.RecordBatch) -> pa.RecordBatch:
    where = os.environ.get("SLEEPER_TEST_ATTEMPT_DIR")
    if not where or batch.num_rows == 0:
        return batch
    from pyspark import TaskContext

    task = TaskContext.get()
    if task is None or task.attemptNumber() != 0 or task.taskAttemptId() in _roles:
        return batch
    role = _roles[task.taskAttemptId()] = _claim(Path(where), batch)
    deadline = time.monotonic() + WAIT_SECONDS
    if role == "slow":
        while not Path(where, "release").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        Path(where, "raised").touch()
        raise RuntimeError("test hook: the slow first attempt fails after its speculative copy won")
    done = Path(where, "raised") if role == "" else None
    while time.monotonic() < deadline and (done is None or not done.exists()):
        time.sleep(0.05)
    return batch
