"""The ingest batcher: files queued as ingest requests, grouped into standard ingest jobs.

:func:`submit_ingest_requests` queues files (local paths or ``s3://`` URIs) for a
table. It refuses the whole call, queueing nothing, if the table is unknown or any
file is missing, unreadable or of an unknown type; each request records the file's
absolute location and size.

:func:`run_batcher` takes the table's pending requests, oldest first, and
groups them (:func:`plan_ingest_jobs`) by the table's
``sleeper.table.ingest.batcher.job.min.size`` / ``.max.size`` / ``.max.files`` /
``.max.age.seconds``. It runs each job through the :class:`JobRunners` the layer above
gives it (:meth:`sleeper_ops.table.Table.batcher_runners`; :func:`run_ingest_batcher`
asks a Sleeper for a table's): it never calls back into the facade. A job of at least
``sleeper.table.ingest.batcher.bulk.import.min.size`` bytes runs as a bulk import on
Spark (:meth:`sleeper_ops.table.Table.bulk_import`), keyed by the job's id, whose one
commit marks the requests ingested; smaller ones run as below. Each group is assigned to a fresh job atomically (a group
another batcher took first is skipped) and ingested with standard ingest: one
add-files commit that also marks the job's requests ``ingested`` and its record
committed, in the same state-store transaction. A job that fails commits nothing
and puts its requests back to ``pending`` with the error, to be retried on a later
run in jobs of their own (so one bad file cannot hold back others); after
``max_attempts`` failures a request is marked ``failed``. A job that stalls (the table's
``sleeper.table.ingest.max.files.per.leaf`` held it until
``sleeper.table.ingest.max.files.wait.seconds`` passed, :mod:`sleeper_ops.ingest.stall`)
read none of its files: its requests go back to ``pending`` with the stall as their
``last_error`` and their attempts as they were (compaction being behind is not their
fault; they never fail for it), its record is failed with a reason starting
``stalled:``, and the run starts no further job (each would wait as long); the report
counts it as ``stalled``. Every job is recorded as a
:class:`~statestore.jobs.JobRecord` of kind ``ingest``. Offline tables still take
ingest.

Crash safety: each file is ingested exactly once, whenever the process dies. Requests
stay ``assigned`` to a job whose process died before its commit; a later run puts them
back to pending once the job has shown no progress for ``stale_after_seconds``. If the
slow job was in fact alive, its commit is then refused (its requests are no longer
assigned to it) and its files are deleted, so the requeued requests are ingested once.
A job that died after its commit has nothing to settle: the commit marked its requests.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Optional, Protocol, Sequence

from sleeper_ops.errors import IngestError, IngestStalledError
from sleeper_ops.io.inputs import check_readable
from statestore import clock
from statestore.catalog import TableInfo
from statestore.client_writes import ClientWrite, ClientWriteRecord, check_key, digest_of
from statestore.ingest_requests import IngestRequest
from statestore.jobs import JobRecord
from statestore.properties import (
    INGEST_BATCHER_BULK_IMPORT_MIN_SIZE,
    INGEST_BATCHER_JOB_MAX_AGE_SECONDS,
    INGEST_BATCHER_JOB_MAX_FILES,
    INGEST_BATCHER_JOB_MAX_SIZE,
    INGEST_BATCHER_JOB_MIN_SIZE,
)

if TYPE_CHECKING:
    from sleeper_ops.stores import Stores
    from statestore.store import StateStore



# ----- requests ------------------------------------------------------------------------
def submit_ingest_requests(sleeper: Stores, table_name: str, files: Sequence[str], *,
                           received_ms: Optional[int] = None, request_id: Optional[str] = None) -> list[IngestRequest]:
    """Queue ``files`` for the table's ingest batcher; all or nothing. Requests of one
    call are received at the same time and listed in the order given.

    With ``request_id`` (the client's idempotency key, :mod:`statestore.client_writes`)
    a repeat of the same files within ``sleeper.table.write.idempotency.hours`` queues
    nothing and returns the requests the first call queued (as first queued).

    Raises:
        TableNotFoundError: no such table.
        IngestError: no files, a file given twice, or files missing, unreadable or of
            an unknown type (all of them named); nothing is queued.
        IdempotencyKeyReusedError: ``request_id`` was used for other files.
    """
    info = sleeper.state_store.get_table(table_name)
    write = None
    if request_id is not None:
        asked = (f if f.startswith("s3://") else os.path.abspath(f) for f in files)
        write = ClientWrite(check_key(request_id), digest_of("ingest-request", *(f.encode() for f in asked)))
        earlier = sleeper.state_store.client_write(info.table_id, request_id)
        if earlier is not None:
            return _requests_of(earlier.answer_for(info.table_id, write))
    if not files:
        raise IngestError(f"table {table_name}: no files given to ingest")
    problems: list[str] = []
    located: list[tuple[str, int]] = []
    seen: set[str] = set()
    for f in files:
        where = f if f.startswith("s3://") else os.path.abspath(f)
        if where in seen:
            problems.append(f"{f}: given twice")
            continue
        seen.add(where)
        try:
            located.append((where, check_readable(f, sleeper.s3)))
        except IngestError as e:
            problems.append(str(e))
    if problems:
        raise IngestError(f"table {table_name}: nothing queued: " + "; ".join(problems))
    when = clock.now_ms() if received_ms is None else received_ms
    # ids of one call share a prefix and sort in the order the files were given
    prefix = uuid.uuid4().hex
    requests = [IngestRequest(f"{prefix}-{i:06d}", info.table_id, where, size, when)
                for i, (where, size) in enumerate(located)]
    if write is not None:
        write = replace(write, answer=json.dumps([r.to_dict() for r in requests], separators=(",", ":")))
    earlier = sleeper.state_store.add_ingest_requests(info.table_id, requests, client_write=write)
    return requests if earlier is None else _requests_of(earlier)


def _requests_of(earlier: ClientWriteRecord) -> list[IngestRequest]:
    """The requests a keyed submission queued, from its remembered answer."""
    return [IngestRequest.from_dict(d) for d in json.loads(earlier.answer)]


# ----- planning (pure) ---------------------------------------------------------------
@dataclass(frozen=True)
class BatcherLimits:
    """A table's batching properties, in bytes, files and milliseconds."""

    min_size: int
    max_size: int
    max_files: int
    max_age_ms: int

    @classmethod
    def of(cls, table: TableInfo) -> BatcherLimits:
        return cls(table.get_size(INGEST_BATCHER_JOB_MIN_SIZE), table.get_size(INGEST_BATCHER_JOB_MAX_SIZE),
                   table.get_int(INGEST_BATCHER_JOB_MAX_FILES),
                   table.get_int(INGEST_BATCHER_JOB_MAX_AGE_SECONDS) * 1000)


def plan_ingest_jobs(pending: Sequence[IngestRequest], limits: BatcherLimits, now_ms: int) -> list[list[IngestRequest]]:
    """Groups of requests to send now, each one ingest job.

    A request that failed before goes alone. The others, oldest received first, fill
    groups of at most ``max_files`` files and ``max_size`` bytes (a file bigger than
    ``max_size`` goes alone); a new group starts when the next request does not fit.
    A group is sent when it reaches ``min_size``, holds ``max_files`` files, or its
    oldest request is at least ``max_age`` old; other groups wait for a later run
    (which regroups them with newer requests).
    """
    retries = [[r] for r in pending if r.attempts > 0]
    fresh = sorted((r for r in pending if r.attempts == 0), key=lambda r: (r.received_ms, r.request_id))
    groups: list[list[IngestRequest]] = []
    size = 0
    for r in fresh:
        if groups and len(groups[-1]) < limits.max_files and size + r.size_bytes <= limits.max_size:
            groups[-1].append(r)
            size += r.size_bytes
        else:
            groups.append([r])
            size = r.size_bytes

    def ready(g: list[IngestRequest]) -> bool:
        return (sum(r.size_bytes for r in g) >= limits.min_size or len(g) >= limits.max_files
                or now_ms - min(r.received_ms for r in g) >= limits.max_age_ms)

    return retries + [g for g in groups if ready(g)]


# ----- running -----------------------------------------------------------------------
#: runs a standard ingest of the files as the batcher's job (the record given; its commit
#: marks the job's requests ingested and the record committed); returns the records
#: ingested and the data files written
IngestJob = Callable[[list[str], JobRecord], tuple[int, int]]
#: runs a bulk import of the files keyed by the job's id (its commit marks the job's
#: requests ingested), recording the run id given; returns the records imported and the
#: data files written
BulkImportJob = Callable[[list[str], JobRecord, Optional[str]], tuple[int, int]]


@dataclass(frozen=True)
class JobRunners:
    """What the batcher runs one table's jobs with, given by the layer above it
    (:meth:`sleeper_ops.table.Table.batcher_runners`)."""

    info: TableInfo  # the table, as opened
    ingest: IngestJob
    #: None when bulk imports cannot be submitted (a Sleeper opened without a
    #: configuration): every job is then a standard ingest, whatever its size
    bulk_import: Optional[BulkImportJob]


class RunnerSource(Protocol):
    """A Sleeper as :func:`run_ingest_batcher` sees it (``Sleeper`` is one)."""

    @property
    def state_store(self) -> StateStore:
        """The instance's table metadata."""

    def batcher_runners(self, table_name: str) -> JobRunners:
        """The runners of table ``table_name``'s batcher jobs."""


@dataclass(frozen=True)
class BatchedJob:
    """One ingest job the batcher ran (or could not take)."""

    job_id: str
    request_ids: tuple[str, ...]
    files: tuple[str, ...]
    size_bytes: int
    #: "committed", "failed", "stalled" (it waited for compaction in vain and read nothing: its requests
    #: are pending again, the attempt not counted) or "taken" (another batcher assigned the requests first)
    status: str
    records: int = 0
    error: Optional[str] = None
    written: int = 0  # data files committed


@dataclass
class BatcherReport:
    """What one run of the batcher did for one table."""

    table: str
    jobs: list[BatchedJob] = field(default_factory=list)
    waiting: int = 0  # pending requests left for a later run
    requeued: int = 0  # requests of abandoned jobs put back to pending

    @property
    def committed(self) -> list[BatchedJob]:
        return [j for j in self.jobs if j.status == "committed"]

    @property
    def failed(self) -> list[BatchedJob]:
        return [j for j in self.jobs if j.status == "failed"]

    @property
    def stalled(self) -> list[BatchedJob]:
        return [j for j in self.jobs if j.status == "stalled"]

    @property
    def records(self) -> int:
        return sum(j.records for j in self.jobs)

    def summary(self) -> str:
        stalled = (f", {len(self.stalled)} stalled waiting for compaction ({self.stalled[0].error})"
                   if self.stalled else "")
        return (f"table {self.table}: {len(self.committed)} ingest jobs committed ({self.records:,} records), "
                f"{len(self.failed)} failed, {sum(1 for j in self.jobs if j.status == 'taken')} taken by another "
                f"batcher, {self.requeued} requests requeued, {self.waiting} waiting{stalled}")


#: how the reason of a job that stalled starts (:func:`stalled_reason`)
STALLED = "stalled"


def stalled_reason(reason: Optional[str]) -> bool:
    """Whether a failed job's ``reason`` says it stalled: it waited for compaction in vain
    and read none of its files (a failure that is not its requests')."""
    return reason is not None and reason.startswith(f"{STALLED}: ")


def requeue_abandoned(store: StateStore, table_id: str, *, stale_after_seconds: float,
                      now_ms: Optional[int] = None) -> int:
    """Settle requests left ``assigned`` by a batcher that died; returns how many went
    back to pending.

    A job whose record says it committed has its requests marked ``ingested`` (they
    already are, unless written by an older version that marked them separately); one
    recorded ``failed`` has them requeued at once (the attempt not counted when it had
    stalled); one with no progress for
    ``stale_after_seconds`` (or no record) has them requeued and its record failed (its
    commit, should it still come, is refused).
    """
    now = clock.now_ms() if now_ms is None else now_ms
    assigned = store.list_ingest_requests(table_id, status="assigned", limit=None)
    requeued = 0
    for job_id in sorted({r.job_id for r in assigned if r.job_id is not None}):
        record = store.get_job(table_id, job_id)
        if record is not None and record.status == "committed":
            store.finish_ingest_job(table_id, job_id, ok=True)  # only marking the requests was lost
        elif record is not None and record.status == "failed":
            requeued += store.finish_ingest_job(table_id, job_id, ok=False, error=record.reason,
                                                counted=not stalled_reason(record.reason))
        elif record is None or now - record.last_update_ms >= stale_after_seconds * 1000:
            reason = f"abandoned: no progress for {stale_after_seconds:g}s"
            requeued += store.finish_ingest_job(table_id, job_id, ok=False, error=reason)
            if record is not None:
                store.put_job(record.failed(reason))
    return requeued


def run_ingest_batcher(sleeper: RunnerSource, table_name: str, *, now_ms: Optional[int] = None,
                       run_id: Optional[str] = None, max_attempts: Optional[int] = 3,
                       stale_after_seconds: float = 3600.0, send_now: bool = False) -> BatcherReport:
    """:func:`run_batcher` for table ``table_name`` of ``sleeper``, with its runners."""
    return run_batcher(sleeper.state_store, sleeper.batcher_runners(table_name), now_ms=now_ms, run_id=run_id,
                       max_attempts=max_attempts, stale_after_seconds=stale_after_seconds, send_now=send_now)


def run_batcher(store: StateStore, runners: JobRunners, *, now_ms: Optional[int] = None,
                run_id: Optional[str] = None, max_attempts: Optional[int] = 3,
                stale_after_seconds: float = 3600.0, send_now: bool = False) -> BatcherReport:
    """Group the table's pending requests into jobs and run them with ``runners`` (see
    the module docstring).

    Args:
        now_ms: the time to judge request age by (default: now).
        run_id: recorded on each job (e.g. the Airflow ``dag_id/run_id``).
        max_attempts: failures after which a request is marked ``failed`` (None: never).
        stale_after_seconds: requeue requests of jobs with no progress for this long.
        send_now: send every group now, however small or young (the jobs still respect the
            table's max size and max files): event-driven ingest's runs, which ingest what
            their messages announced at once.
    """
    info = runners.info
    now = clock.now_ms() if now_ms is None else now_ms
    report = BatcherReport(info.name)
    report.requeued = requeue_abandoned(store, info.table_id, stale_after_seconds=stale_after_seconds, now_ms=now)
    pending = store.pending_ingest_requests(info.table_id)
    limits = BatcherLimits.of(info)
    groups = plan_ingest_jobs(pending, replace(limits, min_size=0) if send_now else limits, now)
    sent = 0
    for group in groups:
        report.jobs.append(_run_job(store, runners, group, run_id=run_id, max_attempts=max_attempts))
        sent += len(group)
        if report.jobs[-1].status == "stalled":  # the next job would wait as long: left for a later run
            break
    report.waiting = len(pending) - sent
    return report


def _run_job(store: StateStore, runners: JobRunners, group: list[IngestRequest], *, run_id: Optional[str],
             max_attempts: Optional[int]) -> BatchedJob:
    """Assign ``group`` to a new job, ingest its files, record the outcome."""
    table_id = runners.info.table_id
    job_id = uuid.uuid4().hex
    ids = tuple(r.request_id for r in group)
    files = tuple(r.filename for r in group)
    size = sum(r.size_bytes for r in group)
    record = JobRecord.created(table_id, job_id, "ingest", input_files=len(group), run_id=run_id)
    store.put_job(record)
    if not store.assign_ingest_requests(table_id, job_id, ids):
        store.put_job(record.failed("another batcher took its requests first"))
        return BatchedJob(job_id, ids, files, size, "taken")
    record = record.started(run_id)
    store.put_job(record)
    if size >= runners.info.get_size(INGEST_BATCHER_BULK_IMPORT_MIN_SIZE) and runners.bulk_import is not None:
        return _run_bulk_job(store, runners.bulk_import, record, ids, files, size, run_id=run_id,
                             max_attempts=max_attempts)
    try:
        # the data commit marks the requests ingested and the record committed, atomically
        records, written = runners.ingest(list(files), record)
    except IngestStalledError as e:  # compaction is behind, not the files: the attempt does not count
        reason = f"{STALLED}: {e}"
        store.put_job(record.failed(reason))
        store.finish_ingest_job(table_id, job_id, ok=False, error=reason, counted=False)
        return BatchedJob(job_id, ids, files, size, "stalled", error=reason)
    except Exception as e:
        reason = f"{type(e).__name__}: {e}" if not isinstance(e, IngestError) else str(e)
        store.put_job(record.failed(reason))
        # only requests still assigned (the commit did not apply) go back to pending
        store.finish_ingest_job(table_id, job_id, ok=False, error=reason, max_attempts=max_attempts)
        return BatchedJob(job_id, ids, files, size, "failed", error=reason)
    return BatchedJob(job_id, ids, files, size, "committed", records=records, written=written)


def _run_bulk_job(store: StateStore, bulk_import: BulkImportJob, record: JobRecord, ids: tuple[str, ...],
                  files: tuple[str, ...], size: int, *, run_id: Optional[str],
                  max_attempts: Optional[int]) -> BatchedJob:
    """A job of at least ``sleeper.table.ingest.batcher.bulk.import.min.size`` bytes: a
    bulk import on Spark keyed by the job id, whose commit marks the job's requests
    ingested (so they are ingested once, whatever fails where)."""
    table_id, job_id = record.table_id, record.job_id
    try:
        records, written = bulk_import(list(files), record, run_id)
    except Exception as e:
        reason = f"bulk import: {type(e).__name__}: {e}"
        store.put_job(record.failed(reason))
        store.finish_ingest_job(table_id, job_id, ok=False, error=reason, max_attempts=max_attempts)
        return BatchedJob(job_id, ids, files, size, "failed", error=reason)
    store.put_job(record.finished(records, records).committed())
    return BatchedJob(job_id, ids, files, size, "committed", records=records, written=written)
