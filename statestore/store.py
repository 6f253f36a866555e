"""The StateStore abstract base class: the table catalog plus each table's state.

The same methods, grouped by what a caller needs, are the roles of
:mod:`statestore.roles` (catalog, table commits, job tracker, leases, ingest queue,
write buffer, client writes, history); a caller types against the role it uses, and a
backend may build one object per role over one connection
(:class:`~statestore.composed.ComposedStateStore`; docs/adr/0016-state-store-roles.md).

Guarantees every backend gives:

* :meth:`StateStore.commit` is atomic: a transaction is validated against the
  current state and applied entirely, or raises and changes nothing. Concurrent
  commits to one table behave as if applied one at a time in some order.
* Transient conflicts (e.g. serialization failures) are retried inside ``commit``
  with jittered backoff; :class:`CommitConflictError` is raised only when retries run
  out. A :class:`TransactionError` means the transaction is invalid against the
  state it saw and is never retried.
* :meth:`create_table` registers the table and its partitions atomically;
  :meth:`delete_table` removes the table and all its state.
* Ingest requests (:mod:`statestore.ingest_requests`) are queued atomically and
  assigned to at most one job at a time.
* Commits are idempotent by commit id: the store remembers the ids of applied
  commits (for :data:`COMMIT_ID_RETENTION_MS` at least), so a commit retried after an
  unknown outcome (a connection lost during COMMIT) applies at most once. A commit's
  bookkeeping (its job's record, its ingest requests) is applied in the same atomic
  step as its data, so no crash can separate the two.
* The write buffer (:mod:`statestore.buffer`): :meth:`append_buffer` returns only
  once the entry is durable; a commit with ``buffer_seqs`` removes those entries in
  the same atomic step as its data, so a flushed record is in a file or in the buffer,
  never both and never neither.
"""

from __future__ import annotations

import abc
from typing import Any, Collection, Iterator, Mapping, Optional, Sequence

from statestore.buffer import BufferSnapshot, BufferStats, RecordBlob
from statestore.catalog import TableInfo
from statestore.changes import TableChanges
from statestore.client_writes import ClientWrite, ClientWriteRecord
from statestore.deletes import TOMBSTONE_GOES, KeyRecord
from statestore.errors import NotSupportedError
from statestore.ingest_requests import IngestRequest
from statestore.jobs import JobRecord
from statestore.leases import Lease
from statestore.partitions import Partition
from statestore.role_defaults import StateReads
from statestore.schema import Schema
from statestore.state import TableState
from statestore.summaries import TransactionSummary
from statestore.transactions import Transaction

#: How long a backend remembers an applied commit id (see :meth:`StateStore.prune_commit_ids`).
COMMIT_ID_RETENTION_MS = 24 * 3600 * 1000


