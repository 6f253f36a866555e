"""The PostgreSQL state store: the StateStore interface over the role modules of this
package (see the package docstring for the design), and the factory the backend
registry calls."""

from __future__ import annotations

import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import psycopg
from psycopg import IsolationLevel

from statestore.client_writes import ClientWrite, IdempotencyKeyReusedError
from statestore.deletes import TOMBSTONE_GOES, KeyRecord, Tombstone
from statestore.errors import (
    CommitOutcomeUnknownError,
    SleeperError,
    StateStoreUnavailableError,
    TableNotFoundError,
    TransactionError,
)
from statestore.files import FileReference
from statestore.history import retention_ms
from statestore.jobs import JobRecord, now_ms
from statestore.partitions import Partition
from statestore.postgres.buffer import WriteBufferMixin
from statestore.postgres.catalog import CatalogMixin
from statestore.postgres.changes import CHANGE_RETENTION_MS, ChangesMixin, prune_changes
from statestore.postgres.commits import ALREADY_APPLIED, Bookkeeping, commit_attempt
from statestore.postgres.history import HistoryMixin, key_records, prune_history
from statestore.postgres.ingest_queue import IngestQueueMixin
from statestore.postgres.jobs import JobsMixin
from statestore.postgres.leases import LeasesMixin
from statestore.postgres.overview import OverviewMixin
from statestore.postgres.rows import (
    PARTITION_COLUMNS,
    REF_COLUMNS,
    TOMBSTONES,
    fill_tombstones,
    gc_paused,
    load_all,
    partition_from_row,
    require_table_id,
    table_info,
)
from statestore.retry import COMMIT_RETRIES
from statestore.state import TableState
from statestore.store import StateStore
from statestore.transactions import Transaction


