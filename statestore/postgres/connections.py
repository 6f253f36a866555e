"""Connections: a small pool opened on first use (migrating first), and the retry loop
that runs a unit of work in one database transaction, retrying serialization failures
and deadlocks with jittered backoff (CommitConflictError when attempts run out; a lost
server is StateStoreUnavailableError)."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, TypeVar, Union

import psycopg
from psycopg import IsolationLevel
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool, PoolTimeout

from statestore.errors import CommitConflictError, StateStoreUnavailableError
from statestore.postgres.migrate import migrate
from statestore.retry import Backoff

T = TypeVar("T")

_RETRYABLE = (pg_errors.SerializationFailure, pg_errors.DeadlockDetected)


class PostgresConnection:
    """The pool and the retry loop every part of :class:`PostgresStateStore` uses."""

    def __init__(self, dsn: str, backoff: Optional[Backoff] = None, *, max_connections: int = 4,
                 connect_timeout: float = 30.0, migrate: bool = True,
                 migrations_dir: Optional[Union[str, Path]] = None) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        self.dsn = dsn
        self.backoff = backoff or Backoff()
        self.max_connections = max_connections
        self.connect_timeout = connect_timeout
        self._migrate = migrate
        self._migrations_dir = Path(migrations_dir) if migrations_dir is not None else None
        self._pool: Optional[ConnectionPool[Any]] = None
        self._pool_lock = threading.Lock()
        self._closed = False
        #: called once by :meth:`close`, after the pool (e.g. stop an embedded server)
        self._on_close: list[Callable[[], None]] = []

    def __repr__(self) -> str:
        return f"PostgresStateStore({conninfo_to_dict(self.dsn).get('dbname', '?')!r})"

    # ----- connections ----------------------------------------------------------------
    @staticmethod
    def _configure(conn: psycopg.Connection[Any]) -> None:
        # Sequential scans take relation-level SIRead locks, which make every concurrent
        # writer a serialization conflict; index scans lock only what they read.
        conn.execute("SET enable_seqscan = off")

    def _get_pool(self) -> ConnectionPool[Any]:
        pool = self._pool
        if pool is not None:
            return pool
        with self._pool_lock:
            if self._closed:
                raise StateStoreUnavailableError("the state store is closed")
            if self._pool is None:
                if self._migrate:
                    try:
                        with psycopg.connect(self.dsn, autocommit=True,
                                             connect_timeout=max(1, int(self.connect_timeout))) as conn:
                            migrate(conn, self._migrations_dir)
                    except psycopg.OperationalError as e:
                        raise StateStoreUnavailableError(f"cannot reach the PostgreSQL state store: {e}") from e
                new: ConnectionPool[Any] = ConnectionPool(
                    self.dsn, min_size=1, max_size=self.max_connections, open=False,
                    kwargs={"autocommit": True}, configure=self._configure,
                    timeout=self.connect_timeout, name="sleeper-statestore")
                new.open(wait=False)
                self._pool = new
            return self._pool

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        try:
            with self._get_pool().connection() as conn:
                yield conn
        except PoolTimeout as e:
            raise StateStoreUnavailableError(f"no connection to the PostgreSQL state store: {e}") from e

    def _retrying(self, what: str, attempt: Callable[[psycopg.Connection[Any]], T], *, idempotent: bool = False,
                  on_retry: Optional[Callable[[], None]] = None) -> T:
        """Call ``attempt(conn)`` until it does not fail with a serialization failure
        or deadlock, pausing between attempts; give up with CommitConflictError. An
        ``idempotent`` attempt (a read) is also tried again on a fresh connection when
        its connection was lost (e.g. the server restarted since it was pooled).
        ``on_retry`` is called before each try after the first."""
        n = 0
        while True:
            n += 1
            try:
                with self._connection() as conn:
                    try:
                        return attempt(conn)
                    except pg_errors.InvalidSqlStatementName:
                        # When a pipeline aborts before a statement's first PREPARE ran,
                        # psycopg still lists it as prepared; a fresh connection has a
                        # clean cache. The failed transaction wrote nothing: try again.
                        conn.close()
                        if n >= self.backoff.max_attempts:
                            raise
                        continue
            except _RETRYABLE as e:
                if n >= self.backoff.max_attempts:
                    raise CommitConflictError(f"{what}: still conflicting after {n} attempts ({e})") from e
                self.backoff.pause(n)
            except psycopg.OperationalError as e:
                if not idempotent or n >= self.backoff.max_attempts:
                    raise StateStoreUnavailableError(f"{what}: {e}") from e
                self.backoff.pause(n)
            if on_retry is not None:
                on_retry()

    def _run(self, what: str, fn: Callable[[psycopg.Cursor[Any]], T], *,
             isolation: IsolationLevel = IsolationLevel.SERIALIZABLE, read_only: bool = False) -> T:
        """Run ``fn`` in one database transaction, retrying serialization failures."""

        def attempt(conn: psycopg.Connection[Any]) -> T:
            if conn.isolation_level != isolation:
                conn.isolation_level = isolation
            if conn.read_only != read_only:
                conn.read_only = read_only
            with conn.transaction(), conn.cursor() as cur:
                return fn(cur)

        return self._retrying(what, attempt, idempotent=read_only)

    def close(self) -> None:
        with self._pool_lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()
        callbacks, self._on_close = self._on_close, []
        for callback in callbacks:
            callback()
