"""Connections: one opened in the caller's thread on first use (migrations checked
on it), a small pool opened only when a second thread needs a connection at the same
time, and the retry loop that runs a unit of work in one database transaction,
retrying serialization failures and deadlocks with jittered backoff
(CommitConflictError when attempts run out; a lost server is
StateStoreUnavailableError).

The first connection is not pooled because a new process that makes one lookup
(every ``sleeper query``) would otherwise pay for the pool's worker threads, a
connection opened in one of them (a thread hop each way) and a separate connection
for the migration check: measured, a third of such a command's wall time on a busy
machine (docs/adr/0009-lookup-process.md)."""

from __future__ import annotations

import importlib.util
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional, TypeVar, Union

import psycopg
from psycopg import IsolationLevel
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import TransactionStatus

from statestore.errors import CommitConflictError, StateStoreUnavailableError
from statestore.postgres.migrate import migrate_if_needed
from statestore.retry import Backoff

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

if importlib.util.find_spec("psycopg_pool") is None:  # imported when first needed; missing, said now
    raise ModuleNotFoundError("No module named 'psycopg_pool'", name="psycopg_pool")

T = TypeVar("T")

_RETRYABLE = (pg_errors.SerializationFailure, pg_errors.DeadlockDetected)

#: every connection's session setting, sent with the connection's start-up (no round trip):
#: sequential scans take relation-level SIRead locks, which make every concurrent writer a
#: serialization conflict; index scans lock only what they read
SESSION_OPTIONS = "-c enable_seqscan=off"


def session_options(dsn: str) -> str:
    """The libpq ``options`` of a connection to ``dsn``: its own, then :data:`SESSION_OPTIONS`."""
    own = conninfo_to_dict(dsn).get("options")
    return f"{own} {SESSION_OPTIONS}" if own else SESSION_OPTIONS


