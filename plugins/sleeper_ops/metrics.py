"""The figures an operator alerts on, per table, from bounded reads only.

:func:`table_metrics` reads a table's overview (partition counts, no file list), its
write buffer's summary, at most :data:`LIST_LIMIT` pending ingest requests and the
newest :data:`LIST_LIMIT` job records: never the whole state, so a scrape costs the
same for a table of ten files or ten million. A count read from a bounded listing
stops at :data:`LIST_LIMIT` (an alert threshold is far below it).

``commit_retries`` counts the commits of the table tried again in this process since
it started (:meth:`statestore.store.StateStore.commit_retries`).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Optional

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
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
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
        records=view.records, files=view.files, leaf_partitions=len(leaves),
        leaf_files_max=max((view.count(p.id).files for p in leaves), default=0),
        buffer_records=buffer_rows, buffer_oldest_seconds=buffer_age,
        ingest_requests_pending=len(store.pending_ingest_requests(tid, limit=LIST_LIMIT)),
        compaction_jobs_pending=sum(1 for j in jobs if j.kind == "compaction" and j.status in _OPEN_JOB),
        jobs_failed=sum(1 for j in jobs if j.status == "failed"),
        gc_files_pending=view.unreferenced,
        commit_retries=store.commit_retries(tid))
