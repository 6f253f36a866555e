"""Job status records: what each maintenance job did, for reports and retries.

A :class:`JobRecord` is one job (compaction, split, ingest, ...) of one table, kept
as a single row that moves forward through ``created -> started -> finished ->
committed``, or ends ``failed`` with a reason. Writers save the whole record each
time (an upsert by ``(table_id, job_id)``); the latest save wins.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace
from typing import Any, Optional

JOB_KINDS = ("compaction", "split", "ingest", "bulk_import", "gc")
JOB_STATUSES = ("created", "started", "finished", "committed", "failed")


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class JobRecord:
    """One job of one table.

    Attributes:
        table_id, job_id: identity; ``job_id`` is unique within the table.
        kind: one of :data:`JOB_KINDS`.
        status: one of :data:`JOB_STATUSES`.
        partition_id: the partition the job works on, if any.
        input_files: how many files the job reads.
        created_ms, started_ms, finished_ms, committed_ms: milliseconds since the epoch.
        rows_read, rows_written: records the job read and wrote.
        reason: why the job failed (or why its commit changed nothing).
        run_id: the run (e.g. Airflow ``dag_id/run_id`` or a CLI process) that ran it.
        attempts: how many times the job was started.
        output: the file the job wrote, if any.
    """

    table_id: str
    job_id: str
    kind: str
    status: str = "created"
    partition_id: Optional[str] = None
    input_files: int = 0
    created_ms: int = 0
    started_ms: Optional[int] = None
    finished_ms: Optional[int] = None
    committed_ms: Optional[int] = None
    rows_read: int = 0
    rows_written: int = 0
    reason: Optional[str] = None
    run_id: Optional[str] = None
    attempts: int = 0
    output: Optional[str] = None

    def __post_init__(self) -> None:
        if self.kind not in JOB_KINDS:
            raise ValueError(f"unknown job kind {self.kind!r}")
        if self.status not in JOB_STATUSES:
            raise ValueError(f"unknown job status {self.status!r}")

    @classmethod
    def created(cls, table_id: str, job_id: str, kind: str, **fields: Any) -> JobRecord:
        return cls(table_id, job_id, kind, "created", created_ms=now_ms(), **fields)

    def started(self, run_id: Optional[str] = None) -> JobRecord:
        return replace(self, status="started", started_ms=now_ms(), finished_ms=None, committed_ms=None,
                       reason=None, attempts=self.attempts + 1, run_id=run_id or self.run_id)

    def finished(self, rows_read: int, rows_written: int, output: Optional[str] = None) -> JobRecord:
        return replace(self, status="finished", finished_ms=now_ms(), rows_read=rows_read,
                       rows_written=rows_written, output=output)

    def committed(self) -> JobRecord:
        return replace(self, status="committed", committed_ms=now_ms())

    def failed(self, reason: str) -> JobRecord:
        return replace(self, status="failed", finished_ms=self.finished_ms or now_ms(), reason=reason)

    @property
    def duration_s(self) -> Optional[float]:
        if self.started_ms is None or self.finished_ms is None:
            return None
        return max(0, self.finished_ms - self.started_ms) / 1000

    @property
    def rate(self) -> Optional[float]:
        """Rows read per second while running, when known."""
        d = self.duration_s
        if d is None or not self.rows_read:
            return None
        return self.rows_read / max(d, 1e-3)

    @property
    def last_update_ms(self) -> int:
        return max(t for t in (self.created_ms, self.started_ms, self.finished_ms, self.committed_ms) if t is not None)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> JobRecord:
        return cls(**d)
