"""PostgreSQL state store: seed 001, option 3.

Tables (``include/sql/``): ``tables`` (the catalog), ``partitions``,
``file_references`` (one row per file per partition) and ``files`` (one row per
tracked file, referenced or not). There is no reference-count column; counts come
from ``file_references``, so concurrent commits do not all update the same rows.

A commit runs inside one SERIALIZABLE database transaction:

1. ``txn.touches()`` names the partitions and files the transaction reads or writes;
2. only those rows are loaded into a :class:`TableState` fragment (partitions by id;
   for each named file its ``files`` row and all its references), or the whole table
   when ``whole_table``;
3. ``before = fragment.copy()``, ``txn.validate(fragment)``, ``txn.apply(fragment)``;
4. the difference between ``before`` and the fragment is written with a handful of
   set-based statements (``unnest`` arrays; binary COPY for large inserts).

So a commit costs O(size of the change), never O(size of the table). BEGIN and the
reads go to the server in one pipeline, the writes and COMMIT in another: a small
commit takes two round trips. Serialization
failures and deadlocks are retried with jittered backoff; :class:`CommitConflictError`
is raised when attempts run out. A :class:`TransactionError` is never retried: the
database transaction has written nothing; it is committed read-only, so PostgreSQL
confirms the refusal was based on a serializable view (a serialization failure there
retries the whole commit, like any other).

Connections come from a small pool opened on first use; :meth:`close` closes it.
Migrations (``include/sql/NNN_*.sql``) are applied on first use under an advisory
lock, recorded in ``schema_migrations``.

psycopg is imported only here (and lazily by :mod:`statestore.postgres.embedded`).
"""

from __future__ import annotations

import gc
import hashlib
import importlib.resources
import re
import threading
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence, TypeVar, Union

import psycopg
from psycopg import IsolationLevel, sql
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import TransactionStatus
from psycopg.types.json import Json, Jsonb
from psycopg_pool import ConnectionPool, PoolTimeout

from statestore.catalog import TableInfo
from statestore.errors import (
    CommitConflictError,
    StateStoreUnavailableError,
    TableExistsError,
    TableNotFoundError,
    TransactionError,
)
from statestore.files import FileRecord, FileReference
from statestore.ingest_requests import INGEST_REQUEST_STATUSES, IngestRequest, IngestRequestError, check_new_requests
from statestore.jobs import JobRecord
from statestore.leases import Lease
from statestore.partitions import Partition
from statestore.properties import validate_properties
from statestore.region import Region
from statestore.retry import Backoff
from statestore.schema import Schema
from statestore.state import TableState
from statestore.store import StateStore
from statestore.transactions import InitialisePartitions, Touches, Transaction

T = TypeVar("T")

#: ``include/sql`` of the checkout, shipped in the wheel as the package ``statestore.postgres.ddl``.
MIGRATIONS_DIR = Path(str(importlib.resources.files("statestore.postgres.ddl")))
_MIGRATION_RE = re.compile(r"^(\d+)_[A-Za-z0-9_.-]*\.sql$")
MIGRATION_LOCK_KEY = int.from_bytes(hashlib.sha256(b"sleeper.statestore.migrations").digest()[:8], "big", signed=True)

#: inserts of more rows than this go through COPY
COPY_THRESHOLD = 2000
#: transactions naming more files than this pause the cyclic garbage collector while
#: they build their fragment (it would otherwise rescan the growing heap many times)
LARGE_TRANSACTION = 5000

_RETRYABLE = (pg_errors.SerializationFailure, pg_errors.DeadlockDetected)

_REF_COLUMNS = "filename, partition_id, record_count, count_approximate, whole_file, job_id, update_time"
_PARTITION_COLUMNS = "partition_id, parent_id, child_ids, is_leaf, dimension, region"


# ----- helpers usable without a store -------------------------------------------------
def create_database_if_missing(dsn: str, database: str) -> None:
    """Create ``database`` on the server of ``dsn`` (any database there) if it is missing."""
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database,)).fetchone()
            if exists is None:
                try:
                    conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
                except (pg_errors.DuplicateDatabase, pg_errors.UniqueViolation):
                    pass  # created concurrently by another process
    except psycopg.OperationalError as e:
        raise StateStoreUnavailableError(f"could not create database {database!r}: {e}") from e


