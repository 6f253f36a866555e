"""The PostgreSQL state store: the StateStore interface over the role modules of this
package (see the package docstring for the design), and the factory the backend
registry calls."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Union

import psycopg
from psycopg import IsolationLevel

from statestore.errors import StateStoreUnavailableError
from statestore.files import FileReference
from statestore.partitions import Partition
from statestore.postgres.catalog import CatalogMixin
from statestore.postgres.commits import _commit_attempt
from statestore.postgres.ingest_queue import IngestQueueMixin
from statestore.postgres.jobs import JobsMixin
from statestore.postgres.leases import LeasesMixin
from statestore.postgres.rows import (
    _PARTITION_COLUMNS,
    _REF_COLUMNS,
    _gc_paused,
    _load_all,
    _partition_from_row,
    _require_table_id,
)
from statestore.state import TableState
from statestore.store import StateStore
from statestore.transactions import Transaction


class PostgresStateStore(CatalogMixin, JobsMixin, LeasesMixin, IngestQueueMixin, StateStore):
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

    # ----- table state ----------------------------------------------------------------
    def commit(self, table_id: str, transaction: Transaction) -> None:
        touches = transaction.touches()
        refused = self._retrying(f"commit {transaction.TYPE} to table {table_id}",
                                 lambda conn: _commit_attempt(conn, table_id, transaction, touches))
        if refused is not None:
            raise refused

    def load_state(self, table_id: str) -> TableState:
        def fn(cur: psycopg.Cursor[Any]) -> TableState:
            _require_table_id(cur, table_id)
            with _gc_paused():
                return _load_all(cur, table_id)

        return self._run(f"load state of table {table_id}", fn, isolation=IsolationLevel.REPEATABLE_READ,
                         read_only=True)

    def partitions(self, table_id: str) -> list[Partition]:
        def fn(cur: psycopg.Cursor[Any]) -> list[Partition]:
            _require_table_id(cur, table_id)
            cur.execute(f"SELECT {_PARTITION_COLUMNS} FROM partitions WHERE table_id = %s", (table_id,))
            return [_partition_from_row(r) for r in cur.fetchall()]

        return self._run(f"load partitions of table {table_id}", fn, isolation=IsolationLevel.REPEATABLE_READ,
                         read_only=True)

    def file_references(self, table_id: str) -> list[FileReference]:
        def fn(cur: psycopg.Cursor[Any]) -> list[FileReference]:
            _require_table_id(cur, table_id)
            cur.execute(f"SELECT {_REF_COLUMNS} FROM file_references WHERE table_id = %s", (table_id,))
            with _gc_paused():
                return [FileReference(*r) for r in cur.fetchall()]

        return self._run(f"load file references of table {table_id}", fn,
                         isolation=IsolationLevel.REPEATABLE_READ, read_only=True)

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
                _require_table_id(cur, table_id)
            return names

        return self._run(f"find unreferenced files of table {table_id}", fn,
                         isolation=IsolationLevel.REPEATABLE_READ, read_only=True)


def open_postgres(dsn: Optional[str] = None, *, embedded_dir: Optional[Union[str, Path]] = None,
                  **store_kwargs: Any) -> PostgresStateStore:
    """The PostgreSQL state store at ``dsn``; without a DSN, the embedded server whose data
    lives in ``embedded_dir`` is started (or joined) and the store owns it: closing the
    store closes its pool, then stops the server (when no other process uses it)."""
    if dsn:
        return PostgresStateStore(dsn, **store_kwargs)
    if embedded_dir is None:
        raise StateStoreUnavailableError(
            "the PostgreSQL state store needs a DSN or a directory for the embedded server")
    from statestore.postgres.embedded import EmbeddedPostgres

    server = EmbeddedPostgres(embedded_dir)
    store = PostgresStateStore(server.start(), **store_kwargs)
    store._on_close.append(server.stop)
    return store
