"""The table commits role of the PostgreSQL state store (:class:`PostgresCommits`): a
commit in one SERIALIZABLE transaction with its bookkeeping (:mod:`.commits`), tried
again with the same id after a lost connection; and the table's reads, each in one
snapshot (whole state, partitions, references, tombstones, unreferenced files, and the
incremental and paged reads of :mod:`.changes` and :mod:`.overview`)."""

from __future__ import annotations

import time
import uuid
from dataclasses import replace
from typing import Any, Optional, Sequence

import psycopg
from psycopg import IsolationLevel

from statestore.changes import TableChanges
from statestore.client_writes import ClientWrite, IdempotencyKeyReusedError
from statestore.clock import now_ms
from statestore.deletes import Tombstone
from statestore.errors import (
    CommitOutcomeUnknownError,
    SleeperError,
    StateStoreUnavailableError,
    TableNotFoundError,
    TransactionError,
)
from statestore.files import FileReference, FileStatus
from statestore.jobs import JobRecord
from statestore.overview import DEFAULT_FILE_SAMPLE, TableOverview
from statestore.partitions import Partition
from statestore.postgres.changes import CHANGE_RETENTION_MS, PostgresChanges, prune_changes
from statestore.postgres.commits import ALREADY_APPLIED, Bookkeeping, commit_attempt
from statestore.postgres.connections import PostgresConnection
from statestore.postgres.overview import PostgresOverview
from statestore.postgres.rows import (
    PARTITION_COLUMNS,
    REF_COLUMNS,
    TOMBSTONES,
    fill_tombstones,
    gc_paused,
    load_all,
    partition_from_row,
    require_table_id,
)
from statestore.retry import COMMIT_RETRIES
from statestore.role_defaults import StateReads, tombstones_of
from statestore.state import TableState
from statestore.transactions import Transaction


