"""The state store's roles: one small protocol for each thing a caller may need of it.

A caller types against the role it uses (a lease helper takes :class:`Leases`, the
batcher an :class:`IngestQueue`), so it names only that. Every
:class:`~statestore.store.StateStore` plays every role, so a caller is handed the whole
store; each backend builds the roles as objects over one shared connection (one lock
and its dicts in memory, one PostgreSQL connection pool, one DynamoDB client with its
object store and cache), so what must commit together still commits in one atomic
step: a commit with its job record, its ingest requests, its write-buffer entries and
its client write (:meth:`TableCommits.commit`).

The guarantees each role carries are in its docstring; :mod:`statestore.store` documents
each method in full.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Collection, Iterator, Mapping, Optional, Protocol, Sequence, runtime_checkable

from statestore.overview import DEFAULT_FILE_SAMPLE

if TYPE_CHECKING:
    from statestore.buffer import BufferSnapshot, BufferStats, RecordBlob
    from statestore.catalog import TableInfo
    from statestore.changes import TableChanges
    from statestore.client_writes import ClientWrite, ClientWriteRecord
    from statestore.deletes import KeyRecord, Tombstone
    from statestore.files import FileReference, FileStatus
    from statestore.ingest_requests import IngestRequest
    from statestore.jobs import JobRecord
    from statestore.leases import Lease
    from statestore.overview import TableOverview
    from statestore.partitions import Partition
    from statestore.schema import Schema
    from statestore.state import TableState
    from statestore.summaries import TransactionSummary
    from statestore.transactions import Transaction


@runtime_checkable
class TableCatalog(Protocol):
    """The table catalog: name -> table id, schema and properties.

    :meth:`create_table` registers the table and its partitions atomically;
    :meth:`rename_table` raises and changes nothing when either name is wrong;
    :meth:`delete_table` removes the table and all its state; :meth:`instance_id` is the
    store's own identity, created once (two processes opening a fresh store at once end
    with one id) and never changed."""

    def create_table(self, name: str, schema: Schema, partitions: Sequence[Partition],
                     properties: Optional[Mapping[str, str]] = None) -> TableInfo: ...
    def list_tables(self) -> list[TableInfo]: ...
    def get_table(self, name: str) -> TableInfo: ...
    def update_properties(self, name: str, properties: Mapping[str, str]) -> TableInfo: ...
    def rename_table(self, old: str, new: str) -> TableInfo: ...
    def delete_table(self, name: str) -> TableInfo: ...
    def instance_id(self) -> str: ...


@runtime_checkable
class TableCommits(Protocol):
    """A table's partitions, file references and files: commits and reads.

    :meth:`commit` is atomic: a transaction is validated against the current state and
    applied entirely, or raises and changes nothing; concurrent commits to one table
    behave as if applied one at a time. Transient conflicts are retried inside it
    (``CommitConflictError`` when retries run out); a ``TransactionError`` is never
    retried. Commits are idempotent by commit id (remembered for
    :data:`~statestore.store.COMMIT_ID_RETENTION_MS` at least), and a commit's
    bookkeeping (its job record, its ingest requests, the write-buffer entries it
    flushed, its client write) is applied in the same atomic step as its data.
    Reads are consistent snapshots; :meth:`changes_since` is read-your-writes."""

    def commit(self, table_id: str, transaction: Transaction, *, commit_id: Optional[str] = None,
               job: Optional[JobRecord] = None, ingest_job_id: Optional[str] = None,
               buffer_seqs: Sequence[int] = (), client_write: Optional[ClientWrite] = None) -> bool: ...
    def load_state(self, table_id: str) -> TableState: ...
    def changes_since(self, table_id: str, since: Any = None) -> TableChanges: ...
    def partitions(self, table_id: str) -> list[Partition]: ...
    def file_references(self, table_id: str) -> list[FileReference]: ...
    def file_statuses(self, table_id: str) -> list[FileStatus]: ...
    def file_page(self, table_id: str, *, after: Optional[str] = None, limit: int = 1000) -> list[FileStatus]: ...
    def overview(self, table_id: str, *, file_limit: int = DEFAULT_FILE_SAMPLE) -> TableOverview: ...
    def tombstones(self, table_id: str) -> tuple[int, tuple[Tombstone, ...]]: ...
    def unreferenced_files(self, table_id: str, updated_before_ms: int, limit: int = 1000) -> list[str]: ...
    def transaction_number(self, table_id: str) -> int: ...
    def prune_commit_ids(self, table_id: str, before_ms: int) -> int: ...
    def sweep_blobs(self, table_id: str, *, older_than_ms: int, dry_run: bool = False) -> list[str]: ...
    def commit_retries(self, table_id: str) -> int: ...


@runtime_checkable
class JobTracker(Protocol):
    """Job records (created, started, committed, failed...).

    ``committed`` is final: a losing duplicate attempt cannot overwrite the winner's
    record; a heartbeat only moves ``heartbeat_ms`` forward; :meth:`open_jobs` costs the
    open jobs, not every job ever run; :meth:`in_flight_outputs` names what the orphan
    sweep must keep."""

    def put_job(self, record: JobRecord) -> None: ...
    def heartbeat_jobs(self, table_id: str, job_ids: Sequence[str], at_ms: int) -> int: ...
    def get_job(self, table_id: str, job_id: str) -> Optional[JobRecord]: ...
    def list_jobs(self, table_id: str, *, kind: Optional[str] = None,
                  limit: Optional[int] = 1000) -> list[JobRecord]: ...
    def open_jobs(self, table_id: str) -> list[JobRecord]: ...
    def in_flight_outputs(self, table_id: str, active_since_ms: int) -> set[str]: ...


@runtime_checkable
class Leases(Protocol):
    """Named exclusive leases with an expiry. Atomic: two holders racing for a free
    lease, one gets it; a lease held past its expiry counts as free."""

    def acquire_lease(self, name: str, holder: str, ttl_seconds: float) -> Optional[Lease]: ...
    def release_lease(self, name: str, holder: str) -> bool: ...
    def get_lease(self, name: str) -> Optional[Lease]: ...


@runtime_checkable
class IngestQueue(Protocol):
    """The ingest batcher's queue (:mod:`statestore.ingest_requests`). Requests are queued
    atomically (all or none, with their client write's key) and assigned to at most
    one job at a time: an assignment is conditional on every request still pending."""

    def add_ingest_requests(self, table_id: str, requests: Sequence[IngestRequest], *,
                            client_write: Optional[ClientWrite] = None) -> Optional[ClientWriteRecord]: ...
    def pending_ingest_requests(self, table_id: str, limit: Optional[int] = None) -> list[IngestRequest]: ...
    def assign_ingest_requests(self, table_id: str, job_id: str, request_ids: Sequence[str]) -> bool: ...
    def finish_ingest_job(self, table_id: str, job_id: str, ok: bool, error: Optional[str] = None, *,
                          max_attempts: Optional[int] = None, counted: bool = True) -> int: ...
    def list_ingest_requests(self, table_id: str, *, status: Optional[str] = None,
                             limit: Optional[int] = 1000) -> list[IngestRequest]: ...


@runtime_checkable
class WriteBuffer(Protocol):
    """The write buffer (:mod:`statestore.buffer`): :meth:`append_buffer` returns only once
    the entry is durable, stored whole or not at all; a full buffer refuses with
    ``BufferFullError``. A flush removes entries through :meth:`TableCommits.commit`
    (``buffer_seqs``) in the same atomic step as its files, so a flushed record is in a
    file or in the buffer, never both and never neither. A backend without a buffer
    raises ``NotSupportedError``."""

    buffer_max_flush_entries: Optional[int]

    def append_buffer(self, table_id: str, data: bytes, rows: int, *, max_rows: Optional[int] = None,
                      client_write: Optional[ClientWrite] = None) -> int: ...
    def read_buffer(self, table_id: str, *, up_to_seq: Optional[int] = None, max_rows: Optional[int] = None,
                    skip_data: Collection[int] = (), max_entries: Optional[int] = None) -> BufferSnapshot: ...
    def buffer_stats(self, table_id: str) -> BufferStats: ...
    def buffer_high_water(self, table_id: str) -> int: ...
    def record_blobs(self, table_id: str) -> Iterator[RecordBlob]: ...


@runtime_checkable
class ClientWrites(Protocol):
    """Idempotency keys of client writes (:mod:`statestore.client_writes`): one record per
    key, stored in the same atomic step as the write it answers; the same key with
    another digest is refused with ``IdempotencyKeyReusedError``."""

    def client_write(self, table_id: str, request_id: str) -> Optional[ClientWriteRecord]: ...
    def claim_client_write(self, table_id: str, write: ClientWrite) -> Optional[ClientWriteRecord]: ...
    def prune_client_writes(self, table_id: str, before_ms: int) -> int: ...


@runtime_checkable
class History(Protocol):
    """A table's history and time travel (:mod:`statestore.history`): a summary of every
    transaction still retained, and the whole state right after any of them; the
    records that hold a delete's keys, for the proof of erasure."""

    def history(self, table_id: str, *, limit: int = 20, upto: Optional[int] = None) -> list[TransactionSummary]: ...
    def history_after(self, table_id: str, number: int) -> Optional[TransactionSummary]: ...
    def number_at(self, table_id: str, time_ms: int) -> Optional[int]: ...
    def state_as_of(self, table_id: str, number: int) -> TableState: ...
    def prune_history(self, table_id: str, now: int) -> int: ...
    def delete_key_records(self, table_id: str, now_ms: int) -> list[KeyRecord]: ...


#: every role, in the order :class:`~statestore.store.StateStore` lists its methods
ROLES: tuple[type, ...] = (TableCatalog, TableCommits, JobTracker, Leases, IngestQueue, WriteBuffer, ClientWrites,
                           History)
