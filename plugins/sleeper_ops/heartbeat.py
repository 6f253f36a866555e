"""Job heartbeats (DESIGN.md section 10: a running job refreshes its progress).

Every job (ingest, flush, compaction, bulk import, the batcher's jobs, split) runs
inside a :class:`Heartbeat`: a background thread that, every ``interval_s`` seconds
while the job runs, records its jobs alive
(:meth:`~statestore.store.StateStore.heartbeat_jobs`). The orphan sweep
(:func:`sleeper_ops.maintenance.gc.sweep_orphans`) keeps the outputs a job not yet
final names for as long as its last update or heartbeat is younger than
``sleeper.table.gc.job.abandon.minutes``; so a job that runs longer than that keeps its
outputs while it beats, and a job that died loses them once silent that long.

The interval is a tenth of the abandon time, at most a minute (:func:`interval_for`):
many beats may fail before the sweep's protection ends. A failed beat is logged and
the job carries on. A batch (the Spark driver's) beats every job it holds, queued
ones too, so a job's clock does not run down while it waits for a slot.

Tests drive it without sleeping: an injected ``clock`` and :meth:`Heartbeat.beat`.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, Iterable, Optional

from statestore.catalog import TableInfo
from statestore.clock import now_ms
from statestore.errors import SleeperError
from statestore.properties import GC_JOB_ABANDON_MINUTES
from statestore.roles import JobTracker

logger = logging.getLogger(__name__)

#: the longest pause between beats
MAX_INTERVAL_S = 60.0


def interval_for(table: TableInfo) -> float:
    """Seconds between beats for ``table``: a tenth of its abandon time, at most a minute."""
    return max(1.0, min(MAX_INTERVAL_S, table.get_int(GC_JOB_ABANDON_MINUTES) * 6.0))


class Heartbeat:
    """Beats the records of ``job_ids`` of one table every ``interval_s`` seconds from a
    background thread, between :meth:`start` and :meth:`stop` (or as a context manager);
    the first beat comes one interval after the start (a job that starts has just saved
    its record). Jobs may be added and dropped while it runs.

    Args:
        clock: milliseconds since the epoch (default: the wall clock).
        interval_s: seconds between beats (default: :func:`interval_for` the table).
    """

    def __init__(self, state_store: JobTracker, table: TableInfo, job_ids: Iterable[str] = (), *,
                 interval_s: Optional[float] = None, clock: Callable[[], int] = now_ms) -> None:
        self.state_store = state_store
        self.table_id = table.table_id
        self.interval_s = interval_for(table) if interval_s is None else interval_s
        self.clock = clock
        self.beats = 0
        self._jobs: dict[str, None] = dict.fromkeys(job_ids)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def add(self, *job_ids: str) -> None:
        with self._lock:
            self._jobs.update(dict.fromkeys(job_ids))

    def discard(self, *job_ids: str) -> None:
        with self._lock:
            for j in job_ids:
                self._jobs.pop(j, None)

    def beat(self) -> int:
        """Record the jobs alive now; returns how many records were refreshed (0 when
        the beat failed: it is logged, and the next one tries again)."""
        with self._lock:
            jobs = list(self._jobs)
        if not jobs:
            return 0
        try:
            n = self.state_store.heartbeat_jobs(self.table_id, jobs, self.clock())
        except (SleeperError, OSError) as e:
            logger.warning("heartbeat of %d jobs of table %s failed (the next beat tries again): %s",
                           len(jobs), self.table_id, e)
            return 0
        self.beats += 1
        return n

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.beat()

    def start(self) -> Heartbeat:
        self._thread = threading.Thread(target=self._run, name=f"sleeper-heartbeat-{self.table_id}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> Heartbeat:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