def migrations(migrations_dir: Optional[Path] = None) -> list[tuple[int, Path]]:
    """The numbered migrations ``NNN_name.sql`` in order."""
    d = migrations_dir or MIGRATIONS_DIR
    if not d.is_dir():
        raise StateStoreUnavailableError(f"the SQL migrations directory {d} is missing")
    out = []
    for p in d.iterdir():
        m = _MIGRATION_RE.match(p.name)
        if m:
            out.append((int(m.group(1)), p))
    out.sort()
    versions = [v for v, _ in out]
    if len(set(versions)) != len(versions):
        raise StateStoreUnavailableError(f"two SQL migrations in {d} have the same number")
    return out


def migrate(conn: psycopg.Connection[Any], migrations_dir: Optional[Path] = None) -> list[int]:
    """Apply missing migrations in one transaction under an advisory lock, so that
    concurrent processes migrate once. ``conn`` must be in autocommit mode. Returns
    the versions applied here."""
    applied_now = []
    todo = migrations(migrations_dir)
    conn.isolation_level = IsolationLevel.READ_COMMITTED
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_KEY,))
        conn.execute("CREATE TABLE IF NOT EXISTS schema_migrations ("
                     " version integer PRIMARY KEY, name text NOT NULL,"
                     " applied_at timestamptz NOT NULL DEFAULT now())")
        done = {r[0] for r in conn.execute("SELECT version FROM schema_migrations")}
        for version, path in todo:
            if version in done:
                continue
            conn.execute(path.read_text())  # type: ignore[call-overload]  # no parameters: several statements
            conn.execute("INSERT INTO schema_migrations (version, name) VALUES (%s, %s)", (version, path.name))
            applied_now.append(version)
    return applied_now


def _partition_from_row(row: Sequence[Any]) -> Partition:
    pid, parent, children, leaf, dimension, region = row
    return Partition(pid, Region.from_dict(region), parent, tuple(children), leaf, dimension)


def _table_info(row: Sequence[Any]) -> TableInfo:
    table_id, name, schema, properties = row
    return TableInfo(table_id, name, Schema.from_dict(schema), dict(properties))


def _changed(before: Mapping[Any, T], after: Mapping[Any, T]) -> tuple[list[Any], list[T], list[T]]:
    """(deleted keys, inserted values, updated values) from ``before`` to ``after``."""
    deleted = [k for k in before if k not in after]
    inserted: list[T] = []
    updated: list[T] = []
    for k, v in after.items():
        old = before.get(k)
        if old is None:
            inserted.append(v)
        elif old is not v and old != v:
            updated.append(v)
    return deleted, inserted, updated