class PostgresCommits(StateReads):
    """The table commits of :class:`~statestore.postgres.store.PostgresStateStore`."""

    def __init__(self, db: PostgresConnection) -> None:
        self._db = db
        self._changes = PostgresChanges(db)
        self._overview = PostgresOverview(db)

    def commit(self, table_id: str, transaction: Transaction, *, commit_id: Optional[str] = None,
               job: Optional[JobRecord] = None, ingest_job_id: Optional[str] = None,
               buffer_seqs: Sequence[int] = (), client_write: Optional[ClientWrite] = None) -> bool:
        """See :meth:`StateStore.commit`. When the connection breaks during an attempt
        (the server may or may not have committed), the commit is tried again with the
        same id, pausing between tries, until the server answers or
        ``outcome_timeout_seconds`` pass (then CommitOutcomeUnknownError): the
        recorded id makes the retry a no-op if the lost attempt applied."""
        db = self._db
        touches = transaction.touches()
        books = Bookkeeping(commit_id or uuid.uuid4().hex, job, ingest_job_id, buffer_seqs=tuple(buffer_seqs),
                            client_write=client_write)
        what = f"commit {transaction.TYPE} to table {table_id}"
        deadline: Optional[float] = None
        tries = 0
        while True:
            try:
                # a fresh id of a first try cannot have been applied: no need to look it up
                this_try = replace(books, check_id=commit_id is not None or tries > 0)
                outcome = db.retrying(what, lambda conn, books=this_try: commit_attempt(  # type: ignore[misc]
                    conn, table_id, transaction, touches, books), on_retry=lambda: COMMIT_RETRIES.add(table_id))
                break
            except (TransactionError, CommitOutcomeUnknownError, IdempotencyKeyReusedError):
                raise
            except SleeperError as e:
                if not isinstance(e, StateStoreUnavailableError):
                    if tries == 0:
                        raise  # e.g. CommitConflictError: every attempt was rolled back
                    raise CommitOutcomeUnknownError(
                        f"{what}: after a connection was lost during the commit (commit id {books.commit_id}), "
                        f"its retry failed, so whether it applied is unknown: {e}") from e
                broken = isinstance(e.__cause__, psycopg.OperationalError)
                if tries == 0 and not broken:
                    raise  # nothing was sent: the commit did not apply
                now = time.monotonic()
                deadline = deadline if deadline is not None else now + db.outcome_timeout_seconds
                if now >= deadline or db.closed:
                    raise CommitOutcomeUnknownError(
                        f"{what}: the state store was lost during the commit and did not come back within "
                        f"{db.outcome_timeout_seconds:g}s, so whether it applied is unknown "
                        f"(commit id {books.commit_id}): {e}") from e
                tries += 1
                COMMIT_RETRIES.add(table_id)
                time.sleep(min(2.0, 0.05 * 2 ** tries, max(0.0, deadline - now)))
        if isinstance(outcome, TransactionError):
            raise outcome
        # ALREADY_APPLIED: by an earlier call with this id, or by a try of this one whose reply was lost
        return outcome != ALREADY_APPLIED

    def load_state(self, table_id: str) -> TableState:
        def fn(cur: psycopg.Cursor[Any]) -> TableState:
            require_table_id(cur, table_id)
            with gc_paused():
                return load_all(cur, table_id)

        return self._db.run(f"load state of table {table_id}", fn, isolation=IsolationLevel.REPEATABLE_READ,
                            read_only=True)

    def changes_since(self, table_id: str, since: Any = None) -> TableChanges:
        return self._changes.changes_since(table_id, since)

    def transaction_number(self, table_id: str) -> int:
        return self._changes.transaction_number(table_id)

    def partitions(self, table_id: str) -> list[Partition]:
        def fn(cur: psycopg.Cursor[Any]) -> list[Partition]:
            require_table_id(cur, table_id)
            cur.execute(f"SELECT {PARTITION_COLUMNS} FROM partitions WHERE table_id = %s", (table_id,))
            return [partition_from_row(r) for r in cur.fetchall()]

        return self._db.run(f"load partitions of table {table_id}", fn, isolation=IsolationLevel.REPEATABLE_READ,
                            read_only=True)

    def file_references(self, table_id: str) -> list[FileReference]:
        def fn(cur: psycopg.Cursor[Any]) -> list[FileReference]:
            require_table_id(cur, table_id)
            cur.execute(f"SELECT {REF_COLUMNS} FROM file_references WHERE table_id = %s", (table_id,))
            with gc_paused():
                return [FileReference(*r) for r in cur.fetchall()]

        return self._db.run(f"load file references of table {table_id}", fn,
                            isolation=IsolationLevel.REPEATABLE_READ, read_only=True)

    def file_page(self, table_id: str, *, after: Optional[str] = None, limit: int = 1000) -> list[FileStatus]:
        return self._overview.file_page(table_id, after=after, limit=limit)

    def overview(self, table_id: str, *, file_limit: int = DEFAULT_FILE_SAMPLE) -> TableOverview:
        return self._overview.overview(table_id, file_limit=file_limit)

    def tombstones(self, table_id: str) -> tuple[int, tuple[Tombstone, ...]]:
        def fn(cur: psycopg.Cursor[Any]) -> tuple[int, tuple[Tombstone, ...]]:
            state = fill_tombstones(TableState(), cur.execute(TOMBSTONES, (table_id,)).fetchone())
            if cur.rowcount == 0:
                raise TableNotFoundError(f"no table with id {table_id}")
            return tombstones_of(state)

        return self._db.run(f"read the tombstones of table {table_id}", fn,
                            isolation=IsolationLevel.REPEATABLE_READ, read_only=True)

    def prune_commit_ids(self, table_id: str, before_ms: int) -> int:
        """See :meth:`StateStore.prune_commit_ids`; also forgets the table's change log
        rows older than :data:`~statestore.postgres.changes.CHANGE_RETENTION_MS`."""
        def fn(cur: psycopg.Cursor[Any]) -> int:
            require_table_id(cur, table_id)
            cur.execute("DELETE FROM commit_ids WHERE table_id = %s AND applied_ms < %s", (table_id, before_ms))
            return cur.rowcount

        count = self._db.run(f"prune commit ids of table {table_id}", fn, isolation=IsolationLevel.READ_COMMITTED)
        self._db.run(f"prune the change log of table {table_id}",
                     lambda cur: prune_changes(cur, table_id, now_ms() - CHANGE_RETENTION_MS),
                     isolation=IsolationLevel.READ_COMMITTED)
        return count

    def unreferenced_files(self, table_id: str, updated_before_ms: int, limit: int = 1000) -> list[str]:
        def fn(cur: psycopg.Cursor[Any]) -> list[str]:
            cur.execute(
                "SELECT f.filename FROM files f"
                " WHERE f.table_id = %s AND f.update_time < %s"
                " AND NOT EXISTS (SELECT 1 FROM file_references r"
                "                 WHERE r.table_id = f.table_id AND r.filename = f.filename)"
                " ORDER BY f.filename LIMIT %s", (table_id, updated_before_ms, max(0, limit)))
            names = [r[0] for r in cur.fetchall()]
            if not names:
                require_table_id(cur, table_id)
            return names

        return self._db.run(f"find unreferenced files of table {table_id}", fn,
                            isolation=IsolationLevel.REPEATABLE_READ, read_only=True)