class StateStore(StateReads, abc.ABC):
    """Table catalog and per-table metadata (partitions, file references, files).

    The reads a backend may answer from :meth:`load_state` (partitions, references, file
    statuses and pages, overview, tombstones), :meth:`sweep_blobs` and
    :meth:`commit_retries` have their defaults in
    :class:`~statestore.role_defaults.StateReads`."""

    # ----- catalog --------------------------------------------------------------------
    @abc.abstractmethod
    def create_table(self, name: str, schema: Schema, partitions: Sequence[Partition],
                     properties: Optional[Mapping[str, str]] = None) -> TableInfo:
        """Register a table with its initial partitions. Raises TableExistsError."""

    @abc.abstractmethod
    def list_tables(self) -> list[TableInfo]:
        """All tables, ordered by name."""

    @abc.abstractmethod
    def get_table(self, name: str) -> TableInfo:
        """The table called ``name``. Raises TableNotFoundError."""

    @abc.abstractmethod
    def update_properties(self, name: str, properties: Mapping[str, str]) -> TableInfo:
        """Set (validated) properties on a table, keeping the others; an empty value
        clears that property (it takes its default again)."""

    @abc.abstractmethod
    def rename_table(self, old: str, new: str) -> TableInfo:
        """Rename; raises TableNotFoundError or TableExistsError and changes nothing."""

    @abc.abstractmethod
    def delete_table(self, name: str) -> TableInfo:
        """Remove the table and all its state; returns what was removed."""

    @abc.abstractmethod
    def instance_id(self) -> str:
        """This state store's identity: a UUID string stored in the store itself, created
        the first time the store is opened or migrated (a store written by a previous
        release gets one on its first open), the same for every process and every
        spelling of its address (the same PostgreSQL database through a socket path or
        host and port), never rewritten. Concurrent first opens end with one id. Raises
        StateStoreUnavailableError when the store cannot be read."""

    # ----- table state ----------------------------------------------------------------
    @abc.abstractmethod
    def commit(self, table_id: str, transaction: Transaction, *, commit_id: Optional[str] = None,
               job: Optional[JobRecord] = None, ingest_job_id: Optional[str] = None,
               buffer_seqs: Sequence[int] = (), client_write: Optional[ClientWrite] = None) -> bool:
        """Validate and apply ``transaction`` atomically (see the module docstring),
        together with its bookkeeping.

        Args:
            commit_id: the commit's idempotency key (default: a fresh one). If a commit
                of this id was already applied, nothing is done and False is returned.
            job: a job record saved in the same atomic step (normally ``committed``).
                Refused with :class:`BookkeepingError` when the stored record of that
                job names other outputs (a later attempt superseded this one) or is
                already committed. Its outputs identify the attempt: a retry of this
                commit finding the record committed with the same outputs is a no-op
                (False), whatever ``commit_id``.
            ingest_job_id: every ingest request assigned to this job becomes
                ``ingested`` in the same atomic step; refused with
                :class:`BookkeepingError` when none is assigned to it any more (the
                requests were requeued for another job).
            buffer_seqs: write-buffer entries (a flush's) removed in the same atomic
                step; refused with :class:`BookkeepingError` when any of them is no
                longer in the buffer (another flush took it).
            client_write: the client's idempotency key with the digest of its request
                (:mod:`statestore.client_writes`), recorded in the same atomic step with
                ``seq`` = :meth:`Transaction.number_in` (a delete's tombstone number) and
                its ``answer`` text. When the table holds the key already, nothing is
                applied: the same digest returns False (read the first answer with
                :meth:`client_write`); another digest raises
                :class:`~statestore.client_writes.IdempotencyKeyReusedError`.

        Returns:
            True if applied by this call; False if ``commit_id`` had been applied before
            (including by an attempt of this call whose reply was lost).

        Raises:
            TransactionError: refused; nothing applied (the caller may delete its output).
            CommitOutcomeUnknownError: the store was lost mid-commit and did not come back
                in time; the commit may or may not have applied (keep the output).
            StateStoreUnavailableError, CommitConflictError: not applied.
        """

    @abc.abstractmethod
    def in_flight_outputs(self, table_id: str, active_since_ms: int) -> set[str]:
        """The objects named in ``outputs`` by the table's jobs that are not final
        (neither committed nor failed) and were last updated at or after
        ``active_since_ms``: objects that may yet be committed, which the orphan sweep
        must keep."""

    @abc.abstractmethod
    def prune_commit_ids(self, table_id: str, before_ms: int) -> int:
        """Forget the ids of commits applied before ``before_ms``; returns how many."""

    @abc.abstractmethod
    def load_state(self, table_id: str) -> TableState:
        """A consistent snapshot of the whole state of one table."""

    @abc.abstractmethod
    def changes_since(self, table_id: str, since: Any = None) -> TableChanges:
        """The table's catalog entry, and what changed in its partitions and references
        since ``since`` (a token an earlier call returned; None: the whole state), with
        the current values of only what changed. Complete, read-your-writes (covers
        every commit that returned before this call) and consistent: see
        :mod:`statestore.changes`. An unchanged table costs one small read.
        Raises TableNotFoundError."""

    def buffer_high_water(self, table_id: str) -> int:
        """The highest sequence number in the table's write buffer now (0 when empty or
        the backend has none): a delete covers the entries numbered at most this."""
        try:
            return max(self.read_buffer(table_id).seqs, default=0)
        except NotSupportedError:
            return 0

    @abc.abstractmethod
    def unreferenced_files(self, table_id: str, updated_before_ms: int, limit: int = 1000) -> list[str]:
        """Names of tracked files with no references, unchanged since before the time."""

    # ----- job status -----------------------------------------------------------------
    @abc.abstractmethod
    def put_job(self, record: JobRecord) -> None:
        """Save ``record``, replacing any earlier record of the same table and job id,
        except that ``committed`` is final: once a job's record says committed, saves
        of other statuses for it are ignored (a losing duplicate attempt cannot
        overwrite the winner's record, however the two race); and once an attempt
        naming outputs has started, saves other than ``started`` from an attempt naming
        other outputs (one it superseded) are ignored (:func:`statestore.jobs.saves_over`)."""

    @abc.abstractmethod
    def heartbeat_jobs(self, table_id: str, job_ids: Sequence[str], at_ms: int) -> int:
        """Record that the jobs are alive at ``at_ms``: each stored record's
        ``heartbeat_ms`` becomes at least ``at_ms`` (never earlier), nothing else of it
        changes, and a job with no record is skipped. Returns how many records were
        refreshed. :meth:`in_flight_outputs` counts a heartbeat as an update, so a
        running job that beats keeps its outputs from the orphan sweep."""

    @abc.abstractmethod
    def get_job(self, table_id: str, job_id: str) -> Optional[JobRecord]:
        """The record of one job, or None."""

    @abc.abstractmethod
    def list_jobs(self, table_id: str, *, kind: Optional[str] = None,
                  limit: Optional[int] = 1000) -> list[JobRecord]:
        """A table's jobs, newest created first (at most ``limit``; None: every one,
        read a page at a time, for a caller that must see them all)."""

    @abc.abstractmethod
    def open_jobs(self, table_id: str) -> list[JobRecord]:
        """Every job of the table that is not final (neither committed nor failed),
        however many jobs came after it: read through an index of open jobs, so the
        cost follows the open jobs, not every job ever run. Raises
        :class:`TableNotFoundError` for a table not in the catalog."""

    # ----- leases ---------------------------------------------------------------------
    @abc.abstractmethod
    def acquire_lease(self, name: str, holder: str, ttl_seconds: float) -> Optional[Lease]:
        """Take or renew the lease ``name`` for ``holder``; None if another holder has it
        unexpired. Atomic: two holders racing for a free lease, one gets it."""

    @abc.abstractmethod
    def release_lease(self, name: str, holder: str) -> bool:
        """Give up the lease if ``holder`` holds it; True if it did."""

    @abc.abstractmethod
    def get_lease(self, name: str) -> Optional[Lease]:
        """The unexpired lease ``name``, or None."""

    # ----- ingest requests (statestore.ingest_requests) --------------------------------
    @abc.abstractmethod
    def add_ingest_requests(self, table_id: str, requests: Sequence[IngestRequest], *,
                            client_write: Optional[ClientWrite] = None) -> Optional[ClientWriteRecord]:
        """Queue new pending requests. Atomic: all are added or none. Raises
        TableNotFoundError, or IngestRequestError for a request of another table, not
        new, or whose id is given twice or already queued.

        With ``client_write`` (:mod:`statestore.client_writes`) its key is recorded in
        the same atomic step. Returns None when the requests were queued now; the
        record of the first write when the table already held the key with the same
        digest (nothing queued now); raises
        :class:`~statestore.client_writes.IdempotencyKeyReusedError` for another digest."""

    @abc.abstractmethod
    def pending_ingest_requests(self, table_id: str, limit: Optional[int] = None) -> list[IngestRequest]:
        """The table's pending requests, oldest received first (at most ``limit``).
        Raises TableNotFoundError."""

    @abc.abstractmethod
    def assign_ingest_requests(self, table_id: str, job_id: str, request_ids: Sequence[str]) -> bool:
        """Assign the requests to ``job_id`` if every one of them is still pending; True
        if it did. Atomic and conditional: refused (False, nothing changed) when any is
        missing or no longer pending, so two batchers never take the same request."""

    @abc.abstractmethod
    def finish_ingest_job(self, table_id: str, job_id: str, ok: bool, error: Optional[str] = None, *,
                          max_attempts: Optional[int] = None, counted: bool = True) -> int:
        """End ``job_id``: its assigned requests become ``ingested`` (``ok``), or go back
        to ``pending`` with ``attempts`` + 1 and ``last_error`` = ``error`` (``failed``
        instead once ``attempts`` reaches ``max_attempts``). A job that ended through no
        fault of its requests (``counted`` False: it gave up before reading them) puts
        them back to ``pending`` with ``last_error`` = ``error`` and ``attempts`` as they
        were, never ``failed``. Only requests still assigned to the job change; returns
        how many did."""

    @abc.abstractmethod
    def list_ingest_requests(self, table_id: str, *, status: Optional[str] = None,
                             limit: Optional[int] = 1000) -> list[IngestRequest]:
        """The table's requests (of one status, if given), oldest received first (at
        most ``limit``; None: all). Raises TableNotFoundError, or IngestRequestError
        for an unknown status."""

    # ----- write buffer (statestore.buffer) ----------------------------------------------
    #: the most entries one commit may remove (``buffer_seqs``); None: no limit
    buffer_max_flush_entries: Optional[int] = None

    def append_buffer(self, table_id: str, data: bytes, rows: int, *, max_rows: Optional[int] = None,
                      client_write: Optional[ClientWrite] = None) -> int:
        """Store one write (``rows`` records as Arrow IPC stream bytes) in the table's
        buffer; returns its sequence number once it is durable. Atomic: the entry is
        stored whole or not at all. Refused with
        :class:`~statestore.errors.BufferFullError` (nothing stored) when the buffer
        would then hold more than ``max_rows`` records; concurrent writes may together
        pass the limit by at most their own sizes. Raises TableNotFoundError.

        With ``client_write`` (:mod:`statestore.client_writes`) its key is recorded in
        the same atomic step as the entry; when the table already holds the key, nothing
        is stored and the first write's sequence number is returned (same digest) or
        :class:`~statestore.client_writes.IdempotencyKeyReusedError` raised."""
        raise NotSupportedError(f"the {type(self).__name__} backend has no write buffer (table {table_id}): "
                                "use ingest, or the PostgreSQL or in-memory state store")

    def read_buffer(self, table_id: str, *, up_to_seq: Optional[int] = None, max_rows: Optional[int] = None,
                    skip_data: Collection[int] = (), max_entries: Optional[int] = None) -> BufferSnapshot:
        """The table's buffered entries at one instant, in sequence order, with the
        count of flushes committed by then: those numbered at most ``up_to_seq`` (None:
        all), or of those the first holding at least ``max_rows`` records, or the first
        ``max_entries`` (at least one entry). Entries whose numbers are in
        ``skip_data`` come without their bytes (a reader that has them already).
        Raises TableNotFoundError."""
        raise NotSupportedError(f"the {type(self).__name__} backend has no write buffer (table {table_id})")

    def buffer_stats(self, table_id: str) -> BufferStats:
        """Entries, records and the oldest write time of the table's buffer, and its
        flush count, in one cheap read. Raises TableNotFoundError."""
        raise NotSupportedError(f"the {type(self).__name__} backend has no write buffer (table {table_id})")

    def record_blobs(self, table_id: str) -> Iterator[RecordBlob]:
        """Every object the backend keeps outside its rows that holds records of the
        table (:class:`~statestore.buffer.RecordBlob`), whether a live entry names it
        or not: for the proof of erasure. None for a backend that keeps records only in
        its rows (the default). Raises TableNotFoundError."""
        return iter(())

    def delete_key_records(self, table_id: str, now_ms: int) -> list[KeyRecord]:
        """Every record of the state store that holds a delete's keys
        (:class:`~statestore.deletes.KeyRecord`), each with when it goes as judged at
        ``now_ms``: for the proof of erasure. The default lists the live tombstones; a
        backend adds what else it keeps (transaction bodies, history rows, snapshots).
        Raises TableNotFoundError."""
        _, live = self.tombstones(table_id)
        return [KeyRecord(f"tombstone {t.number}", t.regions, t.where, TOMBSTONE_GOES) for t in live]

    # ----- idempotency keys of client writes (statestore.client_writes) ---------------------
    def client_write(self, table_id: str, request_id: str) -> Optional[ClientWriteRecord]:
        """The remembered write of key ``request_id`` to the table, or None."""
        return None

    def claim_client_write(self, table_id: str, write: ClientWrite) -> Optional[ClientWriteRecord]:
        """Record ``write``'s key alone, atomically, for a write whose commit point is not
        in the state store (an export's manifest): None when this call recorded it, else
        the first record of the key (:class:`~statestore.client_writes.IdempotencyKeyReusedError`
        for another digest). Every backend records a key in the same atomic step as the
        ingest requests it queues, so queuing none records the key alone."""
        return self.add_ingest_requests(table_id, (), client_write=write)

    def prune_client_writes(self, table_id: str, before_ms: int) -> int:
        """Forget the keys of client writes stored before ``before_ms``; returns how many."""
        return 0

    def transaction_number(self, table_id: str) -> int:
        """A number of the table's state that only grows: at least that of every commit
        that returned before this call, and larger after a later commit that changes
        partitions or references. One small read. (The log number on DynamoDB, the
        largest logged transaction id on PostgreSQL, a version in memory.) Raises
        TableNotFoundError."""
        raise NotSupportedError(f"the {type(self).__name__} backend numbers no transactions (table {table_id})")

    # ----- history and time travel (statestore.history) --------------------------------
    def history(self, table_id: str, *, limit: int = 20, upto: Optional[int] = None) -> list[TransactionSummary]:
        """The table's transactions still in its history, newest first, numbered at most
        ``upto`` (None: all), at most ``limit``. Raises TableNotFoundError."""
        raise NotSupportedError(f"the {type(self).__name__} backend keeps no history (table {table_id})")

    def history_after(self, table_id: str, number: int) -> Optional[TransactionSummary]:
        """The first transaction numbered above ``number``, or None (``number`` is the newest)."""
        raise NotSupportedError(f"the {type(self).__name__} backend keeps no history (table {table_id})")

    def number_at(self, table_id: str, time_ms: int) -> Optional[int]:
        """The number of the last transaction committed at or before ``time_ms`` that is
        still in the history, or None."""
        raise NotSupportedError(f"the {type(self).__name__} backend keeps no history (table {table_id})")

    def state_as_of(self, table_id: str, number: int) -> TableState:
        """The table's whole state right after transaction ``number`` (partitions,
        references, files and tombstones; the write buffer is not part of it). Raises
        :class:`~statestore.history.HistoryError` when ``number`` is not in the table's
        history, TableNotFoundError. Callers check retention first
        (:func:`statestore.history.resolve_as_of`)."""
        raise NotSupportedError(f"the {type(self).__name__} backend keeps no history (table {table_id})")

    def prune_history(self, table_id: str, now: int) -> int:
        """Forget history no retained state needs (older than the table's
        ``sleeper.table.history.retention.minutes`` as at ``now``, ms); garbage
        collection calls this. Returns how many entries went."""
        return 0

    def close(self) -> None:
        """Release connections. The store is unusable afterwards."""

    def __enter__(self) -> StateStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