class PostgresStateStore(StateStore):
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
                pool: ConnectionPool[Any] = ConnectionPool(
                    self.dsn, min_size=1, max_size=self.max_connections, open=False,
                    kwargs={"autocommit": True}, configure=self._configure,
                    timeout=self.connect_timeout, name="sleeper-statestore")
                pool.open(wait=False)
                self._pool = pool
            return self._pool

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        try:
            with self._get_pool().connection() as conn:
                yield conn
        except PoolTimeout as e:
            raise StateStoreUnavailableError(f"no connection to the PostgreSQL state store: {e}") from e

    def _retrying(self, what: str, attempt: Callable[[psycopg.Connection[Any]], T]) -> T:
        """Call ``attempt(conn)`` until it does not fail with a serialization failure
        or deadlock, pausing between attempts; give up with CommitConflictError."""
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
                raise StateStoreUnavailableError(f"{what}: {e}") from e

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

        return self._retrying(what, attempt)

    def close(self) -> None:
        with self._pool_lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()
        callbacks, self._on_close = self._on_close, []
        for callback in callbacks:
            callback()

    # ----- catalog --------------------------------------------------------------------
    def create_table(self, name: str, schema: Schema, partitions: Sequence[Partition],
                     properties: Optional[Mapping[str, str]] = None) -> TableInfo:
        props = validate_properties(properties or {})
        init = InitialisePartitions(tuple(partitions))
        table_id = uuid.uuid4().hex

        def fn(cur: psycopg.Cursor[Any]) -> TableInfo:
            row = cur.execute(
                "INSERT INTO tables (table_id, name, schema, properties) VALUES (%s, %s, %s, %s)"
                " ON CONFLICT (name) DO NOTHING RETURNING table_id",
                (table_id, name, Json(schema.to_dict()), Jsonb(props))).fetchone()
            if row is None:
                raise TableExistsError(f"table {name!r} already exists")
            state = TableState()
            init.validate(state)
            init.apply(state)
            _write_diff(cur, table_id, TableState(), state)
            return TableInfo(table_id, name, schema, props)

        return self._run(f"create table {name!r}", fn)

    def list_tables(self) -> list[TableInfo]:
        def fn(cur: psycopg.Cursor[Any]) -> list[TableInfo]:
            cur.execute("SELECT table_id, name, schema, properties FROM tables ORDER BY name")
            return [_table_info(r) for r in cur.fetchall()]

        return self._run("list tables", fn, isolation=IsolationLevel.REPEATABLE_READ, read_only=True)

    def get_table(self, name: str) -> TableInfo:
        def fn(cur: psycopg.Cursor[Any]) -> TableInfo:
            return _table_info(_require_table(cur, name))

        return self._run(f"get table {name!r}", fn, isolation=IsolationLevel.REPEATABLE_READ, read_only=True)

    def update_properties(self, name: str, properties: Mapping[str, str]) -> TableInfo:
        props = validate_properties(properties)

        def fn(cur: psycopg.Cursor[Any]) -> TableInfo:
            row = cur.execute("UPDATE tables SET properties = properties || %s WHERE name = %s"
                              " RETURNING table_id, name, schema, properties", (Jsonb(props), name)).fetchone()
            if row is None:
                raise TableNotFoundError(f"table {name!r} does not exist")
            return _table_info(row)

        return self._run(f"update properties of {name!r}", fn)

    def rename_table(self, old: str, new: str) -> TableInfo:
        def fn(cur: psycopg.Cursor[Any]) -> TableInfo:
            table_id = _require_table(cur, old)[0]
            if cur.execute("SELECT 1 FROM tables WHERE name = %s", (new,)).fetchone() is not None:
                raise TableExistsError(f"table {new!r} already exists")
            row = cur.execute("UPDATE tables SET name = %s WHERE table_id = %s"
                              " RETURNING table_id, name, schema, properties", (new, table_id)).fetchone()
            return _table_info(row)

        return self._run(f"rename table {old!r}", fn)

    def delete_table(self, name: str) -> TableInfo:
        def fn(cur: psycopg.Cursor[Any]) -> TableInfo:
            row = cur.execute("DELETE FROM tables WHERE name = %s RETURNING table_id, name, schema, properties",
                              (name,)).fetchone()
            if row is None:
                raise TableNotFoundError(f"table {name!r} does not exist")
            for table in ("file_references", "files", "partitions", "jobs"):
                cur.execute(sql.SQL("DELETE FROM {} WHERE table_id = %s").format(sql.Identifier(table)), (row[0],))
            return _table_info(row)

        return self._run(f"delete table {name!r}", fn)

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

    # ----- job status -----------------------------------------------------------------
    def put_job(self, record: JobRecord) -> None:
        d = record.to_dict()
        cols = list(d)
        stmt = sql.SQL("INSERT INTO jobs ({}) VALUES ({}) ON CONFLICT (table_id, job_id) DO UPDATE SET {}"
                       " WHERE jobs.status <> 'committed' OR EXCLUDED.status = 'committed'").format(
            sql.SQL(", ").join(map(sql.Identifier, cols)),
            sql.SQL(", ").join(sql.Placeholder() * len(cols)),
            sql.SQL(", ").join(sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c))
                               for c in cols if c not in ("table_id", "job_id")))

        def fn(cur: psycopg.Cursor[Any]) -> None:
            _require_table_id(cur, record.table_id)
            cur.execute(stmt, list(d.values()))

        self._run(f"save job {record.job_id}", fn, isolation=IsolationLevel.READ_COMMITTED)

    def get_job(self, table_id: str, job_id: str) -> Optional[JobRecord]:
        def fn(cur: psycopg.Cursor[Any]) -> Optional[JobRecord]:
            cur.execute(f"SELECT {_JOB_COLUMNS} FROM jobs WHERE table_id = %s AND job_id = %s", (table_id, job_id))
            row = cur.fetchone()
            return None if row is None else _job_from_row(row)

        return self._run(f"read job {job_id}", fn, isolation=IsolationLevel.READ_COMMITTED, read_only=True)

    def list_jobs(self, table_id: str, *, kind: Optional[str] = None, limit: int = 1000) -> list[JobRecord]:
        def fn(cur: psycopg.Cursor[Any]) -> list[JobRecord]:
            cur.execute(f"SELECT {_JOB_COLUMNS} FROM jobs WHERE table_id = %s AND (%s::text IS NULL OR kind = %s)"
                        " ORDER BY created_ms DESC, job_id DESC LIMIT %s", (table_id, kind, kind, max(0, limit)))
            return [_job_from_row(r) for r in cur.fetchall()]

        return self._run(f"list jobs of table {table_id}", fn, isolation=IsolationLevel.READ_COMMITTED,
                         read_only=True)

    # ----- leases ---------------------------------------------------------------------
    def acquire_lease(self, name: str, holder: str, ttl_seconds: float) -> Optional[Lease]:
        def fn(cur: psycopg.Cursor[Any]) -> Optional[Lease]:
            cur.execute(
                "INSERT INTO leases (name, holder, expires_at)"
                " VALUES (%(n)s, %(h)s, clock_timestamp() + make_interval(secs => %(t)s))"
                " ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at"
                " WHERE leases.holder = EXCLUDED.holder OR leases.expires_at <= clock_timestamp()"
                " RETURNING (extract(epoch FROM expires_at) * 1000)::bigint",
                {"n": name, "h": holder, "t": float(ttl_seconds)})
            row = cur.fetchone()
            return None if row is None else Lease(name, holder, row[0])

        return self._run(f"acquire lease {name}", fn, isolation=IsolationLevel.READ_COMMITTED)

    def release_lease(self, name: str, holder: str) -> bool:
        def fn(cur: psycopg.Cursor[Any]) -> bool:
            cur.execute("DELETE FROM leases WHERE name = %s AND holder = %s", (name, holder))
            return cur.rowcount > 0

        return self._run(f"release lease {name}", fn, isolation=IsolationLevel.READ_COMMITTED)

    def get_lease(self, name: str) -> Optional[Lease]:
        def fn(cur: psycopg.Cursor[Any]) -> Optional[Lease]:
            cur.execute("SELECT holder, (extract(epoch FROM expires_at) * 1000)::bigint FROM leases"
                        " WHERE name = %s AND expires_at > clock_timestamp()", (name,))
            row = cur.fetchone()
            return None if row is None else Lease(name, row[0], row[1])

        return self._run(f"read lease {name}", fn, isolation=IsolationLevel.READ_COMMITTED, read_only=True)

    # ----- ingest requests (migration 003; delete_table removes them by ON DELETE CASCADE) ---
    def add_ingest_requests(self, table_id: str, requests: Sequence[IngestRequest]) -> None:
        new = check_new_requests(table_id, requests)
        if not new:
            return
        columns = ([r.request_id for r in new], [r.filename for r in new], [r.size_bytes for r in new],
                   [r.received_ms for r in new])

        def fn(cur: psycopg.Cursor[Any]) -> None:
            _require_table_id(cur, table_id)
            try:
                cur.execute("INSERT INTO ingest_requests (table_id, request_id, filename, size_bytes, received_ms,"
                            " status) SELECT %s, r.*, 'pending'"
                            " FROM unnest(%s::text[], %s::text[], %s::bigint[], %s::bigint[]) AS r",
                            (table_id, *columns))
            except pg_errors.UniqueViolation as e:
                raise IngestRequestError(f"an ingest request of table {table_id} is already queued: "
                                         f"{e.diag.message_detail or e}") from e
            except pg_errors.ForeignKeyViolation as e:
                raise TableNotFoundError(f"no table with id {table_id}") from e

        self._run(f"queue {len(new)} ingest requests for table {table_id}", fn,
                  isolation=IsolationLevel.READ_COMMITTED)

    def pending_ingest_requests(self, table_id: str, limit: Optional[int] = None) -> list[IngestRequest]:
        return self.list_ingest_requests(table_id, status="pending", limit=limit)

    def assign_ingest_requests(self, table_id: str, job_id: str, request_ids: Sequence[str]) -> bool:
        ids = sorted(set(request_ids))

        def fn(cur: psycopg.Cursor[Any]) -> bool:
            # Lock the rows in one order (no deadlocks between assigners); under READ
            # COMMITTED a row changed meanwhile is seen as it is after that change.
            cur.execute("SELECT status FROM ingest_requests WHERE table_id = %s AND request_id = ANY(%s)"
                        " ORDER BY request_id FOR UPDATE", (table_id, ids))
            rows = cur.fetchall()
            if len(rows) != len(ids) or any(r[0] != "pending" for r in rows):
                _require_table_id(cur, table_id)
                return False
            cur.execute("UPDATE ingest_requests SET status = 'assigned', job_id = %s"
                        " WHERE table_id = %s AND request_id = ANY(%s)", (job_id, table_id, ids))
            return True

        return self._run(f"assign ingest requests of table {table_id} to job {job_id}", fn,
                         isolation=IsolationLevel.READ_COMMITTED)

    def finish_ingest_job(self, table_id: str, job_id: str, ok: bool, error: Optional[str] = None, *,
                          max_attempts: Optional[int] = None) -> int:
        def fn(cur: psycopg.Cursor[Any]) -> int:
            if ok:
                cur.execute("UPDATE ingest_requests SET status = 'ingested'"
                            " WHERE table_id = %s AND job_id = %s AND status = 'assigned'", (table_id, job_id))
            else:
                cur.execute(
                    "UPDATE ingest_requests SET attempts = attempts + 1, last_error = %(error)s,"
                    " status = CASE WHEN attempts + 1 >= %(max)s THEN 'failed' ELSE 'pending' END,"
                    " job_id = CASE WHEN attempts + 1 >= %(max)s THEN job_id END"
                    " WHERE table_id = %(t)s AND job_id = %(job)s AND status = 'assigned'",
                    {"error": error, "max": max_attempts, "t": table_id, "job": job_id})
            n = cur.rowcount
            if not n:
                _require_table_id(cur, table_id)
            return n

        return self._run(f"finish ingest job {job_id} of table {table_id}", fn,
                         isolation=IsolationLevel.READ_COMMITTED)

    def list_ingest_requests(self, table_id: str, *, status: Optional[str] = None,
                             limit: Optional[int] = 1000) -> list[IngestRequest]:
        if status is not None and status not in INGEST_REQUEST_STATUSES:
            raise IngestRequestError(f"unknown ingest request status {status!r}")

        def fn(cur: psycopg.Cursor[Any]) -> list[IngestRequest]:
            cur.execute(f"SELECT {_INGEST_REQUEST_COLUMNS} FROM ingest_requests"
                        " WHERE table_id = %s AND (%s::text IS NULL OR status = %s)"
                        " ORDER BY received_ms, request_id LIMIT %s",
                        (table_id, status, status, None if limit is None else max(0, limit)))
            rows = cur.fetchall()
            if not rows:
                _require_table_id(cur, table_id)
            return [IngestRequest(*r) for r in rows]

        return self._run(f"list ingest requests of table {table_id}", fn,
                         isolation=IsolationLevel.READ_COMMITTED, read_only=True)


