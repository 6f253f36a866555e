"""The PostgreSQL state store: the StateStore interface over one role object per role
(:mod:`statestore.roles`), all sharing one :class:`~statestore.postgres.connections.PostgresConnection`
(see the package docstring for the design), and the factory the backend registry calls.

Each role method runs its work in one database transaction on that connection; what
must commit together is one role method's one transaction (a commit with its job
record, ingest requests, buffer entries and client write: :mod:`.commits`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional, Union

from statestore.composed import ComposedStateStore
from statestore.errors import StateStoreUnavailableError
from statestore.postgres.buffer import PostgresWriteBuffer
from statestore.postgres.catalog import PostgresCatalog
from statestore.postgres.client_writes import PostgresClientWrites
from statestore.postgres.connections import PostgresConnection
from statestore.postgres.history import PostgresHistory
from statestore.postgres.ingest_queue import PostgresIngestQueue
from statestore.postgres.jobs import PostgresJobs
from statestore.postgres.leases import PostgresLeases
from statestore.postgres.table_commits import PostgresCommits
from statestore.retry import Backoff


class PostgresStateStore(ComposedStateStore):
    """The state store in PostgreSQL (see the module docstring).

    Args:
        dsn: a libpq connection string or URI.
        backoff: retry policy for serialization failures (default :class:`Backoff`).
        max_connections: the most pooled connections (threads committing at once).
        connect_timeout: seconds to wait for a connection before
            :class:`StateStoreUnavailableError`.
        migrate: apply missing migrations on first use.
        migrations_dir: where the ``NNN_*.sql`` files are (default ``include/sql``).

    Attributes:
        db: the connections and retry loop every role shares.
    """

    def __init__(self, dsn: str, backoff: Optional[Backoff] = None, *, max_connections: int = 4,
                 connect_timeout: float = 30.0, migrate: bool = True,
                 migrations_dir: Optional[Union[str, Path]] = None,
                 ensure_database: Optional[Callable[[], None]] = None) -> None:
        self.db = db = PostgresConnection(dsn, backoff, max_connections=max_connections,
                                          connect_timeout=connect_timeout, migrate=migrate,
                                          migrations_dir=migrations_dir, ensure_database=ensure_database)
        queue = PostgresIngestQueue(db)
        super().__init__(catalog=PostgresCatalog(db), table_commits=PostgresCommits(db), job_tracker=PostgresJobs(db),
                         leases=PostgresLeases(db), ingest_queue=queue, write_buffer=PostgresWriteBuffer(db),
                         client_writes=PostgresClientWrites(db, queue), table_history=PostgresHistory(db))

    def __repr__(self) -> str:
        return repr(self.db)

    @property
    def dsn(self) -> str:
        return self.db.dsn

    @property
    def backoff(self) -> Backoff:
        return self.db.backoff

    @property
    def connect_timeout(self) -> float:
        """Seconds to wait for a connection (settable)."""
        return self.db.connect_timeout

    @connect_timeout.setter
    def connect_timeout(self, seconds: float) -> None:
        self.db.connect_timeout = seconds

    @property
    def outcome_timeout_seconds(self) -> float:
        """How long a commit whose connection broke keeps trying to learn its outcome (settable)."""
        return self.db.outcome_timeout_seconds

    @outcome_timeout_seconds.setter
    def outcome_timeout_seconds(self, seconds: float) -> None:
        self.db.outcome_timeout_seconds = seconds

    def close(self) -> None:
        """Close the connections (and stop an embedded server this store owns)."""
        self.db.close()


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
    store.db.on_close.append(server.stop)
    return store
