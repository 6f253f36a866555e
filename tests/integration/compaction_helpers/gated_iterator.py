"""A user iterator for the slow-Spark-batch test: with ``SLEEPER_TEST_GATE_DIR`` set, the
second batch touches ``paused`` in that directory and waits (up to two minutes) for a
file ``release`` there, so the test can run garbage collection while the job's output
is half written. Without the variable it passes batches through unchanged."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa

_seen = 0


def gate(batch: pa.RecordBatch) -> pa.RecordBatch:
    global _seen
    _seen += 1
    where = os.environ.get("SLEEPER_TEST_GATE_DIR")
    if where and _seen == 2:
        Path(where, "paused").touch()
        deadline = time.monotonic() + 120
        while not Path(where, "release").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
    return batch