_JOB_COLUMNS = ", ".join(JobRecord.__dataclass_fields__)
_INGEST_REQUEST_COLUMNS = ", ".join(IngestRequest.__dataclass_fields__)


def _job_from_row(row: Sequence[Any]) -> JobRecord:
    return JobRecord(*row)


# ----- reading ------------------------------------------------------------------------
def _require_table(cur: psycopg.Cursor[Any], name: str) -> Sequence[Any]:
    row = cur.execute("SELECT table_id, name, schema, properties FROM tables WHERE name = %s", (name,)).fetchone()
    if row is None:
        raise TableNotFoundError(f"table {name!r} does not exist")
    return row  # type: ignore[no-any-return]


def _require_table_id(cur: psycopg.Cursor[Any], table_id: str) -> None:
    if cur.execute("SELECT 1 FROM tables WHERE table_id = %s", (table_id,)).fetchone() is None:
        raise TableNotFoundError(f"no table with id {table_id}")


def _fill(state: TableState, partitions: Sequence[Sequence[Any]], files: Sequence[Sequence[Any]],
          refs: Sequence[Sequence[Any]]) -> TableState:
    for row in partitions:
        p = _partition_from_row(row)
        state.partitions[p.id] = p
    for name, when in files:
        state.files[name] = FileRecord(name, when)
    references, by_file = state.references, state.refs_by_file
    for row in refs:
        ref = FileReference(*row)
        references[(ref.filename, ref.partition_id)] = ref
        parts = by_file.get(ref.filename)
        if parts is None:
            by_file[ref.filename] = {ref.partition_id}
        else:
            parts.add(ref.partition_id)
    return state


