"""A StateStore made of role objects (:mod:`statestore.roles`).

A backend builds one object per role over one shared connection (or lock) and hands
them to :class:`ComposedStateStore`, which keeps every :class:`~statestore.store.StateStore`
method as a one-line delegation to the role that owns it. The guarantees are the
roles' (and :mod:`statestore.store`'s): what must commit together is done by one role
method (:meth:`~statestore.roles.TableCommits.commit` writes a commit's job record,
ingest requests, buffer removals and client write in its one transaction), so
splitting the store into objects splits no transaction.

A caller may use the roles directly (``store.leases.acquire_lease(...)``) or through
the store's own methods; the store's methods are the ones tests replace.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Collection, Iterator, Mapping, Optional, Sequence

from statestore.overview import DEFAULT_FILE_SAMPLE
from statestore.store import StateStore

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
    from statestore.roles import (
        ClientWrites,
        History,
        IngestQueue,
        JobTracker,
        Leases,
        TableCatalog,
        TableCommits,
        WriteBuffer,
    )
    from statestore.schema import Schema
    from statestore.state import TableState
    from statestore.summaries import TransactionSummary
    from statestore.transactions import Transaction


class ComposedStateStore(StateStore):
    """The StateStore interface over one object per role (see the module docstring).

    Attributes:
        catalog, table_commits, job_tracker, leases, ingest_queue, write_buffer,
        client_writes, table_history: the role objects, sharing the backend's one
        connection.
    """

    def __init__(self, *, catalog: TableCatalog, table_commits: TableCommits, job_tracker: JobTracker,
                 leases: Leases, ingest_queue: IngestQueue, write_buffer: WriteBuffer, client_writes: ClientWrites,
                 table_history: History) -> None:
        self.catalog = catalog
        self.table_commits = table_commits
        self.job_tracker = job_tracker
        self.leases = leases
        self.ingest_queue = ingest_queue
        self.write_buffer = write_buffer
        self.client_writes = client_writes
        self.table_history = table_history
        self.buffer_max_flush_entries = write_buffer.buffer_max_flush_entries

    # ----- catalog --------------------------------------------------------------------
    def create_table(self, name: str, schema: Schema, partitions: Sequence[Partition],
                     properties: Optional[Mapping[str, str]] = None) -> TableInfo:
        return self.catalog.create_table(name, schema, partitions, properties)

    def list_tables(self) -> list[TableInfo]:
        return self.catalog.list_tables()

    def get_table(self, name: str) -> TableInfo:
        return self.catalog.get_table(name)

    def update_properties(self, name: str, properties: Mapping[str, str]) -> TableInfo:
        return self.catalog.update_properties(name, properties)

    def rename_table(self, old: str, new: str) -> TableInfo:
        return self.catalog.rename_table(old, new)

    def delete_table(self, name: str) -> TableInfo:
        return self.catalog.delete_table(name)

    def instance_id(self) -> str:
        return self.catalog.instance_id()

    # ----- table state ----------------------------------------------------------------
    def commit(self, table_id: str, transaction: Transaction, *, commit_id: Optional[str] = None,
               job: Optional[JobRecord] = None, ingest_job_id: Optional[str] = None,
               buffer_seqs: Sequence[int] = (), client_write: Optional[ClientWrite] = None) -> bool:
        return self.table_commits.commit(table_id, transaction, commit_id=commit_id, job=job,
                                         ingest_job_id=ingest_job_id, buffer_seqs=buffer_seqs,
                                         client_write=client_write)

    def load_state(self, table_id: str) -> TableState:
        return self.table_commits.load_state(table_id)

    def changes_since(self, table_id: str, since: Any = None) -> TableChanges:
        return self.table_commits.changes_since(table_id, since)

    def partitions(self, table_id: str) -> list[Partition]:
        return self.table_commits.partitions(table_id)

    def file_references(self, table_id: str) -> list[FileReference]:
        return self.table_commits.file_references(table_id)

    def file_statuses(self, table_id: str) -> list[FileStatus]:
        return self.table_commits.file_statuses(table_id)

    def file_page(self, table_id: str, *, after: Optional[str] = None, limit: int = 1000) -> list[FileStatus]:
        return self.table_commits.file_page(table_id, after=after, limit=limit)

    def overview(self, table_id: str, *, file_limit: int = DEFAULT_FILE_SAMPLE) -> TableOverview:
        return self.table_commits.overview(table_id, file_limit=file_limit)

    def tombstones(self, table_id: str) -> tuple[int, tuple[Tombstone, ...]]:
        return self.table_commits.tombstones(table_id)

    def unreferenced_files(self, table_id: str, updated_before_ms: int, limit: int = 1000) -> list[str]:
        return self.table_commits.unreferenced_files(table_id, updated_before_ms, limit)

    def transaction_number(self, table_id: str) -> int:
        return self.table_commits.transaction_number(table_id)

    def prune_commit_ids(self, table_id: str, before_ms: int) -> int:
        return self.table_commits.prune_commit_ids(table_id, before_ms)

    def sweep_blobs(self, table_id: str, *, older_than_ms: int, dry_run: bool = False) -> list[str]:
        return self.table_commits.sweep_blobs(table_id, older_than_ms=older_than_ms, dry_run=dry_run)

    def commit_retries(self, table_id: str) -> int:
        return self.table_commits.commit_retries(table_id)

    # ----- job status -----------------------------------------------------------------
    def put_job(self, record: JobRecord) -> None:
        self.job_tracker.put_job(record)

    def heartbeat_jobs(self, table_id: str, job_ids: Sequence[str], at_ms: int) -> int:
        return self.job_tracker.heartbeat_jobs(table_id, job_ids, at_ms)

    def get_job(self, table_id: str, job_id: str) -> Optional[JobRecord]:
        return self.job_tracker.get_job(table_id, job_id)

    def list_jobs(self, table_id: str, *, kind: Optional[str] = None,
                  limit: Optional[int] = 1000) -> list[JobRecord]:
        return self.job_tracker.list_jobs(table_id, kind=kind, limit=limit)

    def open_jobs(self, table_id: str) -> list[JobRecord]:
        return self.job_tracker.open_jobs(table_id)

    def in_flight_outputs(self, table_id: str, active_since_ms: int) -> set[str]:
        return self.job_tracker.in_flight_outputs(table_id, active_since_ms)

    # ----- leases ---------------------------------------------------------------------
    def acquire_lease(self, name: str, holder: str, ttl_seconds: float) -> Optional[Lease]:
        return self.leases.acquire_lease(name, holder, ttl_seconds)

    def release_lease(self, name: str, holder: str) -> bool:
        return self.leases.release_lease(name, holder)

    def get_lease(self, name: str) -> Optional[Lease]:
        return self.leases.get_lease(name)

    # ----- ingest requests ------------------------------------------------------------
    def add_ingest_requests(self, table_id: str, requests: Sequence[IngestRequest], *,
                            client_write: Optional[ClientWrite] = None) -> Optional[ClientWriteRecord]:
        return self.ingest_queue.add_ingest_requests(table_id, requests, client_write=client_write)

    def pending_ingest_requests(self, table_id: str, limit: Optional[int] = None) -> list[IngestRequest]:
        return self.ingest_queue.pending_ingest_requests(table_id, limit)

    def assign_ingest_requests(self, table_id: str, job_id: str, request_ids: Sequence[str]) -> bool:
        return self.ingest_queue.assign_ingest_requests(table_id, job_id, request_ids)

    def finish_ingest_job(self, table_id: str, job_id: str, ok: bool, error: Optional[str] = None, *,
                          max_attempts: Optional[int] = None, counted: bool = True) -> int:
        return self.ingest_queue.finish_ingest_job(table_id, job_id, ok, error, max_attempts=max_attempts,
                                                   counted=counted)

    def list_ingest_requests(self, table_id: str, *, status: Optional[str] = None,
                             limit: Optional[int] = 1000) -> list[IngestRequest]:
        return self.ingest_queue.list_ingest_requests(table_id, status=status, limit=limit)

    # ----- write buffer ---------------------------------------------------------------
    def append_buffer(self, table_id: str, data: bytes, rows: int, *, max_rows: Optional[int] = None,
                      client_write: Optional[ClientWrite] = None) -> int:
        return self.write_buffer.append_buffer(table_id, data, rows, max_rows=max_rows, client_write=client_write)

    def read_buffer(self, table_id: str, *, up_to_seq: Optional[int] = None, max_rows: Optional[int] = None,
                    skip_data: Collection[int] = (), max_entries: Optional[int] = None) -> BufferSnapshot:
        return self.write_buffer.read_buffer(table_id, up_to_seq=up_to_seq, max_rows=max_rows, skip_data=skip_data,
                                             max_entries=max_entries)

    def buffer_stats(self, table_id: str) -> BufferStats:
        return self.write_buffer.buffer_stats(table_id)

    def buffer_high_water(self, table_id: str) -> int:
        return self.write_buffer.buffer_high_water(table_id)

    def record_blobs(self, table_id: str) -> Iterator[RecordBlob]:
        return self.write_buffer.record_blobs(table_id)

    # ----- client writes --------------------------------------------------------------
    def client_write(self, table_id: str, request_id: str) -> Optional[ClientWriteRecord]:
        return self.client_writes.client_write(table_id, request_id)

    def claim_client_write(self, table_id: str, write: ClientWrite) -> Optional[ClientWriteRecord]:
        return self.client_writes.claim_client_write(table_id, write)

    def prune_client_writes(self, table_id: str, before_ms: int) -> int:
        return self.client_writes.prune_client_writes(table_id, before_ms)

    # ----- history --------------------------------------------------------------------
    def history(self, table_id: str, *, limit: int = 20, upto: Optional[int] = None) -> list[TransactionSummary]:
        return self.table_history.history(table_id, limit=limit, upto=upto)

    def history_after(self, table_id: str, number: int) -> Optional[TransactionSummary]:
        return self.table_history.history_after(table_id, number)

    def number_at(self, table_id: str, time_ms: int) -> Optional[int]:
        return self.table_history.number_at(table_id, time_ms)

    def state_as_of(self, table_id: str, number: int) -> TableState:
        return self.table_history.state_as_of(table_id, number)

    def prune_history(self, table_id: str, now: int) -> int:
        return self.table_history.prune_history(table_id, now)

    def delete_key_records(self, table_id: str, now_ms: int) -> list[KeyRecord]:
        return self.table_history.delete_key_records(table_id, now_ms)
