"""Job status records: what each maintenance job did, for reports and retries.

A :class:`JobRecord` is one job (compaction, split, ingest, ...) of one table, kept
as a single row that moves forward through ``created -> started -> finished ->
committed``, or ends ``failed`` with a reason. Writers save the whole record each
time (an upsert by ``(table_id, job_id)``); the latest save wins, except that a
committed record is final.

A job names the objects it will write in ``outputs`` *before* writing them
(:meth:`JobRecord.started` with ``outputs``, saved first). The orphan sweep never
deletes an object that a job not yet final names (see
:meth:`statestore.store.StateStore.in_flight_outputs`), so a slow job's output cannot
be swept between its write and its commit.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Optional, Sequence

from statestore.clock import now_ms
from statestore.codec import Record
from statestore.errors import BookkeepingError

JOB_KINDS = ("compaction", "split", "ingest", "bulk_import", "gc", "flush", "export")
#: how the reason of a record declared abandoned starts (:meth:`JobRecord.abandoned`)
ABANDONED = "abandoned:"
JOB_STATUSES = ("created", "started", "finished", "committed", "failed")


@dataclass(frozen=True)
class JobRecord(Record):
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
        outputs: the objects this attempt of the job writes (or may write), named
            before it writes them; each attempt names fresh ones. A name also covers
            the keys an engine's task attempts write for it (the name tagged with the
            task attempt, ``<stem>.attempt-<id>.<ext>``; see ``sleeper_ops.io.attempts``).
        heartbeat_ms: when the running job last showed it is alive
            (:meth:`~statestore.store.StateStore.heartbeat_jobs`); never goes back.
    """

    CODEC_STRICT = True  # an unknown key is refused, as it always was

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
    outputs: tuple[str, ...] = ()
    heartbeat_ms: Optional[int] = None

    def __post_init__(self) -> None:
        if not isinstance(self.outputs, tuple):
            object.__setattr__(self, "outputs", tuple(self.outputs))
        if self.kind not in JOB_KINDS:
            raise ValueError(f"unknown job kind {self.kind!r}")
        if self.status not in JOB_STATUSES:
            raise ValueError(f"unknown job status {self.status!r}")

    @classmethod
    def created(cls, table_id: str, job_id: str, kind: str, **fields: Any) -> JobRecord:
        return cls(table_id, job_id, kind, "created", created_ms=now_ms(), **fields)

    def started(self, run_id: Optional[str] = None, outputs: Sequence[str] = ()) -> JobRecord:
        """A new attempt, naming the objects it will write (save it before writing them)."""
        return replace(self, status="started", started_ms=now_ms(), finished_ms=None, committed_ms=None,
                       reason=None, attempts=self.attempts + 1, run_id=run_id or self.run_id,
                       outputs=tuple(outputs), output=None)

    def naming(self, outputs: Sequence[str]) -> JobRecord:
        """This attempt, naming (also) ``outputs``; save it before writing them."""
        return replace(self, outputs=tuple(dict.fromkeys((*self.outputs, *outputs))))

    @property
    def final(self) -> bool:
        """Committed or failed: the job names nothing it may still commit."""
        return self.status in ("committed", "failed")

    def finished(self, rows_read: int, rows_written: int, output: Optional[str] = None) -> JobRecord:
        return replace(self, status="finished", finished_ms=now_ms(), rows_read=rows_read,
                       rows_written=rows_written, output=output)

    def committed(self) -> JobRecord:
        return replace(self, status="committed", committed_ms=now_ms())

    def failed(self, reason: str) -> JobRecord:
        return replace(self, status="failed", finished_ms=self.finished_ms or now_ms(), reason=reason)

    def abandoned(self, idle_minutes: float, at_ms: int) -> JobRecord:
        """This attempt declared abandoned at ``at_ms`` after ``idle_minutes`` without
        progress: failed, and fenced -- a commit by this attempt is refused from now on
        (:func:`check_job_bookkeeping`); a new attempt (:meth:`started`) may run."""
        return replace(self, status="failed", finished_ms=self.finished_ms or at_ms,
                       reason=f"{ABANDONED} no progress for {idle_minutes:g} minutes "
                              "(sleeper.table.gc.job.abandon.minutes)")

    @property
    def was_abandoned(self) -> bool:
        """Declared abandoned (:meth:`abandoned`): this attempt may not commit."""
        return self.status == "failed" and (self.reason or "").startswith(ABANDONED)

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
        """When the job last made progress or showed it is alive (its heartbeat)."""
        return max(t for t in (self.created_ms, self.started_ms, self.finished_ms, self.committed_ms,
                               self.heartbeat_ms) if t is not None)

    def beating(self, at_ms: int) -> JobRecord:
        """This record with a heartbeat at ``at_ms`` (an earlier heartbeat kept)."""
        return replace(self, heartbeat_ms=max(at_ms, self.heartbeat_ms or 0))


def check_job_bookkeeping(stored: Optional[JobRecord], job: JobRecord) -> None:
    """Refuse (BookkeepingError) to commit ``job``'s attempt when the stored record of
    the job is already committed, declares this attempt abandoned (garbage collection
    stopped waiting for it, so a delete it would undo may have let its tombstone go),
    or names other outputs (a later attempt took over:
    its outputs are the ones the orphan sweep keeps, so this attempt's may be gone)."""
    if stored is None:
        return
    if stored.status == "committed":
        raise BookkeepingError(f"job {job.job_id} of table {job.table_id} is already committed")
    if stored.was_abandoned and stored.outputs == job.outputs:
        raise BookkeepingError(f"job {job.job_id} of table {job.table_id} was declared abandoned ({stored.reason}): "
                               "this attempt may not commit; run the job again")
    if stored.outputs != job.outputs:
        raise BookkeepingError(f"job {job.job_id} of table {job.table_id}: this attempt was superseded "
                               f"(the job's record names {list(stored.outputs)[:3]}, this attempt "
                               f"{list(job.outputs)[:3]})")


def saves_over(stored: JobRecord, record: JobRecord) -> bool:
    """Whether saving ``record`` replaces ``stored`` (see ``StateStore.put_job``): a
    committed record is final, and once an attempt has started naming outputs, only
    a new attempt (a ``started`` save) or that attempt itself (the same outputs) may
    change the record -- never an attempt it superseded."""
    if stored.status == "committed" and record.status != "committed":
        return False
    return record.status == "started" or not stored.outputs or stored.outputs == record.outputs