_BEGIN_SERIALIZABLE = "BEGIN ISOLATION LEVEL SERIALIZABLE READ WRITE"


@contextmanager
def _gc_paused(pause: bool = True) -> Iterator[None]:
    """Pause the cyclic garbage collector while building many objects at once."""
    if not pause or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _rollback_quietly(conn: psycopg.Connection[Any]) -> None:
    if conn.closed or conn.info.transaction_status not in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
        return
    try:
        conn.execute("ROLLBACK")
    except psycopg.Error:
        pass  # a broken connection is discarded by the pool


def _pipelined(conn: psycopg.Connection[Any], body: Callable[[], T]) -> T:
    """Run ``body`` in pipeline mode. An error raised in ``body`` wins over the
    "pipeline aborted" that ending the pipeline then reports (which psycopg would
    otherwise log); an error that only shows at the final sync is raised as is."""
    failure: Optional[BaseException] = None
    result: Optional[T] = None
    try:
        with conn.pipeline():
            try:
                result = body()
            except BaseException as e:
                failure = e
    except psycopg.Error as e:
        failure = failure or e
    if failure is not None:
        raise failure
    return result  # type: ignore[return-value]


def _commit_attempt(conn: psycopg.Connection[Any], table_id: str, txn: Transaction,
                    touches: Touches) -> Optional[TransactionError]:
    """One attempt at a commit, in few round trips: BEGIN and the reads go in one
    pipeline; the writes and COMMIT in another (or with COPY, for large inserts).
    Returns the TransactionError refusing ``txn``, if any."""
    large = touches.whole_table or len(touches.filenames) > LARGE_TRANSACTION

    def read() -> TableState:
        conn.execute(_BEGIN_SERIALIZABLE)
        table = conn.execute("SELECT 1 FROM tables WHERE table_id = %s", (table_id,))
        if touches.whole_table:
            reads = _read_all(conn, table_id)
            if table.fetchone() is None:
                raise TableNotFoundError(f"no table with id {table_id}")
            return _fill(TableState(), *(c.fetchall() for c in reads))
        partitions, files = _read_fragment(conn, table_id, touches)
        if table.fetchone() is None:
            raise TableNotFoundError(f"no table with id {table_id}")
        return _fill_fragment(partitions.fetchall() if partitions else [], files.fetchall() if files else [])

    try:
        with _gc_paused(large):
            fragment = _pipelined(conn, read)
            before = fragment.copy()
            try:
                txn.validate(fragment)
            except TransactionError as e:
                # nothing written; committing confirms the reads were serializable
                conn.execute("COMMIT")
                return e
            txn.apply(fragment)
            diff = _Diff.between(before, fragment)
        with conn.cursor() as cur:
            if diff.needs_copy():
                diff.write(cur, table_id)
                cur.execute("COMMIT")
            else:
                def write() -> None:
                    diff.write(cur, table_id)
                    cur.execute("COMMIT")
                _pipelined(conn, write)
        return None
    except BaseException:
        _rollback_quietly(conn)
        raise


