"""The figures an operator alerts on, per table, from bounded reads only.

:func:`table_metrics` reads a table's overview (partition counts, no file list), its
write buffer's summary, at most :data:`LIST_LIMIT` pending ingest requests and the
newest :data:`LIST_LIMIT` job records: never the whole state, so a scrape costs the
same for a table of ten files or ten million. A count read from a bounded listing
stops at :data:`LIST_LIMIT` (an alert threshold is far below it).

``commit_retries`` counts the commits of the table tried again in this process since
it started (:meth:`statestore.store.StateStore.commit_retries`).

:data:`BACKLOG` keeps the backlog figures (:data:`BACKLOG_FIELDS`) of each read over
time, bounded, for the status page's plot (:func:`sample_metrics`).
"""

from __future__ import annotations

import collections
import threading
from dataclasses import asdict, dataclass
from typing import Optional

from statestore import clock
from statestore.catalog import TableInfo
from statestore.errors import NotSupportedError
from statestore.store import StateStore

#: The most entries a metric counts from one listing (ingest requests, job records).
LIST_LIMIT = 10_000
_OPEN_JOB = ("created", "started", "finished")


@dataclass(frozen=True)
class TableMetrics:
    """One table's figures (see the module docstring)."""

    records: int
    #: 1 when ``records`` includes estimated counts (a file referenced from a partition
    #: that split, until compaction rewrites it), else 0: ``records`` is then exact
    records_approximate: int
    files: int
    leaf_partitions: int
    leaf_files_max: int
    buffer_records: int
    buffer_oldest_seconds: float
    ingest_requests_pending: int
    compaction_jobs_pending: int
    jobs_failed: int
    gc_files_pending: int
    commit_retries: int

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def table_metrics(store: StateStore, info: TableInfo, now_ms: Optional[int] = None) -> TableMetrics:
    """The figures of one table (see the module docstring)."""
    now_ms = clock.now_ms() if now_ms is None else now_ms
    tid = info.table_id
    view = store.overview(tid, file_limit=0)
    leaves = [p for p in view.partitions if p.is_leaf]
    try:
        buffer = store.buffer_stats(tid)
        buffer_rows, buffer_age = buffer.rows, buffer.age_seconds(now_ms)
    except NotSupportedError:  # a backend without a write buffer: nothing buffered
        buffer_rows, buffer_age = 0, 0.0
    jobs = store.list_jobs(tid, limit=LIST_LIMIT)
    return TableMetrics(
        records=view.records, records_approximate=int(view.records_approximate), files=view.files,
        leaf_partitions=len(leaves),
        leaf_files_max=max((view.count(p.id).files for p in leaves), default=0),
        buffer_records=buffer_rows, buffer_oldest_seconds=buffer_age,
        ingest_requests_pending=len(store.pending_ingest_requests(tid, limit=LIST_LIMIT)),
        compaction_jobs_pending=sum(1 for j in jobs if j.kind == "compaction" and j.status in _OPEN_JOB),
        jobs_failed=sum(1 for j in jobs if j.status == "failed"),
        gc_files_pending=view.unreferenced,
        commit_retries=store.commit_retries(tid))


# ----- the backlog over time -------------------------------------------------------------------
#: The backlog figures the status page plots over time (fields of :class:`TableMetrics`).
BACKLOG_FIELDS = ("buffer_records", "buffer_oldest_seconds", "ingest_requests_pending", "compaction_jobs_pending",
                  "gc_files_pending")


@dataclass(frozen=True)
class BacklogSample:
    """A table's backlog figures at ``at_ms`` (milliseconds since the epoch)."""

    at_ms: int
    values: tuple[float, ...]  # in the order of BACKLOG_FIELDS

    def value(self, field: str) -> float:
        return self.values[BACKLOG_FIELDS.index(field)]


class BacklogHistory:
    """The backlog figures of each table over time, in this process's memory: a sample
    each time a table's metrics are read (a ``/metrics`` scrape, the table's status
    page), samples less than ``min_gap_ms`` apart replacing each other, at most
    ``keep`` per table (the oldest dropped first). A restart starts it afresh; a
    Prometheus server scraping ``/metrics`` keeps the long history."""

    def __init__(self, keep: int = 360, min_gap_ms: int = 10_000) -> None:
        self.keep, self.min_gap_ms = keep, min_gap_ms
        self._samples: dict[str, collections.deque[BacklogSample]] = {}
        self._lock = threading.Lock()

    def record(self, table_id: str, m: TableMetrics, at_ms: int) -> None:
        sample = BacklogSample(at_ms, tuple(float(getattr(m, f)) for f in BACKLOG_FIELDS))
        with self._lock:
            series = self._samples.setdefault(table_id, collections.deque(maxlen=self.keep))
            if series and at_ms - series[-1].at_ms < self.min_gap_ms:
                series[-1] = sample
            else:
                series.append(sample)

    def samples(self, table_id: str) -> list[BacklogSample]:
        with self._lock:
            return list(self._samples.get(table_id, ()))


#: The process's backlog history, fed by :func:`sample_metrics`.
BACKLOG = BacklogHistory()


def sample_metrics(store: StateStore, info: TableInfo, now_ms: Optional[int] = None,
                   history: Optional[BacklogHistory] = None) -> TableMetrics:
    """:func:`table_metrics`, also recorded as a sample of ``history`` (default :data:`BACKLOG`)."""
    now_ms = clock.now_ms() if now_ms is None else now_ms
    m = table_metrics(store, info, now_ms)
    (history or BACKLOG).record(info.table_id, m, now_ms)
    return m
