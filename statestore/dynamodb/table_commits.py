"""The DynamoDB store's table commits (:class:`DynamoCommits`): a commit with its
bookkeeping in one TransactWriteItems (:mod:`.commits`), through group commit while
others commit to the table (:mod:`.group_commit`), and the reads of a table's state
through the shared cache (:mod:`.cache`).

A commit's job record, ingest requests, client write and flushed buffer entries go in
the same DynamoDB transaction as its log item: :class:`DynamoCommits` is built over the
store's one :class:`~.context.DynamoContext` and the roles that own those records
(:class:`~.jobs.DynamoJobs`, :class:`~.ingest_queue.DynamoIngestQueue`,
:class:`~.buffer.DynamoWriteBuffer`, :class:`~.client_writes.DynamoClientWrites`), whose
public methods give the items (:class:`~.commits.CommitItems` gathers them); the
transaction itself is written here, or by a leader's batch (:mod:`.group_commit`).
Its other parts are objects too: snapshots (:mod:`.snapshot_policy`) and the blob
clean-up (:mod:`.blob_sweep`)."""

from __future__ import annotations

import time
import uuid
from dataclasses import replace
from typing import Any, Callable, NamedTuple, Optional, Sequence, TypeVar

import botocore.exceptions

from statestore.changes import TableChanges, is_token_of
from statestore.client_writes import ClientWrite
from statestore.clock import now_ms
from statestore.dynamodb.blob_sweep import DynamoBlobSweep
from statestore.dynamodb.buffer import MAX_FLUSH_ENTRIES, DynamoWriteBuffer
from statestore.dynamodb.cache import CachedTable
from statestore.dynamodb.catalog import table_info as catalog_info
from statestore.dynamodb.client_writes import DynamoClientWrites
from statestore.dynamodb.commits import COMMIT_ID, LOG, TABLE, Bookkeeping, CommitItems
from statestore.dynamodb.connection import cancellation_codes
from statestore.dynamodb.contention import Contention
from statestore.dynamodb.context import DynamoContext
from statestore.dynamodb.group_batch import MAX_PENDING_BYTES, pending_size
from statestore.dynamodb.group_commit import DynamoGroupCommit
from statestore.dynamodb.history import summary_attribute
from statestore.dynamodb.ingest_queue import DynamoIngestQueue
from statestore.dynamodb.jobs import DynamoJobs, EncodedJob, encode_job
from statestore.dynamodb.log import EncodedTransaction
from statestore.dynamodb.retention import DynamoRetention
from statestore.dynamodb.sizes import check_log_item, rejection
from statestore.dynamodb.snapshot_policy import SnapshotPolicy
from statestore.dynamodb.writes import delete_quietly, may_have_applied, outcome_unknown
from statestore.errors import (
    CommitConflictError,
    CommitOutcomeUnknownError,
    NotSupportedError,
    StateStoreUnavailableError,
    TableNotFoundError,
)
from statestore.files import FileReference
from statestore.jobs import JobRecord
from statestore.overview import DEFAULT_FILE_SAMPLE, TableOverview, overview_of
from statestore.partitions import Partition
from statestore.retry import COMMIT_RETRIES
from statestore.role_defaults import StateReads
from statestore.state import TableState
from statestore.transactions import Transaction

T = TypeVar("T")


#: what a single try that lost the race returns when group commit is to take over
_RACED = object()


class _Retry(NamedTuple):
    """A cancelled commit try: its encoded transaction (kept for the next try) and
    whether botocore had retried it (then the cancellation may be our own first try's
    write in the way, and the commit's outcome is uncertain until a read settles it)."""

    encoded: EncodedTransaction
    maybe_applied: bool