def _read_fragment(conn: psycopg.Connection[Any], table_id: str,
                   touches: Touches) -> tuple[Optional[psycopg.Cursor[Any]], Optional[psycopg.Cursor[Any]]]:
    """Send the queries for the rows ``touches`` names: partitions by id; each named
    file's record joined with all its references (one row per reference, or one row
    with NULL reference columns). Names go as binary arrays (no quoting to check)."""
    partitions = files = None
    if touches.partition_ids:
        partitions = conn.execute(
            f"SELECT {_PARTITION_COLUMNS} FROM partitions WHERE table_id = %s AND partition_id = ANY(%b)",
            (table_id, list(touches.partition_ids)))
    if touches.filenames:
        files = conn.execute(
            "SELECT f.filename, f.update_time, r.partition_id, r.record_count, r.count_approximate, r.whole_file,"
            " r.job_id, r.update_time"
            " FROM files f LEFT JOIN file_references r ON r.table_id = f.table_id AND r.filename = f.filename"
            " WHERE f.table_id = %s AND f.filename = ANY(%b)", (table_id, list(touches.filenames)))
    return partitions, files


def _fill_fragment(partitions: Sequence[Sequence[Any]], files_with_refs: Sequence[Sequence[Any]]) -> TableState:
    state = _fill(TableState(), partitions, (), ())
    files, references, by_file = state.files, state.references, state.refs_by_file
    for name, file_time, pid, count, approximate, whole, job, ref_time in files_with_refs:
        if name not in files:
            files[name] = FileRecord(name, file_time)
        if pid is not None:
            references[(name, pid)] = FileReference(name, pid, count, approximate, whole, job, ref_time)
            parts = by_file.get(name)
            if parts is None:
                by_file[name] = {pid}
            else:
                parts.add(pid)
    return state