class PostgresConnection:
    """The connections and the retry loop every role of :class:`PostgresStateStore` shares:
    each role method runs its unit of work through :meth:`run` (or :meth:`retrying`,
    :meth:`read_one`) in one database transaction.

    ``ensure_database``: called once when the first connection fails (e.g. the embedded
    server's database is not created yet), before one more try."""

    #: how long a commit whose connection broke keeps trying to learn its outcome
    outcome_timeout_seconds: float = 60.0

    def __init__(self, dsn: str, backoff: Optional[Backoff] = None, *, max_connections: int = 4,
                 connect_timeout: float = 30.0, migrate: bool = True,
                 migrations_dir: Optional[Union[str, Path]] = None,
                 ensure_database: Optional[Callable[[], None]] = None) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        self.dsn = dsn
        self.backoff = backoff or Backoff()
        self.max_connections = max_connections
        self.connect_timeout = connect_timeout
        self._migrate = migrate
        self._migrations_dir = Path(migrations_dir) if migrations_dir is not None else None
        self._ensure_database = ensure_database
        self._kwargs: dict[str, Any] = {"autocommit": True, "options": session_options(dsn)}
        #: the connection opened in the caller's thread, lent to one unit of work at a time
        self._first: Optional[psycopg.Connection[Any]] = None
        self._first_lock = threading.Lock()
        self._migrated = False
        self._pool: Optional[ConnectionPool[Any]] = None
        self._pool_lock = threading.Lock()
        self.closed = False
        #: called once by :meth:`close`, after the connections (e.g. stop an embedded server)
        self.on_close: list[Callable[[], None]] = []

    def __repr__(self) -> str:
        return f"PostgresStateStore({conninfo_to_dict(self.dsn).get('dbname', '?')!r})"

    # ----- connections ----------------------------------------------------------------
    def _connect(self) -> psycopg.Connection[Any]:
        """A new connection (autocommit, with the session options); migrations applied
        first on the first one."""
        timeout = max(1, int(self.connect_timeout))
        try:
            try:
                conn = psycopg.connect(self.dsn, connect_timeout=timeout, **self._kwargs)
            except psycopg.OperationalError:
                ensure, self._ensure_database = self._ensure_database, None
                if ensure is None:
                    raise
                ensure()
                conn = psycopg.connect(self.dsn, connect_timeout=timeout, **self._kwargs)
            if self._migrate and not self._migrated:
                try:
                    migrate_if_needed(conn, self._migrations_dir)
                except BaseException:
                    conn.close()
                    raise
                self._migrated = True
        except psycopg.OperationalError as e:
            raise StateStoreUnavailableError(f"cannot reach the PostgreSQL state store: {e}") from e
        return conn

    @contextmanager
    def _lend_first(self) -> Iterator[psycopg.Connection[Any]]:
        """The first connection, opened if needed; the caller holds ``_first_lock``. After
        use it is kept when healthy and idle (an open transaction rolled back), else dropped."""
        try:
            conn = self._first
            if conn is None or conn.closed:
                if self.closed:
                    raise StateStoreUnavailableError("the state store is closed")
                conn = self._first = self._connect()
            try:
                yield conn
            finally:
                status = conn.info.transaction_status
                if conn.closed or conn.broken or status in (TransactionStatus.UNKNOWN, TransactionStatus.ACTIVE):
                    self._first = None
                    conn.close()
                elif status != TransactionStatus.IDLE:
                    try:
                        conn.rollback()
                    except psycopg.Error:
                        self._first = None
                        conn.close()
                dropped = self._first if self.closed else None
                if dropped is not None:
                    self._first = None
                    dropped.close()
        finally:
            self._first_lock.release()

    def _get_pool(self) -> ConnectionPool[Any]:
        """The pool for threads that find the first connection busy (opened on first need)."""
        pool = self._pool
        if pool is not None:
            return pool
        with self._pool_lock:
            if self.closed:
                raise StateStoreUnavailableError("the state store is closed")
            if self._pool is None:
                from psycopg_pool import ConnectionPool

                if self._migrate and not self._migrated:  # the pool's connections need the schema too
                    self._connect().close()

                new: ConnectionPool[Any] = ConnectionPool(
                    self.dsn, min_size=1, max_size=max(1, self.max_connections - 1), open=False,
                    kwargs=dict(self._kwargs), timeout=self.connect_timeout, name="sleeper-statestore")
                new.open(wait=False)
                self._pool = new
            return self._pool

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection for one unit of work: the first connection when free (opened in
        this thread on first use), else one from the pool; with ``max_connections=1``,
        the first connection, waiting for it."""
        if self.closed:
            raise StateStoreUnavailableError("the state store is closed")
        if self._first_lock.acquire(blocking=False) or (
                self.max_connections == 1 and self._first_lock.acquire(timeout=self.connect_timeout)):
            with self._lend_first() as conn:
                yield conn
            return
        if self.max_connections == 1:
            raise StateStoreUnavailableError(
                f"no connection to the PostgreSQL state store within {self.connect_timeout:g}s")
        from psycopg_pool import PoolTimeout

        try:
            with self._get_pool().connection() as conn:
                yield conn
        except PoolTimeout as e:
            raise StateStoreUnavailableError(f"no connection to the PostgreSQL state store: {e}") from e

    def retrying(self, what: str, attempt: Callable[[psycopg.Connection[Any]], T], *, idempotent: bool = False,
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
                with self.connection() as conn:
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

    def run(self, what: str, fn: Callable[[psycopg.Cursor[Any]], T], *,
             isolation: IsolationLevel = IsolationLevel.SERIALIZABLE, read_only: bool = False,
             idempotent: Optional[bool] = None) -> T:
        """Run ``fn`` in one database transaction, retrying serialization failures; and
        on a fresh connection after a lost one when ``idempotent`` (default: a read; a
        keyed write finds its own first try)."""

        def attempt(conn: psycopg.Connection[Any]) -> T:
            if conn.isolation_level != isolation:
                conn.isolation_level = isolation
            if conn.read_only != read_only:
                conn.read_only = read_only
            with conn.transaction(), conn.cursor() as cur:
                return fn(cur)

        return self.retrying(what, attempt, idempotent=read_only if idempotent is None else idempotent)

    def read_one(self, what: str, fn: Callable[[psycopg.Cursor[Any]], T]) -> T:
        """Run ``fn``, which sends ONE read statement, on a connection in autocommit mode:
        one round trip instead of three (BEGIN, the statement, COMMIT); a single statement
        sees one snapshot, so nothing is lost against a read-only transaction."""
        def attempt(conn: psycopg.Connection[Any]) -> T:
            with conn.cursor() as cur:
                return fn(cur)

        return self.retrying(what, attempt, idempotent=True)

    def close(self) -> None:
        with self._pool_lock:
            self.closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()
        if self._first_lock.acquire(timeout=self.connect_timeout):  # else in use: its lender closes it
            try:
                first, self._first = self._first, None
                if first is not None:
                    first.close()
            finally:
                self._first_lock.release()
        callbacks, self.on_close = self.on_close, []
        for callback in callbacks:
            callback()