class DynamoCommits(StateReads):
    """The table commits role (:class:`~statestore.roles.TableCommits`) of
    :class:`~statestore.dynamodb.store.DynamoDBStateStore` (see the module docstring and
    the store's arguments, of which this takes the snapshot and group commit ones).

    Attributes:
        context: the client, blob store, cache and retry policy every role shares.
        retention: the expiry :meth:`prune_commit_ids` applies.
        items: a commit's bookkeeping reads and items, from the roles given.
        snapshots: the snapshot options (settable) and the snapshots they call for.
        sweep: the blob clean-up (:meth:`sweep_blobs`, and after a lost reply).
        group: group commit, with the outcome timeout and the contention it shares.
        group_commit: whether commits go through group commit while others commit.
    """

    def __init__(self, context: DynamoContext, retention: DynamoRetention, jobs: DynamoJobs,
                 ingest_queue: DynamoIngestQueue, write_buffer: DynamoWriteBuffer, client_writes: DynamoClientWrites,
                 *, snapshot_every: int, snapshot_seconds: float, group_commit: bool) -> None:
        self.context = context
        self.retention = retention
        self.jobs = jobs
        self.items = CommitItems(context, jobs, ingest_queue, write_buffer, client_writes)
        self.snapshots = SnapshotPolicy(context, snapshot_every=snapshot_every, snapshot_seconds=snapshot_seconds)
        self.sweep = DynamoBlobSweep(context, write_buffer)
        self.group = DynamoGroupCommit(context, self.items, jobs, ingest_queue, self.snapshots)
        self.group_commit = group_commit

    @property
    def outcome_timeout_seconds(self) -> float:
        """How long a commit whose request was lost keeps trying to learn its outcome
        (settable; single and group commits share it)."""
        return self.group.outcome_timeout_seconds

    @outcome_timeout_seconds.setter
    def outcome_timeout_seconds(self, value: float) -> None:
        self.group.outcome_timeout_seconds = value

    @property
    def contention(self) -> Contention:
        """The tables this store lately saw other committers on (shared with group commit)."""
        return self.group.contention

    def commit(self, table_id: str, transaction: Transaction, *, commit_id: Optional[str] = None,
               job: Optional[JobRecord] = None, ingest_job_id: Optional[str] = None,
               buffer_seqs: Sequence[int] = (), client_write: Optional[ClientWrite] = None) -> bool:
        """See :meth:`StateStore.commit` and :mod:`statestore.dynamodb.commits`. A flush
        (``buffer_seqs``) removes at most
        :data:`~statestore.dynamodb.buffer.MAX_FLUSH_ENTRIES` entries. Commits
        of one table from threads of this store take turns; other committers (other
        processes) are raced through the conditional log write, retried with full-jitter
        backoff. When a write's reply is lost, the commit is tried again with the same id
        until DynamoDB answers or :attr:`outcome_timeout_seconds` pass (then
        CommitOutcomeUnknownError): a retry finding its id in the log or among the
        recorded ids returns False."""
        if len(set(buffer_seqs)) > MAX_FLUSH_ENTRIES:
            raise NotSupportedError(f"a commit to table {table_id} may remove at most {MAX_FLUSH_ENTRIES} write "
                                    f"buffer entries in DynamoDB, not {len(set(buffer_seqs))}")
        books = Bookkeeping(commit_id or uuid.uuid4().hex, job, ingest_job_id, check_id=commit_id is not None,
                            buffer_seqs=tuple(buffer_seqs), client_write=client_write)
        encoded: Optional[EncodedTransaction] = None
        job_encoded = None if job is None else encode_job(self.context.blobs, job)
        if self.group_commit and not buffer_seqs:
            encoded = EncodedTransaction.of(table_id, transaction, self.context.blobs)
            if pending_size(encoded, job_encoded) <= MAX_PENDING_BYTES:
                def others_pending() -> bool:
                    try:
                        return bool(self.group.requests.pending(table_id))
                    except StateStoreUnavailableError:
                        return False  # the single try meets the same trouble and settles its own blobs

                if not self.contention.grouped(table_id, others_pending):  # alone lately: a single try first
                    outcome = self._commit_single(table_id, transaction, books, encoded, job_encoded, job,
                                                  until_race=True)
                    if outcome is not _RACED:
                        return outcome
                    self.contention.seen(table_id)  # lost the race, nothing applied: join the others
                return self.group.commit(table_id, transaction, books, encoded, job_encoded)
        return self._commit_single(table_id, transaction, books, encoded, job_encoded, job)

    def _commit_single(self, table_id: str, transaction: Transaction, books: Bookkeeping,
                       encoded: Optional[EncodedTransaction], job_encoded: Optional[EncodedJob],
                       job: Optional[JobRecord], until_race: bool = False) -> Any:
        """A commit racing for the next log number itself: True (applied), False (its
        commit id was applied before), or an error; with ``until_race``, :data:`_RACED`
        when its first try lost the race and nothing of it can have applied (its blobs
        are kept for the group commit that follows)."""
        entry = self.context.cache.entry(table_id)
        deadline: Optional[float] = None  # set once a write may have applied without our hearing
        uncertain = False  # a try may have applied: a refusal from now on is no definite no
        conflicts = 0
        what = f"commit {transaction.TYPE} to table {table_id}"
        tried: dict[str, Any] = {}  # what the tries wrote and read: the body blob, the flushed entries' blobs
        with entry.lock:
            try:
                while True:
                    try:
                        outcome = self._commit_attempt(table_id, entry, transaction, books, encoded, job_encoded,
                                                       tried)
                    except StateStoreUnavailableError as e:
                        encoded = tried.get("encoded", encoded)  # a body spilled by the try is ours to settle
                        if not outcome_unknown(e):
                            raise  # e.g. a refusal to the first and only try: nothing applied
                        uncertain = True
                        deadline = deadline if deadline is not None else time.monotonic() + self.outcome_timeout_seconds
                        if time.monotonic() >= deadline:
                            raise CommitOutcomeUnknownError(
                                f"{what}: DynamoDB was lost during the commit and did not come back within "
                                f"{self.outcome_timeout_seconds:g}s, so whether it applied is unknown "
                                f"(commit id {books.commit_id}): {e}") from e
                        books = replace(books, check_id=True)
                        time.sleep(min(2.0, 0.05 * 2 ** min(conflicts, 6)))
                        conflicts += 1
                        COMMIT_RETRIES.add(table_id)
                        continue
                    if isinstance(outcome, _Retry):  # another committer took the number, or a retry of ours did
                        if until_race and not (uncertain or outcome.maybe_applied):
                            return _RACED
                        encoded = outcome.encoded
                        if outcome.maybe_applied:
                            uncertain = True
                            books = replace(books, check_id=True)
                        conflicts += 1
                        if conflicts >= self.context.backoff.max_attempts:
                            if uncertain:
                                raise CommitOutcomeUnknownError(
                                    f"{what}: a try's reply was lost and the retries kept conflicting "
                                    f"({conflicts} attempts), so whether it applied is unknown "
                                    f"(commit id {books.commit_id})")
                            raise CommitConflictError(f"{what}: the log kept moving on ({conflicts} attempts)")
                        self.context.backoff.pause(conflicts)
                        COMMIT_RETRIES.add(table_id)
                        continue
                    if outcome:
                        self.snapshots.maybe_snapshot(table_id, entry)
                    else:  # applied before: what a try of ours wrote or read may be named by nothing now
                        if job is not None and job_encoded is not None and job_encoded.blob_key:
                            self.jobs.drop_unsaved_blob(job, job_encoded.blob_key, what)
                        self.sweep.settle_found_applied(table_id, books, tried.get("encoded", encoded),
                                                   tried.get("flushed", []), what)
                    return outcome
            except BaseException as e:
                encoded = tried.get("encoded", encoded)
                owned = [encoded.blob_key if encoded else None, job_encoded.blob_key if job_encoded else None]
                if any(owned) and not uncertain and not outcome_unknown(e):
                    delete_quietly(self.context.blobs, [k for k in owned if k], what)  # refused: never logged
                raise

    def _commit_attempt(self, table_id: str, entry: CachedTable, txn: Transaction, books: Bookkeeping,
                        encoded: Optional[EncodedTransaction], job_encoded: Optional[EncodedJob],
                        tried: dict[str, Any]) -> bool | _Retry:
        """One try: True (applied), False (applied before), or :class:`_Retry` when the
        transaction was cancelled (try again). Notes in ``tried`` the body it encoded
        (``encoded``) and the blobs of the flushed entries it read (``flushed``)."""
        loaded = entry.n >= 0
        tail = self.context.cache.refresh(table_id, entry)
        if loaded and tail and self.group_commit:
            self.contention.seen(table_id)  # others committed since this store's last read
        if any(t.commit_id == books.commit_id for t in tail):
            return False  # a try of this commit whose reply was lost
        done, job_rev, replaced_job_blob = self.items.check_bookkeeping(table_id, books)
        if done:
            return False
        flushed_rows, blobs = self.items.flushed(table_id, books) if books.buffer_seqs else (0, [])
        tried["flushed"] = sorted({*tried.get("flushed", ()), *blobs})
        txn.validate(entry.state)
        if encoded is None:
            encoded = EncodedTransaction.of(table_id, txn, self.context.blobs)
            tried["encoded"] = encoded
        number = entry.n + 1
        summary = summary_attribute(txn, entry.state, books.job.job_id if books.job is not None else None)
        items = self.items.items(table_id, number, encoded, books, job_rev, now_ms(), flushed_rows, job_encoded,
                                   summary, txn.number_in(entry.state))
        check_log_item(table_id, txn.TYPE, items[LOG]["Put"]["Item"])  # statestore.dynamodb.sizes
        d = self.context.dynamo
        what = f"commit {txn.TYPE} to table {table_id}"
        try:
            d.call(what, d.client.transact_write_items, TransactItems=items)
        except (botocore.exceptions.ClientError, StateStoreUnavailableError) as e:
            refused = rejection(e, what)
            if refused is not None:
                raise refused from e
            codes = cancellation_codes(e)
            if not codes:
                raise
            failed = [i for i, c in enumerate(codes) if c not in ("None", "")]
            if TABLE in failed:
                self.context.cache.forget(table_id)
                raise TableNotFoundError(f"no table with id {table_id}") from None
            if COMMIT_ID in failed and LOG not in failed:
                return False
            # the log moved on, the job record changed, or the ingest job ended -- or a
            # retry by botocore ran into its own first try: the next try's read says which
            return _Retry(encoded, may_have_applied(e))
        entry.apply(number, txn)
        if replaced_job_blob:
            blobs = [*blobs, replaced_job_blob]
        if blobs:
            # the flushed entries' bytes, the replaced job record: nothing names them any more
            delete_quietly(self.context.blobs, blobs, f"commit {txn.TYPE} to table {table_id}")
        return True

    def _with_state(self, table_id: str, fn: Callable[[TableState], T]) -> T:
        """``fn`` of the table's current state (read-only, under the table's lock)."""
        self.context.require_table_id(table_id)
        entry = self.context.cache.entry(table_id)
        with entry.lock:
            self.context.cache.refresh(table_id, entry)
            return fn(entry.state)

    def load_state(self, table_id: str) -> TableState:
        return self._with_state(table_id, TableState.copy)

    def transaction_number(self, table_id: str) -> int:
        """See :meth:`StateStore.transaction_number`: the table's log number (the log
        after this store's cached number is read)."""
        self.context.table_item(table_id)  # TableNotFoundError
        entry = self.context.cache.entry(table_id)
        with entry.lock:
            self.context.cache.refresh(table_id, entry)
            return int(entry.n)

    def changes_since(self, table_id: str, since: Any = None) -> TableChanges:
        """See :meth:`StateStore.changes_since`. The token is a log number: the catalog
        item and the log after this store's cached number are read (two small
        requests), and the rows the transactions after ``since`` touched are taken
        from the cache (the whole state when the cache does not remember them all)."""
        info = catalog_info(self.context.table_item(table_id))
        entry = self.context.cache.entry(table_id)
        with entry.lock:
            self.context.cache.refresh(table_id, entry)
            token = ("dynamodb", entry.n)
            held = is_token_of(since, "dynamodb")
            touched = entry.touched_since(held[0]) if held else None
            if touched is None or touched.whole_table:
                return TableChanges.whole(info, token, entry.state)
            return TableChanges.of_rows(info, token, entry.state, touched.partition_ids, touched.filenames)

    def partitions(self, table_id: str) -> list[Partition]:
        return self._with_state(table_id, lambda st: list(st.partitions.values()))

    def file_references(self, table_id: str) -> list[FileReference]:
        return self._with_state(table_id, lambda st: list(st.references.values()))

    def overview(self, table_id: str, *, file_limit: int = DEFAULT_FILE_SAMPLE) -> TableOverview:
        return self._with_state(table_id, lambda st: overview_of(st, file_limit))

    def unreferenced_files(self, table_id: str, updated_before_ms: int, limit: int = 1000) -> list[str]:
        def fn(st: TableState) -> list[str]:
            return sorted(f.filename for f in st.files.values()
                          if f.filename not in st.refs_by_file and f.update_time < updated_before_ms)[:max(0, limit)]
        return self._with_state(table_id, fn)

    def snapshot(self, table_id: str) -> int:
        """Write a snapshot of the table's current state now; returns its transaction number."""
        return self.snapshots.snapshot(table_id)

    def sweep_blobs(self, table_id: str, *, older_than_ms: int, dry_run: bool = False) -> list[str]:
        """See :meth:`DynamoBlobSweep.sweep_blobs <statestore.dynamodb.blob_sweep.DynamoBlobSweep.sweep_blobs>`."""
        return self.sweep.sweep_blobs(table_id, older_than_ms=older_than_ms, dry_run=dry_run)

    def prune_commit_ids(self, table_id: str, before_ms: int) -> int:
        """See :meth:`StateStore.prune_commit_ids`; also applies the retention's expiry."""
        return self.retention.prune_commit_ids(table_id, before_ms)