def _read_all(conn: psycopg.Connection[Any], table_id: str) -> tuple[psycopg.Cursor[Any], ...]:
    return (conn.execute(f"SELECT {_PARTITION_COLUMNS} FROM partitions WHERE table_id = %s", (table_id,)),
            conn.execute("SELECT filename, update_time FROM files WHERE table_id = %s", (table_id,)),
            conn.execute(f"SELECT {_REF_COLUMNS} FROM file_references WHERE table_id = %s", (table_id,)))


def _load_all(cur: psycopg.Cursor[Any], table_id: str) -> TableState:
    cur.execute(f"SELECT {_PARTITION_COLUMNS} FROM partitions WHERE table_id = %s", (table_id,))
    partitions = cur.fetchall()
    cur.execute("SELECT filename, update_time FROM files WHERE table_id = %s", (table_id,))
    files = cur.fetchall()
    cur.execute(f"SELECT {_REF_COLUMNS} FROM file_references WHERE table_id = %s", (table_id,))
    refs = cur.fetchall()
    return _fill(TableState(), partitions, files, refs)


# ----- writing the difference ---------------------------------------------------------
@dataclass
class _Diff:
    """What changed from one TableState to another: deleted keys, inserted and updated values."""

    p_del: list[str]
    p_ins: list[Partition]
    p_upd: list[Partition]
    r_del: list[tuple[str, str]]
    r_ins: list[FileReference]
    r_upd: list[FileReference]
    f_del: list[str]
    f_ins: list[FileRecord]
    f_upd: list[FileRecord]

    @classmethod
    def between(cls, before: TableState, after: TableState) -> _Diff:
        return cls(*_changed(before.partitions, after.partitions), *_changed(before.references, after.references),
                   *_changed(before.files, after.files))

    def needs_copy(self) -> bool:
        return len(self.r_ins) > COPY_THRESHOLD or len(self.f_ins) > COPY_THRESHOLD

    def write(self, cur: psycopg.Cursor[Any], table_id: str) -> None:
        """Deletes, then inserts, then updates; a few set-based statements."""
        if self.r_del:
            cur.execute("DELETE FROM file_references r"
                        " USING unnest(%s::text[], %s::text[]) AS d(filename, partition_id)"
                        " WHERE r.table_id = %s AND r.filename = d.filename AND r.partition_id = d.partition_id",
                        ([k[0] for k in self.r_del], [k[1] for k in self.r_del], table_id))
        if self.f_del:
            cur.execute("DELETE FROM files WHERE table_id = %s AND filename = ANY(%s)", (table_id, self.f_del))
        if self.p_del:
            cur.execute("DELETE FROM partitions WHERE table_id = %s AND partition_id = ANY(%s)", (table_id, self.p_del))

        if self.p_ins:
            _insert_partitions(cur, table_id, self.p_ins)
        if self.f_ins:
            if len(self.f_ins) > COPY_THRESHOLD:
                with cur.copy("COPY files (table_id, filename, update_time) FROM STDIN (FORMAT BINARY)") as copy:
                    copy.set_types(["text", "text", "int8"])
                    for f in self.f_ins:
                        copy.write_row((table_id, f.filename, f.update_time))
            else:
                cur.execute("INSERT INTO files (table_id, filename, update_time)"
                            " SELECT %s, * FROM unnest(%s::text[], %s::bigint[])",
                            (table_id, [f.filename for f in self.f_ins], [f.update_time for f in self.f_ins]))
        if self.r_ins:
            if len(self.r_ins) > COPY_THRESHOLD:
                with cur.copy(f"COPY file_references (table_id, {_REF_COLUMNS}) FROM STDIN (FORMAT BINARY)") as copy:
                    copy.set_types(["text", "text", "text", "int8", "bool", "bool", "text", "int8"])
                    for r in self.r_ins:
                        copy.write_row((table_id, r.filename, r.partition_id, r.record_count, r.count_approximate,
                                        r.whole_file, r.job_id, r.update_time))
            else:
                cur.execute(f"INSERT INTO file_references (table_id, {_REF_COLUMNS}) SELECT %s, * FROM unnest("
                            "%s::text[], %s::text[], %s::bigint[], %s::boolean[], %s::boolean[], %s::text[],"
                            " %s::bigint[])", (table_id, *_ref_columns(self.r_ins)))

        if self.p_upd:
            cur.execute("DELETE FROM partitions WHERE table_id = %s AND partition_id = ANY(%s)",
                        (table_id, [p.id for p in self.p_upd]))
            _insert_partitions(cur, table_id, self.p_upd)
        if self.f_upd:
            cur.execute("UPDATE files f SET update_time = u.update_time"
                        " FROM unnest(%s::text[], %s::bigint[]) AS u(filename, update_time)"
                        " WHERE f.table_id = %s AND f.filename = u.filename",
                        ([f.filename for f in self.f_upd], [f.update_time for f in self.f_upd], table_id))
        if self.r_upd:
            cur.execute("UPDATE file_references r SET record_count = u.record_count,"
                        " count_approximate = u.count_approximate, whole_file = u.whole_file, job_id = u.job_id,"
                        " update_time = u.update_time"
                        " FROM unnest(%s::text[], %s::text[], %s::bigint[], %s::boolean[], %s::boolean[],"
                        " %s::text[], %s::bigint[]) AS u(filename, partition_id, record_count, count_approximate,"
                        " whole_file, job_id, update_time)"
                        " WHERE r.table_id = %s AND r.filename = u.filename AND r.partition_id = u.partition_id",
                        (*_ref_columns(self.r_upd), table_id))