class PostgresStateStore(CatalogMixin, ChangesMixin, HistoryMixin, JobsMixin, LeasesMixin, IngestQueueMixin,
                         OverviewMixin, WriteBufferMixin, StateStore):
    """The state store in PostgreSQL (see the module docstring).

    Args:
        dsn: a libpq connection string or URI.
        backoff: retry policy for serialization failures (default :class:`Backoff`).
        max_connections: the most pooled connections (threads committing at once).
        connect_timeout: seconds to wait for a connection before
            :class:`StateStoreUnavailableError`.
        migrate: apply missing migrations on first use.
        migrations_dir: where the ``NNN_*.sql`` files are (default ``include/sql``).
    """

    #: how long a commit whose connection broke keeps trying to learn its outcome
    outcome_timeout_seconds: float = 60.0

    # ----- table state ----------------------------------------------------------------
    def commit(self, table_id: str, transaction: Transaction, *, commit_id: Optional[str] = None,
               job: Optional[JobRecord] = None, ingest_job_id: Optional[str] = None,
               buffer_seqs: Sequence[int] = (), client_write: Optional[ClientWrite] = None) -> bool:
        """See :meth:`StateStore.commit`. When the connection breaks during an attempt
        (the server may or may not have committed), the commit is tried again with the
        same id, pausing between tries, until the server answers or
        :attr:`outcome_timeout_seconds` pass (then CommitOutcomeUnknownError): the
        recorded id makes the retry a no-op if the lost attempt applied."""
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
                outcome = self._retrying(what, lambda conn, books=this_try: commit_attempt(  # type: ignore[misc]
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
                deadline = deadline if deadline is not None else now + self.outcome_timeout_seconds
                if now >= deadline or self._closed:
                    raise CommitOutcomeUnknownError(
                        f"{what}: the state store was lost during the commit and did not come back within "
                        f"{self.outcome_timeout_seconds:g}s, so whether it applied is unknown "
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

        return self._run(f"load state of table {table_id}", fn, isolation=IsolationLevel.REPEATABLE_READ,
                         read_only=True)

    def partitions(self, table_id: str) -> list[Partition]:
        def fn(cur: psycopg.Cursor[Any]) -> list[Partition]:
            require_table_id(cur, table_id)
            cur.execute(f"SELECT {PARTITION_COLUMNS} FROM partitions WHERE table_id = %s", (table_id,))
            return [partition_from_row(r) for r in cur.fetchall()]

        return self._run(f"load partitions of table {table_id}", fn, isolation=IsolationLevel.REPEATABLE_READ,
                         read_only=True)

    def file_references(self, table_id: str) -> list[FileReference]:
        def fn(cur: psycopg.Cursor[Any]) -> list[FileReference]:
            require_table_id(cur, table_id)
            cur.execute(f"SELECT {REF_COLUMNS} FROM file_references WHERE table_id = %s", (table_id,))
            with gc_paused():
                return [FileReference(*r) for r in cur.fetchall()]

        return self._run(f"load file references of table {table_id}", fn,
                         isolation=IsolationLevel.REPEATABLE_READ, read_only=True)

    def tombstones(self, table_id: str) -> tuple[int, tuple[Tombstone, ...]]:
        def fn(cur: psycopg.Cursor[Any]) -> tuple[int, tuple[Tombstone, ...]]:
            state = fill_tombstones(TableState(), cur.execute(TOMBSTONES, (table_id,)).fetchone())
            if cur.rowcount == 0:
                raise TableNotFoundError(f"no table with id {table_id}")
            return state.delete_count, tuple(sorted(state.tombstones.values(), key=lambda t: t.number))

        return self._run(f"read the tombstones of table {table_id}", fn, isolation=IsolationLevel.REPEATABLE_READ,
                         read_only=True)

    def prune_commit_ids(self, table_id: str, before_ms: int) -> int:
        """See :meth:`StateStore.prune_commit_ids`; also forgets the table's change log
        rows older than :data:`~statestore.postgres.changes.CHANGE_RETENTION_MS`."""
        count = super().prune_commit_ids(table_id, before_ms)
        self._run(f"prune the change log of table {table_id}",
                  lambda cur: prune_changes(cur, table_id, now_ms() - CHANGE_RETENTION_MS),
                  isolation=IsolationLevel.READ_COMMITTED)
        return count

    def delete_key_records(self, table_id: str, now_ms: int) -> list[KeyRecord]:
        """See :meth:`StateStore.delete_key_records`: the live tombstones (``table_deletes``)
        and the ``table_history`` rows holding a delete's keys (the undo record of a drop,
        or a detail written by a release before docs/adr/0015), read in one transaction."""
        def fn(cur: psycopg.Cursor[Any]) -> list[KeyRecord]:
            row = cur.execute("SELECT table_id, name, schema, properties FROM tables WHERE table_id = %s",
                              (table_id,)).fetchone()
            if row is None:
                raise TableNotFoundError(f"no table with id {table_id}")
            state = fill_tombstones(TableState(), cur.execute(TOMBSTONES, (table_id,)).fetchone())
            live = [KeyRecord(f"tombstone {t.number}", t.regions, t.where, TOMBSTONE_GOES)
                    for t in sorted(state.tombstones.values(), key=lambda t: t.number)]
            return live + key_records(cur, table_id, retention_ms(table_info(row)))

        return self._run(f"find the records holding delete keys of table {table_id}", fn,
                         isolation=IsolationLevel.REPEATABLE_READ, read_only=True)

    def prune_history(self, table_id: str, now: int) -> int:
        """See :meth:`StateStore.prune_history` and
        :func:`~statestore.postgres.history.prune_history`."""
        def fn(cur: psycopg.Cursor[Any]) -> int:
            row = cur.execute("SELECT table_id, name, schema, properties FROM tables WHERE table_id = %s",
                              (table_id,)).fetchone()
            if row is None:
                raise TableNotFoundError(f"no table with id {table_id}")
            return prune_history(cur, table_id, now - retention_ms(table_info(row)))

        return self._run(f"prune the history of table {table_id}", fn, isolation=IsolationLevel.READ_COMMITTED)

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

        return self._run(f"find unreferenced files of table {table_id}", fn,
                         isolation=IsolationLevel.REPEATABLE_READ, read_only=True)


def open_postgres(dsn: Optional[str] = None, *, embedded_dir: Optional[Union[str, Path]] = None,
                  idle_minutes: float = 0, **store_kwargs: Any) -> PostgresStateStore:
    """The PostgreSQL state store at ``dsn``; without a DSN, the embedded server whose data
    lives in ``embedded_dir`` is started (or joined) and the store owns it: closing the
    store closes its pool, then stops the server when no other process uses it, or,
    with ``idle_minutes > 0``, leaves it running until it has been idle that long."""
    if dsn:
        return PostgresStateStore(dsn, **store_kwargs)
    if embedded_dir is None:
        raise StateStoreUnavailableError(
            "the PostgreSQL state store needs a DSN or a directory for the embedded server")
    from statestore.postgres.embedded import EmbeddedPostgres

    server = EmbeddedPostgres(embedded_dir, idle_minutes=idle_minutes)
    # the database is checked only if the first connection fails: one connection less per process
    store = PostgresStateStore(server.start(ensure_database=False), ensure_database=server.ensure_database,
                               **store_kwargs)
    store._on_close.append(server.stop)
    return store
