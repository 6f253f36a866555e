"""A user iterator for the killed-compaction test: with ``SLEEPER_TEST_PAUSE_DIR``
set, the second batch touches ``paused`` in that directory and then sleeps, so the
test can kill the process while its output file is half written. Without the
variable it passes batches through unchanged."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa

_seen = 0


def pause(batch: pa.RecordBatch) -> pa.RecordBatch:
    global _seen
    _seen += 1
    where = os.environ.get("SLEEPER_TEST_PAUSE_DIR")
    if where and _seen == 2:
        Path(where, "paused").touch()
        time.sleep(120)
    return batch