def _write_diff(cur: psycopg.Cursor[Any], table_id: str, before: TableState, after: TableState) -> None:
    _Diff.between(before, after).write(cur, table_id)


def _ref_columns(refs: Sequence[FileReference]) -> tuple[list[Any], ...]:
    return ([r.filename for r in refs], [r.partition_id for r in refs], [r.record_count for r in refs],
            [r.count_approximate for r in refs], [r.whole_file for r in refs], [r.job_id for r in refs],
            [r.update_time for r in refs])


def _insert_partitions(cur: psycopg.Cursor[Any], table_id: str, parts: Sequence[Partition]) -> None:
    cur.executemany(f"INSERT INTO partitions (table_id, {_PARTITION_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                    [(table_id, p.id, p.parent_id, list(p.child_ids), p.is_leaf, p.dimension, Json(p.region.to_dict()))
                     for p in parts])


def open_postgres(dsn: Optional[str] = None, *, embedded_dir: Optional[Union[str, Path]] = None,
                  **store_kwargs: Any) -> PostgresStateStore:
    """The PostgreSQL state store at ``dsn``; without a DSN, the embedded server whose data
    lives in ``embedded_dir`` is started (or joined) and the store owns it: closing the
    store closes its pool, then stops the server (when no other process uses it)."""
    if dsn:
        return PostgresStateStore(dsn, **store_kwargs)
    if embedded_dir is None:
        raise StateStoreUnavailableError("the PostgreSQL state store needs a DSN or a directory for the embedded server")
    from statestore.postgres.embedded import EmbeddedPostgres

    server = EmbeddedPostgres(embedded_dir)
    store = PostgresStateStore(server.start(), **store_kwargs)
    store._on_close.append(server.stop)  # noqa: SLF001 - the store owns the server it started
    return store
